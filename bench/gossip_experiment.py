#!/usr/bin/env python3
"""Synchronous data parallelism vs DiLoCo vs gossip, R = 8 replicas.

    ninja -C build -j1 stretto-gossip-bench
    python3 bench/gossip_experiment.py            # about 10 minutes on 2 cores
    python3 bench/gossip_experiment.py [section.key=value ...]   # overrides for every run
    python3 bench/gossip_experiment.py --smoke    # the same code at a tiny size (seconds)

Runs build/bin/stretto-gossip-bench once per method on bench/gossip-gpt-small.toml
(a small GPT on data/kjv.txt), each run reporting the simulated wall-clock under
a homogeneous and a heterogeneous network model (the numerics do not depend on
it). stretto-gossip-bench runs every replica on the reference executor (the
plain-loop oracle), not the compiled runtime. Writes bench/results/gossip/
{METHOD.csv, results.csv, *.png} and the table in docs/experiments/gossip.md
(between the GENERATED markers), each with the host header of
bench/hostinfo.py (CSV: as '#' comment lines). Needs matplotlib (pip install
matplotlib) for the figures; without it only CSV and table.

--smoke runs every method on the tiny smoke model (bench/benchutil.py) with
4 replicas, H = 2 and 4 local steps, writes the CSVs, figures and a copy of
the page (docs/experiments/gossip.md, its generated table replaced) into a
scratch folder ($STRETTO_SMOKE_DIR/gossip_experiment or a temporary one;
never bench/results or docs) and fails unless every method wrote its rows
with finite losses and the table landed between the page's markers.
--out DIR and --doc FILE write elsewhere; STRETTO_BUILD names another build
folder.
"""
import argparse
import csv
import math
import os
import shutil
import subprocess
import sys
import time

import benchutil
import hostinfo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = benchutil.binary("stretto-gossip-bench")
CONFIG = os.path.join(ROOT, "bench", "gossip-gpt-small.toml")
OUT = os.path.join(ROOT, "bench", "results", "gossip")
DOC = os.path.join(ROOT, "docs", "experiments", "gossip.md")

# (method, label, extra overrides)
METHODS = [
    ("sync", "sync DP (all-reduce every step)", []),
    ("diloco", "DiLoCo (complete, H=20, mu=0.9)", ["train.outer_momentum=0.9"]),
    ("one-peer", "gossip one-peer (H=20, gamma=0.5)", []),
    ("ring", "gossip ring (H=20, gamma=0.5)", []),
    ("one-peer-adaptive", "gossip one-peer, H_i by speed", []),
]


HOST = None  # the host header, set in main()
OVERRIDES = []  # section.key=value for every run (the command line's, or --smoke's)
SMOKE_OVERRIDES = benchutil.SMOKE_MODEL + ["train.replicas=4", "train.local_steps=2",
                                           "train.steps=4", "train.eval_interval=2",
                                           "train.eval_batches=1"]
ENV = dict(os.environ)


def commented(text):
    return "".join("# " + l + "\n" for l in text.splitlines())


def run(method, extra):
    path = os.path.join(OUT, method + ".csv")
    t0 = time.time()
    cmd = [BENCH, CONFIG, method, path] + extra + OVERRIDES
    print("$", " ".join(os.path.relpath(c, ROOT) if c.startswith(ROOT) else c for c in cmd),
          flush=True)
    # One OpenMP thread per executor: the sync run has one executor, the
    # gossip runs one thread per replica; spinning OpenMP teams on a shared
    # 2-core machine are several times slower.
    env = dict(ENV, OMP_NUM_THREADS="1")
    subprocess.run(cmd, check=True, stderr=subprocess.DEVNULL, env=env)
    print(f"  {method}: {time.time() - t0:.0f} s", flush=True)
    with open(path) as f:
        rows = list(csv.DictReader(l for l in f if not l.startswith("#")))
    with open(path) as f:
        body = f.read()
    with open(path, "w") as f:  # the binary wrote the rows; the header goes on top
        f.write(commented(HOST) + body)
    return rows


