"""Exports every model of op_models.py and checks it numerically.

    check_ops.py --out DIR [--stretto-train BIN] [NAME ...]

For each model: DIR/NAME/model.mlir (FileChecked by ops.test), then two
SGD steps (lr 0.5, no momentum) in Stretto's reference executor in f64
and in PyTorch in f64 from the same weights on the same batches (Stretto's
byte windows of a small corpus, recomputed by bench/parity/parity_common).
Prints one line per model: the first loss, the relative differences of the
two losses and of the parameters after the steps. Most losses agree to
1e-16; what bounds the agreement is that the exported model is an f32 model
run in f64: its constants are f32 values (1/7 of a variance, pi/2 of sin,
a scale) and model.safetensors holds f32 (~6e-8 relative per element).
Hence the tolerance 1e-7; a wrong lowering or gradient is off by 1e-3 or
more.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.join(ROOT, "bench", "parity"))
sys.path.insert(0, HERE)

import numpy as np
import torch

import op_models
import parity_common as common
from stretto.export import export

TOL = 1e-7


def torch_side(model, data, steps, lr):
    model = model.double()
    params = dict(model.named_parameters())
    losses = []
    for t in range(steps):
        x, y = data.batch(t, common.TRAIN, 0)
        loss = model(torch.from_numpy(x).long(), torch.from_numpy(y).long())
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
        with torch.no_grad():
            for p, g in zip(params.values(), grads):
                if g is not None:  # unused by this op's model
                    p -= lr * g
        losses.append(float(loss.detach()))
    return losses, {k: v.detach().numpy() for k, v in model.state_dict().items()}


def stretto_side(a, folder, steps, lr, corpus):
    out = os.path.join(folder, "run")
    shutil.rmtree(out, ignore_errors=True)  # a new run each time
    cmd = [a.stretto_train, os.path.join(folder, "model.mlir"), "--init-from",
           os.path.join(folder, "weights.safetensors"), "--executor", "reference",
           "--precision", "f64", "--out", out, "--quiet",
           "train.optimizer=sgd", "train.momentum=0.0", "train.lr=%r" % lr,
           "train.weight_decay=0.0", "train.grad_clip=0.0", "train.schedule=constant",
           "train.warmup_steps=0", "train.steps=%d" % steps, "train.seed=3",
           "train.eval_interval=100000", "train.log_interval=1",
           "data.path=" + corpus, "data.val_fraction=0.5"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        return None, None, r.stderr.strip().splitlines()[-1] if r.stderr.strip() else "failed"
    losses = [json.loads(line)["loss"] for line in open(os.path.join(out, "metrics.jsonl"))]
    return losses, common.read_safetensors(os.path.join(out, "model.safetensors")), None


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--stretto-train", default="stretto-train")
    p.add_argument("names", nargs="*")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    corpus = os.path.join(a.out, "corpus.txt")
    with open(corpus, "wb") as f:  # every byte value, in a fixed shuffled order
        f.write(bytes(np.random.default_rng(0).permutation(np.tile(np.arange(256), 4))
                      .astype(np.uint8)))
    steps, lr, bad = 2, 0.5, 0
    for name in a.names or op_models.NAMES:
        folder = os.path.join(a.out, name)
        model, example = op_models.build(name)
        export(model, example, folder, source="op_models.py:" + name)
        data = common.TokenData(corpus, op_models.B, op_models.T, 0.5, 3)
        s_losses, s_params, err = stretto_side(a, folder, steps, lr, corpus)
        if err:
            print("%s: FAIL (stretto-train: %s)" % (name, err))
            bad += 1
            continue
        t_losses, t_params = torch_side(model, data, steps, lr)
        dl = max(abs(s - t) / abs(t) for s, t in zip(s_losses, t_losses))
        dp = max(common.rel(s_params[k], t_params[k]) for k in t_params)
        ok = dl <= TOL and dp <= TOL and len(s_losses) == steps
        bad += not ok
        print("%s: %s loss %.6f, loss diff %.1e, param diff %.1e" % (
            name, "ok" if ok else "FAIL", t_losses[0], dl, dp))
    print("%d model(s) failed" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
