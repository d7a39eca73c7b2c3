#!/usr/bin/env python3
"""Speed of the compiled CPU training path, next to the reference executor and PyTorch.

    make                                  # builds build/bin/stretto-bench-train
    python3 bench/kernel_bench.py         # gpt-tiny and gpt-mini
    python3 bench/kernel_bench.py --configs examples/gpt-mini.toml --threads 2 \\
        --steps 20 --torch-steps 20 --out /tmp/kernel_bench.json

For each config, runs `stretto-bench-train CONFIG --steps N --ref-steps M
--json FILE` with OMP_NUM_THREADS set to --threads; that binary measures the
sgemm peak with the runtime's GEMM library (on Intel CPUs MKL where it loads,
else oneDNN where installed, else OpenBLAS; STRETTO_GEMM=openblas|onednn|mkl
chooses), cold and warm start, and the
train-step tokens/s of the compiled runtime and of the reference executor. Then, when torch imports
(and --no-torch is not given), the same GPT is built in PyTorch from the
config's [model] and [train] sections and its train step (forward, backward,
gradient clipping, AdamW step, zero_grad) is timed eagerly and under
torch.compile (the model module only, default mode), with the same thread
count.

One method for both sides: --repeat N (default 3) runs of each, interleaved
(Stretto, PyTorch eager, torch.compile, Stretto, ...; with several --gemm
libraries, one Stretto run of each per round), so that a drifting load hits
every side alike. Each figure is the median of its N runs, shown with the
range (min-max); a ratio is the ratio of the two medians. A Stretto run is
one process of the C++ bench (its own warm-up step, then --steps timed
steps); a PyTorch run builds the model afresh, warms up and times
--torch-steps steps.

The figures are ratios measured by this one script on one machine, in one
sitting: the sgemm peak, the compiled runtime, the reference executor and
PyTorch all run here with the same threads. They are printed, and written as
JSON with --out; a Markdown table at the end can be pasted into the README.
Nothing here asserts anything about time. The torch.compile first-step time
depends on TorchInductor's on-disk cache (tens of seconds cold, about a second
warm); on a loaded machine every figure moves, so compare runs of one sitting.

Every run starts with the host header of bench/hostinfo.py (CPU model and
family, ISA flags such as AVX2/AVX-512, cores, date, commit), which is also
the JSON's "host" (with "command", "method" and every run's figures in
"runs"); --log FILE writes everything printed to FILE as well, e.g.

    python3 bench/kernel_bench.py --threads 2 --steps 20 --torch-steps 20 \
        --out bench/results/kernels/cpu-2threads.json --log bench/results/kernels/cpu-2threads.txt

Exit status 1 when a run failed (the table and JSON are still written).

--smoke: the same code on bench/configs/smoke-gpt.toml, 2 interleaved runs
of 2 steps, 1 thread, JSON and log into a scratch folder
($STRETTO_SMOKE_DIR/kernel_bench or a temporary one), then checks the JSON
(every side ran the same number of runs, in alternation, medians inside
their ranges, compiled and reference losses agree); seconds. With --no-torch
it leaves PyTorch out; without it, it needs PyTorch and exits 77 (skipped)
where torch does not import. STRETTO_BUILD names another build folder.
"""
import argparse
import json
import math
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

import benchutil
import hostinfo

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# --emulate-avx2: Stretto's fused kernels (-march) and its runtime's row loops,
# OpenBLAS, oneDNN (Stretto's and PyTorch's) and MKL and ATen (PyTorch)
# limited to AVX2 + FMA.
AVX2_ENV = {"STRETTO_HOST_ARCH": "haswell", "STRETTO_RUNTIME_ISA": "avx2",
            "OPENBLAS_CORETYPE": "Haswell",
            "ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2",
            "MKL_ENABLE_INSTRUCTIONS": "AVX2", "ATEN_CPU_CAPABILITY": "avx2"}
DEFAULT_CONFIGS = ["examples/gpt-tiny.toml", "examples/gpt-mini.toml"]
DEFAULT_BIN = benchutil.binary("stretto-bench-train")
DASH = "\u2014"


