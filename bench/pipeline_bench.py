#!/usr/bin/env python3
"""Flush vs PipeDream-2BW throughput and idle time, as the README's table gives them.

    python3 bench/pipeline_bench.py            # about 1 minute on 2 cores

Runs `OMP_NUM_THREADS=1 build/bin/stretto-bench-pipeline
bench/configs/pipe-bench.toml 20` (S = 4 stages, m = 8 micro-batches,
20 steps) and writes its output to bench/results/pipeline/bench.txt (or
--out FILE) under the host header of bench/hostinfo.py. The stages run on
the reference executor: stretto-bench-pipeline sets neither `compiled` nor
an executor factory in its PipelineOptions.
"""
import argparse
import os
import sys

from train_run import ROOT, Report, run

OUT = os.path.join(ROOT, "bench", "results", "pipeline", "bench.txt")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", default=OUT, help="results file (default %(default)s)")
    p.add_argument("--note", help="a note for the host header (default: $STRETTO_BENCH_NOTE)")
    a = p.parse_args()
    binary = os.path.join(ROOT, "build", "bin", "stretto-bench-pipeline")
    if not os.path.exists(binary):
        sys.exit("build first: cmake --build build --target stretto-bench-pipeline")
    command = "python3 bench/pipeline_bench.py" + ("" if a.steps == 20 else " --steps %d" % a.steps)
    report = Report(os.path.splitext(os.path.basename(a.out))[0], a.note, command)
    report.add("executor: the reference executor, one OpenMP thread per stage (4 stage threads)")
    run(report, [binary, "bench/configs/pipe-bench.toml", str(a.steps)],
        dict(os.environ, OMP_NUM_THREADS="1"))
    report.write(os.path.dirname(os.path.abspath(a.out)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
