#!/usr/bin/env python3
"""GPT parity: Stretto against optax.adamw in JAX, synchronous, with the
one-step delay of PipeDream-2BW and with delay error feedback.

The GPT of lib/Frontend/Import.cpp (pre-norm LayerNorm, eps 1e-5, learned
positions, causal attention, tanh-GELU MLP, untied head without bias, mean
cross-entropy) is written here in JAX. Its initial weights are drawn here
(numpy) and Stretto starts from them with --init-from; the batches are
Stretto's TokenWindows over the byte corpus, recomputed in Python
(parity_common.TokenData). Stretto runs from one compiled plan, on 1 or
more pipeline stages (--stages, --micro-batches), and its parameters after
step k come from model.safetensors of a run of k steps continued with
--resume.

The optimizer on the JAX side is optax.adamw (beta2, eps, weight decay
masked to rank >= 2 as in optax_adamw.py; lr = the schedule of
lib/Transforms/Optimizer.cpp, which optax takes as a function of its step
count). The training modes wrap it, they do not re-implement it:

  sync      x(t+1) = x(t) + optax_update(g(x(t)))
  delay     x(t+1) = x(t) + optax_update(g(x(t-1))), x(-1) = x(0): the
            gradient of the previous weights applied to the current ones
            (PipeDream-2BW, Narayanan et al., ICML 2021: every stage has the
            same one-step delay, whatever the depth; optax's weight decay
            reads the current weights, as Stretto's does)
  delay-ef  u(t) = -optax_update(g(x(t-1))) / lr(t), i.e. the optimizer's
            direction including the decoupled decay term;
            x(t+1) = x(t) - lr(t)·[u(t) + lambda·(u(t) - u(t-1))], u(-1) = u(0)
            (docs/design.md §4.2, "delayed-gradient error feedback")

The loss of step t is the loss at the weights its gradient was taken at
(x(t-2) under delay, 1-based t), which is what Stretto logs.

Where the two could differ: the key third of every attention qkv bias has
a zero gradient in exact arithmetic (softmax is invariant to it), so under
Adam it follows rounding noise (±lr per step either way) in both; it is
left out of the parameter comparison, as in Stretto's own --check.

--full-curve runs both to --steps without parameter snapshots and prints
both validation curves instead of failing: past a few hundred steps f32
rounding has moved the two trajectories apart, so only the curves'
levels are comparable there.

Exit status: 0 parity holds, 1 it does not, 77 JAX/optax missing.

--smoke: the same check at a tiny size and few steps (parity_common.py),
its files kept in $STRETTO_SMOKE_DIR or a temporary folder (ctest
bench-smoke-parity-*).
"""

import argparse
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import jax
    import jax.numpy as jnp
    import optax
    import parity_common as common
except ImportError as e:  # not installed: skipped, never passed
    print("SKIPPED: the optax GPT parity check needs numpy, jax and optax (%s)" % e)
    sys.exit(77)

jax.config.update("jax_enable_x64", "--dtype=f64" in sys.argv or
                  any(a == "f64" and b == "--dtype" for b, a in zip(sys.argv, sys.argv[1:])))


def layer_norm(x, g, b):
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    return (x - mu) / jnp.sqrt(var + 1e-5) * g + b


def gpt_loss(p, tokens, targets, layers, heads):
    B, T = tokens.shape
    d = p["wte"].shape[1]
    dh = d // heads
    x = p["wte"][tokens] + p["wpe"]
    mask = jnp.tril(jnp.ones((T, T), bool))
    for l in range(layers):
        h = "h%d." % l
        a = layer_norm(x, p[h + "ln1.g"], p[h + "ln1.b"])
        qkv = (a @ p[h + "attn.qkv.w"] + p[h + "attn.qkv.b"]).reshape(B, T, 3, heads, dh)
        q, k, v = (jnp.transpose(qkv[:, :, i], (0, 2, 1, 3)) for i in range(3))
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / jnp.sqrt(jnp.asarray(dh, x.dtype))
        s = jnp.where(mask, s, -jnp.inf)
        att = jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, axis=-1), v)
        att = jnp.transpose(att, (0, 2, 1, 3)).reshape(B, T, d)
        x = x + att @ p[h + "attn.proj.w"] + p[h + "attn.proj.b"]
        a = layer_norm(x, p[h + "ln2.g"], p[h + "ln2.b"])
        f = jax.nn.gelu(a @ p[h + "mlp.fc.w"] + p[h + "mlp.fc.b"], approximate=True)
        x = x + f @ p[h + "mlp.proj.w"] + p[h + "mlp.proj.b"]
    x = layer_norm(x, p["ln_f.g"], p["ln_f.b"])
    logits = x @ p["head.w"]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, targets[..., None], axis=-1))


