#!/usr/bin/env python3
"""Sync data parallelism vs DiLoCo vs gossip at gpt-tiny scale, R = 8 replicas.

    python3 bench/gossip_experiment_tiny.py     # ~45 min on 2 shared cores, 2 runs at a time

Model and budget: bench/configs/exp-gossip-gpt-tiny.toml (gpt-tiny, 8
replicas, H = 20 local steps, 30 outer rounds = 600 local steps per replica,
AdamW lr 3e-3 with warm-up 30 and cosine to 10 %, clipping 1.0, wd 0.1; the
validation loss of the replicas' mean model after every round, 16 batches).
Every training run is stretto-train on the compiled runtime
(--executor=compiled: a fallback to the reference executor fails instead of
changing what is measured), one OpenMP thread per replica, at nice 10.

Methods (per seed; train.seed sets the initialisation, the data order, the
gossip peer draw and which replicas/links the heterogeneous network slows):
  - sync DP: stretto-train has no synchronous data parallelism over
    replicas on the simulated clock (train.replicas > 1 needs sync = gossip
    or diloco). It runs as one process with model.batch = 128 and
    train.micro_batches = 8: each step the gradients of 8 batches of 16 are
    averaged, batch k of step t being window batch 8t + k, which are the
    numerics of runDataParallel (runtime/run/Gossip.cpp, stretto-gossip-bench's
    "sync"); its clock is runDataParallel's (below).
  - DiLoCo (sync = diloco), outer momentum 0.5 and 0.9; outer lr 0.7.
  - gossip on the complete graph with γ = 0.9, which must be DiLoCo μ = 0.9.
  - gossip one-peer (a random perfect matching per round) and ring, γ before
    the mixing (the default) over --gammas / --ring-gammas.
  - gossip one-peer γ = 0.5 with gamma_placement = after-mixing.

Simulated clock (include/stretto/Runtime/Gossip.h): 0.1 s per local step, 10 MB/s
links with 10 ms latency; heterogeneous: net_slow_replicas = 0.25 (2x
slower) and net_slow_links = 0.25 (10x slower). The numerics do not depend
on the network, and stretto-train reports one network per run, so the
gpt-tiny runs use the homogeneous network, and the clocks come from
bench/configs/gossip-clock-proxy.toml (a 2,316-parameter GPT) with
net_bandwidth scaled by its bytes / gpt-tiny's, which leaves every transfer
time, hence every clock, unchanged: stretto-train for the gossip/DiLoCo
clocks on both networks, stretto-gossip-bench's "sync" for sync DP's. The
script checks that the proxy's homogeneous clock equals each gpt-tiny
run's, round by round.

STRETTO_TRAIN / STRETTO_GOSSIP_BENCH=PATH run other binaries (e.g. copies,
so that a rebuild of a shared tree changes nothing). Runs are kept under
--work (default /tmp/stretto-gossip-tiny) and reused when finished, so an
interrupted experiment continues. Writes bench/results/gossip/tiny-{runs,
curves,clock-check}.csv, tiny-loss.png and docs/experiments/gossip-gpt-tiny.md,
each with the host header of bench/hostinfo.py (--out DIR and --doc FILE
write elsewhere). The page reports what the runs measured, the γ placement
(after the mixing vs before) included; it quotes no figure it did not
measure.

--smoke runs every method (seed 1; one-peer γ 0 and 0.5, ring γ 0.5, the
complete graph, after-mixing) on the tiny smoke model (bench/benchutil.py)
with H = 2 for 2 rounds, in a fresh --work folder, writes the CSVs, the plot
and the page into a scratch folder ($STRETTO_SMOKE_DIR/gossip_experiment_tiny
or a temporary one; never bench/results or docs) and fails unless every
run finished with finite losses, the proxy clock equals every gossip and
DiLoCo run's round by round, and the complete graph at γ = 0.9 is DiLoCo
μ = 0.9 bit for bit. STRETTO_BUILD names another build folder.
"""
import argparse
import csv
import hashlib
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import benchutil
import hostinfo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN = os.environ.get("STRETTO_TRAIN", benchutil.binary("stretto-train"))
GBENCH = os.environ.get("STRETTO_GOSSIP_BENCH", benchutil.binary("stretto-gossip-bench"))
CONFIG = os.path.join(ROOT, "bench", "configs", "exp-gossip-gpt-tiny.toml")
PROXY = os.path.join(ROOT, "bench", "configs", "gossip-clock-proxy.toml")
OUT = os.path.join(ROOT, "bench", "results", "gossip")
DOC = os.path.join(ROOT, "docs", "experiments", "gossip-gpt-tiny.md")
R, H, ROUNDS = 8, 20, 30
STEPS = H * ROUNDS
BATCH = 16  # rows per replica's batch
BANDWIDTH = 1e7
# --smoke: the smoke model for the gpt-tiny runs, and the schedule (H,
# evaluation every round) for every run, the proxy's included.
MODEL = []
SCHEDULE = []