def default_threads():
    env = os.environ.get("OMP_NUM_THREADS", "")
    m = re.match(r"\s*(\d+)", env)
    if m and int(m.group(1)) > 0:
        return int(m.group(1))
    return os.cpu_count() or 1


def resolve(path):
    """`path` as given if it exists, else relative to the repository root."""
    if os.path.exists(path) or os.path.isabs(path):
        return path
    alt = os.path.join(ROOT, path)
    return alt if os.path.exists(alt) else path


def parse_args():
    p = argparse.ArgumentParser(
        description="Compiled CPU training path vs reference executor vs PyTorch "
        "(prints figures, asserts nothing).")
    p.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS,
                   help="model configs (default: %(default)s)")
    p.add_argument("--steps", type=int, default=10, help="timed compiled steps (default 10)")
    p.add_argument("--ref-steps", type=int, default=2,
                   help="timed reference-executor steps (default 2)")
    p.add_argument("--torch-steps", type=int, default=10,
                   help="timed PyTorch steps, eager and compiled (default 10)")
    p.add_argument("--threads", type=int, default=default_threads(),
                   help="threads for everything (default: OMP_NUM_THREADS or the CPU count)")
    p.add_argument("--bin", default=DEFAULT_BIN, help="the C++ bench (default %(default)s)")
    p.add_argument("--out", help="write all results as JSON to this file")
    p.add_argument("--no-torch", action="store_true", help="skip the PyTorch figures")
    p.add_argument("--gemm", nargs="+", default=[None], metavar="LIB",
                   help="run Stretto once per GEMM library (STRETTO_GEMM: openblas, onednn, "
                        "mkl, auto), one row each; default: the runtime's own choice")
    p.add_argument("--emulate-avx2", action="store_true",
                   help="restrict every library to AVX2 on an AVX-512 host (an approximation of "
                        "an AVX2 host: same cores and memory): " + " ".join(
                            "%s=%s" % kv for kv in sorted(AVX2_ENV.items())))
    p.add_argument("--repeat", type=int, default=3,
                   help="runs of each side (Stretto per library, PyTorch eager, torch.compile), "
                        "interleaved; medians and ranges are reported (default 3)")
    p.add_argument("--smoke", action="store_true",
                   help="tiny model and steps, output into a scratch folder, checks (seconds)")
    p.add_argument("--check-loss-diff", type=float, metavar="TOL",
                   help="fail when the compiled and the reference executor's losses differ by "
                        "more than TOL (--smoke: 1e-4)")
    p.add_argument("--log", help="also write everything printed to this file")
    p.add_argument("--note", help="a note for the host header (default: $STRETTO_BENCH_NOTE)")
    a = p.parse_args()
    if a.smoke:
        scratch = benchutil.scratch("kernel_bench" + ("" if a.no_torch else "-torch"))
        a.configs = [benchutil.SMOKE_CONFIG]
        a.steps, a.ref_steps, a.torch_steps, a.threads = 2, 1, 2, 1
        a.repeat = 2
        a.out = a.out or os.path.join(scratch, "kernel_bench.json")
        a.log = a.log or os.path.join(scratch, "kernel_bench.txt")
        if a.check_loss_diff is None:
            a.check_loss_diff = 1e-4
        benchutil.refuse_committed(a.out)
        benchutil.refuse_committed(a.log)
        os.environ.update(benchutil.smoke_env(scratch))
    if a.repeat < 1:
        p.error("--repeat must be at least 1")
    if a.threads < 1:
        p.error("--threads must be at least 1")
    for name in ("steps", "ref_steps", "torch_steps"):
        if getattr(a, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    return a


# --- the C++ bench ------------------------------------------------------------

def parse_bench_json(text):
    """The bench's JSON; tolerates the bare inf/nan that C++ streams print."""
    try:
        return json.loads(text)
    except ValueError:
        fixed = re.sub(r"(?<![\w\"])(-?)(inf|nan)(?![\w\"])",
                       lambda m: "null" if m.group(2) == "nan" else m.group(1) + "Infinity",
                       text)
        return json.loads(fixed)


def run_stretto(binary, config, args, gemm=None):
    """Runs the C++ bench (STRETTO_GEMM=gemm when given), echoing its output;
    its JSON dict, or {'error': ...}."""
    fd, json_path = tempfile.mkstemp(prefix="stretto-kernel-bench-", suffix=".json")
    os.close(fd)
    cmd = [binary, config, "--steps", str(args.steps), "--ref-steps", str(args.ref_steps),
           "--json", json_path]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    if gemm:
        env["STRETTO_GEMM"] = gemm
    print("$ %sOMP_NUM_THREADS=%d %s" % ("STRETTO_GEMM=%s " % gemm if gemm else "", args.threads,
                                         " ".join(cmd)), flush=True)
    try:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, env=env, text=True)
        for line in proc.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
        rc = proc.wait()
        wall = time.perf_counter() - t0
        if rc != 0:
            return {"error": "%s exited with status %d" % (os.path.basename(binary), rc)}
        with open(json_path) as f:
            text = f.read()
        if not text.strip():
            return {"error": "the bench wrote no JSON"}
        res = parse_bench_json(text)
        res["bench_wall_s"] = wall
        return res
    except (OSError, ValueError) as e:
        return {"error": "%s: %s" % (type(e).__name__, str(e).splitlines()[0] if str(e) else "")}
    finally:
        try:
            os.unlink(json_path)
        except OSError:
            pass


