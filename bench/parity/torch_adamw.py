#!/usr/bin/env python3
"""AdamW parity: Stretto against torch.optim.AdamW, step by step.

The same check as optax_adamw.py (same MLP, weights, batches, settings and
tolerances; see parity_common.py) with PyTorch's own AdamW. Not run in CI
(PyTorch is several GB); bench/parity/README.md says how to run it and
what it measured (torch 2.15.0: PASS, 9.6e-7 losses, 6.8e-7 parameters).

torch.optim.AdamW against Stretto's AdamW:
  - epsilon: denom = sqrt(v) / sqrt(1 - beta2^t) + eps, i.e.
    m̂ / (sqrt(v̂) + eps) as in Stretto.
  - bias correction: 1 - beta^t with t from 1, as in Stretto.
  - weight decay: p <- p * (1 - lr * wd) before the Adam step, i.e.
    p - lr * (update + wd * p) with the old p, as in Stretto; Stretto decays
    matrices only, so the biases go to a parameter group with wd = 0.
  - amsgrad, maximize, foreach/fused: defaults (off / per-tensor loop).

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
    import parity_common as common
except ImportError as e:  # not installed: skipped, never passed
    print("SKIPPED: the PyTorch parity check needs numpy and torch (%s)" % e)
    sys.exit(77)


def run_torch(a, init, batches):
    torch.manual_seed(0)  # nothing random is drawn; for completeness
    layers = ["fc%d" % i for i in range(len(a.hidden))] + ["out"]
    params = {k: torch.tensor(np.array(v), dtype=torch.float32, requires_grad=True)
              for k, v in init.items()}
    decay = [p for k, p in sorted(params.items()) if p.dim() >= 2]
    no_decay = [p for k, p in sorted(params.items()) if p.dim() < 2]
    if a.mutate == "decay-biases":
        decay, no_decay = decay + no_decay, []
    groups = [{"params": decay, "weight_decay": a.weight_decay}]
    if no_decay:
        groups.append({"params": no_decay, "weight_decay": 0.0})
    opt = torch.optim.AdamW(groups, lr=a.lr, betas=(a.beta1, a.beta2), eps=a.eps, foreach=False)

    def loss_of(x, y):
        h = x
        for name in layers[:-1]:
            h = torch.relu(h @ params[name + ".w"] + params[name + ".b"])
        logits = h @ params[layers[-1] + ".w"] + params[layers[-1] + ".b"]
        return torch.nn.functional.cross_entropy(logits, y)

    def snapshot():
        return {k: p.detach().numpy().copy() for k, p in params.items()}

    losses, snapshots = [], {0: snapshot()}
    for step, (x, y) in enumerate(batches, start=1):
        opt.zero_grad(set_to_none=True)
        loss = loss_of(torch.from_numpy(x), torch.from_numpy(y.astype(np.int64)))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
        snapshots[step] = snapshot()
    return losses, snapshots


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_arguments(p)
    p.add_argument("--mutate", default="none", choices=["none", "decay-biases"],
                   help="change the PyTorch side on purpose (to show the check sees it)")
    a = p.parse_args()
    common.finish_arguments(p, a, "torch_adamw")
    torch.set_num_threads(max(1, min(4, os.cpu_count() or 1)))
    return common.check(a, "torch %s" % torch.__version__, run_torch)


if __name__ == "__main__":
    sys.exit(main())
