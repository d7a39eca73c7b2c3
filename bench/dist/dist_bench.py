#!/usr/bin/env python3
"""Multi-process runs against in-process ones, and gossip vs DiLoCo on a real
(shaped) network. Printed and written to bench/results/dist/, never asserted.

    python3 bench/dist/dist_bench.py throughput   # tok/s, bytes and comm time per step per rank
    python3 bench/dist/dist_bench.py network      # 4 replicas in network namespaces, tc-shaped links
    python3 bench/dist/dist_bench.py network --smoke   # the same at tiny sizes (seconds)

`throughput` runs, on the same machine and plan: a 2-stage PipeDream-2BW
gpt-tiny pipeline (threads vs 2 processes), 4-replica one-peer gossip
(threads vs 4 processes) and synchronous data parallelism (2 processes vs
one process with the doubled batch).

`network` (root, iproute2, tc) puts each of 4 replicas in its own network
namespace, joined to a bridge by a veth link whose egress is shaped with
tc htb: every link at FAST, a quarter of the replica pairs (2 of 6) at
FAST/10 (per-destination htb classes). It runs DiLoCo (complete graph) and
gossip (one-peer matching, gamma 0.5) on gpt-tiny with H local steps per
round, records the wall-clock of every round, and reports the wall-clock
to a target loss, next to the in-process simulated clock with the same
slow links. Each replica has one thread; the script reports how much of
the wall clock was compute (the rounds' local steps) and how much waiting.
Every run (method) gets fresh --out folders, one per replica: a run never
meets an earlier run's checkpoints (stretto-run refuses to overwrite them).
`network` needs root, iproute2 and tc; without them it prints SKIPPED and
exits 77.

--smoke runs the same code at a tiny model, few steps and rounds, writes
the results file into a scratch folder ($STRETTO_SMOKE_DIR/dist_bench-WHAT
or a temporary one; never bench/results), checks what the full run relies
on (every rank trained every step or round, finite losses, one comm line
per rank) and exits non-zero on any failure. STRETTO_BUILD names another
build folder.
"""
import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import benchutil  # noqa: E402
import hostinfo  # noqa: E402

TRAIN = benchutil.binary("stretto-train")
RUN = benchutil.binary("stretto-run")
TINY = os.path.join(ROOT, "examples", "gpt-tiny.toml")
RESULTS = os.path.join(ROOT, "bench", "results", "dist")
WORK = None  # set in main()
SMOKE = False
ENV = dict(os.environ)  # the children's environment (smoke: a shared kernel cache)


# A rank that failed: since gossip and DiLoCo replicas continue without a
# dead peer by default, a launcher can end with status 0 after one; a
# benchmark with a replica missing measured something else.
RANK_FAILED = re.compile(r"^\[rank \d+\] error:|^launcher: rank \d+ failed", re.M)


def sh(cmd, env=None, timeout=1800):
    p = subprocess.run(cmd, cwd=WORK, env=env or ENV, text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=timeout)
    if p.returncode != 0 or RANK_FAILED.search(p.stdout):
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}):\n{p.stdout[-3000:]}")
    return p.stdout


def plan(name, *overrides):
    path = os.path.join(WORK, name + ".plan")
    model = benchutil.smoke_model(overrides) if SMOKE else []
    sh([TRAIN, TINY, "train.warmup_steps=2", "train.eval_interval=100000", *model, *overrides,
        "--save-plan", path, "--quiet"])
    return path


def env(threads):
    e = dict(ENV)
    e["OMP_NUM_THREADS"] = str(threads)
    e["OPENBLAS_NUM_THREADS"] = str(threads)
    return e


def tok_s(out):
    m = re.findall(r"([0-9.]+) tok/s", out)
    return float(m[-1]) if m else float("nan")


def comm(out):
    """Per rank: (MB sent, MB received, s in communication)."""
    return [(int(r), float(a), float(b), float(c)) for r, a, b, c in
            re.findall(r"comm: rank (\d+) sent ([0-9.]+) MB, received ([0-9.]+) MB, "
                       r"([0-9.]+) s in communication", out)]


def expect(ok, what):
    """The smoke mode's checks (a full run reports; it only fails on errors)."""
    if SMOKE:
        benchutil.check(ok, what)