# --- the config ---------------------------------------------------------------

def load_config(path):
    import tomllib
    with open(path, "rb") as f:
        cfg = tomllib.load(f)
    m, t = cfg.get("model", {}), cfg.get("train", {})
    return {
        "name": m.get("name", os.path.splitext(os.path.basename(path))[0]),
        "kind": m.get("kind", "gpt"),
        "layers": int(m.get("layers", 0)),
        "heads": int(m.get("heads", 1)),
        "d_model": int(m.get("d_model", 0)),
        "seq_len": int(m.get("seq_len", 0)),
        "batch": int(m.get("batch", 0)),
        "vocab": int(m.get("vocab", 256)),
        "mlp_ratio": int(m.get("mlp_ratio", 4)),
        "norm": m.get("norm", "layernorm"),
        "init_std": float(m.get("init_std", 0.02)),
        "optimizer": t.get("optimizer", "adamw"),
        "lr": float(t.get("lr", 1e-3)),
        "weight_decay": float(t.get("weight_decay", 0.0)),
        # Stretto's defaults (lib/Frontend/Import.cpp buildTrainer): beta2 is
        # 0.95 there, so the same here; neither changes the speed.
        "beta1": float(t.get("beta1", 0.9)),
        "beta2": float(t.get("beta2", 0.95)),
        "eps": float(t.get("eps", 1e-8)),
        "grad_clip": float(t.get("grad_clip", 0.0)),
        "micro_batches": int(t.get("micro_batches", 1)),
    }


def stretto_param_count(c):
    """The parameter count of Import.cpp's GPT, for a cross-check."""
    d, f, v, t = c["d_model"], c["mlp_ratio"] * c["d_model"], c["vocab"], c["seq_len"]
    norms = d if c["norm"] == "rmsnorm" else 2 * d
    per_layer = 2 * norms + (d * 3 * d + 3 * d) + (d * d + d) + (d * f + f) + (f * d + d)
    return v * d + t * d + c["layers"] * per_layer + norms + d * v


# --- PyTorch ------------------------------------------------------------------

