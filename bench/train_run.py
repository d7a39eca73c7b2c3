#!/usr/bin/env python3
"""The README's training figures, each from a run of stretto-train or stretto-bench-train.

    python3 bench/train_run.py tiny      # gpt-tiny, 300 steps: loss table, time, compiled vs reference
    python3 bench/train_run.py bf16      # gpt-mini, 30 steps: bf16 GEMMs vs f32 on the CPU
    python3 bench/train_run.py pipe2     # gpt-tiny, 2 stages, 2BW + delay-EF, 20 steps: compiled vs reference
    python3 bench/train_run.py profile   # gpt-mini: where the compiled runtime spends a step
    python3 bench/train_run.py kernels   # gpt-tiny: fused kernels by kind (no timing)
    python3 bench/train_run.py all       # all five (about 5 minutes on 2 cores)

Each writes bench/results/train/<name>.txt (or --results DIR): the host header
of bench/hostinfo.py, every command with its wall-clock time and the lines
it printed that carry figures, then a summary of the figures the README
quotes. Runs use the machine's default thread count (OMP_NUM_THREADS as set),
a temporary --out folder and, where a cold kernel compile would distort the
timing, a kernel cache that a first untimed run has filled. Timings are of
one run on one machine: run on an idle machine and compare within one file.

--smoke runs every task (or the one named) with the same code on a tiny
model (bench/benchutil.py's) for a few steps, without waiting for an idle
machine, writes the files into a scratch folder ($STRETTO_SMOKE_DIR/
train_run or a temporary one; never bench/results), and fails (exit 1)
where a figure the README takes from these files is missing or a check
does not hold (cold and warm kernel caches give the same losses, the
compiled and reference executors agree, bf16 and f32 both train, the
kernel census finds kernels). STRETTO_BUILD names another build folder.
"""
import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib

import benchutil
import hostinfo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = benchutil.BIN
RESULTS = os.path.join(ROOT, "bench", "results", "train")
SMOKE = False  # --smoke: tiny model and steps, no idle wait, checks