def gpt_params(layers, d, seq, vocab, mlp_ratio=4):
    """Parameters of Stretto's GPT (lib/Frontend/Import.cpp: LayerNorm gains
    and biases, qkv/proj/fc/proj with biases, learned positions, untied head)."""
    f = mlp_ratio * d
    per_layer = 4 * d + (3 * d * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
    return vocab * d + seq * d + layers * per_layer + 2 * d + d * vocab


TINY_PARAMS = gpt_params(2, 128, 64, 256)  # 470,528
PROXY_PARAMS = gpt_params(1, 4, 4, 256)    # 2,316: gossip-clock-proxy.toml
HET = ["train.net_slow_replicas=0.25", "train.net_slow_links=0.25"]


def methods(gammas, ring_gammas, complete_seeds, seed):
    """(name, clock topology, overrides) of the runs of one seed."""
    m = [("sync DP", "sync", ["train.replicas=1", f"model.batch={R * BATCH}",
                              f"train.micro_batches={R}"]),
         ("DiLoCo mu=0.5", "complete", ["train.sync=diloco", "train.outer_momentum=0.5"]),
         ("DiLoCo mu=0.9", "complete", ["train.sync=diloco", "train.outer_momentum=0.9"])]
    if seed in complete_seeds:
        m.append(("gossip complete gamma=0.9", "complete",
                  ["train.sync=gossip", "train.topology=complete", "train.outer_momentum=0.9"]))
    for topo, gs in (("one-peer", gammas), ("ring", ring_gammas)):
        for g in gs:
            m.append((f"gossip {topo} gamma={g:g}", topo,
                      ["train.sync=gossip", f"train.topology={topo}", f"train.outer_momentum={g}"]))
    m.append(("gossip one-peer gamma=0.5 after-mixing", "one-peer",
              ["train.sync=gossip", "train.topology=one-peer", "train.outer_momentum=0.5",
               "train.gamma_placement=after-mixing"]))
    return m


def slug(name, seed):
    return name.replace(" ", "_").replace("=", "") + f"-s{seed}"


def train(work, name, seed, overrides, config=CONFIG):
    """One stretto-train run (reused when its folder holds a finished run)."""
    out = os.path.join(work, slug(name, seed))
    done = os.path.join(out, "done.json")
    if os.path.exists(done):
        info = json.load(open(done))
    else:
        os.makedirs(out, exist_ok=True)
        model = MODEL if config == CONFIG else []
        cmd = ["nice", "-n", "10", TRAIN, config, "--executor=compiled", "--out", out,
               "--quiet", f"train.seed={seed}", f"train.steps={STEPS}"] + model + SCHEDULE + \
            overrides
        t0 = time.time()
        with open(os.path.join(out, "log.txt"), "w") as log:
            subprocess.run(cmd, check=True, stdout=log, stderr=subprocess.STDOUT,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
        info = {"wall_s": time.time() - t0, "cmd": cmd}
        json.dump(info, open(done, "w"))
    rows = [json.loads(l) for l in open(os.path.join(out, "metrics.jsonl"))]
    model = os.path.join(out, "model.safetensors")
    digest = hashlib.sha256(open(model, "rb").read()).hexdigest() if os.path.exists(model) else ""
    return {"name": name, "seed": seed, "rows": rows, "wall_s": info["wall_s"], "sha": digest,
            "note": info.get("note")}


def proxy_clock(work, topo, seed, het):
    """Per-round simulated clock of the proxy model (gpt-tiny's transfer times)."""
    bw = BANDWIDTH * PROXY_PARAMS / TINY_PARAMS
    net = "het" if het else "homo"
    if topo == "sync":
        path = os.path.join(work, f"proxy-sync-s{seed}.csv")
        if not os.path.exists(path):
            subprocess.run([GBENCH, PROXY, "sync", path + ".tmp", f"train.seed={seed}",
                            f"train.net_bandwidth={bw!r}", f"train.steps={STEPS}"] + SCHEDULE,
                           check=True, stderr=subprocess.DEVNULL,
                           env=dict(os.environ, OMP_NUM_THREADS="1"))
            os.replace(path + ".tmp", path)
        rows = list(csv.DictReader(open(path)))
        key = "sim_heterogeneous_s" if het else "sim_homogeneous_s"
        return {int(r["round"]): float(r[key]) for r in rows}
    sync = "diloco" if topo == "complete" else "gossip"
    r = train(work, f"proxy {topo} {net}", seed,
              [f"train.sync={sync}", f"train.topology={topo}", f"train.net_bandwidth={bw!r}"]
              + (HET if het else []), config=PROXY)
    return {row["round"]: row["sim_time"] for row in r["rows"]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    p.add_argument("--gammas", type=float, nargs="+", default=[0.0, 0.5, 0.9],
                   help="one-peer γ (before the mixing)")
    p.add_argument("--ring-gammas", type=float, nargs="+", default=[0.0, 0.5, 0.9])
    p.add_argument("--complete-seeds", type=int, nargs="*", default=[1, 2],
                   help="seeds with a complete-graph gossip run (the DiLoCo equality check)")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--rounds", type=int, default=30, help="outer rounds (smoke tests)")
    p.add_argument("--no-run", action="store_true",
                   help="report the finished runs in --work only (a method missing a seed is left out)")
    p.add_argument("--work", default="/tmp/stretto-gossip-tiny")
    p.add_argument("--smoke", action="store_true",
                   help="tiny model, H = 2, 2 rounds, seed 1, a fresh --work, files into a "
                        "scratch folder, checks")
    p.add_argument("--out", help="folder for the CSVs and the plot (default bench/results/gossip)")
    p.add_argument("--doc", help="the page to write (default docs/experiments/gossip-gpt-tiny.md)")
    a = p.parse_args()
    global OUT, DOC, H, BATCH, MODEL, SCHEDULE, TINY_PARAMS
    if a.smoke:
        scratch = benchutil.scratch("gossip_experiment_tiny")
        OUT, DOC = a.out or scratch, a.doc or os.path.join(scratch, "gossip-gpt-tiny.md")
        benchutil.refuse_committed(OUT)
        benchutil.refuse_committed(DOC)
        a.work = benchutil.fresh(os.path.join(scratch, "work"))
        a.seeds, a.gammas, a.ring_gammas, a.complete_seeds, a.rounds = [1], [0.0, 0.5], [0.5], [1], 2
        H, BATCH = 2, 4
        MODEL = benchutil.SMOKE_MODEL
        d = benchutil.smoke_dims()
        TINY_PARAMS = gpt_params(d["layers"], d["d_model"], d["seq_len"], d["vocab"])
        SCHEDULE = [f"train.local_steps={H}", f"train.eval_interval={H}",
                    f"train.log_interval={H}", "train.warmup_steps=1", "train.eval_batches=2"]
        os.environ.update(benchutil.smoke_env(scratch))
    else:
        OUT, DOC = a.out or OUT, a.doc or DOC
    ROUNDS, STEPS = a.rounds, a.rounds * H
    globals().update(ROUNDS=ROUNDS, STEPS=STEPS)
    for b in (TRAIN, GBENCH):
        if not os.path.exists(b):
            sys.exit(f"{b} is missing: build stretto-train and stretto-gossip-bench first")
    os.makedirs(OUT, exist_ok=True)
    os.makedirs(a.work, exist_ok=True)
    default = (a.seeds == [1, 2] and a.gammas == [0.0, 0.5, 0.9] and a.ring_gammas == [0.0, 0.5]
               and a.complete_seeds == [1] and a.rounds == 30)
    cmdline = "python3 bench/gossip_experiment_tiny.py" + (" --smoke" if a.smoke else "" if default else (
        f" --seeds {' '.join(map(str, a.seeds))} --gammas {' '.join(f'{g:g}' for g in a.gammas)}"
        f" --ring-gammas {' '.join(f'{g:g}' for g in a.ring_gammas)}"
        f" --complete-seeds {' '.join(map(str, a.complete_seeds))} --rounds {a.rounds}"))
    # The header of the run that started the runs in --work (a rerun that
    # reuses them reports that run's host, date and load).
    host_path = os.path.join(a.work, "host.txt")
    if not os.path.exists(host_path):
        with open(host_path, "w") as f:
            f.write(hostinfo.header(command=cmdline))
    host = open(host_path).read().rstrip("\n") + "\n"
    binaries = "; ".join(f"{os.path.basename(b)} sha256 "
                         f"{hashlib.sha256(open(b, 'rb').read()).hexdigest()[:16]}"
                         for b in (TRAIN, GBENCH))
    print(host, binaries, flush=True)
    t_start = time.time()

    # Clocks first (seconds), then the gpt-tiny runs, seed by seed.
    topos = ["sync", "complete", "one-peer", "ring"]
    clocks = {}
    for seed in a.seeds:
        for topo in topos:
            for het in (False, True):
                clocks[(topo, seed, het)] = proxy_clock(a.work, topo, seed, het)
    print(f"proxy clocks done ({time.time() - t_start:.0f} s)", flush=True)

    # Method by method (each on every seed), so that a cut-short experiment has
    # whole methods: the most important first.
    jobs = [(name, topo, seed, o) for seed in a.seeds
            for name, topo, o in methods(a.gammas, a.ring_gammas, a.complete_seeds, seed)]
    first = ["sync DP", "DiLoCo mu=0.9", "gossip one-peer gamma=0.5", "gossip ring gamma=0.5",
             "DiLoCo mu=0.5", "gossip complete gamma=0.9", "gossip one-peer gamma=0.5 after-mixing"]
    order = {n: i for i, n in enumerate(first)}
    jobs.sort(key=lambda j: (order.get(j[0], len(first)), j[0], j[2]))
    names = []
    for name, _, _, _ in jobs:
        if name not in names:
            names.append(name)
    topo_of = {name: topo for name, topo, _, _ in jobs}

    def one(job):
        name, topo, seed, o = job
        if a.no_run and not os.path.exists(os.path.join(a.work, slug(name, seed), "done.json")):
            return None
        r = train(a.work, name, seed, o)
        vals = [x["val_loss"] for x in r["rows"] if "val_loss" in x]
        print(f"  {name:<40} seed {seed}: final val {vals[-1]:.4f} ({r['wall_s']:.0f} s)",
              flush=True)
        return r

    with ThreadPoolExecutor(max_workers=a.jobs) as pool:
        runs = list(pool.map(one, jobs))
    # --no-run: a method counts only when every seed it was asked for finished.
    missing = {name for (name, _, _, _), r in zip(jobs, runs) if r is None}
    runs = [r for r in runs if r is not None and r["name"] not in missing]
    names = [n for n in names if n not in missing]
    if not runs:
        sys.exit("no finished runs")
    # From the start of the first run to the end of the last (across reruns).
    last_done = max(os.path.getmtime(os.path.join(a.work, slug(r["name"], r["seed"]), "done.json"))
                    for r in runs)
    wall_min = (last_done - os.path.getmtime(host_path)) / 60

    # Per-round curves: (round, steps/replica, train loss, val loss, consensus,
    # MB sent per replica, clock homogeneous, clock heterogeneous).
    clock_check = []
    for r in runs:
        topo = topo_of[r["name"]]
        ch, ct = clocks[(topo, r["seed"], False)], clocks[(topo, r["seed"], True)]
        curve = []
        if topo == "sync":
            losses = {x["step"]: x["loss"] for x in r["rows"]}
            for x in r["rows"]:
                if "val_loss" in x:  # every 20 steps; train loss: the mean of those 20
                    t = x["step"]
                    tl = statistics.mean(losses[s] for s in range(t - H + 1, t + 1))
                    curve.append((t // H, t, tl, x["val_loss"], None,
                                  t * 2.0 * (R - 1) / R * TINY_PARAMS * 4 / 1e6, ch[t], ct[t]))
        else:
            for x in r["rows"]:
                k = x["round"]
                curve.append((k, k * H, x["loss"], x.get("val_loss"), x.get("consensus"),
                               x["bytes"] / R / 1e6, ch[k], ct[k]))
                clock_check.append((r["name"], r["seed"], k, x["sim_time"], ch[k],
                                    abs(x["sim_time"] - ch[k]) / x["sim_time"]))
        r["curve"] = curve
    max_clock_err = max(c[5] for c in clock_check)

    header = "".join("# " + l + "\n" for l in host.splitlines())
    with open(os.path.join(OUT, "tiny-curves.csv"), "w", newline="") as f:
        f.write(header)
        w = csv.writer(f)
        w.writerow(["run", "seed", "round", "steps_per_replica", "train_loss", "val_loss",
                    "consensus", "mb_sent_per_replica", "sim_homogeneous_s",
                    "sim_heterogeneous_s"])
        for r in runs:
            for c in r["curve"]:
                w.writerow([r["name"], r["seed"]] + ["" if v is None else v for v in c])
    with open(os.path.join(OUT, "tiny-clock-check.csv"), "w", newline="") as f:
        f.write(header)
        w = csv.writer(f)
        w.writerow(["run", "seed", "round", "sim_time_gpt_tiny", "sim_time_proxy", "rel_diff"])
        w.writerows(clock_check)

    # The target: the highest of the runs' best validation losses, rounded up
    # to 0.01, so that every run reaches it.
    target = max(min(c[3] for c in r["curve"] if c[3] is not None) for r in runs)
    target = int(target * 100 + 0.999999) / 100

    def reach(r, target):
        for c in r["curve"]:
            if c[3] is not None and c[3] <= target:
                return c
        return None

    def stat(xs):
        xs = [x for x in xs if x is not None]
        if not xs:
            return "—"
        return xs, statistics.mean(xs), (max(xs) - min(xs)) / 2

    def fmt(xs, d):
        s = stat(xs)
        if s == "—":
            return s
        if len(s[0]) == 1:
            return f"{s[1]:.{d}f}"
        return f"{s[1]:.{d}f} ± {s[2]:.{d}f}"

    summary = []
    with open(os.path.join(OUT, "tiny-runs.csv"), "w", newline="") as f:
        f.write(header)
        w = csv.writer(f)
        w.writerow(["run", "seed", "final_val_loss", "final_train_loss", "final_consensus",
                    "mb_sent_per_replica", "sim_homogeneous_s", "sim_heterogeneous_s",
                    f"steps_to_val_{target:.2f}", f"sim_homogeneous_s_to_val_{target:.2f}",
                    f"sim_heterogeneous_s_to_val_{target:.2f}", "wall_s", "model_sha256"])
        for r in runs:
            last, hit = r["curve"][-1], reach(r, target)
            row = [r["name"], r["seed"], f"{last[3]:.5f}", f"{last[2]:.5f}",
                   "" if last[4] is None else f"{last[4]:.4g}", f"{last[5]:.2f}",
                   f"{last[6]:.2f}", f"{last[7]:.2f}"]
            row += [hit[1], f"{hit[6]:.2f}", f"{hit[7]:.2f}"] if hit else ["", "", ""]
            w.writerow(row + [f"{r['wall_s']:.0f}", r["sha"]])

    def of(name, key):
        rs = [r for r in runs if r["name"] == name]
        if key == "hit":
            return [reach(r, target) for r in rs]
        return [r["curve"][-1][key] for r in rs]

    table = ["| method | final val loss | final train loss | consensus distance | "
             "MB sent / replica | sim. time, homogeneous (s) | sim. time, heterogeneous (s) | "
             f"steps to val {target:.2f} | sim. s to val {target:.2f}, homogeneous | "
             f"sim. s to val {target:.2f}, heterogeneous |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for n in names:
        hits = of(n, "hit")
        miss = sum(h is None for h in hits)
        note = f" ({miss} seed(s) never reach it)" if miss else ""
        cons = "—" if topo_of[n] == "sync" else fmt(of(n, 4), 3)
        seeds_n = sorted(r["seed"] for r in runs if r["name"] == n)
        label = n + (f" (seed {', '.join(map(str, seeds_n))} only)" if len(seeds_n) < len(a.seeds) else "")
        table.append(
            f"| {label} | {fmt(of(n, 3), 4)} | {fmt(of(n, 2), 4)} | {cons} | "
            f"{statistics.mean(of(n, 5)):.1f} | {statistics.mean(of(n, 6)):.1f} | "
            f"{statistics.mean(of(n, 7)):.1f} | {fmt([h[1] if h else None for h in hits], 0)}{note} | "
            f"{fmt([h[6] if h else None for h in hits], 1)} | "
            f"{fmt([h[7] if h else None for h in hits], 1)} |")
    per_seed = ["| method | " + " | ".join(f"seed {s}" for s in a.seeds) + " |",
                "|---|" + "---:|" * len(a.seeds)]
    for n in names:
        v = {r["seed"]: r["curve"][-1][3] for r in runs if r["name"] == n}
        per_seed.append(f"| {n} | " + " | ".join(f"{v[s]:.4f}" if s in v else "—"
                                                   for s in a.seeds) + " |")

    # The complete graph against DiLoCo mu = 0.9, seed by seed.
    eq = []
    for seed in a.complete_seeds:
        d = next((r for r in runs if r["name"] == "DiLoCo mu=0.9" and r["seed"] == seed), None)
        g = next((r for r in runs if r["name"] == "gossip complete gamma=0.9"
                  and r["seed"] == seed), None)
        if not d or not g:
            continue
        diff = 0.0
        for x, y in zip(d["rows"], g["rows"]):
            for k in ("loss", "val_loss", "sim_time", "bytes", "consensus"):
                if k in x or k in y:
                    diff = max(diff, abs(x.get(k, float("nan")) - y.get(k, float("nan"))))
        eq.append(f"seed {seed}: {len(d['rows'])} rounds, largest difference over the per-round "
                  f"train loss, val loss, consensus, clock and bytes {diff:.3g}; final mean "
                  f"models (model.safetensors) {'bit-identical' if d['sha'] == g['sha'] else 'different'}")

    def delta(a_name, b_name):
        """Per seed: a's final val minus b's; mean ± half-range."""
        va = {r["seed"]: r["curve"][-1][3] for r in runs if r["name"] == a_name}
        vb = {r["seed"]: r["curve"][-1][3] for r in runs if r["name"] == b_name}
        return fmt([va[s] - vb[s] for s in va if s in vb], 4)

    def has(n):
        return n in names

    def final(n):
        return [r["curve"][-1][3] for r in runs if r["name"] == n]

    def t_hit(n, col):
        return [h[col] if h else None for h in of(n, "hit")]

    claims = []
    for g_name in ("gossip one-peer gamma=0.5", "gossip ring gamma=0.5"):
        if has(g_name) and has("DiLoCo mu=0.9") and has("DiLoCo mu=0.5"):
            claims.append(f"- Equal steps: {g_name} − DiLoCo μ = 0.9: "
                          f"{delta(g_name, 'DiLoCo mu=0.9')}; − DiLoCo μ = 0.5: "
                          f"{delta(g_name, 'DiLoCo mu=0.5')}.")
    for g_name in ("gossip one-peer gamma=0.5", "gossip ring gamma=0.5"):
        if has(g_name) and has("DiLoCo mu=0.9"):
            claims.append(
                f"- Time to val {target:.2f}, heterogeneous network: {g_name} "
                f"{fmt(t_hit(g_name, 7), 1)} s vs DiLoCo μ = 0.9 {fmt(t_hit('DiLoCo mu=0.9', 7), 1)} s"
                + (f" and μ = 0.5 {fmt(t_hit('DiLoCo mu=0.5', 7), 1)} s" if has("DiLoCo mu=0.5") else "")
                + f" (homogeneous: {fmt(t_hit(g_name, 6), 1)} s vs {fmt(t_hit('DiLoCo mu=0.9', 6), 1)} s).")
    for topo in ("one-peer", "ring"):
        gs = [n for n in names if n.startswith(f"gossip {topo} gamma=") and "after" not in n]
        if len(gs) > 1:
            claims.append(f"- γ on {topo}: " + ", ".join(
                f"γ = {n.split('=')[1]}: {fmt(final(n), 4)}" for n in gs) + ".")
    if has("gossip one-peer gamma=0.5 after-mixing") and has("gossip one-peer gamma=0.5"):
        am = [r for r in runs if r["name"] == "gossip one-peer gamma=0.5 after-mixing"]
        marks = sorted({max(1, ROUNDS // 3), max(1, 2 * ROUNDS // 3), ROUNDS})  # 10, 20, 30
        cons = [[c[4] for c in r["curve"] if c[4] is not None] for r in am]
        claims.append(
            "- γ after the mixing (one-peer γ = 0.5) − before: "
            f"{delta('gossip one-peer gamma=0.5 after-mixing', 'gossip one-peer gamma=0.5')}; "
            f"its consensus distance per seed, round {' / '.join(map(str, marks))}: "
            + "; ".join(" / ".join(f"{c[i - 1]:.3g}" for i in marks if i <= len(c)) for c in cons)
            + f" (before the mixing: {fmt(of('gossip one-peer gamma=0.5', 4), 3)} at the end).")

    # The γ placement, as this experiment measured it (no quoted figure).
    after, before = "gossip one-peer gamma=0.5 after-mixing", "gossip one-peer gamma=0.5"
    if has(after) and has(before):
        cons = {n: [[c[4] for c in r["curve"] if c[4] is not None]
                    for r in runs if r["name"] == n] for n in (after, before)}
        ends = {n: [c[-1] for c in cons[n] if c] for n in cons}
        mid = ROUNDS // 2
        grew = [c[-1] > c[mid - 1] for c in cons[after] if len(c) >= mid >= 1]
        trend = ("grew on every seed" if grew and all(grew) else
                 "did not grow on any seed" if grew and not any(grew) else
                 "grew on %d of %d seeds" % (sum(grew), len(grew)) if grew else "was not recorded")
        placement = [
            f"The γ placement, as measured here (gpt-tiny, {R} replicas, H = {H}, one-peer,",
            f"γ = 0.5, seed{'s' if len(a.seeds) > 1 else ''} {', '.join(map(str, a.seeds))}): "
            "after the mixing − before the mixing,",
            f"final validation loss {delta(after, before)} (per-seed mean ± half-range); final",
            f"consensus distance {fmt(ends[after], 3)} after the mixing against "
            f"{fmt(ends[before], 3)} before;",
            f"the after-mixing consensus distance {trend} from round {mid} to round {ROUNDS}.",
        ]
    else:
        placement = ["This run has no after-mixing run: it measured nothing about the γ placement."]

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, 3, figsize=(17, 5))
        for n in names:
            rs = [r for r in runs if r["name"] == n]
            k = min(len(r["curve"]) for r in rs)
            y = [statistics.mean(r["curve"][i][3] for r in rs) for i in range(k)]
            style = "-" if "one-peer" in n or "sync" in n else "--" if "ring" in n else ":"
            for ax, col in ((axes[0], 1), (axes[1], 6), (axes[2], 7)):
                x = [statistics.mean(r["curve"][i][col] for r in rs) for i in range(k)]
                ax.plot(x, y, style, marker=".", label=n)
        axes[0].set_xlabel("local steps per replica")
        axes[1].set_xlabel("simulated wall-clock (s), homogeneous network")
        axes[2].set_xlabel("simulated wall-clock (s), 1/4 replicas 2x slower, 1/4 links 10x slower")
        for ax in axes:
            ax.set_ylabel(f"val loss of the mean model (mean of {len(a.seeds)} seeds)")
            ax.axhline(target, color="grey", lw=0.8)
            ax.set_ylim(top=2.6)
            ax.grid(alpha=0.3)
        axes[2].set_xscale("log")
        axes[1].set_xscale("log")
        axes[0].legend(fontsize=7)
        fig.suptitle("gpt-tiny, 8 replicas, H = 20: sync DP vs DiLoCo vs gossip "
                     f"(grey: target val {target:.2f})")
        fig.tight_layout()
        fig.savefig(os.path.join(OUT, "tiny-loss.png"), dpi=100)
        plot = ["![validation loss vs steps and simulated time](../../bench/results/gossip/tiny-loss.png)"]
    except ImportError:
        print("matplotlib not available: no plot")
        plot = ["(No plot: matplotlib was not installed.)"]

    # What the grid has that did not run (on every seed).
    cut = []
    for n, _, _ in methods([0.0, 0.5, 0.9], [0.0, 0.5, 0.9], a.seeds, a.seeds[0]):
        if n not in names:
            cut.append(n.replace("gamma=", "γ = ").replace("mu=", "μ = "))
    if "gossip complete gamma=0.9" in names and set(a.complete_seeds) != set(a.seeds):
        cut.append("the complete-graph gossip run on seed(s) "
                   + ", ".join(str(s) for s in a.seeds if s not in a.complete_seeds))
    lines = [
        "# Gossip experiment at gpt-tiny scale: sync DP vs DiLoCo vs gossip",
        "",
        "Issue 13's seed-2 experiment at gpt-tiny scale (the smaller one, 8 replicas of a d = 64",
        "GPT on the reference executor, is [gossip.md](gossip.md)). Written by the command below.",
        "",
        f"Command: `{cmdline}` ({wall_min:.0f} min from the first run's start to the last one's",
        f"end, {a.jobs} runs at a time, nice 10)."
        + (" It was stopped at the time limit; this page was written from the finished runs by"
           " the same command with `--no-run`." if a.no_run else ""),
        "",
        "## Setup",
        "",
        "- Model and budget: `bench/configs/exp-gossip-gpt-tiny.toml`: gpt-tiny",
        "  (examples/gpt-tiny.toml's model: 2 layers, d = 128, 4 heads, sequence 64, batch 16",
        f"  per replica, {TINY_PARAMS:,} parameters), byte-level on `data/kjv.txt`. 8 replicas,",
        f"  H = {H} local steps, {ROUNDS} outer rounds: {STEPS} local steps per replica for every",
        f"  method (sync DP: {STEPS} steps of 8 × 16 sequences; equal tokens and compute).",
        "- Inner optimizer: AdamW, lr 3e-3 (the rate bench/pipeline_experiment_tiny.py's sweep",
        "  chose for one gpt-tiny replica, [pipeline-gpt-tiny.md](pipeline-gpt-tiny.md); not",
        f"  re-swept here), warm-up 30 steps, cosine to 10 % over the {STEPS} local steps, weight",
        "  decay 0.1, clipping 1.0. Outer lr η = 0.7, α = 1 (Metropolis weights).",
        "- Executor: the compiled runtime (`stretto-train --executor=compiled`), one OpenMP",
        "  thread per replica thread. Binaries: " + binaries + ".",
        "- Sync DP: stretto-train has no synchronous data parallelism over replicas (with",
        "  `train.replicas` > 1 it asks for sync = gossip or diloco), so it runs as one process",
        "  with `model.batch=128 train.micro_batches=8 train.replicas=1`: the mean gradient of",
        "  8 batches of 16 per step, batch k of step t being window batch 8t + k, the numerics",
        "  of `runDataParallel` (runtime/run/Gossip.cpp); its clock is runDataParallel's (each",
        "  step waits for the slowest replica, then a ring all-reduce of the gradients).",
        "- Validation: the mean of the replicas' parameters after every round (every 20 steps",
        "  for sync DP), 16 batches of the held-out 10 %.",
        "- Seeds: " + ", ".join(str(s) for s in a.seeds) + " (`train.seed`: initialisation, data"
        " order, peer draws, and which replicas and links the heterogeneous network slows).",
        "  ± is the half-range over the seeds.",
        "- Simulated clock (include/stretto/Runtime/Gossip.h): 0.1 s per local step, links of 10 MB/s",
        "  with 10 ms latency (`net_step_time`, `net_bandwidth`, `net_latency`). Heterogeneous:",
        "  `net_slow_replicas = 0.25` (2× slower) and `net_slow_links = 0.25` (10× slower).",
        "  stretto-train reports one network per run and the numerics do not depend on it,",
        "  so the gpt-tiny runs use the homogeneous network, and both clocks come from runs",
        "  of `bench/configs/gossip-clock-proxy.toml` (a 2,316-parameter GPT) with the same",
        f"  replicas, H, rounds, topology and seed, and `net_bandwidth` scaled by {PROXY_PARAMS} / {TINY_PARAMS},",
        "  which leaves every transfer time unchanged (stretto-train for the gossip and DiLoCo",
        "  clocks, `stretto-gossip-bench ... sync` for sync DP's). Check: the proxy's",
        "  homogeneous clock equals every gpt-tiny gossip/DiLoCo run's, round by round, "
        + ("exactly" if max_clock_err == 0 else f"to a relative {max_clock_err:.1g}")
        + " (`tiny-clock-check.csv`).",
        "- Runs (γ before the mixing unless marked after-mixing, i.e. `gamma_placement =",
        "  \"after-mixing\"`): " + "; ".join(n.replace("gamma=", "γ = ").replace("mu=", "μ = ")
                                     for n in names)
        + (f" (the complete graph on seed(s) {', '.join(map(str, a.complete_seeds))})"
           if "gossip complete gamma=0.9" in names else "") + ".",
    ]
    for r in runs:
        if r.get("note"):
            lines.append(f"- {r['name']}, seed {r['seed']}: {r['note']}.")
    if cut:
        lines.append("- Not run, to fit about an hour of a 2-core machine shared with builds: "
                     + "; ".join(cut) + ".")
    lines += [
        "",
        "Host and code of this run:",
        "",
        "```",
    ] + host.splitlines() + [
        "```",
        "",
        "## Results",
        "",
        f"Target: validation loss {target:.2f}, the highest of the runs' best validation",
        "losses rounded up to 0.01, so every run (every method, every seed) reaches it (the",
        "first evaluated round at or below it counts). Simulated times are at the end of that round",
        "(the latest replica's clock).",
        "",
    ] + table + [
        "",
        "Columns: final val / train loss after the last round (train: the replicas' mean",
        "local loss over the last round; sync DP: the mean over its last 20 steps); consensus distance",
        "Σ_i ‖θ_i − θ̄‖² at the end (0 on the complete graph); MB sent per replica and the",
        "simulated times at the end are means over the seeds.",
        "",
        "Final validation loss per seed:",
        "",
    ] + per_seed + [
        "",
        "Complete-graph gossip vs DiLoCo (μ = γ = 0.9): " + ("; ".join(eq) if eq else "not run") + ".",
        "",
        "Per-seed differences in final val loss (mean ± half-range):",
        "",
    ] + [f"- {x} − {y}: {delta(x, y)}" for x, y in (
        ("gossip one-peer gamma=0.5", "DiLoCo mu=0.9"), ("gossip ring gamma=0.5", "DiLoCo mu=0.9"),
        ("gossip one-peer gamma=0.5", "DiLoCo mu=0.5"), ("gossip ring gamma=0.5", "DiLoCo mu=0.5"),
        ("DiLoCo mu=0.5", "DiLoCo mu=0.9"),
        ("gossip one-peer gamma=0.5 after-mixing", "gossip one-peer gamma=0.5"),
        ("DiLoCo mu=0.9", "sync DP"), ("DiLoCo mu=0.5", "sync DP")) if x in names and y in names] + [
        "",
    ] + plot + [
        "",
        "## The paper's claims (docs/design.md §4.5, §4.6)",
        "",
        "docs/design.md §4.6 reports of GASLoC (arXiv 2606.11081): \"competitive with DiLoCo at",
        "equal steps and clearly faster under heterogeneous bandwidth; outer momentum improves",
        "the dependence on the graph's spectral gap from χ to √χ\". §4.5 gives DiLoCo's",
        "published η = 0.7, μ = 0.9.",
        "",
    ] + placement + [
        "",
        "Measured here (final val loss, per-seed differences):",
        "",
    ] + claims + [
        "",
        "Files: `bench/results/gossip/tiny-runs.csv` (one row per run),",
        "`tiny-curves.csv` (one row per round), `tiny-clock-check.csv` (proxy vs gpt-tiny",
        "clocks), `tiny-loss.png`.",
    ]
    if a.smoke:
        lines[1:1] = ["", "(Smoke run: the tiny smoke model, H = 2, 2 rounds; no figures.)"]
    os.makedirs(os.path.dirname(os.path.abspath(DOC)), exist_ok=True)
    with open(DOC, "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    if a.smoke:
        n_jobs = len(jobs)
        benchutil.check(len(runs) == n_jobs and all(
            all(math.isfinite(c[2]) and (c[3] is None or math.isfinite(c[3])) for c in r["curve"])
            and len(r["curve"]) == ROUNDS for r in runs),
            f"{n_jobs} runs, each with {ROUNDS} rounds of finite losses")
        benchutil.check(clock_check and max_clock_err <= 1e-9,
                        "the proxy's clock is every gossip/DiLoCo run's, round by round "
                        f"(largest relative difference {max_clock_err:.1g})")
        d = next(r for r in runs if r["name"] == "DiLoCo mu=0.9")
        g = next(r for r in runs if r["name"] == "gossip complete gamma=0.9")
        benchutil.check(d["sha"] and d["sha"] == g["sha"],
                        "gossip on the complete graph (γ = 0.9) is DiLoCo μ = 0.9 bit for bit")
        benchutil.check("The γ placement, as measured here" in "\n".join(lines) and
                        "about 0.09" not in "\n".join(lines),
                        "the page states the γ placement this run measured (no quoted figure)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
