#!/usr/bin/env python3
"""The GPU speed bench: Stretto against PyTorch on one NVIDIA GPU, in one sitting.

    bench/gpu/bundle.sh                               # here: gpu-bundle/ (stretto-run, plans)
    python3 bench/gpu/speed.py                        # on the GPU machine, from the repository
                                                      # root: bench/results/gpu/speed-<gpu>.txt
    python3 bench/gpu/speed.py --out-dir "$OUT"       # (bench/gpu/on-device.sh does this)
    python3 bench/gpu/speed.py --smoke [--no-torch]   # here, without a GPU: the same logic at the
                                                      # smoke model's size on the CPU (seconds)

What runs, for gpt-tiny, gpt-mini and gpt-small (examples/*.toml; the plans
that bundle.sh packed from them):
  - Stretto: `stretto-run PLAN --device=cuda --precision P` for P = f32, tf32
    (cuBLASLt's TF32 compute type; left out, and said so, where this
    stretto-run has no --precision tf32) and bf16: the model's bf16-storage
    plan (`<model>-bf16.plan`, compiled with train.precision=bf16: the
    compiler's rounding points, GEMMs on bf16 operands, f32 accumulation)
    where the bundle has one, else the f32 plan with bf16 GEMM operands. Each run trains `warm-up + timed + 1` steps with --out
    and --log-interval 1; its metrics.csv (one line a step: tokens/s and
    elapsed seconds, written by the step driver) gives the tokens and the
    time of each step. tok/s = the timed steps' tokens / their seconds: the
    warm-up steps (kernel loads, cuBLASLt's first calls), the last step
    (validation and the checkpoint) and any step that validated are left
    out. A step ends when its loss is on the host, so the GPU work is in it.
    Two more sides on gpt-tiny and gpt-mini (launch-bound): f32 with
    STRETTO_CUDA_GRAPHS=0, every node launched from the host, against the
    default (each micro-step and update replayed as one CUDA graph), and
    bf16 with STRETTO_QUEUE_AHEAD=0, each step's loss read before the next
    step is queued, against the default (the next step queued behind the
    one whose loss the host waits for); and
    one on gpt-small (bandwidth-bound): bf16 with STRETTO_BF16_STORAGE=0,
    bf16 values in four bytes, against the default (two bytes where the
    plan says, kernel-bf16-storage).
  - PyTorch: the GPT of bench/parity/torch_gpt.py (its gpt_loss: pre-norm,
    LayerNorm, tanh-GELU MLP, causal scaled_dot_product_attention, untied
    head) with the config's dimensions, random tokens, torch.optim.AdamW
    with the config's lr, betas, eps and weight decay (matrices and
    embeddings decayed, biases and gains not, as Stretto's optimizer pass
    groups them; fused=True on CUDA), gradient clipping at the config's
    grad_clip. A step is forward, backward, clip_grad_norm_, step,
    zero_grad. Modes: f32 (allow_tf32 False), tf32 (allow_tf32 True),
    bf16 autocast, torch.compile bf16 (the loss function compiled, under
    bf16 autocast). A run builds the parameters and optimizer afresh, warms
    up, then times its steps between two torch.cuda.synchronize() calls
    (no host sync inside the timed steps).
  - The parameter counts of both sides are compared (the plan's states
    against the PyTorch tensors): a mismatch is a failure.

Start-up (issue 28's target: gpt-small's first step within 15 s cold, 2 s
warm): before everything else, the last model's bf16 plan (else f32) runs 2
steps twice on a kernel cache of its own, first empty (cold: NVRTC compiles
every unit, cuBLASLt's algorithms are timed) then filled (warm); reported as
the seconds from the process's start to step 1's line in metrics.csv
(polled every 10 ms), CUDA graphs on as in a timed run. The profile at the
end prints the start-up phases (warm).

Method (the project's rule for speed): a warm-up pass first (one short
Stretto run per model, which fills the kernel caches, and torch.compile's
compilation of each model), discarded; then rounds, each running every side
of every model once, in the same order (Stretto f32, tf32, bf16, PyTorch
f32, tf32, bf16, torch.compile bf16), so a drifting clock or load hits
every side alike. Every side gets the same number of runs. Figures are
medians over the runs with their range (min-max); a ratio is the ratio of
two medians. Nothing asserts anything about time.

Time: --budget-s (default 300) bounds the whole script: a round is started
only when the time so far plus the last round's time and the profile's
fits; the rounds run are reported (at least one). Estimated on an H200
from the 2026-12-04 run (shared/gpu-h200): the warm-up pass about 90 s
(gpt-small's 712 host-compiled kernels on a cold cache, torch.compile of
three models), a round about 60-80 s (fourteen Stretto processes, each about
1-3 s of start-up for gpt-tiny and gpt-mini, about 8-12 s for gpt-small
plus its 7 steps of about 0.85 s; the PyTorch runs about 15 s), the
profile about 15 s: three rounds in about 5 minutes.

Model FLOPs: 6 x P + 6 x L x T x d per token (P all parameters, embeddings
included; L layers, T the sequence length, d d_model). The second term is
attention's two matrix products, QK^T and AV: 2 T d FLOPs each per token
and layer forward, twice that backward, 12 L T d in all, halved for the
causal mask. It is the formula of the 2026-12-04 run's PyTorch figures.
TFLOP/s = FLOPs per token x tok/s.

After the rounds: the per-kernel profile of gpt-small in bf16
(`stretto-run --profile`, one run) and the cost model's prediction of each
plan (`stretto-run PLAN --device-model h200|h100`, no GPU needed: the
eager and CUDA-graph tok/s it predicts, beside the measurement).

Writes OUT_DIR/speed-<gpu>.txt (the host header with GPU, driver, CUDA and
torch versions, the plan, the tables, the ratios, the profile) and
speed-<gpu>.json (every run). Default OUT_DIR: bench/results/gpu.

Exit status: 0 when every run succeeded; 1 when a run failed or (--smoke) a
check of the output failed; 77 (skipped) on a machine without an NVIDIA GPU
(unless --smoke), or --smoke without --no-torch where torch does not import.
Without torch (not --smoke) the Stretto side runs and PyTorch is said to be
skipped.

--smoke: Stretto on --device=cpu and PyTorch on the CPU at the smoke model's
size (bench/benchutil.py SMOKE_MODEL; a bundle from `bundle.sh --smoke DIR`
with --bundle DIR/gpu-bundle, else plans made here with stretto-train),
2 rounds of a few steps, into a scratch folder (never bench/results), then
checks its own JSON and text: every side ran the same number of runs, in
rounds, medians inside their ranges, the header names host, date and
commit, the profile is there. Stretto's tf32 is a CUDA compute type: on
the CPU it is left out (and said so).
"""
import argparse
import gzip
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
import benchutil  # noqa: E402
import hostinfo  # noqa: E402
from kernel_bench import fmt_range, load_config, stats  # noqa: E402

