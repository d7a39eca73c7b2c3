#!/usr/bin/env python3
"""stretto-tune on the lopsided example: the measured speedup of the tuned partition over the even split.

    flock /tmp/build.lock python3 bench/tune_bench.py     # about 2 minutes on 2 cores

Runs `build/bin/stretto-tune examples/gpt-wide-head.toml --stages 2
--no-cache --repeats 5` (a fresh profile, then the best 2 candidates and
the even split, 5 runs of 8 steps each on the pipeline runtime, one kernel
thread per stage thread) and writes its output under the host header of
bench/hostinfo.py to bench/results/tune/gpt-wide-head-2stages.txt, with the
tuner's tune.csv, tune.json and timeline.svg next to it. The timed run waits
for an idle machine and is repeated (up to 3 tries) when other processes
took more than a quarter of the CPU time during it; the run-to-run noise
the tuner prints is half the range of the 5 runs' median step times.
"""
import argparse
import os
import shutil
import sys
import tempfile

from train_run import ROOT, Report, run

OUT = os.path.join(ROOT, "bench", "results", "tune")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--out", default=OUT, help="results folder (default %(default)s)")
    p.add_argument("--note", help="a note for the host header (default: $STRETTO_BENCH_NOTE)")
    a = p.parse_args()
    binary = os.path.join(ROOT, "build", "bin", "stretto-tune")
    if not os.path.exists(binary):
        sys.exit("build first: cmake --build build --target stretto-tune")
    command = "python3 bench/tune_bench.py" + ("" if a.repeats == 5 else " --repeats %d" % a.repeats)
    report = Report("gpt-wide-head-2stages", a.note, command)
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "tune")
        run(report, [binary, "examples/gpt-wide-head.toml", "--stages", "2", "--no-cache",
                     "--repeats", str(a.repeats), "--out", out], max_other=0.25)
        os.makedirs(a.out, exist_ok=True)
        for f in ("tune.csv", "tune.json", "timeline.svg"):
            shutil.copy(os.path.join(out, f), os.path.join(a.out, f))
    report.write(a.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