def build_torch_gpt(torch, c):
    nn, F = torch.nn, torch.nn.functional
    d, H, T, V = c["d_model"], c["heads"], c["seq_len"], c["vocab"]
    Dh = d // H
    rms = c["norm"] == "rmsnorm"

    def norm():
        # RMSNorm in Stretto has a gain only; LayerNorm has weight and bias.
        return nn.RMSNorm(d, eps=1e-5) if rms else nn.LayerNorm(d, eps=1e-5)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = norm()
            self.qkv = nn.Linear(d, 3 * d, bias=True)
            self.proj = nn.Linear(d, d, bias=True)
            self.ln2 = norm()
            self.fc = nn.Linear(d, c["mlp_ratio"] * d, bias=True)
            self.fc_proj = nn.Linear(c["mlp_ratio"] * d, d, bias=True)

        def forward(self, x):
            B, T_, _ = x.shape
            qkv = self.qkv(self.ln1(x)).view(B, T_, 3, H, Dh).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            a = a.transpose(1, 2).reshape(B, T_, d)
            x = x + self.proj(a)
            h = F.gelu(self.fc(self.ln2(x)), approximate="tanh")
            return x + self.fc_proj(h)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(V, d)
            self.wpe = nn.Parameter(torch.empty(T, d))
            self.blocks = nn.ModuleList(Block() for _ in range(c["layers"]))
            self.ln_f = norm()
            self.head = nn.Linear(d, V, bias=False)
            # Stretto's initialisation (GPT-2): normal(init_std), residual
            # projections scaled by 1/sqrt(2 layers), zero biases.
            std = c["init_std"]
            resid = std / math.sqrt(2.0 * c["layers"])
            for name, p in self.named_parameters():
                if p.dim() == 1:
                    if name.endswith("bias"):
                        nn.init.zeros_(p)
                    else:
                        nn.init.ones_(p)
                else:
                    is_resid = name.endswith("proj.weight")
                    nn.init.normal_(p, 0.0, resid if is_resid else std)

        def forward(self, tokens, targets):
            x = self.wte(tokens) + self.wpe
            for b in self.blocks:
                x = b(x)
            logits = self.head(self.ln_f(x))
            return F.cross_entropy(logits.view(-1, V), targets.view(-1))

    return GPT()


def first_line(e):
    s = str(e).strip()
    return "%s: %s" % (type(e).__name__, s.splitlines()[0] if s else "")