ROOT = benchutil.ROOT
MODELS = ["gpt-tiny", "gpt-mini", "gpt-small"]
STRETTO_PRECISIONS = ["f32", "tf32", "bf16"]
# Stretto sides that turn one thing off, each against its default side: f32
# with STRETTO_CUDA_GRAPHS=0 (every node launched from the host) on the
# launch-bound models (what CUDA graphs gain), bf16 with
# STRETTO_QUEUE_AHEAD=0 (the host waits for each step before queuing the
# next) on the same models (what queuing a step ahead gains), and bf16 with
# STRETTO_BF16_STORAGE=0 (bf16 values in four bytes, each GEMM operand
# rounded into a copy) on the bandwidth-bound one (what two-byte storage
# gains). key: (precision, variable, models, label).
EAGER = "f32-eager"
EAGER_MODELS = ["gpt-tiny", "gpt-mini"]
FOUR = "bf16-four"
UNQUEUED = "bf16-unqueued"
VARIANTS = {
    EAGER: ("f32", "STRETTO_CUDA_GRAPHS", EAGER_MODELS, "Stretto f32, no CUDA graphs",
            "graphs on and off are compared where launches bound a step", "f32, no graphs"),
    UNQUEUED: ("bf16", "STRETTO_QUEUE_AHEAD", EAGER_MODELS, "Stretto bf16, steps not queued ahead",
               "steps queued ahead or not are compared where the host's turn-around between "
               "steps shows", "bf16, not queued"),
    FOUR: ("bf16", "STRETTO_BF16_STORAGE", ["gpt-small"], "Stretto bf16, values in four bytes",
           "two- and four-byte bf16 are compared where bandwidth bounds a step", "bf16, 4-byte"),
}
TORCH_MODES = ["f32", "tf32", "bf16", "compile-bf16"]
TORCH_LABEL = {"f32": "PyTorch f32", "tf32": "PyTorch tf32", "bf16": "PyTorch bf16 autocast",
               "compile-bf16": "torch.compile bf16"}
# Steps per run: (Stretto warm-up, Stretto timed, PyTorch warm-up, PyTorch timed).
# Chosen from the H200's step times (shared/gpu-h200): Stretto about 8 ms,
# 40 ms and 850 ms a step, PyTorch about 4, 6 and 15-100 ms.
STEPS = {"gpt-tiny": (3, 50, 3, 50), "gpt-mini": (3, 20, 3, 50), "gpt-small": (2, 4, 3, 10)}
SMOKE_STEPS = (1, 2, 1, 2)
PROFILE_MODEL, PROFILE_PRECISION, PROFILE_STEPS = "gpt-small", "bf16", 6
METHOD = ("a warm-up pass (discarded), then rounds: each round runs every side of every model "
          "once, in the same order; every side gets the same number of runs; figures are medians "
          "over the runs with the range (min-max); ratios are ratios of medians")
FLOPS_FORMULA = "6 x P + 6 x L x T x d per token (P all parameters; attention's QK^T and AV, " \
                "forward and backward, over the causal half)"
DASH = "\u2014"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bundle", default="gpu-bundle",
                   help="bundle.sh's folder: bin/stretto-run, lib/, plans/, data/ "
                        "(default %(default)s; --smoke without it makes its own plans)")
    p.add_argument("--models", nargs="+", default=MODELS, help="default: %(default)s")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (default 3)")
    p.add_argument("--budget-s", type=float, default=300,
                   help="no round is started that would end past this (default 300 s)")
    p.add_argument("--out-dir", help="where speed-<gpu>.txt and .json go (default bench/results/gpu)")
    p.add_argument("--device-model", help="the cost model's device (default: h200 or h100 from "
                   "the GPU's name, else h200)")
    p.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    p.add_argument("--no-profile", action="store_true", help="no --profile run at the end")
    p.add_argument("--smoke", action="store_true",
                   help="the smoke model on the CPU, into a scratch folder, then checks (seconds)")
    p.add_argument("--note", help="a note for the host header (default: $STRETTO_BENCH_NOTE)")
    a = p.parse_args()
    if a.rounds < 1:
        p.error("--rounds must be at least 1")
    a.device = "cpu" if a.smoke else "cuda"
    if a.smoke:
        a.scratch = benchutil.scratch("gpu-speed" + ("" if a.no_torch else "-torch"))
        a.out_dir = a.out_dir or os.path.join(a.scratch, "out")
        a.rounds = min(a.rounds, 2)
        if a.bundle == "gpu-bundle" and not os.path.isdir(os.path.join(ROOT, "gpu-bundle")):
            a.bundle = None
        benchutil.refuse_committed(a.out_dir)
    else:
        a.scratch = tempfile.mkdtemp(prefix="stretto-gpu-speed-")
        a.out_dir = a.out_dir or os.path.join(benchutil.RESULTS, "gpu")
    return a


# --- the GPU and the host -------------------------------------------------------

def gpu_slug(name):
    """'NVIDIA H200' -> 'h200' (the results file's name)."""
    s = re.sub(r"^nvidia\s+", "", name.strip(), flags=re.I).lower()
    return re.sub(r"[^a-z0-9]+", "-", s).strip("-") or "gpu"


def device_model_for(name):
    n = name.lower()
    for m in ("h200", "h100"):
        if m in n:
            return m, None
    return "h200", "no cost model for %s: the H200's is shown" % name


# --- Stretto --------------------------------------------------------------------

