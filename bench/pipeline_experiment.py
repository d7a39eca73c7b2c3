#!/usr/bin/env python3
"""Synchronous vs PipeDream-2BW x {AdamW, Muon, Muon + delay-EF} on a small GPT.

    python3 bench/pipeline_experiment.py            # ~10 min on 2 cores

Equal token budgets (same steps and batch for every run). Learning rates are
tuned per optimizer on the synchronous run (AdamW: lr; Muon: muon_lr, its
AdamW group keeping AdamW's tuned lr) and reused for 2BW. The 2BW runs use
one stage: the delayed update is in the IR (train-2bw), and the tests show it
is the same update on 1, 2 or 4 stages. Every run is on the compiled runtime
(--executor=compiled, so that a fallback to the reference executor fails
instead of changing what was measured). Writes bench/results/pipeline/
{runs.csv, curves.csv, loss.png} and docs/experiments/pipeline.md, each with
the host header of bench/hostinfo.py (CSV: as '#' comment lines).

--smoke runs the same grid and runs on the tiny smoke model (bench/
benchutil.py) for 4 steps each, writes the CSVs, the plot and the page into
a scratch folder ($STRETTO_SMOKE_DIR/pipeline_experiment or a temporary
one; never bench/results or docs) and fails unless every run finished with
a finite validation loss and every file was written. --out DIR and --doc
FILE write elsewhere; STRETTO_BUILD names another build folder.
"""
import argparse
import csv
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor

import benchutil
import hostinfo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = benchutil.binary("stretto-train")
CONFIG = os.path.join(ROOT, "bench", "configs", "exp-gpt.toml")
OUT = os.path.join(ROOT, "bench", "results", "pipeline")
DOC = os.path.join(ROOT, "docs", "experiments", "pipeline.md")
SEEDS = [1, 2]
SMOKE = []  # --smoke: the overrides that make every run tiny
WORK = None  # the runs' folders (removed at the end)
ENV = dict(os.environ)


def run(name, seed, overrides):
    out = tempfile.mkdtemp(prefix="run-", dir=WORK)
    cmd = [TRAIN, CONFIG, "--executor=compiled", "--seed", str(seed), "--out", out,
           "--quiet"] + overrides + SMOKE
    # One thread per run, two runs at a time: the small model gains nothing
    # from threads, and idle OpenMP workers would spin on the other core.
    env = dict(ENV, OMP_NUM_THREADS="1")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, env=env)
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    vals = [r["val_loss"] for r in rows if "val_loss" in r]
    print(f"  {name:<22} seed {seed}: final val {vals[-1]:.4f}", flush=True)
    return {"name": name, "seed": seed, "final_val": vals[-1],
            "final_train": statistics.mean(r["loss"] for r in rows[-20:]),
            "curve": [(r["step"], r["loss"], r.get("val_loss")) for r in rows]}


def main():
    global OUT, DOC, SMOKE, WORK, ENV
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--smoke", action="store_true",
                   help="tiny model, 4 steps per run, files into a scratch folder, checks")
    p.add_argument("--out", help="folder for the CSVs and the plot (default bench/results/pipeline)")
    p.add_argument("--doc", help="the page to write (default docs/experiments/pipeline.md)")
    a = p.parse_args()
    benchutil.require("stretto-train")
    if a.smoke:
        scratch = benchutil.scratch("pipeline_experiment")
        OUT, DOC = a.out or scratch, a.doc or os.path.join(scratch, "pipeline.md")
        benchutil.refuse_committed(OUT)
        benchutil.refuse_committed(DOC)
        SMOKE = benchutil.SMOKE_MODEL + ["train.steps=4", "train.warmup_steps=1",
                                         "train.eval_interval=2"]
        ENV = benchutil.smoke_env(scratch)
    else:
        OUT, DOC = a.out or OUT, a.doc or DOC
    os.makedirs(OUT, exist_ok=True)
    WORK = tempfile.mkdtemp(prefix="stretto-exp-")
    try:
        return experiment(a)
    finally:
        shutil.rmtree(WORK, ignore_errors=True)