def main():
    global HOST, OUT, DOC, OVERRIDES, ENV
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("overrides", nargs="*", metavar="section.key=value",
                   help="settings for every run (passed to stretto-gossip-bench)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny model, 4 replicas, 4 steps, files into a scratch folder, checks")
    p.add_argument("--out", help="folder for the CSVs and figures (default bench/results/gossip)")
    p.add_argument("--doc", help="the page whose generated table is replaced (default "
                                 "docs/experiments/gossip.md)")
    a = p.parse_args()
    benchutil.require("stretto-gossip-bench")
    OVERRIDES = list(a.overrides)
    if a.smoke:
        scratch = benchutil.scratch("gossip_experiment")
        OUT = a.out or scratch
        if not a.doc:  # a copy of the page, whose table the run replaces
            a.doc = os.path.join(scratch, "gossip.md")
            shutil.copy(DOC, a.doc)
        DOC = a.doc
        benchutil.refuse_committed(OUT)
        benchutil.refuse_committed(DOC)
        OVERRIDES = SMOKE_OVERRIDES + OVERRIDES
        ENV = benchutil.smoke_env(scratch)
    else:
        OUT, DOC = a.out or OUT, a.doc or DOC
    os.makedirs(OUT, exist_ok=True)
    HOST = hostinfo.header(command=" ".join(["python3 bench/gossip_experiment.py"] + sys.argv[1:]))
    print(HOST)
    rows = {m: run(m, extra) for m, _, extra in METHODS}
    with open(os.path.join(OUT, "results.csv"), "w", newline="") as f:
        f.write(commented(HOST))
        w = csv.writer(f)
        keys = list(rows["sync"][0].keys())
        w.writerow(keys)
        for m, _, _ in METHODS:
            for r in rows[m]:
                w.writerow([r[k] for k in keys])

    def last_val(rs):
        vals = [float(r["val_loss"]) for r in rs if r["val_loss"]]
        return vals[-1] if vals else float("nan")

    def smooth_loss(rs, n):
        tail = [float(r["loss"]) for r in rs[-n:]]
        return sum(tail) / len(tail)

    table = ["| method | steps / replica | train loss (last 20 steps) | val loss (mean model) | "
             "sim. time, homogeneous (s) | sim. time, heterogeneous (s) | MB sent / replica |",
             "|---|---|---|---|---|---|---|"]
    for m, label, _ in METHODS:
        rs = rows[m]
        last = rs[-1]
        n = 20 if m == "sync" else 1  # sync reports per step, the others per round of 20 steps
        homo = "n/a (H_i tuned to the heterogeneous speeds)" if m == "one-peer-adaptive" else \
            f"{float(last['sim_homogeneous_s']):.1f}"
        table.append(f"| {label} | {last['steps_per_replica']} | {smooth_loss(rs, n):.4f} | "
                     f"{last_val(rs):.4f} | {homo} | {float(last['sim_heterogeneous_s']):.1f} | "
                     f"{float(last['bytes_total']) / 8 / 1e6:.1f} |")
    text = "\n".join(table + ["", "Executor: the reference executor (stretto-gossip-bench). Host and "
                                 "code of this run:", "", "```"] + HOST.splitlines() + ["```"])
    print(text)

    if os.path.exists(DOC):
        doc = open(DOC).read()
        m0, m1 = "<!-- GENERATED TABLE -->", "<!-- END GENERATED TABLE -->"
        if m0 in doc and m1 in doc:
            doc = doc[:doc.index(m0) + len(m0)] + "\n" + text + "\n" + doc[doc.index(m1):]
            open(DOC, "w").write(doc)
    if a.smoke:
        steps, H = 4, 2
        for m, _, _ in METHODS:
            want = steps if m == "sync" else steps // H
            benchutil.check(len(rows[m]) == want and
                            all(math.isfinite(float(r["loss"])) for r in rows[m]),
                            f"{m}: {want} rows with finite losses")
        doc = open(DOC).read()
        benchutil.check(text in doc, "the table is in the page, between its markers")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no figures")
        return
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    for m, label, _ in METHODS:
        rs = rows[m]
        x = [int(r["steps_per_replica"]) for r in rs]
        y = [float(r["loss"]) for r in rs]
        if m == "sync":  # per-step losses are noisy: mean over each 20 steps
            x = x[19::20]
            y = [sum(y[i:i + 20]) / 20 for i in range(0, len(y) - 19, 20)]
        axes[0].plot(x, y, label=label)
        for ax, key in ((axes[1], "sim_homogeneous_s"), (axes[2], "sim_heterogeneous_s")):
            if key == "sim_homogeneous_s" and m == "one-peer-adaptive":
                continue
            t = [float(r[key]) for r in rs]
            ly = [float(r["loss"]) for r in rs]
            if m == "sync":
                t = t[19::20]
                ly = [sum(ly[i:i + 20]) / 20 for i in range(0, len(ly) - 19, 20)]
            ax.plot(t, ly, label=label)
    axes[0].set_xlabel("local steps per replica")
    axes[1].set_xlabel("simulated wall-clock (s), homogeneous links")
    axes[2].set_xlabel("simulated wall-clock (s), 1/4 links 10x slower, 1/4 replicas 2x slower")
    for ax in axes:
        ax.set_ylabel("training loss (mean over replicas)")
        ax.set_ylim(top=3.2)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle("8 replicas, GPT 2x64, kjv.txt: loss vs steps and vs simulated time")
    fig.tight_layout()
    fig.savefig(os.path.join(OUT, "loss.png"), dpi=110)
    fig.savefig(os.path.join(OUT, "loss.svg"))
    print("wrote", os.path.relpath(OUT, ROOT) + "/{results.csv,loss.png,loss.svg}")


if __name__ == "__main__":
    main()
