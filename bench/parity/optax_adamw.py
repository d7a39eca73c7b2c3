#!/usr/bin/env python3
"""AdamW parity: Stretto against optax.adamw, step by step.

A small MLP classifier (the importer's `kind = "mlp"`: x @ w + b, ReLU,
softmax cross-entropy averaged over the batch) starts from weights this
script draws and writes as safetensors; Stretto trains from them with
`--init-from`, and the same model written in JAX trains with
`optax.adamw` from the same weights on the same batches. The script
compares every step's training loss and the parameters every
--param-every steps, and fails past the stated f32 tolerances.

The batches: Stretto's synthetic classifier data is a pure function of
(seed, split, index) (runtime/io/Data.cpp); this script computes the same
function (splitmix64, Box-Muller, a fixed random linear teacher) in
Python, so no batch has to be dumped.

Stretto's parameters after step k come from its model.safetensors after a
run of k steps, continued with --resume (bit-identical to an uninterrupted
run: test/lit/Train/resume-exact.test), from one compiled plan.

Where the two optimizers could differ, and how they are matched:
  - epsilon placement: both add eps to sqrt of the bias-corrected second
    moment, m̂ / (sqrt(v̂) + eps) (optax eps_root = 0).
  - bias correction: both divide by 1 - beta^t with t counted from 1.
  - weight decay: both decoupled, p <- p - lr * (update + wd * p), the
    decay scaled by the learning rate; Stretto decays only matrices
    (rank >= 2), so optax gets mask = rank >= 2 (biases not decayed).
  - beta2: Stretto's default is 0.95 (optax's 0.999): both get it set.
  - the learning-rate schedule: constant here (no warm-up, no clipping).

Exit status: 0 parity holds, 1 it does not, 77 JAX/optax missing (the

--smoke: the same check at a tiny size and few steps (parity_common.py),
its files kept in $STRETTO_SMOKE_DIR or a temporary folder (ctest
bench-smoke-parity-*).
harness reports itself skipped, never passed).
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import jax
    import jax.numpy as jnp
    import optax
    import parity_common as common
except ImportError as e:  # not installed: skipped, never passed
    print("SKIPPED: the optax parity check needs numpy, jax and optax (%s)" % e)
    sys.exit(77)

jax.config.update("jax_enable_x64", False)


def loss_fn(params, x, y, layers):
    h = x
    for name in layers[:-1]:
        h = jax.nn.relu(h @ params[name + ".w"] + params[name + ".b"])
    logits = h @ params[layers[-1] + ".w"] + params[layers[-1] + ".b"]
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=-1))


def run_optax(a, init, batches):
    layers = ["fc%d" % i for i in range(len(a.hidden))] + ["out"]
    params = {k: jnp.asarray(v) for k, v in init.items()}
    mask = {k: v.ndim >= 2 for k, v in params.items()}
    b2, eps, eps_root = a.beta2, a.eps, 0.0
    if a.mutate == "beta2-default":  # optax's own default instead of Stretto's setting
        b2 = 0.999
    if a.mutate == "eps-inside-sqrt":  # m̂ / sqrt(v̂ + eps) instead of m̂ / (sqrt(v̂) + eps)
        eps, eps_root = 0.0, a.eps
    if a.mutate == "decay-biases":  # weight decay on every parameter
        mask = None
    if a.mutate == "wd-not-scaled-by-lr":  # p <- p - lr·u - wd·p
        opt = optax.chain(optax.scale_by_adam(b1=a.beta1, b2=b2, eps=eps, eps_root=eps_root),
                          optax.scale(-a.lr), optax.add_decayed_weights(-a.weight_decay, mask))
    else:
        opt = optax.adamw(learning_rate=a.lr, b1=a.beta1, b2=b2, eps=eps, eps_root=eps_root,
                          weight_decay=a.weight_decay, mask=mask)
    state = opt.init(params)
    grad = jax.jit(jax.value_and_grad(lambda p, x, y: loss_fn(p, x, y, layers)))
    losses, snapshots = [], {0: {k: np.asarray(v) for k, v in params.items()}}
    for step, (x, y) in enumerate(batches, start=1):
        loss, g = grad(params, jnp.asarray(x), jnp.asarray(y))
        updates, state = opt.update(g, state, params)
        params = optax.apply_updates(params, updates)
        losses.append(float(loss))
        snapshots[step] = {k: np.asarray(v) for k, v in params.items()}
    return losses, snapshots


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    common.add_arguments(p)
    p.add_argument("--mutate", default="none",
                   choices=["none", "beta2-default", "eps-inside-sqrt", "decay-biases",
                            "wd-not-scaled-by-lr"],
                   help="change the optax side on purpose (to show the check sees it)")
    a = p.parse_args()
    common.finish_arguments(p, a, "optax_adamw")
    return common.check(a, "optax %s, jax %s" % (optax.__version__, jax.__version__), run_optax)


if __name__ == "__main__":
    sys.exit(main())
