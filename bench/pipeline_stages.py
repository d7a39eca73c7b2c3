#!/usr/bin/env python3
"""2BW on the real pipeline schedule (one process per stage) against the one-stage 2BW run.

    python3 bench/pipeline_stages.py            # about 4 minutes on 2 cores
    python3 bench/pipeline_stages.py --smoke    # the same code at a tiny size (seconds)

The 2BW experiments (bench/pipeline_experiment_tiny.py) train on one stage:
the delayed update is in the IR, the same on any number of stages. This
script checks that on the pipeline runtime: each case trains one plan
setting twice from the same seed, on one stage in one process and on S
stages in S processes (stretto-train --nproc S, Gloo on loopback), and
compares every step's train loss, every validation loss and the final
parameters (model.safetensors, tensor by tensor: bit-identical or the
relative L2 distance).

  gpt-tiny: bench/configs/exp-gpt-tiny.toml with the experiment's
    "2bw muon + EF 1.0" setting (Muon, muon_scale rms, lr 3e-3, muon_lr
    0.01, lambda 1), seed 1, --tiny-steps steps (default 300; the
    experiment's 1500 take ~10 minutes here), 2 stages.
  gpt-mini: examples/gpt-mini.toml, 2BW + EF lambda 1, no clipping, seed 1,
    --mini-steps steps (default 50; warm-up a fifth of them), 4 stages.

Every run is on the compiled runtime (--executor=compiled) with one OpenMP
thread per process. Writes bench/results/pipeline/stages-vs-one.txt (or
--out FILE) under the host header of bench/hostinfo.py, with each command,
its wall-clock time and the comparison. Exit status 1 when a run fails or
a case's losses differ by more than --tol (relative, default 1e-5): the
stages must not change the math.

--smoke runs both cases on the tiny smoke model for 4 steps,
writes into a scratch folder ($STRETTO_SMOKE_DIR/pipeline_stages or a
temporary one; never bench/results) and fails as above. STRETTO_BUILD
names another build folder.
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from array import array

import benchutil
import hostinfo

ROOT = benchutil.ROOT
OUT = os.path.join(ROOT, "bench", "results", "pipeline", "stages-vs-one.txt")


def cases(a):
    tiny = ["bench/configs/exp-gpt-tiny.toml", "--executor=compiled", "--seed", "1",
            "train.optimizer=muon", "train.muon_scale=rms", "train.lr=0.003", "train.muon_lr=0.01",
            "train.sync=2bw", "train.ef_lambda=1.0", f"train.steps={a.tiny_steps}",
            f"train.eval_interval={max(1, a.tiny_steps // 4)}"]
    mini = ["examples/gpt-mini.toml", "--executor=compiled", "--seed", "1", "train.sync=2bw",
            "train.ef_lambda=1.0", "train.grad_clip=0", f"train.steps={a.mini_steps}",
            f"train.warmup_steps={max(1, a.mini_steps // 5)}",
            f"train.eval_interval={max(1, a.mini_steps // 2)}"]
    if a.smoke:
        tiny += benchutil.smoke_model(["train.stages=2"]) + ["train.warmup_steps=1"]
        mini += benchutil.smoke_model(["train.stages=4"]) + ["train.warmup_steps=1"]
    return [("gpt-tiny", tiny, 2, a.tiny_steps), ("gpt-mini", mini, 4, a.mini_steps)]


class Log:
    def __init__(self):
        self.lines = []

    def __call__(self, text=""):
        print(text, flush=True)
        self.lines.append(text)


def train(log, args, out, env):
    shown = " ".join(os.path.relpath(x, ROOT) if x.startswith(ROOT) else x for x in args)
    log("$ " + shown)
    t0 = time.perf_counter()
    p = subprocess.run(args + ["--out", out], cwd=ROOT, env=env, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    dt = time.perf_counter() - t0
    for line in p.stdout.splitlines():
        if "done:" in line or "| val" in line or line.lstrip().startswith("val"):
            log("  " + line)
    log("  (exit status %d, wall-clock %.1f s)" % (p.returncode, dt))
    if p.returncode != 0:
        sys.stdout.write(p.stdout[-3000:])
        raise SystemExit("failed: " + shown)
    with open(os.path.join(out, "metrics.jsonl")) as f:
        rows = [json.loads(l) for l in f if l.strip()]
    return rows, dt


def tensors(path):
    """safetensors -> {name: raw bytes} (F32)."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    return {k: data[v["data_offsets"][0]:v["data_offsets"][1]]
            for k, v in header.items() if k != "__metadata__"}


def rel_l2(x, y):
    a, b = array("f"), array("f")
    a.frombytes(x)
    b.frombytes(y)
    dd = sum((p - q) * (p - q) for p, q in zip(a, b))
    nn = max(sum(p * p for p in a), sum(q * q for q in b))
    return 0.0 if dd == 0 else math.sqrt(dd / nn) if nn > 0 else math.inf