def sized(config, steps, *sets):
    """The config and overrides of a run: as given, or (--smoke) the smoke
    model for `steps` steps (train.* settings kept, so the code path is the
    same)."""
    if not SMOKE:
        return [config] + list(sets)
    keep = [x for x in sets if not x.startswith(("train.steps=", "train.warmup_steps=",
                                                  "train.eval_interval="))]
    return [config] + keep + benchutil.smoke_model(keep) + [
        "train.steps=%d" % steps, "train.warmup_steps=1",
        "train.eval_interval=%d" % max(1, steps // 2), "train.log_interval=1"]


def expect(ok, what):
    """A --smoke check (the full runs report, they do not assert)."""
    if SMOKE:
        benchutil.check(ok, what)


class Report:
    def __init__(self, name, note, command):
        # The header as the run starts (the commit and tree it ran from).
        self.name, self.lines, self.binaries = name, [], set()
        self.header = hostinfo.header(note, command=command)

    def add(self, text=""):
        print(text, flush=True)
        self.lines.append(text)

    def write(self, folder):
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, self.name + ".txt")
        with open(path, "w") as f:
            f.write(self.header)
            f.write("\n" + "\n".join(self.lines) + "\n")
        print("wrote " + os.path.relpath(path, ROOT), flush=True)


def rel(path):
    return os.path.relpath(path, ROOT) if path.startswith(ROOT) else path


def busy_cpu_s():
    """CPU seconds all processes have run (user, nice, system, irq), from /proc/stat."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:8]]
        return (v[0] + v[1] + v[2] + v[5] + v[6]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError):
        return 0.0


def child_cpu_s():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def wait_idle(report, max_wait=60.0, window=2.0, threshold=0.1):
    """Waits (at most max_wait s) for a `window` in which other processes use
    less than `threshold` of one core; says so in the report if it gave up."""
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < max_wait:
        b0 = busy_cpu_s()
        time.sleep(window)
        if busy_cpu_s() - b0 < threshold * window:
            return
    report.add("(the machine did not become idle within %.0f s; measured anyway)" % max_wait)


def run(report, args, env=None, keep=lambda line: True, timed=True, reset=None, tries=3,
        max_other=0.10):
    """Runs a command from the repository root; records it, its wall-clock
    time, the CPU time other processes took meanwhile (a shared machine) and
    the output lines `keep` selects; returns (stdout, seconds).

    A timed command first waits for an idle machine, and is run again (up to
    `tries` times; `reset` and the --out folder's removal make each try
    start alike) when other processes took more than `max_other` of the CPU
    time available during it; discarded tries are listed in the report."""
    shown = " ".join(rel(a) for a in args)
    if env is not None and env.get("OMP_NUM_THREADS") != os.environ.get("OMP_NUM_THREADS"):
        shown = "OMP_NUM_THREADS=%s %s" % (env.get("OMP_NUM_THREADS"), shown)
    out_dir = args[args.index("--out") + 1] if "--out" in args else None
    if SMOKE:  # seconds, not figures: no idle wait, no retries
        timed, tries = False, 1
    for attempt in range(1, tries + 1):
        if out_dir:
            shutil.rmtree(out_dir, ignore_errors=True)
        if reset:
            reset()
        if timed:
            wait_idle(report)
        busy0, child0 = busy_cpu_s(), child_cpu_s()
        t0 = time.perf_counter()
        p = subprocess.run(args, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
        dt = time.perf_counter() - t0
        other = max(busy_cpu_s() - busy0 - (child_cpu_s() - child0), 0.0)
        avail = dt * (os.cpu_count() or 1)
        if p.returncode == 0 and timed and other > max_other * avail and attempt < tries:
            report.add("(try %d of `%s` discarded: other processes took %.1f s of %.1f s of CPU "
                       "time during it)" % (attempt, shown, other, avail))
            continue
        break
    report.add("$ %s" % shown)
    if args[0].startswith(BIN) and args[0] not in report.binaries:
        # The binary may be older than the commit in the header.
        report.binaries.add(args[0])
        report.add("  (%s: built %s)" % (rel(args[0]), time.strftime(
            "%Y-%m-%dT%H:%M:%SZ", time.gmtime(os.path.getmtime(args[0])))))
    for line in p.stdout.splitlines():
        if keep(line):
            report.add("  " + line)
    report.add("  (exit status %d, wall-clock %.2f s; CPU time of other processes meanwhile: "
               "%.1f s of %.1f s available)" % (p.returncode, dt, other, avail))
    if p.returncode != 0:
        sys.stdout.write(p.stdout)
        raise SystemExit("failed: " + shown)
    return p.stdout, dt


def metrics(folder):
    with open(os.path.join(folder, "metrics.jsonl")) as f:
        return [json.loads(l) for l in f if l.strip()]


def done_line(out):
    m = [l for l in out.splitlines() if l.startswith("done:")]
    return m[-1] if m else ""


def done_tok_s(out):
    m = re.search(r"([\d.]+) tok/s", done_line(out))
    return float(m.group(1)) if m else float("nan")


def tokens_per_step(config):
    with open(os.path.join(ROOT, config), "rb") as f:
        c = tomllib.load(f)
    return c["model"]["batch"] * c["model"]["seq_len"]


def cache_env(cache, shared_in_smoke=True):
    """A kernel cache of the run's own (a timed run's cache state is part of
    what it measures); --smoke shares the smoke tests' cache unless the
    task needs its own (the cold-cache run)."""
    if SMOKE and shared_in_smoke and os.environ.get("STRETTO_CACHE_DIR"):
        return dict(os.environ)
    return dict(os.environ, STRETTO_CACHE_DIR=cache)


FIGURE_LINE = re.compile(r"^(model |data: |device: |buffer plan|step |done:|compiled \d+ fused|"
                         r"note: |stage |  stage)")


def tiny(report, tmp):
    """gpt-tiny as `make train` runs it: the loss table, the time with a cold
    and a warm kernel cache, the same run on the reference executor."""
    cfg = "examples/gpt-tiny.toml"
    train = os.path.join(BIN, "stretto-train")
    run(report, [sys.executable, os.path.join(ROOT, "bench", "corpus_stats.py"), "data/kjv.txt"],
        timed=False)
    report.add()
    cache = os.path.join(tmp, "cache")
    env = cache_env(cache, shared_in_smoke=False)  # empty: the first run compiles the kernels
    steps = 6 if SMOKE else 300
    table_steps = (1, 3, 6) if SMOKE else (1, 100, 200, 300)
    cold_out, cold_s = run(report, [train] + sized(cfg, steps) + ["--out", os.path.join(tmp, "cold")], env,
                           FIGURE_LINE.match, reset=lambda: shutil.rmtree(cache, ignore_errors=True))
    report.add()
    warm_out, warm_s = run(report, [train] + sized(cfg, steps) + ["--out", os.path.join(tmp, "warm")], env,
                           FIGURE_LINE.match)
    report.add()
    ref_out, ref_s = run(report, [train] + sized(cfg, steps) + ["--executor=reference", "--out",
                                                                os.path.join(tmp, "ref")],
                         env, FIGURE_LINE.match)
    cold, warm, ref = (metrics(os.path.join(tmp, d)) for d in ("cold", "warm", "ref"))
    by_step = {r["step"]: r for r in warm}
    report.add()
    report.add("== summary ==")
    report.add("loss table (warm-cache compiled run, metrics.jsonl):")
    report.add("| step | train loss | val loss |")
    for step in table_steps:
        r = by_step.get(step, {})
        report.add("| %d | %s | %s |" % (step, "%.4f" % r["loss"] if "loss" in r else "-",
                                         "%.4f" % r["val_loss"] if "val_loss" in r else "-"))
    same = [(r["loss"], r.get("val_loss")) for r in cold] == \
        [(r["loss"], r.get("val_loss")) for r in warm]
    report.add("cold-cache and warm-cache runs: losses %s (every step, as written to metrics.jsonl)"
               % ("bit-identical" if same else "DIFFER"))
    expect(same and len(warm) >= steps, "cold and warm kernel caches give the same %d losses" % steps)
    with open(os.path.join(tmp, "warm", "metrics.csv")) as f:
        rows = [l.split(",") for l in f.read().splitlines()[1:]]
    tps = [float(r[3]) for r in rows]
    report.add("compiled, cold kernel cache: %.1f s wall-clock for the process, trainer %.0f tok/s"
               % (cold_s, done_tok_s(cold_out)))
    report.add("compiled, warm kernel cache: %.1f s wall-clock for the process, trainer %.0f tok/s "
               "(%d steps and %d evaluations); per log interval (metrics.csv tokens_per_s) "
               "%.0f-%.0f tok/s" % (warm_s, done_tok_s(warm_out), steps,
                                    sum("val_loss" in r for r in warm), min(tps), max(tps)))
    report.add("reference executor: %.1f s wall-clock, trainer %.0f tok/s, final val loss %.4f"
               % (ref_s, done_tok_s(ref_out), ref[-1].get("val_loss", float("nan"))))
    report.add("final val loss: compiled %.4f, reference %.4f" % (
        warm[-1].get("val_loss", float("nan")), ref[-1].get("val_loss", float("nan"))))
    expect(abs(warm[-1].get("val_loss", 0) - ref[-1].get("val_loss", 1e9)) <= 1e-3,
           "compiled and reference final val losses agree to 1e-3")
    expect(done_tok_s(warm_out) > 0 and done_tok_s(ref_out) > 0, "both report tok/s")


def bf16(report, tmp):
    """gpt-mini, 30 steps: bf16-rounded GEMM operands vs f32 on the CPU."""
    cfg = "examples/gpt-mini.toml"
    train = os.path.join(BIN, "stretto-train")
    steps = 4 if SMOKE else 30
    sets = sized(cfg, steps, "train.steps=30", "train.warmup_steps=5", "train.eval_interval=1000")
    env = cache_env(os.path.join(tmp, "cache"))
    report.add("kernel cache filled first (untimed): both precisions share the kernels")
    run(report, [train, "--quiet", "--out", os.path.join(tmp, "warmup")] + sets +
        ["train.steps=6", "train.warmup_steps=2"], env, lambda l: l.startswith("done:"),
        timed=False)
    report.add()
    res = {}
    for prec in ("f32", "bf16"):
        out, dt = run(report, [train] + sets + ["--precision=" + prec, "--out",
                                                os.path.join(tmp, prec)], env, FIGURE_LINE.match)
        res[prec] = (done_tok_s(out), metrics(os.path.join(tmp, prec)), dt)
        report.add()
    report.add("== summary ==")
    for prec in ("f32", "bf16"):
        tok, m, dt = res[prec]
        report.add("%-4s: %.0f tok/s (trainer, %d steps + 1 evaluation), process %.1f s; "
                   "loss at step %d %.5f, val loss %.5f" % (prec, tok, steps, dt, steps,
                                                          m[-1]["loss"],
                                                          m[-1].get("val_loss", float("nan"))))
        expect(len(m) == steps and tok > 0 and all(r["loss"] == r["loss"] for r in m),
               "%s trains %d steps with finite losses and reports tok/s" % (prec, steps))
    d = abs(res["f32"][1][-1]["loss"] - res["bf16"][1][-1]["loss"])
    report.add("|loss f32 - loss bf16| at step %d: %.2g (same to 3 decimals: %s)" % (
        steps, d, "yes" if round(res["f32"][1][-1]["loss"], 3) == round(res["bf16"][1][-1]["loss"], 3)
        else "no"))


def pipe2(report, tmp):
    """gpt-tiny on 2 pipeline stages, 4 micro-batches, 2BW + delay-EF, 20 steps."""
    cfg = "examples/gpt-tiny.toml"
    train = os.path.join(BIN, "stretto-train")
    steps = 4 if SMOKE else 20
    sets = sized(cfg, steps, "train.stages=2", "train.micro_batches=4", "train.sync=2bw",
                 "train.ef_lambda=0.5", "train.grad_clip=0", "train.warmup_steps=2")
    if not SMOKE:
        sets += ["--steps", "20"]
    env = cache_env(os.path.join(tmp, "cache"))
    report.add("kernel cache filled first (untimed)")
    run(report, [train, "--quiet", "--out", os.path.join(tmp, "warmup")] + sets, env,
        lambda l: l.startswith("done:"), timed=False)
    report.add()
    res = {}
    for ex in ("compiled", "reference"):
        out, dt = run(report, [train] + sets + ["--executor=" + ex, "--out",
                                                os.path.join(tmp, ex)], env,
                      FIGURE_LINE.match)
        m = re.search(r"done: \d+ steps in ([\d.]+) s", out)
        res[ex] = (float(m.group(1)) if m else float("nan"), done_tok_s(out),
                   metrics(os.path.join(tmp, ex)), dt)
        report.add()
    report.add("== summary ==")
    for ex in ("compiled", "reference"):
        s, tok, _, dt = res[ex]
        report.add("%-9s: %d steps in %.1f s (trainer), %.0f tok/s; process %.1f s"
                   % (ex, steps, s, tok, dt))
    # (a pipeline writes its validation losses as rows of their own)
    a, b = ([r for r in res[ex][2] if "loss" in r] for ex in ("compiled", "reference"))
    diff = max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b))
    report.add("max |loss compiled - loss reference| over %d steps: %.2g" % (min(len(a), len(b)), diff))
    expect(len(a) == len(b) == steps and diff <= 1e-4,
           "the 2-stage pipeline's compiled and reference losses agree to 1e-4 over %d steps" % steps)


def profile(report, tmp):
    """Where gpt-mini's compiled step spends its time, per op kind."""
    cfg = benchutil.SMOKE_CONFIG if SMOKE else "examples/gpt-mini.toml"
    out, _ = run(report, [os.path.join(BIN, "stretto-bench-train"), cfg, "--profile"] +
                 (["--steps", "2", "--ref-steps", "1"] if SMOKE else []),
                 cache_env(os.path.join(tmp, "cache")) if SMOKE else None)
    expect("memory bandwidth (triad, measured)" in out and re.search(r"compiled\s+\d+ tok/s", out),
           "the profile reports the step's time per op kind and the triad roof")