class Stretto:
    """stretto-run and the plans, from a bundle or (smoke) made here."""

    def __init__(self, a):
        self.a = a
        self.work = os.path.join(a.scratch, "stretto")
        os.makedirs(self.work, exist_ok=True)
        self.env = dict(benchutil.smoke_env(a.scratch) if a.smoke else os.environ)
        if not a.smoke:
            self.env.setdefault("STRETTO_CACHE_DIR", "/tmp/stretto-cache")
        self.bundle_info = None
        if a.bundle:
            b = os.path.abspath(a.bundle)
            if not os.path.isdir(b):
                sys.exit("error: no %s: run bench/gpu/bundle.sh first (or --bundle DIR)" % a.bundle)
            self.bin = os.path.join(b, "bin", "stretto-run")
            libs = [os.path.join(self.work, "lib"), os.path.join(b, "lib")]
            os.makedirs(libs[0], exist_ok=True)
            for f in os.listdir(libs[1]):  # bundle.sh compressed OpenBLAS
                if f.endswith(".gz") and not os.path.exists(os.path.join(libs[1], f[:-3])):
                    self.gunzip(os.path.join(libs[1], f), os.path.join(libs[0], f[:-3]))
            libs += cuda_library_dirs()
            self.env["LD_LIBRARY_PATH"] = ":".join(libs + [self.env.get("LD_LIBRARY_PATH", "")])
            self.data = self.unpacked(os.path.join(b, "data", "kjv.txt"))
            self.plans = {m: self.unpacked(os.path.join(b, "plans", m + ".plan")) for m in a.models}
            for m in a.models:  # bf16 storage, where bundled
                bf16 = os.path.join(b, "plans", m + "-bf16.plan")
                if os.path.exists(bf16) or os.path.exists(bf16 + ".gz"):
                    self.plans[m + "-bf16"] = self.unpacked(bf16)
            info = os.path.join(b, "bundle-info.txt")
            if os.path.exists(info):
                self.bundle_info = open(info).read().strip()
        else:  # --smoke without a bundle: the smoke model's plans, made here
            benchutil.require("stretto-run", "stretto-train")
            self.bin = benchutil.binary("stretto-run")
            self.data = os.path.join(ROOT, "data", "kjv.txt")
            self.plans = {}
            for m in a.models:
                for name, extra in ((m, []), (m + "-bf16", ["train.precision=bf16"])):
                    path = os.path.join(self.work, name + ".plan")
                    cmd = [benchutil.binary("stretto-train"),
                           os.path.join(ROOT, "examples", m + ".toml")] \
                        + benchutil.SMOKE_MODEL + extra + ["--save-plan", path, "--quiet"]
                    r = subprocess.run(cmd, env=self.env, capture_output=True, text=True)
                    if r.returncode != 0:
                        sys.exit("error: %s failed:\n%s%s" % (" ".join(cmd), r.stdout, r.stderr))
                    self.plans[name] = path
        if not os.access(self.bin, os.X_OK):
            sys.exit("error: no stretto-run at %s" % self.bin)
        self.help = subprocess.run([self.bin, "--help"], env=self.env, capture_output=True,
                                   text=True).stdout
        m = re.search(r"--precision ([a-z0-9|]+)", self.help)
        self.precisions = m.group(1).split("|") if m else ["f32", "bf16"]

    @staticmethod
    def gunzip(src, dst):
        with gzip.open(src, "rb") as f, open(dst + ".tmp", "wb") as g:
            shutil.copyfileobj(f, g)
        os.replace(dst + ".tmp", dst)
        return dst

    def unpacked(self, path):
        """`path`, or its .gz unpacked into the work folder (the bundle is
        left as it is: device-check.sh may unpack it at the same time)."""
        if os.path.exists(path):
            return path
        if os.path.exists(path + ".gz"):
            return self.gunzip(path + ".gz", os.path.join(self.work, os.path.basename(path)))
        sys.exit("error: the bundle lacks %s (run bench/gpu/bundle.sh again)" % path)

    def skip_reason(self, precision, model):
        if precision in VARIANTS:
            base, _, models, _, why, _ = VARIANTS[precision]
            if model not in models and not self.a.smoke:
                return "%s (%s)" % (why, ", ".join(models))
            precision = base
        if precision not in self.precisions:
            return "this stretto-run has no --precision %s (it takes %s)" % (
                precision, "|".join(self.precisions))
        if precision == "tf32" and self.a.device == "cpu":
            return "tf32 is a CUDA compute type (cuBLASLt's); the CPU runtime refuses it"
        return None

    def plan(self, model, precision):
        """The plan a precision runs: bf16 takes the bf16-storage plan when there is one."""
        return self.plans.get(model + "-bf16", self.plans[model]) if precision == "bf16" \
            else self.plans[model]

    def run(self, model, precision, warm, timed, tag):
        """One timed process; a dict with tok_s, step_ms, the device lines, or an error."""
        out = os.path.join(run_root(self.a), "%s-%s-%s" % (model, precision, tag))
        shutil.rmtree(out, ignore_errors=True)
        steps = warm + timed + 1
        env = dict(self.env)
        off = ""
        if precision in VARIANTS:
            precision, var = VARIANTS[precision][:2]
            env[var] = "0"
            off = var + "=0 "
        cmd = [self.bin, self.plan(model, precision), "--device=" + self.a.device, "--precision",
               precision, "--steps", str(steps), "--log-interval", "1", "--data", self.data,
               "--out", out]
        t0 = time.perf_counter()
        r = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        log = r.stdout + r.stderr
        res = {"cmd": off + " ".join(cmd), "wall_s": wall,
               "device_lines": [l for l in log.splitlines() if l.startswith("device:")],
               "done": next((l for l in log.splitlines() if l.startswith("done:")), None)}
        try:
            if r.returncode != 0:
                res["error"] = "exit status %d: %s" % (r.returncode, last_lines(log))
                return res
            rows = read_metrics(os.path.join(out, "metrics.csv"))
            res.update(timed_window(rows, warm, steps))
            return res
        except (OSError, ValueError, KeyError) as e:
            res["error"] = "%s: %s" % (type(e).__name__, e)
            return res
        finally:
            with open(os.path.join(self.work, "last-run.log"), "w") as f:
                f.write(res["cmd"] + "\n" + log)
            keep = os.path.join(self.work, "metrics", os.path.basename(out) + ".csv")
            os.makedirs(os.path.dirname(keep), exist_ok=True)
            if os.path.exists(os.path.join(out, "metrics.csv")):
                shutil.copy(os.path.join(out, "metrics.csv"), keep)
            shutil.rmtree(out, ignore_errors=True)  # the checkpoint: gpt-small's is 1 GB

    def warm(self, model):
        """A short run that fills the kernel caches (host compiler, NVRTC)."""
        t0, rc, log = time.perf_counter(), 0, ""
        for plan in sorted({self.plans[model], self.plan(model, "bf16")}):
            cmd = [self.bin, plan, "--device=" + self.a.device, "--steps", "2", "--data", self.data,
                   "--quiet"]
            r = subprocess.run(cmd, env=self.env, capture_output=True, text=True)
            rc, log = rc or r.returncode, log + r.stdout + r.stderr
        return rc, time.perf_counter() - t0, log

    def startup(self, model):
        """Seconds from the process's start to step 1's line in metrics.csv, for
        the model's bf16 plan (else f32) with an empty kernel cache of its own
        (cold: NVRTC compiles every unit, cuBLASLt's algorithms are timed) and
        then with that cache (warm); CUDA graphs on, as in a timed run:
        {"cold"|"warm": {"first_step_s", "wall_s"}} or {"error"}."""
        cache = os.path.join(self.work, "startup-cache")
        shutil.rmtree(cache, ignore_errors=True)
        env = dict(self.env, STRETTO_CACHE_DIR=cache)
        plan = self.plan(model, "bf16")
        out = {"plan": os.path.basename(plan)}
        for kind in ("cold", "warm"):
            run = os.path.join(run_root(self.a), "startup-%s-%s" % (model, kind))
            shutil.rmtree(run, ignore_errors=True)
            os.makedirs(run)
            metrics = os.path.join(run, "metrics.csv")
            cmd = [self.bin, plan, "--device=" + self.a.device, "--steps", "2", "--log-interval",
                   "1", "--data", self.data, "--out", run]
            first = None
            with open(os.path.join(self.work, "startup.log"), "w+") as log:
                t0 = time.perf_counter()
                p = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
                while p.poll() is None:
                    if first is None and step_logged(metrics, 1):
                        first = time.perf_counter() - t0
                    time.sleep(0.01)
                wall = time.perf_counter() - t0
                log.seek(0)
                text = log.read()
            if first is None and p.returncode == 0 and step_logged(metrics, 1):
                first = wall  # (logged in the last 10 ms)
            shutil.rmtree(run, ignore_errors=True)
            if p.returncode != 0 or first is None:
                out["error"] = "%s run: exit status %d%s: %s" % (
                    kind, p.returncode, "" if first else ", no step 1 in metrics.csv",
                    last_lines(text))
                break
            out[kind] = {"first_step_s": first, "wall_s": wall}
        shutil.rmtree(cache, ignore_errors=True)
        return out

    def profile(self, model, precision, steps):
        cmd = [self.bin, self.plan(model, precision), "--device=" + self.a.device, "--precision",
               precision, "--steps", str(steps), "--profile", "--quiet", "--data", self.data]
        r = subprocess.run(cmd, env=self.env, capture_output=True, text=True)
        return "$ %s\n%s%s(exit status %d)\n" % (" ".join(cmd), r.stdout, r.stderr, r.returncode), \
            r.returncode

    def predict(self, model, device_model):
        """The cost model's {precision: (eager tok/s, graph tok/s)} of a plan."""
        out, texts = {}, {}
        for prec in ("f32", "bf16", FOUR):
            base = VARIANTS[prec][0] if prec in VARIANTS else prec
            cmd = [self.bin, self.plan(model, base), "--device-model", device_model, "--precision",
                   base]
            env = dict(self.env)
            if prec == FOUR: # the bf16 plan's values in four bytes
                env["STRETTO_BF16_STORAGE"] = "0"
            r = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if r.returncode != 0:
                return {"error": last_lines(r.stdout + r.stderr)}, texts
            texts[prec] = r.stdout
            m = re.search(r"predicted: ([0-9]+) tok/s eager, ([0-9]+) tok/s as a graph", r.stdout)
            if m:
                out[prec] = (int(m.group(1)), int(m.group(2)))
            if prec == "f32":
                t = re.search(r"with tf32: ([0-9.]+) ms a step eager, ([0-9.]+) ms as a graph "
                              r"\(([0-9]+) tok/s\)", r.stdout)
                e = re.search(r"step, launched eagerly: ([0-9.]+) ms", r.stdout)
                if t and e and m and float(t.group(1)) > 0:
                    # the eager tok/s scales with the step time
                    out["tf32"] = (int(round(int(m.group(1)) * float(e.group(1)) / float(t.group(1)))),
                                   int(t.group(3)))
        return out, texts

    def plan_shapes(self, model):
        """{parameter name: shape} from the plan's state lines."""
        shapes = {}
        with open(self.plans[model], errors="replace") as f:
            for line in f:
                if not line.startswith("state "):
                    continue
                m = re.match(r"state \d+:(\S+) .*?\bparam=1\b.*?\bshape=([0-9,]*)", line)
                if m:
                    shapes[m.group(1)] = [int(x) for x in m.group(2).split(",") if x]
        return shapes