def compare(log, name, one, many, one_dir, many_dir, tol):
    """Logs the comparison; True when the losses agree within tol."""
    def by_step(rows):  # a pipeline writes its validation losses as rows of their own
        d = {}
        for r in rows:
            if "step" in r:
                d.setdefault(r["step"], {}).update(r)
        return d

    a, b = by_step(one), by_step(many)
    ok = True
    train_steps = sorted(s for s in a if "loss" in a[s] and s in b and "loss" in b[s])
    val_steps = sorted(s for s in a if "val_loss" in a[s] and s in b and "val_loss" in b[s])
    rel = lambda x, y: abs(x - y) / max(abs(y), 1e-30)
    if train_steps:
        d = max(rel(b[s]["loss"], a[s]["loss"]) for s in train_steps)
        same = sum(b[s]["loss"] == a[s]["loss"] for s in train_steps)
        log("  train loss, %d steps compared: %d identical, largest relative difference %.2g"
            % (len(train_steps), same, d))
        ok &= d <= tol
    else:
        log("  train loss: the multi-process run logs no per-step train loss to compare")
    if val_steps:
        d = max(rel(b[s]["val_loss"], a[s]["val_loss"]) for s in val_steps)
        log("  validation loss at steps %s: one stage %s; %s %s; largest relative difference %.2g"
            % (", ".join(map(str, val_steps)),
               ", ".join("%.4f" % a[s]["val_loss"] for s in val_steps), name,
               ", ".join("%.4f" % b[s]["val_loss"] for s in val_steps), d))
        ok &= d <= tol
    else:
        log("  validation loss: none in both runs")
        ok = False
    want = max(a) if a else 0
    if not (a and b and max(b) == want):
        log("  the runs end at different steps (%s vs %s)" % (max(a) if a else "-",
                                                             max(b) if b else "-"))
        ok = False
    ta = tensors(os.path.join(one_dir, "model.safetensors"))
    tb = tensors(os.path.join(many_dir, "model.safetensors"))
    if ta.keys() != tb.keys():
        log("  final parameters: different tensor names")
        return False
    same = sum(ta[k] == tb[k] for k in ta)
    worst = max((rel_l2(tb[k], ta[k]) for k in ta if ta[k] != tb[k]), default=0.0)
    log("  final parameters (model.safetensors): %d of %d tensors bit-identical%s"
        % (same, len(ta), "" if same == len(ta) else
           "; largest relative L2 difference %.2g" % worst))
    ok &= worst <= tol
    return ok


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tiny-steps", type=int, default=300)
    p.add_argument("--mini-steps", type=int, default=50)
    p.add_argument("--tol", type=float, default=1e-5,
                   help="largest relative loss or parameter difference (default 1e-5)")
    p.add_argument("--out", help="results file (default %s; --smoke: a scratch folder)"
                   % os.path.relpath(OUT, ROOT))
    p.add_argument("--note", help="a note for the host header (default: $STRETTO_BENCH_NOTE)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny model, 4 steps, output into a scratch folder, checks")
    a = p.parse_args()
    benchutil.require("stretto-train", "stretto-run")
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    command = "python3 bench/pipeline_stages.py"
    if a.smoke:
        a.tiny_steps = a.mini_steps = 4
        scratch = benchutil.scratch("pipeline_stages")
        a.out = a.out or os.path.join(scratch, "stages-vs-one.txt")
        env = dict(benchutil.smoke_env(scratch), **{"OMP_NUM_THREADS": "1"})
        command += " --smoke"
    else:
        if (a.tiny_steps, a.mini_steps) != (300, 50):
            command += " --tiny-steps %d --mini-steps %d" % (a.tiny_steps, a.mini_steps)
    out = a.out or OUT
    if a.smoke:
        benchutil.refuse_committed(out)
    log = Log()
    header = hostinfo.header(a.note, command=command)
    train_bin = benchutil.binary("stretto-train")
    work = tempfile.mkdtemp(prefix="stretto-stages-")
    failed = []
    try:
        log("2BW on the real pipeline schedule (one process per stage) against the one-stage")
        log("2BW run of the same setting, seed and steps: the stages must not change the math")
        log("(tolerance %g relative). Compiled runtime, one OpenMP thread per process." % a.tol)
        for name, args, S, steps in cases(a):
            log()
            log("%s, %d stages on %d processes vs 1 stage, %d steps:" % (name, S, S, steps))
            one_dir, many_dir = os.path.join(work, name + "-1"), os.path.join(work, name + "-%d" % S)
            one, t1 = train(log, [train_bin] + args, one_dir, env)
            many, tS = train(log, [train_bin] + args + ["train.stages=%d" % S, "--nproc", str(S)],
                             many_dir, env)
            log("  wall-clock: 1 stage %.1f s, %d stages on %d processes %.1f s" % (t1, S, S, tS))
            if compare(log, "%d stages" % S, one, many, one_dir, many_dir, a.tol):
                log("  %s: the same run (within %g)" % (name, a.tol))
            else:
                log("  %s: DIFFERENT" % name)
                failed.append(name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(header + "\n" + "\n".join(log.lines) + "\n")
    print("wrote " + (os.path.relpath(out, ROOT) if out.startswith(ROOT) else out))
    if failed:
        print("FAILED: %s differ between one stage and the pipeline" % ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