def kernels(report, tmp):
    """What gpt-tiny compiles to: fused kernels by kind, from the kernel IR
    that `stretto-train --dump` writes after the last kernel pass."""
    dump = os.path.join(tmp, "dump")
    run(report, [os.path.join(BIN, "stretto-train")] +
        sized("examples/gpt-tiny.toml", 2, "train.steps=21") +
        ["--quiet", "--dump", dump, "--out", os.path.join(tmp, "out")],
        cache_env(os.path.join(tmp, "cache")), lambda l: l.startswith("compiled "), timed=False)
    passes = []
    for root, _, files in os.walk(os.path.join(dump, "kernel")):
        passes += [os.path.join(root, f) for f in files if f.endswith(".mlir")]
    last = max(passes, key=lambda f: [int(x) for x in os.path.basename(f).split("_")[:2]])
    text = open(last).read()
    count = lambda op: len(re.findall(r"= %s[ (]" % re.escape(op), text))
    rows_sums = cols_sums = 0
    for dims, shape in re.findall(r"kernel\.reduce\(.*?\) sum \[([0-9, ]+)\] of \[([0-9, ]+)\]",
                                  text):
        d, n = [int(x) for x in dims.split(",")], len(shape.split(","))
        if d[0] == 0 and len(d) < n:
            cols_sums += 1  # a leading run of dims: column sums (bias gradients)
        else:
            rows_sums += 1  # a trailing run (whole-tensor sums, e.g. gradient norms, included)
    e, r, w, g = (count("kernel.elementwise"), count("kernel.reduce"), count("kernel.rows"),
                  count("kernel.gemm"))
    report.add()
    report.add("== summary ==")
    report.add("kernel IR after the last kernel pass: %s" % os.path.relpath(last, dump))
    report.add("fused kernels: %d = %d kernel.elementwise + %d kernel.reduce + %d kernel.rows"
               % (e + r + w, e, r, w))
    report.add("kernel.reduce: %d over a trailing run of dims (row sums; whole-tensor sums "
               "included), %d over a leading run (column sums)" % (rows_sums, cols_sums))
    report.add("kernel.gemm (the GEMM library, not fused kernels): %d" % g)
    expect(e > 0 and r > 0 and w > 0 and g > 0 and rows_sums + cols_sums == r,
           "the kernel IR has elementwise, reduce, rows and gemm kernels; every reduce classified")