def cuda_library_dirs():
    """NVRTC and cuBLASLt: the toolkit's, else PyTorch's wheels (as device-check.sh)."""
    dirs = [d for d in ("/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib")
            if os.path.isdir(d)]
    try:
        import nvidia  # the pip packages' namespace
        for p in nvidia.__path__:
            dirs += [os.path.join(p, d, "lib") for d in sorted(os.listdir(p))
                     if os.path.isdir(os.path.join(p, d, "lib"))]
    except Exception:
        pass
    return dirs


def run_root(a):
    """--out of the timed runs: tmpfs where it has room (gpt-small's
    checkpoint is about 1 GB, written after the last, untimed step)."""
    if not hasattr(a, "_run_root"):
        a._run_root = os.path.join(a.scratch, "runs")
        try:
            st = os.statvfs("/dev/shm")
            if not a.smoke and st.f_bavail * st.f_frsize > 8 * 2**30:
                a._run_root = tempfile.mkdtemp(prefix="stretto-speed-", dir="/dev/shm")
        except OSError:
            pass
        os.makedirs(a._run_root, exist_ok=True)
    return a._run_root


def last_lines(text, n=3):
    return " | ".join(l for l in text.strip().splitlines()[-n:])


def read_metrics(path):
    """metrics.csv's rows: step, val_loss (or None), tokens_per_s, elapsed_s."""
    rows = []
    with open(path) as f:
        header = f.readline().strip().split(",")
        idx = {k: i for i, k in enumerate(header)}
        for line in f:
            c = line.strip().split(",")
            if len(c) < len(header):
                continue
            rows.append({"step": int(c[idx[header[0]]]),
                         "val": c[idx["val_loss"]] != "",
                         "tps": float(c[idx["tokens_per_s"]]),
                         "elapsed": float(c[idx["elapsed_s"]])})
    return rows


def timed_window(rows, warm, steps):
    """tok/s over steps warm+1 .. steps-1 (the last validates and checkpoints),
    leaving out any step that validated; each step's tokens = its tokens/s x
    its seconds (the step driver's own count)."""
    if [r["step"] for r in rows] != list(range(1, steps + 1)):
        raise ValueError("metrics.csv has steps %s, not 1..%d (--log-interval 1)"
                         % ([r["step"] for r in rows][:5], steps))
    prev = {r["step"]: (rows[i - 1]["elapsed"] if i else 0.0) for i, r in enumerate(rows)}
    durations, tokens, left_out = [], 0.0, []
    for r in rows:
        if r["step"] <= warm or r["step"] == steps:
            continue
        if r["val"]:
            left_out.append(r["step"])
            continue
        dt = r["elapsed"] - prev[r["step"]]
        durations.append(dt)
        tokens += r["tps"] * dt
    secs = sum(durations)
    if not durations or secs <= 0:
        raise ValueError("no timed step")
    per_step = tokens / len(durations)
    return {"tok_s": tokens / secs, "step_ms": 1e3 * secs / len(durations),
            "tokens_per_step": int(round(per_step)), "timed_steps": len(durations),
            "steps_left_out_validating": left_out}


