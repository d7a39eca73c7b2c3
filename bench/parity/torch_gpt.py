#!/usr/bin/env python3
"""GPT parity: Stretto against torch.optim.AdamW and torch.optim.Muon,
synchronous, with the one-step delay of PipeDream-2BW and with delay EF.

The same check as optax_gpt.py (same GPT, weights, batches, schedule, modes
and tolerances; parity_common.gpt_check) with PyTorch's own optimizers.
Not in CI (PyTorch is several GB); bench/parity/README.md has the command.

The model is written with torch.nn.functional on a dict of tensors. Its
matrices are held in PyTorch's [out, in] layout (Stretto's are [in, out],
x·W): that is the layout torch.optim.Muon's adjust_lr_fn reads its shape
from, so the scale is the same as Stretto's; they are transposed back for
the comparison.

Parameter groups (as lib/Transforms/Optimizer.cpp assigns them):
  - Muon: the attention and MLP matrices (role "matrix": h*.attn.qkv.w,
    h*.attn.proj.w, h*.mlp.fc.w, h*.mlp.proj.w), lr = muon_lr,
    momentum 0.95, Nesterov, adjust_lr_fn "original" for muon_scale =
    shape (sqrt(max(1, out/in))) and "match_rms_adamw" for rms
    (0.2·sqrt(max(out, in))); weight decay p·(1 − lr·wd), the same as
    Stretto's p − lr·(… + wd·p).
  - AdamW with weight decay: wte, wpe, head.w (rank 2, not "matrix").
  - AdamW without weight decay: biases and LayerNorm gains/shifts.
  With --optimizer adamw every tensor is in the two AdamW groups.

torch.optim.Muon against Stretto's Muon:
  - Newton–Schulz runs in bf16 in PyTorch, f32 in Stretto. --ns f32 (the
    default for the check) replaces torch's _zeropower_via_newtonschulz by
    a copy of it that keeps f32 (the same steps, coefficients, transpose
    and normalisation); --ns bf16 runs PyTorch's own, and its gap to
    Stretto is reported, not checked.
  - normalisation: PyTorch X / max(‖X‖, 1e-7), Stretto X / (‖X‖ + 1e-7):
    a relative difference of 1e-7/‖X‖ in the orthogonalised update.
  - momentum, Nesterov (U = (1−β)g + βM after M ← βM + (1−β)g),
    coefficients (3.4445, −4.7750, 2.0315), 5 steps: the same.

Modes (as optax_gpt.py): delay takes the gradient at x(t−1) for every
tensor and lets the optimizer step the current weights; delay-ef takes
u(t) = (x(t) − x'(t+1)) / lr_group(t) from the optimizer's step x'(t+1) and
sets x(t+1) = x(t) − lr_group(t)·[u(t) + λ(u(t) − u(t−1))], u(−1) = u(0).

Exit status: 0 parity holds, 1 it does not, 77 PyTorch missing (skipped).

--smoke: the same check at a tiny size and few steps (parity_common.py),
its files kept in $STRETTO_SMOKE_DIR or a temporary folder (ctest
bench-smoke-parity-*).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import torch
    import torch.nn.functional as F
    import parity_common as common
except ImportError as e:  # not installed: skipped, never passed
    print("SKIPPED: the PyTorch GPT parity check needs numpy and torch (%s)" % e)
    sys.exit(77)

MATRIX_SUFFIXES = ("attn.qkv.w", "attn.proj.w", "mlp.fc.w", "mlp.proj.w")


def is_muon_matrix(name):
    return name.startswith("h") and name.endswith(MATRIX_SUFFIXES)


def transposed(name):
    """Held as [out, in] here: every x·W matrix (not the embeddings)."""
    return name.endswith(".w")


def ns_f32(grad, ns_coefficients, ns_steps, eps):
    """torch.optim._muon._zeropower_via_newtonschulz without the bf16 cast."""
    a, b, c = ns_coefficients
    x = grad.to(dtype=torch.float32, copy=True)
    if grad.size(0) > grad.size(1):
        x = x.T
    x.div_(x.norm().clamp(min=eps))
    for _ in range(ns_steps):
        gram = x @ x.T
        upd = torch.addmm(gram, gram, gram, beta=b, alpha=c)
        x = torch.addmm(x, upd, x, beta=a)
    if grad.size(0) > grad.size(1):
        x = x.T
    return x


def gpt_loss(p, tokens, targets, a):
    B, T = tokens.shape
    d, H = a.d_model, a.heads
    x = p["wte"][tokens] + p["wpe"]
    for l in range(a.layers):
        h = "h%d." % l
        y = F.layer_norm(x, (d,), p[h + "ln1.g"], p[h + "ln1.b"], 1e-5)
        qkv = F.linear(y, p[h + "attn.qkv.w"], p[h + "attn.qkv.b"]).view(B, T, 3, H, d // H)
        q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
        att = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + F.linear(att.transpose(1, 2).reshape(B, T, d), p[h + "attn.proj.w"],
                         p[h + "attn.proj.b"])
        y = F.layer_norm(x, (d,), p[h + "ln2.g"], p[h + "ln2.b"], 1e-5)
        f = F.gelu(F.linear(y, p[h + "mlp.fc.w"], p[h + "mlp.fc.b"]), approximate="tanh")
        x = x + F.linear(f, p[h + "mlp.proj.w"], p[h + "mlp.proj.b"])
    x = F.layer_norm(x, (d,), p["ln_f.g"], p["ln_f.b"], 1e-5)
    logits = F.linear(x, p["head.w"])
    return F.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))


def run_torch(a, init, data):
    dt = torch.float64 if a.dtype == "f64" else torch.float32
    params = {k: torch.tensor(np.array(v.T if transposed(k) else v), dtype=dt,
                              requires_grad=True) for k, v in sorted(init.items())}
    muon = a.optimizer == "muon"
    groups = {"muon": [], "decay": [], "no_decay": []}
    for k, p in params.items():
        g = "muon" if muon and is_muon_matrix(k) else "decay" if p.dim() >= 2 else "no_decay"
        groups[g].append(k)
    opts, base_lr = [], {}
    adam_groups = [{"params": [params[k] for k in groups["decay"]], "weight_decay": a.weight_decay},
                   {"params": [params[k] for k in groups["no_decay"]], "weight_decay": 0.0}]
    opts.append(torch.optim.AdamW(adam_groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps,
                                  foreach=False))
    lr_of = {k: a.lr for k in params}
    if groups["muon"]:
        if a.ns == "f32":
            torch.optim._muon._zeropower_via_newtonschulz = ns_f32
        adjust = "match_rms_adamw" if a.muon_scale == "rms" else "original"
        opts.append(torch.optim.Muon([params[k] for k in groups["muon"]], lr=a.muon_lr,
                                     weight_decay=a.weight_decay, momentum=a.muon_momentum,
                                     nesterov=True, adjust_lr_fn=adjust))
        for k in groups["muon"]:
            lr_of[k] = a.muon_lr

    def val_loss(w):
        with torch.no_grad():
            return float(np.mean([float(gpt_loss(w, torch.from_numpy(x).long(),
                                                 torch.from_numpy(y).long(), a))
                                  for x, y in (data.batch(i, common.VAL, p)
                                               for i in range(a.eval_batches)
                                               for p in range(a.micro_batches))]))

    def snapshot():
        return {k: (p.detach().T if transposed(k) else p.detach()).numpy().astype(np.float64)
                for k, p in params.items()}

    prev = {k: p.detach().clone() for k, p in params.items()}  # x(t-1), x(-1) = x(0)
    u_prev = None
    losses, snapshots, vals = [], {}, {}
    m = a.micro_batches
    for t in range(1, a.steps + 1):
        mult = common.lr_multiplier(a, t)
        for opt in opts:
            for g in opt.param_groups:
                g["lr"] = (a.muon_lr if isinstance(opt, torch.optim.Muon) else a.lr) * mult
        delayed = a.mode != "sync" and a.mutate != "no-delay"
        at = {k: (prev[k] if delayed else p.detach()).clone().requires_grad_(True)
              for k, p in params.items()}
        loss = 0.0
        grads = {k: torch.zeros_like(p) for k, p in params.items()}
        for j in range(m):  # the parts of step t's batch
            x, y = data.batch(t - 1, common.TRAIN, j)
            lj = gpt_loss(at, torch.from_numpy(x).long(), torch.from_numpy(y).long(), a)
            gj = torch.autograd.grad(lj, list(at.values()))
            for k, g in zip(at, gj):
                grads[k] += g
            loss += float(lj) / m
        for k, p in params.items():
            p.grad = grads[k] / m if m > 1 else grads[k]
        before = {k: p.detach().clone() for k, p in params.items()}
        for opt in opts:
            opt.step()
        prev = before
        if a.mode == "delay-ef":
            with torch.no_grad():
                u = {k: (before[k] - params[k]) / (lr_of[k] * mult) for k in params}
                if u_prev is None:
                    u_prev = u
                for k, p in params.items():
                    p.copy_(before[k] - lr_of[k] * mult * (u[k] + a.ef_lambda * (u[k] - u_prev[k])))
                u_prev = u
        losses.append(loss)
        if t in a.snapshot_steps:
            snapshots[t] = snapshot()
        if t % a.eval_interval == 0 or t == a.steps:
            # Stretto validates a 2BW run with the version its step reads,
            # x(t-1) (the .prev weights), a synchronous one with x(t).
            vals[t] = val_loss(params if a.mode == "sync" else prev)
    return losses, snapshots, vals


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_gpt_arguments(p)
    p.add_argument("--ns", default="f32", choices=["f32", "bf16"],
                   help="Muon's Newton-Schulz: an f32 copy of PyTorch's (checked) or PyTorch's "
                        "own bf16 one (its gap is reported)")
    p.add_argument("--mutate", default="none", choices=["none", "no-delay"],
                   help="change the PyTorch side on purpose (to show the check sees it)")
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    common.finish_gpt_arguments(p, a)
    torch.set_num_threads(a.threads)
    if a.dtype == "f64" and a.optimizer == "muon" and a.ns == "bf16":
        p.error("--ns bf16 with --dtype f64 compares nothing useful")
    framework = "torch %s%s" % (torch.__version__,
                                 ", Newton-Schulz %s" % a.ns if a.optimizer == "muon" else "")
    return common.gpt_check(a, framework, run_torch)


if __name__ == "__main__":
    sys.exit(main())
