#!/usr/bin/env python3
"""The smoke mode of the C++ benches (bench/CMakeLists.txt), which print
figures and check nothing themselves: each runs at a tiny size and this
script checks what they printed or wrote.

    python3 bench/smoke/cxx_benches.py train      # stretto-bench-train
    python3 bench/smoke/cxx_benches.py pipeline   # stretto-bench-pipeline
    python3 bench/smoke/cxx_benches.py gossip     # stretto-gossip-bench

train: bench/configs/smoke-gpt.toml with --profile and --json (2 compiled
steps, 1 reference step): exit 0, the JSON parses as strict JSON with every
field finite, tok/s > 0, the compiled and reference losses within 1e-4, the
profile table and the triad roof printed; then --gemm-libraries prints a
row per GEMM. pipeline: bench/configs/smoke-pipe.toml for 2 steps: a flush
and a 2bw row with finite figures. gossip: the topologies that
bench/gossip_experiment.py --smoke does not run (two-peer, exponential) on
the smoke model, 4 replicas, H = 2, 4 steps: a CSV row per round with
finite losses and a clock that never runs backwards; and a usage error
exits 2. Files go to $STRETTO_SMOKE_DIR/cxx-NAME or a temporary folder.
Exit 0 when every check holds, 1 otherwise. STRETTO_BUILD names another
build folder.
"""
import csv
import json
import math
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchutil  # noqa: E402

check = benchutil.check


def run(cmd, env, expect_rc=0):
    print("$ " + " ".join(os.path.relpath(c, benchutil.ROOT) if c.startswith(benchutil.ROOT)
                          else c for c in cmd), flush=True)
    p = subprocess.run(cmd, env=env, cwd=benchutil.ROOT, text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=300)
    sys.stdout.write(p.stdout)
    check(p.returncode == expect_rc, "exit status %d (expected %d)" % (p.returncode, expect_rc))
    return p.stdout


def finite(x):
    return isinstance(x, (int, float)) and math.isfinite(x)


def train(work, env):
    bench = benchutil.binary("stretto-bench-train")
    js = os.path.join(work, "bench.json")
    out = run([bench, benchutil.SMOKE_CONFIG, "--steps", "2", "--ref-steps", "1", "--profile",
               "--json", js], env)
    with open(js) as f:
        d = json.load(f, parse_constant=lambda c: float("nan"))  # inf/nan: caught below
    keys = ["threads", "tokens_per_step", "kernels", "sgemm_peak_gflops", "step_gflop",
            "compiled_tok_s", "compiled_gflops", "reference_tok_s", "cold_start_s",
            "warm_start_s", "peak_bytes", "max_loss_diff", "triad_gbs"]
    check(all(finite(d.get(k)) for k in keys), "the JSON has every figure, finite")
    check(d["model"] == "smoke_gpt" or d["model"] == "smoke-gpt", "the JSON names the model")
    check(d["compiled_tok_s"] > 0 and d["reference_tok_s"] > 0 and d["kernels"] > 0,
          "tok/s of both executors and the fused kernel count")
    check(d["max_loss_diff"] <= 1e-4, "compiled and reference losses agree (%.2g <= 1e-4)"
          % d["max_loss_diff"])
    check("memory bandwidth (triad, measured)" in out, "the profile's triad roof")
    check(re.search(r"compiled\s+\d+ tok/s", out) is not None, "the compiled tok/s line")
    out = run([bench, benchutil.SMOKE_CONFIG, "--gemm-libraries"], env)
    check(len(re.findall(r"\d+\s*x\s*\d+\s*x\s*\d+|\d+x\d+x\d+", out)) > 0 or
          "GFLOP/s" in out, "--gemm-libraries prints the step's GEMMs")
    run([bench], env, expect_rc=2)


def pipeline(work, env):
    out = run([benchutil.binary("stretto-bench-pipeline"), benchutil.SMOKE_PIPE_CONFIG, "2"], env)
    rows = re.findall(r"^(flush|2bw)\s+\|\s+(\S+)\s+\|\s+(\S+)x \|", out, re.M)
    check(sorted(r[0] for r in rows) == ["2bw", "flush"], "a flush and a 2bw row")
    check(all(math.isfinite(float(r[1])) and float(r[1]) > 0 for r in rows), "finite tok/s")
    check("(S=4, m=4, 2 steps)" in out, "4 stages, 4 micro-batches, 2 steps")
    run([benchutil.binary("stretto-bench-pipeline")], env, expect_rc=2)


def gossip(work, env):
    bench = benchutil.binary("stretto-gossip-bench")
    sets = benchutil.SMOKE_MODEL + ["train.replicas=4", "train.local_steps=2", "train.steps=4",
                                    "train.eval_interval=2", "train.eval_batches=1"]
    for method in ("two-peer", "exponential"):
        path = os.path.join(work, method + ".csv")
        run([bench, benchutil.SMOKE_CONFIG, method, path] + sets, env)
        with open(path) as f:
            rows = list(csv.DictReader(f))
        check(len(rows) == 2 and [int(r["round"]) for r in rows] == [1, 2],
              "%s: a row per round (2)" % method)
        check(all(math.isfinite(float(r["loss"])) for r in rows), "%s: finite losses" % method)
        for key in ("sim_homogeneous_s", "sim_heterogeneous_s"):
            t = [float(r[key]) for r in rows]
            check(t[0] > 0 and t == sorted(t), "%s: %s runs forward" % (method, key))
        check(all(float(r["bytes_total"]) > 0 for r in rows), "%s: bytes sent" % method)
    run([bench, benchutil.SMOKE_CONFIG], env, expect_rc=2)


def main():
    what = sys.argv[1] if len(sys.argv) > 1 else ""
    tasks = {"train": ("stretto-bench-train", train), "pipeline": ("stretto-bench-pipeline", pipeline),
             "gossip": ("stretto-gossip-bench", gossip)}
    if what not in tasks:
        sys.exit("usage: cxx_benches.py train|pipeline|gossip")
    name, fn = tasks[what]
    benchutil.require(name)
    work = benchutil.scratch("cxx-" + what)
    fn(work, benchutil.smoke_env(work))
    print("all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