def experiment(a):
    host = hostinfo.header(command="python3 bench/pipeline_experiment.py" +
                           (" --smoke" if a.smoke else ""))
    print(host)
    print("tuning learning rates on the synchronous run (seed 1)")
    adam_grid = [1e-3, 3e-3, 1e-2]
    pool = ThreadPoolExecutor(max_workers=2)
    adam = dict(zip(adam_grid, pool.map(lambda lr: run(f"sync adamw lr={lr:g}", 1, [f"train.lr={lr}"]),
                                        adam_grid)))
    best_lr = min(adam, key=lambda lr: adam[lr]["final_val"])
    muon_grid = [0.01, 0.03, 0.1]
    muon = dict(zip(muon_grid, pool.map(
        lambda mlr: run(f"sync muon muon_lr={mlr:g}", 1,
                        ["train.optimizer=muon", f"train.lr={best_lr}", f"train.muon_lr={mlr}"]),
        muon_grid)))
    best_mlr = min(muon, key=lambda m: muon[m]["final_val"])
    print(f"tuned: adamw lr {best_lr:g}, muon muon_lr {best_mlr:g}")

    adam_o = [f"train.lr={best_lr}"]
    muon_o = ["train.optimizer=muon", f"train.lr={best_lr}", f"train.muon_lr={best_mlr}"]
    configs = [
        ("sync adamw", adam_o), ("2bw adamw", adam_o + ["train.sync=2bw"]),
        ("sync muon", muon_o), ("2bw muon", muon_o + ["train.sync=2bw"]),
        ("2bw muon + EF 0.5", muon_o + ["train.sync=2bw", "train.ef_lambda=0.5"]),
        ("2bw muon + EF 1.0", muon_o + ["train.sync=2bw", "train.ef_lambda=1.0"]),
    ]
    print(f"main runs ({len(SEEDS)} seeds)")
    jobs = [(name, seed, o) for name, o in configs for seed in SEEDS]
    runs = list(pool.map(lambda j: run(*j), jobs))

    with open(os.path.join(OUT, "runs.csv"), "w", newline="") as f:
        f.write("".join("# " + l + "\n" for l in host.splitlines()))
        w = csv.writer(f)
        w.writerow(["run", "seed", "final_val_loss", "final_train_loss_last20"])
        for r in list(adam.values()) + list(muon.values()) + runs:
            w.writerow([r["name"], r["seed"], f"{r['final_val']:.5f}", f"{r['final_train']:.5f}"])
    with open(os.path.join(OUT, "curves.csv"), "w", newline="") as f:
        f.write("".join("# " + l + "\n" for l in host.splitlines()))
        w = csv.writer(f)
        w.writerow(["run", "seed", "step", "train_loss", "val_loss"])
        for r in runs:
            for step, loss, val in r["curve"]:
                w.writerow([r["name"], r["seed"], step, loss, "" if val is None else val])

    mean = {name: statistics.mean(r["final_val"] for r in runs if r["name"] == name)
            for name, _ in configs}
    spread = {name: (max(r["final_val"] for r in runs if r["name"] == name) -
                     min(r["final_val"] for r in runs if r["name"] == name)) / 2
              for name, _ in configs}
    gap_adam = mean["2bw adamw"] - mean["sync adamw"]
    gap_muon = mean["2bw muon"] - mean["sync muon"]

    def recovered(name):
        return 100 * (mean["2bw muon"] - mean[name]) / gap_muon if gap_muon > 0 else float("nan")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 5))
        for name, _ in configs:
            pts = {}
            for r in runs:
                if r["name"] == name:
                    for step, _, val in r["curve"]:
                        if val is not None:
                            pts.setdefault(step, []).append(val)
            xs = sorted(pts)
            ax.plot(xs, [statistics.mean(pts[x]) for x in xs], marker="o", label=name)
        ax.set_xlabel("step")
        ax.set_ylabel(f"validation loss (mean of {len(SEEDS)} seeds)")
        ax.set_title("exp-gpt: synchronous vs PipeDream-2BW (one-step delay)")
        ax.legend()
        ax.grid(alpha=0.3)
        fig.savefig(os.path.join(OUT, "loss.png"), dpi=110, bbox_inches="tight")
    except ImportError:
        print("matplotlib not available: no plot")

    lines = [
        "# Pipeline experiment: synchronous vs PipeDream-2BW, with delay-EF",
        "",
        "Command: `python3 bench/pipeline_experiment.py` (model: `bench/configs/exp-gpt.toml`,",
        "2 layers, d = 64, sequence 32, batch 16, 200 steps, cosine schedule, byte-level",
        f"on `data/kjv.txt`; seeds {SEEDS}; learning rates tuned on the synchronous run:",
        f"AdamW lr {best_lr:g}, Muon muon_lr {best_mlr:g} with AdamW lr {best_lr:g} for its AdamW group).",
        "Executor: the compiled runtime (`stretto-train --executor=compiled`), one OpenMP",
        "thread per run, two runs at a time.",
        "",
        "Host and code of this run:",
        "",
        "```",
    ] + host.splitlines() + [
        "```",
        "",
        "| run | final val loss (mean ± half-range) | vs synchronous |",
        "|---|---:|---:|",
    ]
    for name, _ in configs:
        base = mean["sync adamw"] if "adamw" in name else mean["sync muon"]
        lines.append(f"| {name} | {mean[name]:.4f} ± {spread[name]:.4f} | {mean[name] - base:+.4f} |")
    lines += [
        "",
        f"Delay penalty (2BW − sync): AdamW {gap_adam:+.4f}, Muon {gap_muon:+.4f}.",
        f"Share of Muon's penalty recovered by delay-EF: λ = 0.5: {recovered('2bw muon + EF 0.5'):.0f} %,"
        f" λ = 1: {recovered('2bw muon + EF 1.0'):.0f} %.",
        "",
        "![validation loss](../../bench/results/pipeline/loss.png)",
    ]
    if a.smoke:
        lines[1:1] = ["", "(Smoke run: the tiny smoke model for 4 steps per run; no figures.)"]
    os.makedirs(os.path.dirname(os.path.abspath(DOC)), exist_ok=True)
    with open(DOC, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if a.smoke:
        every = list(adam.values()) + list(muon.values()) + runs
        benchutil.check(len(runs) == len(configs) * len(SEEDS) and
                        all(math.isfinite(r["final_val"]) for r in every),
                        "%d runs, each with a finite validation loss" % len(every))
        for f in ("runs.csv", "curves.csv"):
            with open(os.path.join(OUT, f)) as fh:
                rows = [l for l in fh if not l.startswith("#")]
            benchutil.check(len(rows) > len(runs), f"{f} has a row per run (and per step)")
        benchutil.check(all(f"| {n} |" in "\n".join(lines) for n, _ in configs),
                        "the page has a row per method")
    return 0


if __name__ == "__main__":
    sys.exit(main())