# --- PyTorch --------------------------------------------------------------------

class Torch:
    """The GPT of bench/parity/torch_gpt.py, timed on the device."""

    def __init__(self, a):
        self.a = a
        self.error = None
        self.compiled = {}
        try:
            import torch
            sys.path.insert(0, os.path.join(ROOT, "bench", "parity"))
            import torch_gpt
        except (Exception, SystemExit) as e:  # torch_gpt exits 77 without numpy or torch
            self.error = "not importable: %s" % first_line(e)
            return
        self.torch, self.gpt_loss = torch, torch_gpt.gpt_loss
        self.dev = torch.device("cuda" if a.device == "cuda" else "cpu")
        if a.device == "cpu":
            torch.set_num_threads(1)
        elif not torch.cuda.is_available():
            self.error = "torch %s sees no CUDA device" % torch.__version__

    def facts(self):
        t = self.torch
        f = {"torch": t.__version__, "torch_cuda": getattr(t.version, "cuda", None)}
        if self.dev.type == "cuda":
            f["cudnn"] = t.backends.cudnn.version()
            f["device"] = t.cuda.get_device_name(0)
            cap = t.cuda.get_device_capability(0)
            f["capability"] = "%d.%d" % cap
        return f

    def build(self, c):
        """Parameters (Stretto's names, [out, in] layout as torch_gpt.py), optimizer."""
        t = self.torch
        d, V, T, L = c["d_model"], c["vocab"], c["seq_len"], c["layers"]
        f = c["mlp_ratio"] * d
        std, resid = c["init_std"], c["init_std"] / math.sqrt(2.0 * L)
        shapes = {"wte": (V, d), "wpe": (T, d), "ln_f.g": (d,), "ln_f.b": (d,), "head.w": (V, d)}
        for l in range(L):
            h = "h%d." % l
            shapes.update({h + "ln1.g": (d,), h + "ln1.b": (d,), h + "attn.qkv.w": (3 * d, d),
                           h + "attn.qkv.b": (3 * d,), h + "attn.proj.w": (d, d),
                           h + "attn.proj.b": (d,), h + "ln2.g": (d,), h + "ln2.b": (d,),
                           h + "mlp.fc.w": (f, d), h + "mlp.fc.b": (f,), h + "mlp.proj.w": (d, f),
                           h + "mlp.proj.b": (d,)})
        t.manual_seed(1337)
        p = {}
        for k, s in shapes.items():
            if len(s) == 1:
                x = t.ones(s) if k.endswith(".g") else t.zeros(s)
            else:
                x = t.randn(s) * (resid if k.endswith("proj.w") else std)
            p[k] = x.to(self.dev).requires_grad_(True)
        groups = [{"params": [v for v in p.values() if v.dim() >= 2],
                   "weight_decay": c["weight_decay"]},
                  {"params": [v for v in p.values() if v.dim() < 2], "weight_decay": 0.0}]
        kw = {"fused": True} if self.dev.type == "cuda" else {}
        opt = t.optim.AdamW(groups, lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"], **kw)
        return p, opt

    def loss_fn(self, model, mode):
        if mode != "compile-bf16":
            return self.gpt_loss
        if model not in self.compiled:
            self.compiled[model] = self.torch.compile(self.gpt_loss, dynamic=False)
        return self.compiled[model]

    def run(self, model, c, mode, warm, timed):
        t = self.torch
        tf32 = mode == "tf32"
        t.backends.cuda.matmul.allow_tf32 = tf32
        t.backends.cudnn.allow_tf32 = tf32
        bf16 = mode in ("bf16", "compile-bf16")
        try:
            params, opt = self.build(c)
            n_params = sum(v.numel() for v in params.values())
            a = types.SimpleNamespace(d_model=c["d_model"], heads=c["heads"], layers=c["layers"])
            g = t.Generator(device=self.dev).manual_seed(1)
            shape = (c["batch"], c["seq_len"])
            tokens = t.randint(0, c["vocab"], shape, device=self.dev, generator=g)
            targets = t.randint(0, c["vocab"], shape, device=self.dev, generator=g)
            fn = self.loss_fn(model, mode)
            plist = list(params.values())
            micro = c["micro_batches"]

            def step():
                for _ in range(micro):
                    with t.autocast(self.dev.type, dtype=t.bfloat16, enabled=bf16):
                        loss = fn(params, tokens, targets, a)
                    (loss / micro if micro > 1 else loss).backward()
                if c["grad_clip"] > 0:
                    t.nn.utils.clip_grad_norm_(plist, c["grad_clip"])
                opt.step()
                opt.zero_grad(set_to_none=True)
                return loss

            def sync():
                if self.dev.type == "cuda":
                    t.cuda.synchronize()

            warm_times = []
            for i in range(warm if mode != "compile-bf16" else 12):
                t0 = time.perf_counter()
                step()
                sync()
                warm_times.append(time.perf_counter() - t0)
                # torch.compile: at least `warm` steps, then until two steps in
                # a row are within 1.5x of the best after the first (at most 12)
                if mode == "compile-bf16" and i + 1 >= max(warm, 3) and \
                        max(warm_times[-2:]) <= 1.5 * min(warm_times[1:]):
                    break
            sync()
            t0 = time.perf_counter()
            for _ in range(timed):
                loss = step()
            sync()
            secs = time.perf_counter() - t0
            toks = timed * micro * c["batch"] * c["seq_len"]
            res = {"tok_s": toks / secs, "step_ms": 1e3 * secs / timed, "parameters": n_params,
                   "tokens_per_step": micro * c["batch"] * c["seq_len"], "timed_steps": timed,
                   "warmup_steps": len(warm_times), "first_step_s": warm_times[0],
                   "last_loss": float(loss.detach())}
            if not math.isfinite(res["last_loss"]):
                res["error"] = "non-finite loss"
            return res
        except Exception as e:
            return {"error": first_line(e)}
        finally:
            params = opt = None
            if self.dev.type == "cuda":
                t.cuda.empty_cache()


def first_line(e):
    s = str(e).strip()
    return "%s: %s" % (type(e).__name__, s.splitlines()[0] if s else "")


# --- the report -----------------------------------------------------------------

def model_config(a, model):
    c = load_config(os.path.join(ROOT, "examples", model + ".toml"))
    if a.smoke:
        c.update(benchutil.smoke_dims())
    return c


def flops_per_token(params, c):
    return 6.0 * params + 6.0 * c["layers"] * c["seq_len"] * c["d_model"]


def ratio(x, y):
    return x / y if x and y else None


def fmt(v, spec, suffix=""):
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return DASH
    return format(v, spec) + suffix


def sides():
    out = [("stretto", p, "Stretto " + p) for p in STRETTO_PRECISIONS]
    out += [("stretto", key, v[3]) for key, v in VARIANTS.items()]
    out += [("torch", m, TORCH_LABEL[m]) for m in TORCH_MODES]
    return out


def report(a, meta, results):
    """The tables as text lines."""
    lines = []
    for model in a.models:
        r = results[model]
        c, params = r["config"], r.get("parameters")
        fpt = flops_per_token(params, c) if params else None
        lines += ["", "== %s: %s parameters, %d tokens a step (batch %d x seq %d), %d layers, "
                  "d_model %d, %d heads" % (model, params, c["batch"] * c["seq_len"] *
                                            c["micro_batches"], c["batch"], c["seq_len"],
                                            c["layers"], c["d_model"], c["heads"]), "",
                  "| side | tok/s, median (range) | ms a step, median | model TFLOP/s | runs | "
                  "cost model (%s), eager / CUDA graph tok/s |" % meta["device_model"],
                  "|---|---:|---:|---:|---:|---|"]
        for kind, key, label in sides():
            s = r["sides"][kind + ":" + key]
            if s.get("skipped"):
                lines.append("| %s | skipped: %s | | | 0 | |" % (label, s["skipped"]))
                continue
            st = s.get("stats") or {}
            tok = (st.get("tok_s") or {}).get("median")
            pred = ""
            if kind == "stretto":
                pr = (r.get("prediction") or {}).get(FOUR if key == FOUR else
                                                     VARIANTS[key][0] if key in VARIANTS else key)
                pred = "%d / %d" % tuple(pr) if pr else DASH
            lines.append("| %s | %s | %s | %s | %d | %s |" % (
                label, fmt_range(st.get("tok_s"), ".0f"),
                fmt((st.get("step_ms") or {}).get("median"), ".2f"),
                fmt(tok * fpt / 1e12 if tok and fpt else None, ".2f"),
                len([x for x in s["runs"] if "error" not in x]), pred))
        med = {k: ((v.get("stats") or {}).get("tok_s") or {}).get("median")
               for k, v in r["sides"].items()}
        lines += ["", "ratios (of medians, tok/s; above 1 Stretto is faster):"]
        pairs = [("stretto:f32", "torch:f32"), ("stretto:tf32", "torch:tf32"),
                 ("stretto:bf16", "torch:bf16"), ("stretto:bf16", "torch:compile-bf16")]
        best = max((v for k, v in med.items() if k.startswith("stretto:") and v), default=None)
        for key, (base, _, _, _, _, short) in VARIANTS.items():
            if med.get("stretto:" + key):
                lines.append("  %-14s / %-20s %s" % (
                    "stretto " + base, "stretto " + short,
                    fmt(ratio(med.get("stretto:" + base), med.get("stretto:" + key)), ".3f",
                        "x")))
        for x, y in pairs:
            lines.append("  %-14s / %-20s %s" % (x.replace(":", " "), y.replace(":", " "),
                                                 fmt(ratio(med.get(x), med.get(y)), ".3f", "x")))
        lines.append("  %-14s / %-20s %s" % ("best Stretto", "torch compile-bf16",
                                             fmt(ratio(best, med.get("torch:compile-bf16")),
                                                 ".3f", "x")))
    return lines


# --- the run --------------------------------------------------------------------

def gpu_facts(a):
    """{name, ...} of GPU 0 from nvidia-smi (hostinfo), or None."""
    g = hostinfo.gpu_info()
    return g["gpus"][0] if g.get("gpus") else None


def main():
    a = parse_args()
    t_start = time.perf_counter()
    gpu = gpu_facts(a)
    if not a.smoke and gpu is None:
        benchutil.skip("no NVIDIA GPU here (nvidia-smi lists none); --smoke runs the same logic "
                       "on the CPU at the smoke model's size")
    torch_side = None if a.no_torch else Torch(a)
    torch_note = "left out (--no-torch)" if a.no_torch else \
        ("skipped: " + torch_side.error if torch_side.error else None)
    if a.smoke and torch_note and not a.no_torch:
        benchutil.skip("speed.py --smoke needs PyTorch (%s); --no-torch runs the Stretto side"
                       % torch_side.error)
    if torch_note:
        torch_side = None
    stretto = Stretto(a)
    gpu_name = gpu["name"] if gpu else "cpu"
    slug = "cpu-smoke" if a.smoke else gpu_slug(gpu_name)
    dm, dm_note = (a.device_model, None) if a.device_model else device_model_for(gpu_name)
    os.makedirs(a.out_dir, exist_ok=True)
    txt = os.path.join(a.out_dir, "speed-%s.txt" % slug)
    jsn = os.path.join(a.out_dir, "speed-%s.json" % slug)
    command = " ".join(["python3", os.path.relpath(os.path.abspath(__file__), ROOT)] + sys.argv[1:])
    meta = {"command": command, "method": METHOD, "flops_formula": FLOPS_FORMULA,
            "device": a.device, "device_model": dm, "device_model_note": dm_note,
            "rounds_planned": a.rounds, "budget_s": a.budget_s, "models": a.models,
            "host": hostinfo.info(a.note, gpu=True), "torch": None, "torch_note": torch_note,
            "bundle_info": stretto.bundle_info, "stretto_precisions": stretto.precisions,
            "order": [], "warmup": []}
    if torch_side:
        meta["torch"] = torch_side.facts()
    steps = {m: (SMOKE_STEPS if a.smoke else STEPS.get(m, (3, 10, 3, 10))) for m in a.models}
    meta["steps"] = {m: dict(zip(("stretto_warmup", "stretto_timed", "torch_warmup", "torch_timed"),
                                 s)) for m, s in steps.items()}

    head = [hostinfo.header(a.note, command=command, gpu=True).rstrip("\n")]
    if torch_side:
        f = meta["torch"]
        head.append("torch: %s (built with CUDA %s)%s" % (
            f["torch"], f.get("torch_cuda"),
            "; cuDNN %s; sees %s (compute capability %s)" % (f["cudnn"], f["device"], f["capability"])
            if "device" in f else "; on the CPU"))
    else:
        head.append("torch: %s" % torch_note)
    if stretto.bundle_info:
        head.append("stretto-run: from the bundle; " + stretto.bundle_info.splitlines()[0])
    head += ["what: Stretto (stretto-run %s, --device=%s) against PyTorch, one process a run; "
             "%s" % ("|".join(stretto.precisions), a.device, METHOD),
             "plan: up to %d rounds within %.0f s; steps a run (warm-up + timed): %s; Stretto's "
             "runs also train one last, untimed step (validation, checkpoint)" % (
                 a.rounds, a.budget_s, "; ".join(
                     "%s Stretto %d+%d, PyTorch %d+%d" % ((m,) + steps[m]) for m in a.models)),
             "model FLOPs: " + FLOPS_FORMULA]
    print("\n".join(head), flush=True)

    results = {}
    failures = []
    for m in a.models:
        c = model_config(a, m)
        shapes = stretto.plan_shapes(m)
        results[m] = {"config": c, "parameters": sum(math.prod(s) for s in shapes.values()),
                      "sides": {}}
        if shapes.get("wpe") != [c["seq_len"], c["d_model"]]:
            failures.append("%s: the plan's wpe is %s, the config's seq_len x d_model %d x %d: "
                            "the plan is not this config's (--smoke with a smoke bundle?)" % (
                                m, shapes.get("wpe"), c["seq_len"], c["d_model"]))
        for kind, key, label in sides():
            s = {"label": label, "runs": []}
            if kind == "stretto":
                why = stretto.skip_reason(key, m)
                if why:
                    s["skipped"] = why
            elif torch_side is None:
                s["skipped"] = "PyTorch " + torch_note
            results[m]["sides"][kind + ":" + key] = s
    if failures:
        for f in failures:
            print("FAILED: " + f)
        return 1

    # Start-up of the largest model, cold (a kernel cache of its own, empty)
    # and warm, to the end of its first step.
    sm = a.models[-1]
    meta["startup"] = dict(stretto.startup(sm), model=sm)
    print("start-up: " + startup_line(meta["startup"]), flush=True)
    if "error" in meta["startup"]:
        failures.append("%s: the start-up runs failed: %s" % (sm, meta["startup"]["error"]))
    # The warm-up pass: kernel caches and torch.compile, discarded.
    print("\n-- warm-up pass (discarded) --", flush=True)
    for m in a.models:
        rc, secs, log = stretto.warm(m)
        meta["warmup"].append("%s: stretto-run --steps 2: exit %d, %.1f s" % (m, rc, secs))
        print(meta["warmup"][-1], flush=True)
        if rc != 0:
            failures.append("%s: the warm-up run failed, so the model is left out: %s" % (
                m, last_lines(log)))
            continue
        if torch_side:
            t0 = time.perf_counter()
            w = torch_side.run(m, results[m]["config"], "compile-bf16", 1, 1)
            meta["warmup"].append("%s: torch.compile bf16, %d steps: %.1f s%s" % (
                m, w.get("warmup_steps", 0) + 1, time.perf_counter() - t0,
                " (%s)" % w["error"] if "error" in w else ""))
            print(meta["warmup"][-1], flush=True)
    # A model whose warm-up failed is left out of the rounds (the others'
    # figures still come); its failure makes the exit status 1.
    broken = [m for m in a.models if any(f.startswith(m + ": the warm-up") for f in failures)]
    a.models = [m for m in a.models if m not in broken]
    for m in broken:
        results.pop(m)
    if not a.models:
        for f in failures:
            print("FAILED: " + f)
        return 1

    rounds_done, last_round = 0, None
    profile_reserve = 0 if a.no_profile else 30
    for rnd in range(1, a.rounds + 1):
        elapsed = time.perf_counter() - t_start
        if last_round is not None and elapsed + last_round + profile_reserve > a.budget_s:
            meta["stopped"] = ("round %d not started: %.0f s so far + %.0f s a round + %d s for "
                               "the profile > the %.0f s budget" % (
                                   rnd, elapsed, last_round, profile_reserve, a.budget_s))
            print(meta["stopped"], flush=True)
            break
        t_round = time.perf_counter()
        print("\n-- round %d of %d --" % (rnd, a.rounds), flush=True)
        for m in a.models:
            sw, st_, tw, tt = steps[m]
            for kind, key, label in sides():
                s = results[m]["sides"][kind + ":" + key]
                if s.get("skipped"):
                    continue
                if kind == "stretto":
                    res = stretto.run(m, key, sw, st_, "r%d" % rnd)
                else:
                    res = torch_side.run(m, results[m]["config"], key, tw, tt)
                res["round"] = rnd
                s["runs"].append(res)
                meta["order"].append("%s: %s" % (m, label))
                if "error" in res:
                    failures.append("%s, %s, round %d: %s" % (m, label, rnd, res["error"]))
                print("%-10s %-24s %s" % (m, label, res["error"] if "error" in res else
                                          "%10.0f tok/s  %9.2f ms a step" % (res["tok_s"],
                                                                             res["step_ms"])),
                      flush=True)
        rounds_done = rnd
        last_round = time.perf_counter() - t_round
        summarise(results)
        write(a, meta, results, head, rounds_done, txt, jsn, profile=None)  # a killed run keeps these
    meta["rounds_done"] = rounds_done

    # Parameter counts: the PyTorch GPT against the plan's.
    for m in a.models:
        for k, s in results[m]["sides"].items():
            for x in s["runs"]:
                if "parameters" in x and x["parameters"] != results[m]["parameters"]:
                    failures.append("%s: %s has %d parameters, the plan %d" % (
                        m, s["label"], x["parameters"], results[m]["parameters"]))
                    break

    print("\n-- the cost model (--device-model %s) and the profile --" % dm, flush=True)
    predictions_text = []
    for m in a.models:
        pred, texts = stretto.predict(m, dm)
        results[m]["prediction"] = pred
        if "f32" in texts and m == a.models[-1]:
            predictions_text.append("== %s, f32 (stretto-run PLAN --device-model %s)\n%s" % (
                m, dm, texts["f32"]))
    profile_text = None
    if not a.no_profile:
        pm = PROFILE_MODEL if PROFILE_MODEL in a.models else a.models[-1]
        prec = PROFILE_PRECISION if PROFILE_PRECISION in stretto.precisions else "f32"
        profile_text, rc = stretto.profile(pm, prec, 2 if a.smoke else PROFILE_STEPS)
        meta["profile"] = "%s %s, %d steps, exit %d" % (pm, prec, 2 if a.smoke else PROFILE_STEPS, rc)
        if rc != 0:
            failures.append("the --profile run failed (exit %d)" % rc)
    meta["predictions_text"] = predictions_text
    meta["seconds"] = time.perf_counter() - t_start
    write(a, meta, results, head, rounds_done, txt, jsn, profile=profile_text)
    print(open(txt).read(), flush=True)
    print("wrote %s and %s (%.0f s)" % (txt, jsn, meta["seconds"]), flush=True)
    if a.smoke and not failures:
        failures += smoke_checks(a, txt, jsn, torch_side is not None)
    for f in failures:
        print("FAILED: " + f, flush=True)
    if not a.smoke:
        shutil.rmtree(a.scratch, ignore_errors=True)
        if run_root(a).startswith("/dev/shm"):
            shutil.rmtree(run_root(a), ignore_errors=True)
    return 1 if failures else 0


def summarise(results):
    for r in results.values():
        for s in r["sides"].values():
            ok = [x for x in s["runs"] if "error" not in x]
            s["stats"] = {k: stats(x[k] for x in ok) for k in ("tok_s", "step_ms")} if ok else {}


def write(a, meta, results, head, rounds_done, txt, jsn, profile):
    meta = dict(meta, rounds_done=rounds_done)
    lines = list(head)
    lines.append("rounds run: %d of %d%s; run order: %s" % (
        rounds_done, a.rounds, " (%s)" % meta["stopped"] if meta.get("stopped") else "",
        "the same every round (%s)" % ", ".join(
            o.split(": ", 1)[1] for o in meta["order"][:len(meta["order"]) // max(rounds_done, 1)]
            if o.startswith(a.models[0] + ":")) if rounds_done else DASH))
    lines.append("warm-up pass: " + "; ".join(meta["warmup"]))
    if meta.get("startup"):
        lines.append("start-up to the end of step 1: " + startup_line(meta["startup"]))
    if meta.get("device_model_note"):
        lines.append("cost model: " + meta["device_model_note"])
    lines += report(a, meta, results)
    stretto_dev = sorted({l for r in results.values() for s in r["sides"].values()
                          for x in s["runs"] for l in x.get("device_lines", [])})
    if stretto_dev:
        lines += ["", "Stretto's device lines:"] + ["  " + l for l in stretto_dev]
    if profile:
        lines += ["", "== the per-kernel profile (%s)" % meta.get("profile"), profile.rstrip()]
    for t in meta.get("predictions_text", []):
        lines += ["", t.rstrip()]
    with open(txt, "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(jsn, "w") as f:
        json.dump({"meta": meta, "results": _finite(results)}, f, indent=1)
        f.write("\n")


def _finite(x):
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def step_logged(metrics, step):
    """Whether metrics.csv holds the line of `step`."""
    try:
        with open(metrics) as f:
            return any(line.split(",", 1)[0] == str(step) for line in f)
    except OSError:
        return False


def startup_line(st):
    """meta["startup"] as one line: cold and warm, each the seconds to step 1."""
    parts = ["%s %.2f s (the process %.2f s in all)" % (k, st[k]["first_step_s"], st[k]["wall_s"])
             for k in ("cold", "warm") if k in st]
    text = "%s, %s: %s" % (st.get("model"), st.get("plan"), "; ".join(parts) or DASH)
    if "error" in st:
        text += " (%s)" % st["error"]
    return text


def smoke_checks(a, txt, jsn, with_torch):
    """What --smoke checks in what it wrote; a list of failures."""
    bad = []
    d = json.load(open(jsn))
    text = open(txt).read()
    meta, res = d["meta"], d["results"]
    host = meta.get("host") or {}
    if not (host.get("commit") and host.get("date_utc") and host.get("cpu")):
        bad.append("the host facts lack the commit, date or CPU")
    if "gpu" not in host:
        bad.append("the host facts say nothing of the GPU")
    for line in ("host: ", "date: ", "commit: ", "gpu: ", "torch: ", "plan: ", "model FLOPs: ",
                 "rounds run: ", "ratios (of medians", "== the per-kernel profile",
                 "--device-model", "| Stretto f32 |", "| Stretto bf16 |",
                 "| Stretto f32, no CUDA graphs |", "stretto f32, no graphs",
                 "| Stretto bf16, values in four bytes |", "stretto bf16, 4-byte",
                 "start-up to the end of step 1: "):
        if line not in text:
            bad.append("the text lacks %r" % line)
    st = meta.get("startup") or {}
    if "error" in st or not all(k in st and 0 < st[k]["first_step_s"] <= st[k]["wall_s"]
                                for k in ("cold", "warm")):
        bad.append("the start-up runs measured no cold and warm start: %s" % st)
    if meta.get("rounds_done") != a.rounds:
        bad.append("%s rounds run, not %d" % (meta.get("rounds_done"), a.rounds))
    one = []
    for m in a.models:
        for kind, side, _ in sides():
            s = res[m]["sides"][kind + ":" + side]
            if not s.get("skipped"):
                one.append("%s: %s" % (m, s["label"]))
    if meta.get("order") != one * a.rounds:
        bad.append("the runs were not in rounds of one run a side: %s" % meta.get("order"))
    ran = {}
    for m in a.models:
        for key, s in res[m]["sides"].items():
            if s.get("skipped"):
                if key == "stretto:tf32" or (key.startswith("torch:") and not with_torch):
                    continue
                bad.append("%s %s skipped: %s" % (m, key, s["skipped"]))
                continue
            n = len([x for x in s["runs"] if "error" not in x])
            ran[(m, key)] = n
            st = (s.get("stats") or {}).get("tok_s") or {}
            if not (st and st["min"] <= st["median"] <= st["max"] and st["median"] > 0):
                bad.append("%s %s: the median lies outside its range" % (m, key))
            for x in s["runs"]:
                if key.startswith("stretto:"):
                    p = key.split(":")[1]
                    base = VARIANTS[p][0] if p in VARIANTS else p
                    want = "device: cpu (compiled executor, %s)" % base
                    for q, v in VARIANTS.items():
                        if (p == q) != x.get("cmd", "").startswith(v[1] + "=0 "):
                            bad.append("%s %s: %s %s in %r" % (m, key, v[1], "unset" if p == q
                                                               else "=0", x.get("cmd")))
                    if want not in x.get("device_lines", []):
                        bad.append("%s %s: the run says %s, not %r" % (m, key, x.get("device_lines"),
                                                                      want))
                    if x.get("tokens_per_step") != res[m]["config"]["batch"] * \
                            res[m]["config"]["seq_len"]:
                        bad.append("%s %s: %s tokens a step, the config's batch x seq_len %d" % (
                            m, key, x.get("tokens_per_step"),
                            res[m]["config"]["batch"] * res[m]["config"]["seq_len"]))
        pred = res[m].get("prediction") or {}
        if "f32" not in pred:
            bad.append("%s: no cost-model prediction" % m)
        elif pred.get(FOUR) is None or pred.get(FOUR) == pred.get("bf16"):
            bad.append("%s: the four-byte bf16 prediction %s is the two-byte one %s" % (
                m, pred.get(FOUR), pred.get("bf16")))
    if set(ran.values()) != {a.rounds}:
        bad.append("the sides ran different numbers of runs: %s" % ran)
    if with_torch and not any(k[1].startswith("torch:") for k in ran):
        bad.append("no PyTorch run")
    print("smoke checks: %s" % ("ok" if not bad else "%d failed" % len(bad)), flush=True)
    return bad


if __name__ == "__main__":
    sys.exit(main())