TASKS = {"tiny": ("gpt-tiny", tiny), "bf16": ("gpt-mini-bf16", bf16),
         "pipe2": ("gpt-tiny-pipe2", pipe2), "profile": ("gpt-mini-profile", profile),
         "kernels": ("gpt-tiny-kernels", kernels)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("task", nargs="?" if "--smoke" in sys.argv else None,
                   choices=list(TASKS) + ["all"], default="all")
    p.add_argument("--results", help="folder for the results files (default bench/results/train; "
                                     "--smoke: a scratch folder)")
    p.add_argument("--note", help="a note for the host header (default: $STRETTO_BENCH_NOTE)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny model and steps, no idle wait, files into a scratch folder, checks")
    a = p.parse_args()
    global SMOKE
    SMOKE = a.smoke
    benchutil.require("stretto-train", "stretto-bench-train")
    results = a.results or (benchutil.scratch("train_run") if SMOKE else RESULTS)
    if SMOKE:
        benchutil.refuse_committed(results)
    for task in (TASKS if a.task == "all" else [a.task]):
        name, fn = TASKS[task]
        report = Report(name, a.note, "python3 bench/train_run.py " + task +
                        (" --smoke" if SMOKE else ""))
        tmp = tempfile.mkdtemp(prefix="stretto-train-run-")
        try:
            fn(report, tmp)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        report.write(results)
    return 0


if __name__ == "__main__":
    sys.exit(main())
