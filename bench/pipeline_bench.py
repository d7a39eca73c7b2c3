#!/usr/bin/env python3
"""Flush vs PipeDream-2BW throughput and idle time, as the README's table gives them.

    python3 bench/pipeline_bench.py            # about 1 minute on 2 cores
    python3 bench/pipeline_bench.py --smoke    # the same code at a tiny size (seconds)

Runs `OMP_NUM_THREADS=1 build/bin/stretto-bench-pipeline
bench/configs/pipe-bench.toml 20` (S = 4 stages, m = 8 micro-batches,
20 steps) and writes its output to bench/results/pipeline/bench.txt (or
--out FILE) under the host header of bench/hostinfo.py. The stages run on
the reference executor: stretto-bench-pipeline sets neither `compiled` nor
an executor factory in its PipelineOptions.

--smoke runs bench/configs/smoke-pipe.toml (the same 4 stages, a tiny
model) for 2 steps without waiting for an idle machine, writes into a
scratch folder ($STRETTO_SMOKE_DIR/pipeline_bench or a temporary one; never
bench/results) and fails unless both schedules' rows are there with finite
figures. STRETTO_BUILD names another build folder.
"""
import argparse
import math
import os
import re
import sys

import benchutil
import train_run
from train_run import ROOT, Report, run

OUT = os.path.join(ROOT, "bench", "results", "pipeline", "bench.txt")
ROW = re.compile(r"^(flush|2bw)\s+\|\s+([0-9.]+|inf|nan)\s+\|\s+([0-9.]+|inf|nan)x \|")


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", help="results file (default %s; --smoke: a scratch folder)"
                   % os.path.relpath(OUT, ROOT))
    p.add_argument("--note", help="a note for the host header (default: $STRETTO_BENCH_NOTE)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny model, 2 steps, no idle wait, output into a scratch folder, checks")
    a = p.parse_args()
    benchutil.require("stretto-bench-pipeline")
    binary = benchutil.binary("stretto-bench-pipeline")
    config = "bench/configs/pipe-bench.toml"
    if a.smoke:
        train_run.SMOKE = True
        a.steps = 2
        a.out = a.out or os.path.join(benchutil.scratch("pipeline_bench"), "bench.txt")
        benchutil.refuse_committed(a.out)
        config = os.path.relpath(benchutil.SMOKE_PIPE_CONFIG, ROOT)
    out = a.out or OUT
    command = "python3 bench/pipeline_bench.py" + ("" if a.steps == 20 else " --steps %d" % a.steps)
    if a.smoke:
        command = "python3 bench/pipeline_bench.py --smoke"
    report = Report(os.path.splitext(os.path.basename(out))[0], a.note, command)
    report.add("executor: the reference executor, one OpenMP thread per stage (4 stage threads)")
    text, _ = run(report, [binary, config, str(a.steps)], dict(os.environ, OMP_NUM_THREADS="1"))
    report.write(os.path.dirname(os.path.abspath(out)))
    rows = {m.group(1): (float(m.group(2)), float(m.group(3)))
            for m in (ROW.match(l) for l in text.splitlines()) if m}
    if a.smoke:
        benchutil.check(set(rows) == {"flush", "2bw"}, "both schedules' rows are there")
        benchutil.check(all(math.isfinite(v) and v > 0 for r in rows.values() for v in r),
                        "finite tok/s and ratios")
        benchutil.check("modelled idle per stage" in text and "(S=4, m=4, 2 steps)" in text,
                        "the modelled idle times of 4 stages, 4 micro-batches, 2 steps")
    return 0


if __name__ == "__main__":
    sys.exit(main())