def throughput():
    lines = []
    say = lambda s="": (print(s), lines.append(s))
    steps = 4 if SMOKE else 60
    say(f"# Multi-process vs in-process, gpt-tiny{' (smoke size)' if SMOKE else ''}, {steps} steps "
        "per run (tok/s from the runs' own summary lines; comm per rank from their 'comm:' lines)")
    say("| run | in-process tok/s | multi-process tok/s | multi / in | per step per rank: MB sent, "
        "MB received, ms in communication |")
    say("|---|---:|---:|---:|---|")

    pp = plan("pipe", f"train.steps={steps}", "train.stages=2", "train.micro_batches=4",
              "train.sync=2bw", "train.ef_lambda=0.5", "train.grad_clip=0")
    a = sh([RUN, pp, "--quiet"], env=env(2))
    b = sh([RUN, pp, "--nproc", "2", "--timeout", "120"], env=env(1))
    c = comm(b)
    expect(math.isfinite(tok_s(a)) and math.isfinite(tok_s(b)), "pipeline runs report tok/s")
    expect(len(c) == 2, "the 2-process pipeline reports comm for both ranks")
    per = "; ".join(f"rank {r}: {s / steps:.2f}, {rc / steps:.2f}, {1000 * t / steps:.1f}"
                    for r, s, rc, t in c)
    say(f"| 2-stage 2BW + EF, 4 micro-batches (threads vs 2 processes) | {tok_s(a):,.0f} | "
        f"{tok_s(b):,.0f} | {tok_s(b) / tok_s(a):.2f}x | {per} |")

    rounds, H = (2, 2) if SMOKE else (6, 10)
    g = plan("gossip", "train.sync=gossip", "train.replicas=4", f"train.local_steps={H}",
             "train.topology=one-peer", f"train.steps={rounds * H}")
    a = sh([RUN, g, "--quiet"], env=env(2))
    b = sh([RUN, g, "--nproc", "4", "--timeout", "120", "--on-peer-failure=stop"], env=env(1))
    # Every mode's summary line is the step driver's: tokens of all replicas'
    # local steps over the run's wall-clock time.
    ta, tb = tok_s(a), tok_s(b)
    c = comm(b)
    expect(math.isfinite(ta) and math.isfinite(tb), "gossip runs report tok/s")
    expect(len(c) == 4, "the 4-process gossip run reports comm for every rank")
    per = "; ".join(f"rank {r}: {s / (rounds * H):.2f}, {rc / (rounds * H):.2f}, "
                    f"{1000 * t / (rounds * H):.1f}" for r, s, rc, t in c)
    say(f"| gossip one-peer, 4 replicas, H = {H} (threads vs 4 processes) | {ta:,.0f} | {tb:,.0f} | "
        f"{tb / ta:.2f}x | {per} |")

    batch = 4 if SMOKE else 16
    dp = plan("dp", f"train.steps={steps}")
    one = plan("one", f"train.steps={steps}", f"model.batch={2 * batch}", "train.micro_batches=2")
    a = sh([RUN, one, "--quiet"], env=env(2))
    b = sh([RUN, dp, "--nproc", "2", "--timeout", "120"], env=env(1))
    c = comm(b)
    expect(math.isfinite(tok_s(a)) and math.isfinite(tok_s(b)), "data-parallel runs report tok/s")
    expect(len(c) == 2, "the 2-process data-parallel run reports comm for both ranks")
    per = "; ".join(f"rank {r}: {s / steps:.2f}, {rc / steps:.2f}, {1000 * t / steps:.1f}"
                    for r, s, rc, t in c)
    say(f"| data parallel: 1 process, batch {2 * batch} as 2 micro-batches vs 2 processes of "
        f"{batch} | {tok_s(a):,.0f} | {tok_s(b):,.0f} | {tok_s(b) / tok_s(a):.2f}x | {per} |")
    say()
    say("In-process runs use 2 OpenMP threads (stages and replicas are threads sharing them); "
        "each process of a multi-process run gets 1 (the launcher's share of 2 cores).")
    return lines


# --- shaped network -----------------------------------------------------------

def run_root(cmd):
    p = subprocess.run(cmd, shell=True, text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT)
    if p.returncode != 0:
        raise RuntimeError(f"{cmd}: {p.stdout}")
    return p.stdout


