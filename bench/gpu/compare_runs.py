#!/usr/bin/env python3
"""Two runs of one plan, compared: the GPU kit's check that a GPU run gives
the CPU run's losses and parameters (bench/gpu/device-check.sh).

    compare_runs.py NAME GPU_OUT CPU_OUT [--loss-tol T] [--state-tol T] [--expect-differ]

GPU_OUT and CPU_OUT are stretto-run --out folders of the same plan and
steps. Compared: every row of metrics.jsonl (a step's, or a gossip/DiLoCo
round's, train loss; the validation losses where both have one) as
|a - b| / (1 + |b|), the relative measure of stretto-run --check, within
--loss-tol (default 1e-3); and every tensor of model.safetensors as
||a - b|| / max(||a||, ||b||) within --state-tol (default 1e-2), the key
third of each attention qkv bias left out (its gradient is zero in exact
arithmetic: Adam steps it along rounding noise that no two runtimes share,
as --check does). The tolerances are 10x stretto-run --check's (1e-4 and
1e-3 over 5 steps): these runs are 20 steps, over which f32 rounding
differences between GEMM libraries grow. A run that reads other data or
drops a rank's gradients is off by far more (device-check.sh --dry-run
shows one such run failing this check).

Prints one line, `compare NAME: ...: ok` or `...: DIFFER` (and the worst
rows); exit 0 when within the tolerances, 1 when not or when a folder lacks
its files. --expect-differ inverts the verdict (the self-test that the
check can fail). Standard library only: it runs on a bare GPU machine.
"""
import argparse
import json
import math
import os
import struct
import sys
from array import array


def rows(folder):
    path = os.path.join(folder, "metrics.jsonl")
    with open(path) as f:
        return [json.loads(l) for l in f if l.strip()]


def tensors(folder):
    """model.safetensors -> {name: (shape, array of floats)} (F32 only)."""
    with open(os.path.join(folder, "model.safetensors"), "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] != "F32":
            raise ValueError("%s: dtype %s (F32 expected)" % (name, info["dtype"]))
        b, e = info["data_offsets"]
        a = array("f")
        a.frombytes(data[b:e])
        if sys.byteorder != "little":
            a.byteswap()
        out[name] = (info["shape"], a)
    return out


def rel_l2(name, x, y):
    n = len(x)
    skip = range(0)
    if name.endswith("attn.qkv.b") and n % 3 == 0:
        skip = range(n // 3, 2 * n // 3)  # the key third
    dd = xx = yy = 0.0
    for i in range(n):
        if i in skip:
            continue
        a, b = x[i], y[i]
        dd += (a - b) * (a - b)
        xx += a * a
        yy += b * b
    if dd == 0:
        return 0.0
    r = math.sqrt(dd) / math.sqrt(max(xx, yy))
    return r if math.isfinite(r) else math.inf


def compare(a_dir, b_dir, loss_tol, state_tol):
    """(ok, summary, details)."""
    ra, rb = rows(a_dir), rows(b_dir)
    details = []
    if len(ra) != len(rb) or not ra:
        return False, "%d vs %d metrics rows" % (len(ra), len(rb)), details
    worst, where = 0.0, "-"
    for x, y in zip(ra, rb):
        key = "step %s" % x.get("step", x.get("round"))
        for k in ("loss", "val_loss"):
            if k in x and k in y:
                d = abs(x[k] - y[k]) / (1 + abs(y[k]))
                if not d <= worst:  # NaN counts as the worst
                    worst, where = (d if math.isfinite(d) else math.inf), "%s %s" % (key, k)
                if not d <= loss_tol:
                    details.append("  %s %s: %.7f vs %.7f (%.2e)" % (key, k, x[k], y[k], d))
            elif (k in x) != (k in y):
                return False, "%s: %s in one run only" % (key, k), details
    ta, tb = tensors(a_dir), tensors(b_dir)
    if ta.keys() != tb.keys():
        return False, "the models hold different tensors", details
    sworst, swhere = 0.0, "-"
    for name in sorted(ta):
        if ta[name][0] != tb[name][0]:
            return False, "%s: shape %s vs %s" % (name, ta[name][0], tb[name][0]), details
        d = rel_l2(name, ta[name][1], tb[name][1])
        if d > sworst:
            sworst, swhere = d, name
        if d > state_tol:
            details.append("  %s: relative L2 %.2e" % (name, d))
    ok = worst <= loss_tol and sworst <= state_tol
    summary = ("%d rows, largest loss difference %.2e at %s (tolerance %.0e); %d tensors, "
               "largest relative L2 %.2e at %s (tolerance %.0e)" % (
                   len(ra), worst, where, loss_tol, len(ta), sworst, swhere, state_tol))
    return ok, summary, details


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("name")
    p.add_argument("gpu_out")
    p.add_argument("cpu_out")
    p.add_argument("--loss-tol", type=float, default=1e-3)
    p.add_argument("--state-tol", type=float, default=1e-2)
    p.add_argument("--expect-differ", action="store_true",
                   help="pass when the runs differ (the check's self-test)")
    a = p.parse_args()
    try:
        ok, summary, details = compare(a.gpu_out, a.cpu_out, a.loss_tol, a.state_tol)
    except (OSError, ValueError, KeyError) as e:
        print("compare %s: FAILED: %s" % (a.name, e))
        return 1
    if a.expect_differ:
        print("compare %s: %s: %s" % (a.name, summary, "differ, as they must: ok" if not ok
                                     else "SAME (the check cannot tell these runs apart)"))
        return 0 if not ok else 1
    print("compare %s: %s: %s" % (a.name, summary, "ok" if ok else "DIFFER"))
    for line in details[:8]:
        print(line)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
