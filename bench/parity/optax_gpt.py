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
            (DESIGN §4, "delayed-gradient error feedback")

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
"""

import argparse
import os
import re
import shutil
import sys
import tempfile

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

    val_batches = [data.batch(i, common.VAL) for i in range(a.eval_batches)]

    def val_loss(p):
        return float(np.mean([float(evalf(p, jnp.asarray(x), jnp.asarray(y)))
                              for x, y in val_batches]))

    prev, u_prev = params, None  # x(t-1) with x(-1) = x(0); u(t-1)
    losses, snapshots, vals = [], {}, {}
    m = a.micro_batches
    for t in range(1, a.steps + 1):
        # Where this step's gradient is taken: x(t-1) (sync) or x(t-2)
        # (delay); --delay-only delays just the matching tensors (JAX only).
        at = params if a.mode == "sync" or a.mutate == "no-delay" else (
            prev if not a.delay_only else
            {k: prev[k] if re.search(a.delay_only, k) else params[k] for k in params})
        loss, g = 0.0, None
        for j in range((t - 1) * m, t * m):  # Stretto's micro-batches: batches (t-1)m .. tm-1
            x, y = data.batch(j)
            lj, gj = grad(at, jnp.asarray(x), jnp.asarray(y))
            loss += float(lj) / m
            g = gj if g is None else jax.tree_util.tree_map(jnp.add, g, gj)
        if m > 1:
            g = jax.tree_util.tree_map(lambda v: v / m, g)
        updates, state = step(params, g, state)
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
            vals[t] = val_loss(params)
    return losses, snapshots, vals


def without_key_bias(name, v, d):
    if name.endswith("attn.qkv.b"):
        return np.concatenate([v[:d], v[2 * d:]])
    return v


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    bindir = os.path.join(here, "..", "..", "build", "bin")
    p.add_argument("--stretto-train", default=os.path.join(bindir, "stretto-train"))
    p.add_argument("--stretto-run", default=os.path.join(bindir, "stretto-run"))
    p.add_argument("--executor", default="compiled", choices=["compiled", "reference"])
    p.add_argument("--dtype", default="f32", choices=["f32", "f64"],
                   help="f64: Stretto's reference executor and JAX in double precision")
    p.add_argument("--corpus", default=os.path.join(here, "..", "..", "data", "kjv.txt"))
    p.add_argument("--mode", default="sync", choices=["sync", "delay", "delay-ef"])
    p.add_argument("--ef-lambda", type=float, default=1.0)
    p.add_argument("--stages", type=int, default=1)
    p.add_argument("--micro-batches", type=int, default=1)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--param-every", type=int, default=25)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--schedule", default="cosine", choices=["constant", "cosine"])
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1, help="data order (Stretto's train.seed)")
    p.add_argument("--init-seed", type=int, default=0, help="numpy seed of the initial weights")
    p.add_argument("--val-fraction", type=float, default=0.1)
    p.add_argument("--eval-interval", type=int, default=100000)
    p.add_argument("--eval-batches", type=int, default=8)
    # f32 tolerances (see README.md for the measured values).
    p.add_argument("--loss-tol", type=float, default=1e-4)
    p.add_argument("--param-tol", type=float, default=1e-4)
    p.add_argument("--full-curve", action="store_true",
                   help="train both for --steps and print the validation curves (no check)")
    p.add_argument("--mutate", default="none", choices=["none", "no-delay", "ef-on-steps"],
                   help="change the JAX side on purpose (to show the check sees it): no-delay "
                        "takes the gradient at the current weights; ef-on-steps applies the "
                        "correction to the lr-scaled steps instead of the directions u (differs "
                        "while the learning rate changes)")
    p.add_argument("--jax-only", action="store_true",
                   help="train only the JAX side and print its curves (experiments, no check)")
    p.add_argument("--delay-only", default="",
                   help="with --jax-only: delay only the tensors whose name matches this regex")
    p.add_argument("--work", help="keep the files here (default: a temporary folder)")
    a = p.parse_args()
    if a.dtype == "f64":
        a.executor = "reference"
    if a.batch % a.micro_batches:
        p.error("--micro-batches must divide --batch")
    if a.full_curve or a.dtype == "f64":
        a.snapshot_steps = {a.steps}
        checkpoints = [a.steps]
    else:
        checkpoints = sorted(set(list(range(a.param_every, a.steps + 1, a.param_every)) + [a.steps]))
        a.snapshot_steps = set(checkpoints)

    if a.delay_only and not a.jax_only:
        p.error("--delay-only needs --jax-only (Stretto delays every parameter)")
    if a.jax_only:
        init = common.gpt_initial_params(a)
        data = common.TokenData(a.corpus, a.batch // a.micro_batches, a.seq_len,
                                a.val_fraction, a.seed)
        losses, _, vals = run_optax(a, init, data)
        print("jax-only: mode %s%s, lr %g, betas (%g, %g), eps %g, wd %g, warm-up %d, %d steps"
              % (a.mode, " (delayed: %s)" % a.delay_only if a.delay_only else "", a.lr, a.beta1,
                 a.beta2, a.eps, a.weight_decay, a.warmup, a.steps))
        for t in sorted(vals):
            print("step %5d | train (mean of the last 50) %.4f | val %.4f"
                  % (t, float(np.mean(losses[max(0, t - 50):t])), vals[t]))
        return 0
    work = a.work or tempfile.mkdtemp(prefix="stretto-parity-gpt-")
    os.makedirs(work, exist_ok=True)
    try:
        init = common.gpt_initial_params(a)
        init_path = os.path.join(work, "init.safetensors")
        common.write_safetensors(init_path, init, a.dtype)
        # One micro-batch is batch / micro_batches rows (lib/Frontend/Import.cpp).
        data = common.TokenData(a.corpus, a.batch // a.micro_batches, a.seq_len,
                                a.val_fraction, a.seed)
        s_losses, s_params, s_vals = common.run_stretto_config(
            a, work, common.gpt_config_toml(a), init_path, checkpoints)
        o_losses, o_params, o_vals = run_optax(a, init, data)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)

    mode = a.mode + (" lambda %g" % a.ef_lambda if a.mode == "delay-ef" else "")
    print("optax %s, jax %s; %s executor; GPT %d layers, d %d, %d heads, T %d, batch %d x %d "
          "micro-batches, %d stage(s); AdamW lr %g (%s, warm-up %d) betas (%g, %g) eps %g wd %g; "
          "mode %s; %d steps" % (optax.__version__, jax.__version__, a.executor, a.layers,
                                 a.d_model, a.heads, a.seq_len, a.batch, a.micro_batches, a.stages,
                                 a.lr, a.schedule, a.warmup, a.beta1, a.beta2, a.eps,
                                 a.weight_decay, mode, a.steps))
    if len(s_losses) != a.steps:
        print("FAIL: Stretto wrote %d losses for %d steps" % (len(s_losses), a.steps))
        return 1
    if a.full_curve:
        print("step | stretto val | optax val")
        for t in sorted(o_vals):
            print("%5d | %s | %.4f" % (t, "%.4f" % s_vals[t] if t in s_vals else "   -  ", o_vals[t]))
        k = max(1, a.steps // 10)
        print("train loss, mean of the last %d steps: stretto %.4f, optax %.4f"
              % (k, float(np.mean(s_losses[-k:])), float(np.mean(o_losses[-k:]))))
        return 0
    print("step | stretto loss | optax loss | rel diff | max param rel diff")
    worst_loss, worst_param, worst_name = 0.0, 0.0, ""
    for t in range(1, a.steps + 1):
        ls, lo = s_losses[t - 1], o_losses[t - 1]
        d = abs(ls - lo) / abs(lo)
        worst_loss = max(worst_loss, d)
        line = "%4d | %.9f | %.9f | %.2e" % (t, ls, lo, d)
        if t in s_params:
            diffs = {k: common.rel(without_key_bias(k, s_params[t][k], a.d_model),
                                   without_key_bias(k, o_params[t][k], a.d_model))
                     for k in o_params[t]}
            k = max(diffs, key=diffs.get)
            line += " | %.2e (%s)" % (diffs[k], k)
            if diffs[k] > worst_param:
                worst_param, worst_name = diffs[k], k
        print(line)
    first = abs(s_losses[0] - o_losses[0]) / abs(o_losses[0])
    print("first-step loss (same weights, same batch: the model and data match): rel diff %.2e"
          % first)
    print("max loss rel diff %.2e (tolerance %.0e); parameters at steps %s: max ‖Δθ‖/‖θ‖ %.2e "
          "in %s (tolerance %.0e)" % (worst_loss, a.loss_tol,
                                      ",".join(map(str, sorted(s_params))), worst_param,
                                      worst_name, a.param_tol))
    if a.mutate != "none":
        print("optax side mutated: %s" % a.mutate)
    ok = worst_loss <= a.loss_tol and worst_param <= a.param_tol
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