def bench_torch(torch, c, args, compiled):
    """tokens/s of the PyTorch train step; for torch.compile also the compile time."""
    torch.manual_seed(1337)
    model = build_torch_gpt(torch, c)
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=c["lr"], betas=(c["beta1"], c["beta2"]),
                            eps=c["eps"], weight_decay=c["weight_decay"])
    micro = c["micro_batches"]
    g = torch.Generator().manual_seed(1)
    shape = (c["batch"], c["seq_len"])
    tokens = torch.randint(0, c["vocab"], shape, dtype=torch.int64, generator=g)
    targets = torch.randint(0, c["vocab"], shape, dtype=torch.int64, generator=g)
    fwd = model
    if compiled:
        torch._dynamo.reset()
        fwd = torch.compile(model)

    def step():
        loss_sum = 0.0
        for _ in range(micro):
            loss = fwd(tokens, targets)
            (loss / micro if micro > 1 else loss).backward()
            loss_sum += loss.item()
        if c["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), c["grad_clip"])
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss_sum / micro

    out = {"parameters": params}
    if not compiled:
        for _ in range(2):
            step()
    else:
        # The first step compiles (forward and backward graphs); the next
        # ones can still be slow (recompiles, lazy loading), so warm up until
        # two steps in a row are within 1.5x of the best after the first,
        # with at least 3 steps and at most 12.
        times = []
        while True:
            t0 = time.perf_counter()
            step()
            times.append(time.perf_counter() - t0)
            n = len(times)
            if n >= 12:
                break
            if n >= 3 and max(times[-2:]) <= 1.5 * min(times[1:]):
                break
        out["compile_s"] = times[0]
        out["warmup_steps"] = len(times)
    t0 = time.perf_counter()
    losses = [step() for _ in range(args.torch_steps)]
    secs = time.perf_counter() - t0
    out["seconds"] = secs
    out["tok_s"] = args.torch_steps * micro * c["batch"] * c["seq_len"] / secs
    out["last_loss"] = losses[-1]
    return out


def run_torch(torch, config_path, args):
    res = {}
    try:
        c = load_config(config_path)
    except Exception as e:  # a malformed config: the C++ bench will say more
        return {"error": first_line(e)}
    if c["kind"] != "gpt":
        return {"error": "model kind '%s': only gpt has a PyTorch twin here" % c["kind"]}
    if c["optimizer"] != "adamw":
        return {"error": "optimizer '%s': the PyTorch step here is AdamW" % c["optimizer"]}
    torch.set_num_threads(args.threads)
    res["expected_parameters"] = stretto_param_count(c)
    try:
        eager = bench_torch(torch, c, args, compiled=False)
    except Exception as e:
        return {"error": "eager: " + first_line(e)}
    res["parameters"] = eager.pop("parameters")
    print("torch model: %d parameters (Stretto's GPT: %d)" %
          (res["parameters"], res["expected_parameters"]), flush=True)
    res["eager"] = eager
    print("  torch eager          %9.0f tok/s  (%d steps)" % (eager["tok_s"], args.torch_steps),
          flush=True)
    try:
        comp = bench_torch(torch, c, args, compiled=True)
        comp.pop("parameters", None)
        res["compile"] = comp
        print("  torch.compile        %9.0f tok/s  (%d steps; first step (compile) %.1f s, %d warm-up steps)"
              % (comp["tok_s"], args.torch_steps, comp["compile_s"], comp["warmup_steps"]),
              flush=True)
    except Exception as e:
        res["compile"] = {"error": first_line(e)}
        print("  torch.compile        unavailable: %s" % res["compile"]["error"], flush=True)
    return res


# --- medians and ranges --------------------------------------------------------

# The Stretto figures that are timings (a median and a range over the runs);
# the rest (model, kernels, FLOPs, plan bytes) are the same in every run.
STRETTO_TIMED = ["compiled_tok_s", "compiled_gflops", "reference_tok_s", "sgemm_peak_gflops",
                 "cold_start_s", "warm_start_s", "bench_wall_s"]
TORCH_TIMED = {"eager": ["tok_s", "seconds"], "compile": ["tok_s", "seconds", "compile_s"]}


def stats(values):
    """Median, min, max and count of the finite values; None when there are none."""
    xs = sorted(v for v in values if isinstance(v, (int, float)) and math.isfinite(v))
    if not xs:
        return None
    n = len(xs)
    med = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2
    return {"median": med, "min": xs[0], "max": xs[-1], "n": n}


def summarise_stretto(runs):
    """One dict like a run's, its timings replaced by their medians, and the
    statistics of each timing; max_loss_diff is the largest of the runs'."""
    ok = [x for x in runs if "error" not in x]
    if not ok:
        return dict(runs[0]) if runs else {"error": "no run"}, {}
    out = dict(ok[0])
    st = {}
    for k in STRETTO_TIMED:
        st[k] = stats(x.get(k) for x in ok)
        out[k] = st[k]["median"] if st[k] else None
    diffs = [x.get("max_loss_diff") for x in ok if x.get("max_loss_diff") is not None]
    out["max_loss_diff"] = max(diffs) if diffs else None
    out["runs_ok"] = len(ok)
    return out, st


def summarise_torch(runs):
    """{"eager": {...medians...}, "compile": {...}} and the statistics; an
    error when no run of that kind succeeded."""
    out, st = {}, {}
    if not runs:
        return out, st
    for key in ("expected_parameters", "parameters"):
        if key in runs[0]:
            out[key] = runs[0][key]
    for kind, keys in TORCH_TIMED.items():
        ok = [r[kind] for r in runs if kind in r and "error" not in r[kind]]
        if not ok:
            errs = [r.get(kind, {}).get("error") or r.get("error") for r in runs]
            out[kind] = {"error": next((e for e in errs if e), "no run")}
            continue
        out[kind] = dict(ok[0])
        st[kind] = {}
        for k in keys:
            st[kind][k] = stats(x.get(k) for x in ok)
            out[kind][k] = st[kind][k]["median"] if st[kind][k] else None
        out[kind]["runs_ok"] = len(ok)
    return out, st


# --- the table ----------------------------------------------------------------

def fmt(v, spec, suffix=""):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return DASH
    return format(v, spec) + suffix


def fmt_range(st, spec):
    """'median (min-max)' of a statistics dict; the median alone for one run."""
    if not st:
        return DASH
    if st["n"] == 1:
        return format(st["median"], spec)
    return "%s (%s%s%s)" % (format(st["median"], spec), format(st["min"], spec), "\u2013",
                            format(st["max"], spec))


def ratio(a, b):
    if a is None or b is None or not b or not math.isfinite(a) or not math.isfinite(b):
        return None
    return a / b


def table(results):
    cols = ["model", "threads", "GEMM library", "sgemm peak GFLOP/s",
            "stretto compiled tok/s, median (range)", "% sgemm peak",
            "reference tok/s", "compiled/reference", "torch eager tok/s, median (range)",
            "compiled/eager", "torch.compile tok/s, median (range)", "compiled/torch.compile",
            "cold start s", "warm start s", "plan peak MB", "runs"]
    rows = []
    for r in results:
        s = r.get("stretto") or {}
        st = r.get("stretto_stats") or {}
        t = r.get("torch") or {}
        tst = r.get("torch_stats") or {}
        eager = (t.get("eager") or {}).get("tok_s")
        tcomp = (t.get("compile") or {}).get("tok_s")
        comp = s.get("compiled_tok_s")
        gfl, peak = s.get("compiled_gflops"), s.get("sgemm_peak_gflops")
        pct = ratio(gfl, peak)
        peak_bytes = s.get("peak_bytes")
        n_torch = (t.get("eager") or {}).get("runs_ok")
        rows.append([
            s.get("model") or r["name"],
            str(s.get("threads", r["threads"])),
            s.get("gemm_library") or "OpenBLAS",
            fmt(peak, ".1f"),
            fmt_range(st.get("compiled_tok_s"), ".0f"),
            fmt(None if pct is None else 100 * pct, ".1f", "%"),
            fmt(s.get("reference_tok_s"), ".0f"),
            fmt(ratio(comp, s.get("reference_tok_s")), ".1f", "x"),
            fmt_range((tst.get("eager") or {}).get("tok_s"), ".0f"),
            fmt(ratio(comp, eager), ".2f", "x"),
            fmt_range((tst.get("compile") or {}).get("tok_s"), ".0f"),
            fmt(ratio(comp, tcomp), ".2f", "x"),
            fmt(s.get("cold_start_s"), ".2f"),
            fmt(s.get("warm_start_s"), ".2f"),
            fmt(None if peak_bytes is None else peak_bytes / 1e6, ".1f"),
            "%s stretto%s" % (s.get("runs_ok", 0),
                              ", %s torch" % n_torch if n_torch is not None else ""),
        ])
    widths = [max(len(c), *(len(row[i]) for row in rows)) if rows else len(c)
              for i, c in enumerate(cols)]
    line = lambda cells: "| " + " | ".join(x.ljust(w) for x, w in zip(cells, widths)) + " |"
    out = [line(cols), "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
    out += [line(row) for row in rows]
    return "\n".join(out)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for l in f:
                if l.startswith("model name"):
                    return l.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


class _Tee:
    """stdout that is also written to a log file."""

    def __init__(self, stream, path):
        self.stream, self.file = stream, open(path, "w")

    def write(self, text):
        self.stream.write(text)
        self.file.write(text)

    def flush(self):
        self.stream.flush()
        self.file.flush()


METHOD = ("each side (Stretto per GEMM library, PyTorch eager, torch.compile) run --repeat "
          "times, interleaved round by round; figures are medians with the range (min-max) "
          "over the runs; ratios are ratios of medians")


def main():
    args = parse_args()
    if args.emulate_avx2:  # before torch is imported; the C++ bench inherits it
        os.environ.update(AVX2_ENV)
        args.note = ((args.note + "; ") if args.note else "") + \
            "AVX2 emulated on this host: " + " ".join("%s=%s" % kv for kv in sorted(AVX2_ENV.items()))
    torch = None
    torch_note = "disabled (--no-torch)" if args.no_torch else None
    if not args.no_torch:
        try:
            import torch  # noqa: F811
        except Exception as e:
            torch_note = "not importable: " + first_line(e)
            if args.smoke:  # the PyTorch half of the smoke test cannot run here
                benchutil.skip("kernel_bench.py --smoke needs PyTorch (%s); --no-torch runs "
                               "the Stretto half" % torch_note)
    if args.log:
        sys.stdout = _Tee(sys.stdout, args.log)
    command = " ".join(["python3", os.path.relpath(os.path.abspath(__file__), ROOT)] + sys.argv[1:])
    print(hostinfo.header(args.note, command=command), flush=True)
    if torch is None and not args.no_torch:
        print("torch %s; PyTorch columns left empty" % torch_note, flush=True)
    binary = resolve(args.bin)
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        print("error: %s not found; run `make` first (it builds build/bin/stretto-bench-train)"
              % args.bin, file=sys.stderr)
        return 1
    configs = [resolve(c) for c in args.configs]
    missing = [c for c in configs if not os.path.isfile(c)]
    if missing:
        print("error: no such config: %s" % ", ".join(missing), file=sys.stderr)
        return 1

    meta = {
        "threads": args.threads, "steps": args.steps, "ref_steps": args.ref_steps,
        "torch_steps": args.torch_steps, "repeat": args.repeat, "method": METHOD,
        "command": command, "cpu": cpu_name(), "cpu_count": os.cpu_count(),
        "python": platform.python_version(),
        "torch": getattr(torch, "__version__", None), "torch_note": torch_note,
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "host": hostinfo.info(args.note),
    }
    print("threads %d, %s, Python %s%s; %d interleaved runs per side" % (
        args.threads, meta["cpu"], meta["python"],
        ", torch " + meta["torch"] if meta["torch"] else "", args.repeat), flush=True)

    results, failures, order = [], [], []
    for config in configs:
        name = os.path.splitext(os.path.basename(config))[0]
        print("\n== %s ==" % config, flush=True)
        rows = [{"config": config, "name": name, "threads": args.threads,
                 "gemm": gemm or "default", "runs": []} for gemm in args.gemm]
        torch_runs = []
        for rep in range(args.repeat):  # A B A B ...: a drifting load hits every side alike
            print("-- round %d of %d --" % (rep + 1, args.repeat), flush=True)
            for r, gemm in zip(rows, args.gemm):
                res = run_stretto(binary, config, args, gemm)
                order.append("%s: stretto %s" % (name, r["gemm"]))
                if "error" in res:
                    print("stretto bench: %s" % res["error"], flush=True)
                    failures.append("%s, stretto %s, run %d: %s" % (name, r["gemm"], rep + 1,
                                                                    res["error"]))
                r["runs"].append(res)
            if torch is not None:
                t = run_torch(torch, config, args)
                order.append("%s: torch" % name)
                if "error" in t or "error" in t.get("eager", {}):
                    err = t.get("error") or t["eager"]["error"]
                    print("torch: %s" % err, flush=True)
                    failures.append("%s, torch, run %d: %s" % (name, rep + 1, err))
                torch_runs.append(t)
        tsum, tstats = summarise_torch(torch_runs)
        for r in rows:
            r["stretto"], r["stretto_stats"] = summarise_stretto(r["runs"])
            ok = [x for x in r["runs"] if "error" not in x]
            print("%s: compiled tok/s over %d runs: %s -> median %s" % (
                r["gemm"], len(ok), ", ".join("%.0f" % (x.get("compiled_tok_s") or 0) for x in ok),
                fmt(r["stretto"].get("compiled_tok_s"), ".0f")), flush=True)
            if args.check_loss_diff is not None:
                d = r["stretto"].get("max_loss_diff")
                if d is None or not d <= args.check_loss_diff:
                    failures.append("%s, stretto %s: compiled vs reference losses differ by %s "
                                    "(tolerance %g)" % (name, r["gemm"], d, args.check_loss_diff))
            if torch is not None:  # the same PyTorch runs, compared with every row
                r["torch_runs"], r["torch"], r["torch_stats"] = torch_runs, tsum, tstats
        if torch is not None:
            for kind in ("eager", "compile"):
                ok = [x[kind]["tok_s"] for x in torch_runs if "tok_s" in x.get(kind, {})]
                print("torch %s: tok/s over %d runs: %s -> median %s" % (
                    kind, len(ok), ", ".join("%.0f" % x for x in ok),
                    fmt((tsum.get(kind) or {}).get("tok_s"), ".0f")), flush=True)
        results += rows
    meta["order"] = order

    print("\n" + table(results))
    print("\n%s; threads %d; timed steps per run: compiled %d, reference %d, torch %s; %s. "
          "Ratios from one sitting of this script; nothing asserts time." %
          (meta["cpu"], args.threads, args.steps, args.ref_steps,
           args.torch_steps if torch is not None else DASH, METHOD))
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"meta": meta, "results": _finite(results)}, f, indent=2)
            f.write("\n")
        print("wrote %s" % args.out)
    if args.smoke and not failures:
        failures += smoke_checks(args, torch is not None)
    for f in failures:
        print("FAILED: " + f, flush=True)
    return 1 if failures else 0


