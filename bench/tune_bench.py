#!/usr/bin/env python3
"""stretto-tune on the lopsided example: the measured speedup of the tuned partition over the even split.

    flock /tmp/build.lock python3 bench/tune_bench.py     # about 2 minutes on 2 cores
    python3 bench/tune_bench.py --smoke                   # the same code at a tiny size (seconds)

Runs `build/bin/stretto-tune examples/gpt-wide-head.toml --stages 2
--no-cache --repeats 5` (a fresh profile, then the best 2 candidates and
the even split, 5 runs of 8 steps each on the pipeline runtime, one kernel
thread per stage thread) and writes its output under the host header of
bench/hostinfo.py to bench/results/tune/gpt-wide-head-2stages.txt, with the
tuner's tune.csv, tune.json and timeline.svg next to it. The timed run waits
for an idle machine and is repeated (up to 3 tries) when other processes
took more than a quarter of the CPU time during it; the run-to-run noise
the tuner prints is half the range of the 5 runs' median step times.

--smoke tunes the tiny smoke model (bench/benchutil.py) with one profiling
run, the best candidate and the even split measured once for 3 steps,
without waiting for an idle machine, writes into a scratch folder
($STRETTO_SMOKE_DIR/tune_bench or a temporary one; never bench/results) and
fails unless the tuner's files are there and parse (tune.json with
json.load, tune.csv with a row per candidate, timeline.svg as SVG).
STRETTO_BUILD names another build folder.
"""
import argparse
import csv
import json
import os
import shutil
import sys
import tempfile

import benchutil
import train_run
from train_run import ROOT, Report, run

OUT = os.path.join(ROOT, "bench", "results", "tune")
FILES = ("tune.csv", "tune.json", "timeline.svg")


def smoke_checks(folder):
    """The tuner's files as a reader takes them; a list of failures."""
    bad = []
    try:
        with open(os.path.join(folder, "tune.json")) as f:
            j = json.load(f)
        if not (j.get("winner", {}).get("stages") == 2 and j.get("candidates")):
            bad.append("tune.json has no 2-stage winner or no candidates")
    except (OSError, ValueError) as e:
        bad.append("tune.json does not parse as JSON: %s" % e)
    try:
        with open(os.path.join(folder, "tune.csv")) as f:
            rows = list(csv.DictReader(l for l in f if not l.startswith("#")))
        if len(rows) < 2:
            bad.append("tune.csv has %d candidate rows" % len(rows))
    except (OSError, csv.Error) as e:
        bad.append("tune.csv: %s" % e)
    try:
        with open(os.path.join(folder, "timeline.svg")) as f:
            svg = f.read()
        if "<svg" not in svg or "</svg>" not in svg:
            bad.append("timeline.svg is not an SVG document")
    except OSError as e:
        bad.append("timeline.svg: %s" % e)
    return bad


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", help="results folder (default %s; --smoke: a scratch folder)"
                   % os.path.relpath(OUT, ROOT))
    p.add_argument("--note", help="a note for the host header (default: $STRETTO_BENCH_NOTE)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny model, one measured run each, output into a scratch folder, checks")
    a = p.parse_args()
    benchutil.require("stretto-tune")
    binary = benchutil.binary("stretto-tune")
    args = ["examples/gpt-wide-head.toml", "--stages", "2", "--no-cache", "--repeats",
            str(a.repeats)]
    command = "python3 bench/tune_bench.py" + ("" if a.repeats == 5 else " --repeats %d" % a.repeats)
    env = None
    if a.smoke:
        train_run.SMOKE = True
        a.out = a.out or benchutil.scratch("tune_bench")
        benchutil.refuse_committed(a.out)
        args = ["examples/gpt-wide-head.toml"] + benchutil.smoke_model(["train.stages=2"]) + [
            "train.micro_batches=2", "--stages", "2", "--no-cache",
            "--repeats", "1", "--top", "1", "--measure-steps", "3", "--profile-steps", "2",
            "--profile-runs", "1"]
        command = "python3 bench/tune_bench.py --smoke"
        env = benchutil.smoke_env(a.out)
    out_dir = a.out or OUT
    report = Report("gpt-wide-head-2stages", a.note, command)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "tune")
        run(report, [binary] + args + ["--out", out], env, max_other=0.25)
        os.makedirs(out_dir, exist_ok=True)
        for f in FILES:
            shutil.copy(os.path.join(out, f), os.path.join(out_dir, f))
    report.write(out_dir)
    if a.smoke:
        bad = smoke_checks(out_dir)
        for b in bad:
            print("FAILED: " + b)
        benchutil.check(not bad, "stretto-tune's tune.json, tune.csv and timeline.svg parse")
    return 0


if __name__ == "__main__":
    sys.exit(main())