GROUPS = {"attention": r"attn\.(qkv|proj)\.w$", "mlp": r"mlp\.(fc|proj)\.w$",
          "embeddings+head": r"^(wte|wpe|head\.w)$"}


@jax.jit
def update_cosines(u, v):
    """Cosine between two consecutive optimizer steps, per group of
    matrices: near -1 when the weights oscillate from step to step."""
    out = {}
    for grp, rx in GROUPS.items():
        keys = [k for k in sorted(u) if re.search(rx, k)]
        dot = sum(jnp.vdot(u[k], v[k]) for k in keys)
        nu = jnp.sqrt(sum(jnp.vdot(u[k], u[k]) for k in keys))
        nv = jnp.sqrt(sum(jnp.vdot(v[k], v[k]) for k in keys))
        out[grp] = dot / (nu * nv)
    return out


def run_optax(a, init, data):
    """Trains with optax.adamw in the chosen mode; returns (losses,
    {step: params} at a.snapshot_steps, {step: val loss})."""
    fdt = jnp.float64 if a.dtype == "f64" else jnp.float32
    params = {k: jnp.asarray(v, fdt) for k, v in init.items()}
    mask = {k: v.ndim >= 2 for k, v in params.items()}
    lr_of = lambda count: a.lr * common.lr_multiplier(a, int(count) + 1)  # optax counts from 0
    lr_table = jnp.asarray([lr_of(c) for c in range(a.steps + 1)], fdt)
    opt = optax.adamw(learning_rate=lambda c: lr_table[c], b1=a.beta1, b2=a.beta2, eps=a.eps,
                      eps_root=0.0, weight_decay=a.weight_decay, mask=mask)
    state = opt.init(params)
    lossf = lambda p, x, y: gpt_loss(p, x, y, a.layers, a.heads)
    grad = jax.jit(jax.value_and_grad(lossf))
    evalf = jax.jit(lossf)

    @jax.jit
    def step(params, g, state):
        updates, state = opt.update(g, state, params)
        return updates, state

    @jax.jit
    def ef_apply(params, updates, u_prev, lr, lam):
        u = jax.tree_util.tree_map(lambda d: -d / lr, updates)
        new = jax.tree_util.tree_map(lambda p, u, v: p - lr * (u + lam * (u - v)), params, u, u_prev)
        return new, u

    val_batches = [data.batch(i, common.VAL, p) for i in range(a.eval_batches)
                   for p in range(a.micro_batches)]

    def val_loss(p):
        return float(np.mean([float(evalf(p, jnp.asarray(x), jnp.asarray(y)))
                              for x, y in val_batches]))

    prev, u_prev = params, None  # x(t-1) with x(-1) = x(0); u(t-1)
    upd_prev, cosines = None, {}
    a.cosines = cosines
    losses, snapshots, vals = [], {}, {}
    m = a.micro_batches
    for t in range(1, a.steps + 1):
        # Where this step's gradient is taken: x(t-1) (sync) or x(t-2)
        # (delay); --delay-only delays just the matching tensors (JAX only).
        at = params if a.mode == "sync" or a.mutate == "no-delay" else (
            prev if not a.delay_only else
            {k: prev[k] if re.search(a.delay_only, k) else params[k] for k in params})
        loss, g = 0.0, None
        for j in range(m):  # Stretto's micro-batches: the parts of step t's batch
            x, y = data.batch(t - 1, common.TRAIN, j)
            lj, gj = grad(at, jnp.asarray(x), jnp.asarray(y))
            loss += float(lj) / m
            g = gj if g is None else jax.tree_util.tree_map(jnp.add, g, gj)
        if m > 1:
            g = jax.tree_util.tree_map(lambda v: v / m, g)
        updates, state = step(params, g, state)
        if getattr(a, "jax_only", False):  # diagnostics: do consecutive steps agree?
            if upd_prev is not None:
                for grp, c in update_cosines(updates, upd_prev).items():
                    cosines.setdefault(t, {})[grp] = float(c)
            upd_prev = updates
        prev = params
        if a.mode == "delay-ef":
            lr = jnp.asarray(lr_of(t - 1), fdt)
            if a.mutate == "ef-on-steps":  # corrects lr-scaled steps: -lr(t)u(t) - λ(lr(t)u(t) - lr(t-1)u(t-1))
                lr = jnp.asarray(1.0, fdt)
            if u_prev is None:  # u(-1) = u(0): no correction on the first step
                u_prev = jax.tree_util.tree_map(lambda d: -d / lr, updates)
            params, u_prev = ef_apply(params, updates, u_prev, lr, jnp.asarray(a.ef_lambda, fdt))
        else:
            params = optax.apply_updates(params, updates)
        losses.append(loss)
        if t in a.snapshot_steps:
            snapshots[t] = {k: np.asarray(v) for k, v in params.items()}
        if t % a.eval_interval == 0 or t == a.steps:
            # Stretto validates a 2BW run with the version its step reads,
            # x(t-1) (the .prev weights), a synchronous one with x(t).
            vals[t] = val_loss(params if a.mode == "sync" else prev)
    return losses, snapshots, vals


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_gpt_arguments(p)
    p.add_argument("--mutate", default="none", choices=["none", "no-delay", "ef-on-steps"],
                   help="change the JAX side on purpose (to show the check sees it): no-delay "
                        "takes the gradient at the current weights; ef-on-steps applies the "
                        "correction to the lr-scaled steps instead of the directions u (differs "
                        "while the learning rate changes)")
    p.add_argument("--jax-only", action="store_true",
                   help="train only the JAX side and print its curves (experiments, no check)")
    p.add_argument("--delay-only", default="",
                   help="with --jax-only: delay only the tensors whose name matches this regex")
    a = p.parse_args()
    common.finish_gpt_arguments(p, a)
    if a.optimizer != "adamw":
        p.error("the optax check covers AdamW (Muon: torch_gpt.py)")
    if a.delay_only and not a.jax_only:
        p.error("--delay-only needs --jax-only (Stretto delays every parameter)")
    if a.jax_only:
        init = common.gpt_initial_params(a)
        losses, _, vals = run_optax(a, init, common.gpt_data(a))
        print("jax-only: mode %s%s, lr %g, betas (%g, %g), eps %g, wd %g, warm-up %d, %d steps"
              % (a.mode, " (delayed: %s)" % a.delay_only if a.delay_only else "", a.lr, a.beta1,
                 a.beta2, a.eps, a.weight_decay, a.warmup, a.steps))
        print("step | train (mean of the last 50) | val | cosine of consecutive steps, mean "
              "since the last line: " + ", ".join(GROUPS))
        last = 0
        for t in sorted(vals):
            win = [a.cosines[s] for s in range(last + 1, t + 1) if s in a.cosines]
            cos = ", ".join("%+.2f" % float(np.mean([w[g] for w in win])) for g in GROUPS)
            print("%5d | %.4f | %.4f | %s" % (t, float(np.mean(losses[max(0, t - 50):t])),
                                              vals[t], cos))
            last = t
        return 0
    return common.gpt_check(a, "optax %s, jax %s" % (optax.__version__, jax.__version__),
                            run_optax)


if __name__ == "__main__":
    sys.exit(main())