def smoke_checks(args, with_torch):
    """What --smoke checks in the JSON it wrote; a list of failures."""
    bad = []
    try:
        with open(args.out) as f:
            d = json.load(f, parse_constant=lambda c: bad.append("JSON holds " + c))
    except (OSError, ValueError) as e:
        return ["the JSON does not load: %s" % first_line(e)]
    meta, res = d.get("meta", {}), d.get("results", [])
    host = meta.get("host") or {}
    if not (host.get("commit") and host.get("date_utc") and host.get("cpu")):
        bad.append("meta.host lacks the commit, date or CPU")
    if meta.get("method") != METHOD or meta.get("repeat") != args.repeat:
        bad.append("meta lacks the method and the run count")
    if len(res) != len(args.configs) * len(args.gemm):
        bad.append("%d result rows for %d configs x %d libraries" % (
            len(res), len(args.configs), len(args.gemm)))
    want = []
    for config in args.configs:
        name = os.path.splitext(os.path.basename(config))[0]
        one_round = ["%s: stretto %s" % (name, g or "default") for g in args.gemm]
        want += (one_round + (["%s: torch" % name] if with_torch else [])) * args.repeat
    if meta.get("order") != want:
        bad.append("runs not interleaved round by round: %s" % meta.get("order"))
    for r in res:
        st = r.get("stretto_stats") or {}
        c = st.get("compiled_tok_s") or {}
        if c.get("n") != args.repeat:
            bad.append("%s: %s Stretto runs, not %d" % (r.get("name"), c.get("n"), args.repeat))
        elif not (c["min"] <= c["median"] <= c["max"] and c["median"] > 0):
            bad.append("%s: the median lies outside its range" % r.get("name"))
        if with_torch:
            for kind in ("eager", "compile"):
                t = ((r.get("torch_stats") or {}).get(kind) or {}).get("tok_s") or {}
                if t.get("n") != args.repeat:
                    bad.append("%s: %s torch %s runs, not %d (the same number as Stretto's)"
                               % (r.get("name"), t.get("n"), kind, args.repeat))
            s, e = (r.get("stretto") or {}).get("compiled_tok_s"), \
                ((r.get("torch") or {}).get("eager") or {}).get("tok_s")
            if not (s and e):
                bad.append("%s: no ratio of medians" % r.get("name"))
            t = r.get("torch") or {}
            if t.get("parameters") != t.get("expected_parameters"):
                bad.append("%s: the PyTorch twin has %s parameters, Stretto's GPT %s" % (
                    r.get("name"), t.get("parameters"), t.get("expected_parameters")))
    print("smoke checks: %s" % ("ok" if not bad else "%d failed" % len(bad)), flush=True)
    return bad


def _finite(x):
    """JSON-safe: non-finite floats become null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_finite(v) for v in x]
    return x


if __name__ == "__main__":
    sys.exit(main())
