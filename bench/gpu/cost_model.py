#!/usr/bin/env python3
"""The cost model's prediction (`--device-model`) for the GPU benchmark
models, beside what the H200 measured: which part of a step pays, before a
GPU is at hand.

    python3 bench/gpu/cost_model.py                 # h200; writes bench/results/gpu/cost-model-h200.txt
    python3 bench/gpu/cost_model.py --device h100 --out FILE
    python3 bench/gpu/cost_model.py --smoke         # a tiny model, into a scratch folder

For gpt-tiny, gpt-mini and gpt-small (examples/*.toml) and each of f32,
tf32 and bf16 storage (bf16 also with its values in four bytes:
STRETTO_BF16_STORAGE=0) it runs `stretto-train CONFIG --device-model DEVICE`
(no GPU, nothing trained) and tabulates the predicted step time launched
eagerly and as one CUDA graph, the bound (launches or device), tok/s, and
the share of GEMMs, attention and the other kernels; then the full report
of each model in bf16 with its costliest nodes. The predictions are
roofline estimates with the assumptions printed in each report; the
H200's measured figures (shared/gpu-h200, docs/results/gpu-speed.md) are
quoted beside them for scale, not remeasured.
"""
import argparse
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchutil  # noqa: E402

MODELS = ["gpt-tiny", "gpt-mini", "gpt-small"]
PRECISIONS = ["f32", "tf32", "bf16"]


def predict(config, device, precision, overrides, env, profile=False):
    """The report's text for one (config, precision): --precision takes
    f32 or bf16; the tf32 figures come from the f32 report's summary line."""
    cmd = [benchutil.binary("stretto-train"), config, "--device-model", device,
           "--precision", "bf16" if precision == "bf16" else "f32"] + list(overrides)
    if profile:
        cmd.append("--profile")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit("error: %s failed (%d):\n%s%s" % (" ".join(cmd), r.returncode, r.stdout,
                                                     r.stderr))
    return r.stdout


def parse(report, precision):
    """{eager_ms, graph_ms, tok_s, bound, shares} from a report."""
    out = {}
    if precision == "tf32":
        m = re.search(r"with tf32: ([0-9.]+) ms a step eager, ([0-9.]+) ms as a graph "
                      r"\(([0-9]+) tok/s\)", report)
        benchutil.check(m is not None, "the report has the tf32 summary line")
        out.update(eager_ms=float(m.group(1)), graph_ms=float(m.group(2)),
                   tok_s=int(m.group(3)), bound="-", shares="-")
        return out
    m = re.search(r"step, launched eagerly: ([0-9.]+) ms \((launch|device)-bound", report)
    g = re.search(r"step, as one CUDA graph: ([0-9.]+) ms", report)
    t = re.search(r"predicted: ([0-9]+) tok/s eager, ([0-9]+) tok/s as a graph", report)
    benchutil.check(m is not None and g is not None and t is not None,
                    "the report names the eager and graph step times")
    shares = dict(re.findall(r"^  ([a-z -]+?) +\| +\d+ \|.*\| +(\d+)%$", report, re.M))
    out.update(eager_ms=float(m.group(1)), bound=m.group(2), graph_ms=float(g.group(1)),
               tok_s=int(t.group(2)),
               shares=", ".join("%s %s%%" % (k, v) for k, v in shares.items() if v != "0"))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="h200", help="the device model (default h200)")
    p.add_argument("--out", help="the results file (default bench/results/gpu/cost-model-DEVICE.txt)")
    p.add_argument("--smoke", action="store_true", help="a tiny model into a scratch folder")
    a = p.parse_args()
    benchutil.require("stretto-train")
    if a.smoke:
        scratch = benchutil.scratch("cost_model")
        env = benchutil.smoke_env(scratch)
        runs = [("smoke", os.path.join(benchutil.ROOT, "examples", "gpt-tiny.toml"),
                 benchutil.SMOKE_MODEL)]
        out = a.out or os.path.join(scratch, "cost-model-%s.txt" % a.device)
    else:
        env = dict(os.environ)
        runs = [(m, os.path.join(benchutil.ROOT, "examples", m + ".toml"), []) for m in MODELS]
        out = a.out or os.path.join(benchutil.RESULTS, "gpu", "cost-model-%s.txt" % a.device)
    header = subprocess.run([sys.executable, os.path.join(benchutil.ROOT, "bench", "hostinfo.py"),
                             "--command", " ".join(["bench/gpu/cost_model.py"] + sys.argv[1:])],
                            capture_output=True, text=True).stdout
    lines = [header.rstrip("\n"),
             "what: the cost model (--device-model %s) of each model's step, a roofline "
             "estimate from the plan computed on the host above; not a GPU measurement" % a.device,
             "",
             "| model | storage | eager ms | bound | graph ms | graph tok/s | device time by part |",
             "|---|---|---:|---|---:|---:|---|"]
    reports = []
    for name, config, overrides in runs:
        f32 = predict(config, a.device, "f32", overrides, env)
        bf16 = predict(config, a.device, "bf16", overrides, env, profile=True)
        # The same bf16 plan with its values in four bytes, as the CUDA
        # runtime keeps them with STRETTO_BF16_STORAGE=0.
        four = predict(config, a.device, "bf16", overrides,
                       dict(env, STRETTO_BF16_STORAGE="0"))
        benchutil.check("bf16 values in four bytes" in four,
                        "STRETTO_BF16_STORAGE=0 reaches the cost model")
        for prec, rep in (("f32", f32), ("tf32", f32), ("bf16, 4-byte values", four),
                          ("bf16", bf16)):
            r = parse(rep, prec)
            lines.append("| %s | %s | %.3f | %s | %.3f | %d | %s |" % (
                name, prec, r["eager_ms"], r["bound"], r["graph_ms"], r["tok_s"], r["shares"]))
        reports.append("== %s, bf16 (stretto-train %s --device-model %s --precision bf16 "
                       "--profile)\n%s" % (name, os.path.relpath(config, benchutil.ROOT),
                                           a.device, bf16))
    lines += ["", "For scale, measured on one H200 (driver 580, CUDA 13.0; docs/results/gpu-speed.md):",
              "gpt-small 9.5 k tok/s (Stretto f32), 79 k (PyTorch eager f32), 565 k "
              "(torch.compile bf16).", ""]
    text = "\n".join(lines) + "\n" + "\n".join(reports)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(text)
    print(text)
    print("wrote %s" % out)
    if a.smoke:
        benchutil.check("| smoke | bf16 |" in text, "the table has the bf16 row")


if __name__ == "__main__":
    main()