class Namespaces:
    """R namespaces stN0..stN(R-1) on a bridge, 10.233.0.(i+1)/24."""

    def __init__(self, R, fast_mbit, slow_pairs, slow_mbit):
        self.R = R
        self.tag = f"sb{os.getpid() % 10000}"
        self.br = self.tag + "br"
        try:
            self._build(fast_mbit, slow_pairs, slow_mbit)
        except Exception:
            self.close()  # what was made so far
            raise

    def _build(self, fast_mbit, slow_pairs, slow_mbit):
        R = self.R
        run_root(f"ip link add {self.br} type bridge")
        run_root(f"ip link set {self.br} up")
        for i in range(R):
            ns, a, b = self.ns(i), f"{self.tag}v{i}", f"{self.tag}p{i}"
            run_root(f"ip netns add {ns}")
            run_root(f"ip link add {a} type veth peer name {b}")
            run_root(f"ip link set {a} netns {ns}")
            run_root(f"ip link set {b} master {self.br} up")
            run_root(f"ip -n {ns} addr add {self.ip(i)}/24 dev {a}")
            run_root(f"ip -n {ns} link set {a} up")
            run_root(f"ip -n {ns} link set lo up")
            # Egress shaping: a class per speed, a filter per slow destination.
            run_root(f"tc -n {ns} qdisc add dev {a} root handle 1: htb default 10")
            run_root(f"tc -n {ns} class add dev {a} parent 1: classid 1:10 htb rate {fast_mbit}mbit "
                     f"ceil {fast_mbit}mbit")
            run_root(f"tc -n {ns} class add dev {a} parent 1: classid 1:20 htb rate {slow_mbit}mbit "
                     f"ceil {slow_mbit}mbit")
            for (x, y) in slow_pairs:
                if i in (x, y):
                    peer = y if i == x else x
                    run_root(f"tc -n {ns} filter add dev {a} protocol ip parent 1: prio 1 u32 "
                             f"match ip dst {self.ip(peer)}/32 flowid 1:20")

    def ns(self, i):
        return f"{self.tag}n{i}"

    def ip(self, i):
        return f"10.233.0.{i + 1}"

    def close(self):
        quiet = dict(shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for i in range(self.R):
            subprocess.run(f"ip netns del {self.ns(i)}", **quiet)
        subprocess.run(f"ip link del {self.br}", **quiet)


def network():
    if os.geteuid() != 0 or not shutil.which("tc") or not shutil.which("ip"):
        benchutil.skip("dist_bench.py network needs root, ip (iproute2) and tc")
    R, H, rounds = (4, 2, 2) if SMOKE else (4, 20, 12)
    fast, slow = 40, 4  # Mbit/s: the model (1.9 MB of f32) takes 0.4 s / 3.8 s per message
    slow_pairs = [(0, 1), (2, 3)]  # a third of the 6 pairs; "some links 10x slower"
    lines = []
    say = lambda s="": (print(s), lines.append(s))
    say(f"# Gossip vs DiLoCo on a shaped network: {R} replicas of gpt-tiny"
        f"{' (smoke size)' if SMOKE else ''} in network namespaces, H = {H}, {rounds} rounds")
    say(f"# links: {fast} Mbit/s, except replica pairs {slow_pairs} at {slow} Mbit/s (tc htb, "
        "per-destination classes); 1 thread per replica")
    try:
        nets = Namespaces(R, fast, slow_pairs, slow)
    except RuntimeError as e:  # e.g. a container without network namespaces or htb
        text = str(e)
        if any(w in text for w in ("ip netns add", "Operation not permitted",
                                   "qdisc kind is unknown")):
            benchutil.skip("cannot make shaped network namespaces here: %s"
                           % " ".join(text.split())[:200])
        raise
    try:
        results = {}
        for name, extra in (("DiLoCo (complete graph, outer momentum 0.9)",
                             ["train.sync=diloco", "train.outer_momentum=0.9"]),
                            ("gossip one-peer (gamma 0.5)",
                             ["train.sync=gossip", "train.topology=one-peer",
                              "train.outer_momentum=0.5"])):
            # The plan's simulated clock: the fast link, a third of the links
            # 10x slower (the model draws which), 1 s per local step.
            slug = re.sub(r"\W+", "-", name).strip("-")
            p = plan(slug, f"train.replicas={R}", f"train.local_steps={H}",
                     f"train.steps={rounds * H}", "train.eval_interval=100000",
                     f"train.net_bandwidth={fast * 1e6 / 8:.0f}", "train.net_slow_links=0.34",
                     "train.net_slow_link_factor=10", *extra)
            # Fresh folders per run and replica: stretto-run refuses to write
            # over an earlier run's checkpoints (a new run never overwrites).
            outs = [os.path.join(WORK, "runs", slug, f"replica{i}") for i in range(R)]
            for o in outs:
                if os.path.exists(o):
                    raise RuntimeError(f"{o} exists: every run needs fresh --out folders")
            e = env(1)
            e["STRETTO_JOB_TOKEN"] = "bench-" + str(os.getpid())
            procs = []
            t0 = time.time()
            for i in range(R):
                procs.append(subprocess.Popen(
                    ["ip", "netns", "exec", nets.ns(i), RUN, p, "--nnodes", str(R), "--node-rank",
                     str(i), "--nproc", "1", "--master-addr", nets.ip(0), "--master-port", "29641",
                     "--timeout", "600", "--on-peer-failure=stop", "--out", outs[i]], cwd=WORK, env=e,
                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
            texts = [q.communicate(timeout=3600)[0] for q in procs]
            wall = time.time() - t0
            for i, (q, t) in enumerate(zip(procs, texts)):
                if q.returncode != 0 or RANK_FAILED.search(t):
                    raise RuntimeError(f"{name}: replica {i} exited with status {q.returncode}:\n"
                                       + t[-3000:])
            rows = [json.loads(l) for l in open(os.path.join(outs[0], "metrics.jsonl"))]
            c = comm(texts[0] + "".join(texts[1:]))
            expect(len(rows) == rounds and [r["round"] for r in rows] == list(range(1, rounds + 1)),
                   f"{name}: metrics.jsonl has rounds 1..{rounds}")
            expect(all(math.isfinite(r["loss"]) for r in rows), f"{name}: finite round losses")
            expect(sorted(x[0] for x in c) == list(range(R)),
                   f"{name}: a comm line from each of the {R} replicas")
            expect(all(x[1] > 0 for x in c), f"{name}: every replica sent bytes")
            results[name] = (rows, wall, c, texts[0])
        # The simulated clock of the same runs (in-process, same slow links).
        say()
        say("| method | final round loss | wall-clock s | s per round | MB sent per replica per "
            "round | s in communication per replica (mean) | simulated clock (model units) |")
        say("|---|---:|---:|---:|---:|---:|---:|")
        for name, (rows, wall, c, text0) in results.items():
            sent = sum(x[1] for x in c) / len(c) / rounds
            waited = sum(x[3] for x in c) / len(c)
            say(f"| {name} | {rows[-1]['loss']:.4f} | {wall:.1f} | {wall / rounds:.2f} | "
                f"{sent:.2f} | {waited:.1f} | {rows[-1]['sim_time']:.1f} |")
        say()
        target = max(min(r['loss'] for r in rows) for rows, *_ in results.values())
        say(f"Wall-clock to the target loss {target:.4f} (the worse method's best round loss):")
        for name, (rows, wall, c, text0) in results.items():
            hit = next((r for r in rows if r["loss"] <= target), None)
            expect(hit is not None, f"{name}: reaches the target loss")
            if hit and "elapsed_s" in hit:
                say(f"- {name}: round {hit['round']}, {hit['elapsed_s']:.1f} s")
            elif hit:
                say(f"- {name}: round {hit['round']}, ~{wall * hit['round'] / rounds:.1f} s")
        say()
        say("The simulated clock is the network model of the same plan (net_bandwidth = the "
            "fast link, a third of the links 10x slower, drawn by the model's seed, which may "
            "differ from the tc-shaped pairs; 1 unit per local step): a prediction in its own "
            "units, to compare ratios, not seconds of this machine.")
    finally:
        nets.close()
    return lines


def main():
    global WORK, SMOKE, ENV
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", default="throughput", choices=["throughput", "network"])
    ap.add_argument("--smoke", action="store_true",
                    help="tiny sizes, results into a scratch folder, checks; seconds")
    ap.add_argument("--results", help="folder for WHAT.md (default bench/results/dist; "
                                      "--smoke: a scratch folder)")
    a = ap.parse_args()
    SMOKE = a.smoke
    benchutil.require("stretto-train", "stretto-run")
    if a.what == "network" and (os.geteuid() != 0 or not shutil.which("tc")
                                or not shutil.which("ip")):
        benchutil.skip("dist_bench.py network needs root, ip (iproute2) and tc")
    results = a.results or (benchutil.scratch("dist_bench-" + a.what) if SMOKE else RESULTS)
    if SMOKE:
        benchutil.refuse_committed(results)
        ENV = benchutil.smoke_env(results)
    os.makedirs(results, exist_ok=True)
    WORK = tempfile.mkdtemp(prefix="stretto-distbench-")
    command = "python3 bench/dist/dist_bench.py " + a.what + (" --smoke" if SMOKE else "")
    # The header as the run starts (the commit and tree it ran from).
    header = hostinfo.header(note="2-core shared VM", prefix="# ", command=command)
    try:
        lines = throughput() if a.what == "throughput" else network()
    finally:
        shutil.rmtree(WORK, ignore_errors=True)
    path = os.path.join(results, f"{a.what}.md")
    with open(path, "w") as f:
        f.write(header)
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
