"""What the parity checks share: Stretto's synthetic data recomputed in
Python, safetensors in and out, the MLP config and its fixed initial
weights, a Stretto run read back step by step, and the comparison.

The frameworks' sides (optax_adamw.py, torch_adamw.py) only build the same
model and optimizer and return their losses and parameter snapshots.

--smoke (every parity script): the same check at a tiny size and few steps
(the GPT in delay-EF mode with 2 micro-batches), its files kept
in a scratch folder ($STRETTO_SMOKE_DIR/<script> or a temporary one); the
exit status is the check's (0 PASS, 1 FAIL, 77 the framework is missing).
STRETTO_BUILD names another build folder.
"""
import argparse
import json
import math
import os
import shutil
import struct
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import benchutil  # noqa: E402

MASK = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK
    return x ^ (x >> 31)


def unit_open_closed(bits):
    return float((bits >> 11) + 1) * 2.0 ** -53


def gaussian(bits):
    u0 = unit_open_closed(bits)
    u1 = unit_open_closed(splitmix64(bits))
    return math.sqrt(-2.0 * math.log(u0)) * math.cos(6.283185307179586 * u1)


TRAIN = 0  # Split::Train


def draw(seed, split, index, row):
    h = splitmix64(seed ^ splitmix64(split + 1))
    h = splitmix64(h ^ splitmix64(index))
    return splitmix64(h ^ splitmix64(row + 0x5151))


class SyntheticData:
    """runtime/io/Data.cpp's SyntheticClassification, in Python."""

    def __init__(self, batch, inputs, classes, seed):
        self.B, self.N, self.C, self.seed = batch, inputs, classes, seed
        self.teacher = np.array([gaussian(splitmix64(0x7EAC4E2 ^ splitmix64(i)))
                                 for i in range(inputs * classes)]).reshape(inputs, classes)

    def batch(self, index, part=0):
        x = np.empty((self.B, self.N))
        for b in range(self.B):
            row = draw(self.seed, TRAIN, index, part * self.B + b)
            for i in range(self.N):
                x[b, i] = gaussian(splitmix64(row ^ splitmix64(i)))
        y = np.empty(self.B, dtype=np.int32)
        for b in range(self.B):
            best, best_score = 0, -1e300
            for c in range(self.C):
                s = 0.0
                for i in range(self.N):  # the C++ loop's summation order
                    s += x[b, i] * self.teacher[i, c]
                if s > best_score:
                    best, best_score = c, s
            y[b] = best
        return x.astype(np.float32), y


def write_safetensors(path, tensors, dtype="f32"):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name], dtype="<f8" if dtype == "f64" else "<f4")
        header[name] = {"dtype": dtype.upper(), "shape": list(a.shape),
                        "data_offsets": [offset, offset + a.nbytes]}
        blobs.append(a.tobytes())
        offset += a.nbytes
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))


def read_safetensors(path):
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        assert info["dtype"] in ("F32", "F64"), (name, info["dtype"])
        b, e = info["data_offsets"]
        out[name] = np.frombuffer(raw[8 + n + b:8 + n + e],
                                  dtype="<f4" if info["dtype"] == "F32" else "<f8").reshape(info["shape"])
    return out


def config_toml(a):
    hidden = ", ".join(str(h) for h in a.hidden)
    return f"""# Written by bench/parity/optax_adamw.py
[model]
kind = "mlp"
inputs = {a.inputs}
hidden = [{hidden}]
classes = {a.classes}
activation = "relu"
batch = {a.batch}

[train]
optimizer = "adamw"
lr = {a.lr!r}
beta1 = {a.beta1!r}
beta2 = {a.beta2!r}
eps = {a.eps!r}
weight_decay = {a.weight_decay!r}
schedule = "constant"
warmup_steps = 0
steps = {a.steps}
seed = {a.seed}
eval_interval = 100000
log_interval = 100000

[data]
format = "synthetic"
"""


def initial_params(a):
    """Fixed weights (numpy seed 0): He-normal matrices, small biases."""
    rng = np.random.default_rng(0)
    params, width = {}, a.inputs
    names = [("fc%d" % i, h) for i, h in enumerate(a.hidden)] + [("out", a.classes)]
    for name, h in names:
        params[name + ".w"] = (rng.standard_normal((width, h)) * math.sqrt(2.0 / width)).astype(np.float32)
        params[name + ".b"] = (rng.standard_normal(h) * 0.1).astype(np.float32)
        width = h
    return params


def run_stretto(a, work, init_path, checkpoints):
    env = dict(os.environ)
    env.setdefault("STRETTO_CACHE_DIR", os.path.join(work, "kernel-cache"))
    cfg = os.path.join(work, "mlp.toml")
    with open(cfg, "w") as f:
        f.write(config_toml(a))
    plan = os.path.join(work, "mlp.plan")
    subprocess.run([a.stretto_train, cfg, "--save-plan", plan, "--quiet"], check=True, env=env)
    out = os.path.join(work, "run")
    snapshots = {}
    done = 0
    for k in checkpoints:
        cmd = [a.stretto_run, plan, "--steps", str(k), "--out", out, "--quiet",
               "--executor", a.executor]
        cmd += ["--resume"] if done else ["--init-from", init_path]
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        snapshots[k] = read_safetensors(os.path.join(out, "model.safetensors"))
        done = k
    losses = []
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            losses.append(json.loads(line)["loss"])
    return losses, snapshots


def rel(a, b):
    """‖a − b‖ / ‖b‖ over a tensor (elementwise ratios blow up where Adam's
    update of a near-zero gradient is ±lr either way)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def add_smoke_argument(p):
    p.add_argument("--smoke", action="store_true",
                   help="a tiny size and few steps, files kept in a scratch folder (seconds)")


def smoke_work(a, name):
    """--smoke: the work folder (kept) in the smoke scratch folder."""
    if not a.work:  # fresh: stretto-run refuses an earlier run's checkpoints
        a.work = benchutil.fresh(os.path.join(benchutil.scratch(name), "work"))
    benchutil.refuse_committed(a.work)
    os.environ.update(benchutil.smoke_env(a.work))


def finish_arguments(p, a, name):
    """The MLP checks' --smoke: 10 steps, parameters compared every 5."""
    if a.smoke:
        a.steps, a.param_every = 10, 5
        smoke_work(a, name)


def add_arguments(p):
    """The model, the optimizer settings and the tolerances, shared."""
    p.add_argument("--stretto-train", default=benchutil.binary("stretto-train"))
    p.add_argument("--stretto-run", default=benchutil.binary("stretto-run"))
    add_smoke_argument(p)
    p.add_argument("--executor", default="compiled", choices=["compiled", "reference"])
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--param-every", type=int, default=10)
    p.add_argument("--inputs", type=int, default=16)
    p.add_argument("--hidden", type=int, nargs="+", default=[32, 32])
    p.add_argument("--classes", type=int, default=5)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    # 1e-6 rather than the usual 1e-8: large enough that putting it inside
    # the square root (eps-inside-sqrt) changes the parameters past the
    # tolerance, so the check sees the placement.
    p.add_argument("--eps", type=float, default=1e-6)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1)
    # f32 tolerances: measured 2.2e-7 (loss) and 1.5e-7 (parameters) over
    # 50 steps against optax on the compiled and the reference executor,
    # i.e. f32 rounding; each --mutate moves one of them past 1e-5.
    p.add_argument("--loss-tol", type=float, default=1e-5,
                   help="max |loss difference| / |loss| over all steps")
    p.add_argument("--param-tol", type=float, default=1e-5,
                   help="max ‖Δθ‖/‖θ‖ per tensor at every compared step")
    p.add_argument("--work", help="keep the files here (default: a temporary folder)")


def check(a, framework, train):
    """Runs Stretto and `train(a, init, batches) -> (losses, {step: params})`
    from the same weights on the same batches; prints the table; 0 if
    within the tolerances, else 1."""
    work = a.work or tempfile.mkdtemp(prefix="stretto-parity-")
    os.makedirs(work, exist_ok=True)
    try:
        init = initial_params(a)
        init_path = os.path.join(work, "init.safetensors")
        write_safetensors(init_path, init)
        data = SyntheticData(a.batch, a.inputs, a.classes, a.seed)
        batches = [data.batch(i) for i in range(a.steps)]  # step s reads train batch s-1
        checkpoints = sorted(set(list(range(a.param_every, a.steps + 1, a.param_every)) + [a.steps]))
        s_losses, s_params = run_stretto(a, work, init_path, checkpoints)
        o_losses, o_params = train(a, init, batches)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)

    if len(s_losses) != a.steps:
        print("FAIL: Stretto wrote %d losses for %d steps" % (len(s_losses), a.steps))
        return 1
    print("%s; %s executor; MLP %d-%s-%d, batch %d; AdamW lr %g betas (%g, %g) eps %g wd %g; "
          "%d steps" % (framework, a.executor, a.inputs, "-".join(map(str, a.hidden)), a.classes,
                        a.batch, a.lr, a.beta1, a.beta2, a.eps, a.weight_decay, a.steps))
    print("step | stretto loss | %s loss | rel diff | max param rel diff" % framework.split()[0])
    worst_loss, worst_param = 0.0, 0.0
    for s in range(1, a.steps + 1):
        ls, lo = s_losses[s - 1], o_losses[s - 1]
        d = abs(ls - lo) / abs(lo)
        worst_loss = max(worst_loss, d)
        line = "%4d | %.9f | %.9f | %.2e" % (s, ls, lo, d)
        if s in s_params:
            pd = max(rel(s_params[s][k], o_params[s][k]) for k in o_params[s])
            line += " | %.2e" % pd
            worst_param = max(worst_param, pd)
        print(line)
    first = abs(s_losses[0] - o_losses[0]) / abs(o_losses[0])
    print("first-step loss (same weights, same batch: the model and data match): rel diff %.2e"
          % first)
    print("max loss rel diff %.2e (tolerance %.0e); parameters at steps %s: max ‖Δθ‖/‖θ‖ "
          "%.2e (tolerance %.0e)" % (worst_loss, a.loss_tol, ",".join(map(str, sorted(s_params))),
                                     worst_param, a.param_tol))
    if getattr(a, "mutate", "none") != "none":
        print("%s side mutated: %s" % (framework.split()[0], a.mutate))
    ok = worst_loss <= a.loss_tol and worst_param <= a.param_tol
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


# --- The GPT (model kind "gpt") on a byte corpus --------------------------


VAL = 1  # Split::Val


class TokenData:
    """runtime/io/Data.cpp's TokenWindows over a byte corpus, in Python: the
    last floor(val_fraction·n) bytes are the validation split; row b of
    part p of step `index` (a micro-batch of B rows) is the window at offset
    draw(seed, split, index, p·B + b) mod (split length − T)."""

    def __init__(self, path, batch, seq, val_fraction, seed):
        self.tokens = np.frombuffer(open(path, "rb").read(), dtype=np.uint8).astype(np.int32)
        n = len(self.tokens)
        self.val_start = n - int(math.floor(val_fraction * n))
        self.B, self.T, self.seed = batch, seq, seed

    def batch(self, index, split=TRAIN, part=0):
        lo, hi = (0, self.val_start) if split == TRAIN else (self.val_start, len(self.tokens))
        windows = hi - lo - self.T
        x = np.empty((self.B, self.T), np.int32)
        y = np.empty((self.B, self.T), np.int32)
        for b in range(self.B):
            off = lo + draw(self.seed, split, index, part * self.B + b) % windows
            x[b] = self.tokens[off:off + self.T]
            y[b] = self.tokens[off + 1:off + self.T + 1]
        return x, y


def gpt_initial_params(a):
    """lib/Frontend/Import.cpp's GPT initialisation drawn with numpy (seed
    a.init_seed): normal(0, 0.02) matrices and embeddings, the residual
    projections at 0.02/sqrt(2·layers), zero biases, unit gains."""
    rng = np.random.default_rng(a.init_seed)
    d, L, V, T, F = a.d_model, a.layers, a.vocab, a.seq_len, 4 * a.d_model
    std, resid = 0.02, 0.02 / math.sqrt(2.0 * L)
    p = {}

    def normal(name, shape, s):
        p[name] = (rng.standard_normal(shape) * s).astype(np.float32)

    normal("wte", (V, d), std)
    normal("wpe", (T, d), std)
    for l in range(L):
        h = "h%d." % l
        for ln in ("ln1", "ln2"):
            p[h + ln + ".g"] = np.ones(d, np.float32)
            p[h + ln + ".b"] = np.zeros(d, np.float32)
        for name, shape, s in (("attn.qkv", (d, 3 * d), std), ("attn.proj", (d, d), resid),
                               ("mlp.fc", (d, F), std), ("mlp.proj", (F, d), resid)):
            normal(h + name + ".w", shape, s)
            p[h + name + ".b"] = np.zeros(shape[1], np.float32)
    p["ln_f.g"] = np.ones(d, np.float32)
    p["ln_f.b"] = np.zeros(d, np.float32)
    normal("head.w", (d, V), std)
    return p


def lr_multiplier(a, t):
    """The learning-rate multiplier of lib/Transforms/Optimizer.cpp at step
    t (1-based): linear warm-up, then cosine to min_lr_ratio (or constant)."""
    mult = min(1.0, t / a.warmup) if a.warmup > 0 else 1.0
    if a.schedule == "cosine":
        prog = min(1.0, max(0.0, (t - a.warmup) / (a.steps - a.warmup)))
        mult *= a.min_lr_ratio + (1.0 - a.min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * prog))
    return mult


def gpt_config_toml(a):
    ef = "ef_lambda = %r\n" % a.ef_lambda if a.mode == "delay-ef" else ""
    return f"""# Written by bench/parity (GPT)
[model]
kind = "gpt"
layers = {a.layers}
heads = {a.heads}
d_model = {a.d_model}
seq_len = {a.seq_len}
batch = {a.batch}
vocab = {a.vocab}
dtype = "{getattr(a, 'dtype', 'f32')}"

[train]
optimizer = "{getattr(a, 'optimizer', 'adamw')}"
lr = {a.lr!r}
muon_lr = {getattr(a, 'muon_lr', 0.02)!r}
muon_scale = "{getattr(a, 'muon_scale', 'shape')}"
muon_momentum = {getattr(a, 'muon_momentum', 0.95)!r}
beta1 = {a.beta1!r}
beta2 = {a.beta2!r}
eps = {a.eps!r}
weight_decay = {a.weight_decay!r}
grad_clip = 0.0
schedule = "{a.schedule}"
warmup_steps = {a.warmup}
min_lr_ratio = {a.min_lr_ratio!r}
steps = {a.steps}
seed = {a.seed}
stages = {a.stages}
micro_batches = {a.micro_batches}
sync = "{'sync' if a.mode == 'sync' else '2bw'}"
{ef}eval_interval = {a.eval_interval}
eval_batches = {a.eval_batches}
log_interval = 100000

[data]
path = "{os.path.abspath(a.corpus)}"
format = "text"
val_fraction = {a.val_fraction!r}
"""


def run_stretto_config(a, work, config_text, init_path, checkpoints):
    """Compiles `config_text` once into a plan and trains it from
    `init_path`, reading model.safetensors after each step in `checkpoints`
    (stretto-run --steps k, then --resume). Returns (losses per step,
    {step: params}, {step: val loss})."""
    cfg = os.path.join(work, "model.toml")
    with open(cfg, "w") as f:
        f.write(config_text)
    return run_stretto_model(a, work, cfg, [], init_path, checkpoints)


def run_stretto_model(a, work, model, overrides, init_path, checkpoints, name="run"):
    """run_stretto_config for a model file (.toml or .mlir) and
    `section.key=value` overrides."""
    env = dict(os.environ)
    env.setdefault("STRETTO_CACHE_DIR", os.path.join(work, "kernel-cache"))
    env.setdefault("OMP_NUM_THREADS", "1")
    cfg = model
    plan = os.path.join(work, name + ".plan")
    out = os.path.join(work, name)
    shutil.rmtree(out, ignore_errors=True)  # --work reused: a new run
    snapshots, done = {}, 0
    if getattr(a, "dtype", "f32") == "f64":
        # Plans are f32 (compiled runtime): f64 trains with stretto-train on
        # the reference executor, in one run, and compares the last step.
        subprocess.run([a.stretto_train, cfg] + overrides +
                       ["--precision", "f64", "--out", out, "--quiet", "--init-from", init_path],
                       check=True, env=env, stdout=subprocess.DEVNULL)
        snapshots[a.steps] = read_safetensors(os.path.join(out, "model.safetensors"))
        checkpoints = []
    else:
        subprocess.run([a.stretto_train, cfg] + overrides + ["--save-plan", plan, "--quiet"],
                       check=True, env=env)
    for k in checkpoints:
        cmd = [a.stretto_run, plan, "--steps", str(k), "--out", out, "--quiet",
               "--executor", a.executor]
        cmd += ["--resume"] if done else ["--init-from", init_path]
        subprocess.run(cmd, check=True, env=env, stdout=subprocess.DEVNULL)
        snapshots[k] = read_safetensors(os.path.join(out, "model.safetensors"))
        done = k
    losses, vals = [], {}
    with open(os.path.join(out, "metrics.jsonl")) as f:
        for line in f:
            row = json.loads(line)
            if "loss" in row:
                losses.append(row["loss"])
            if "val_loss" in row:
                vals[row["step"]] = row["val_loss"]
    return losses, snapshots, vals


def add_gpt_arguments(p):
    """The GPT checks' model, optimizer, mode and tolerance options."""
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--stretto-train", default=benchutil.binary("stretto-train"))
    p.add_argument("--stretto-run", default=benchutil.binary("stretto-run"))
    add_smoke_argument(p)
    p.add_argument("--executor", default="compiled", choices=["compiled", "reference"])
    p.add_argument("--dtype", default="f32", choices=["f32", "f64"],
                   help="f64: Stretto's reference executor and JAX in double precision")
    p.add_argument("--corpus", default=os.path.join(here, "..", "..", "data", "kjv.txt"))
    p.add_argument("--mode", default="sync", choices=["sync", "delay", "delay-ef"])
    p.add_argument("--ef-lambda", type=float, default=1.0)
    p.add_argument("--stages", type=int, default=1)
    p.add_argument("--micro-batches", type=int, default=1)
    p.add_argument("--steps", type=int, default=50)
    p.add_argument("--param-every", type=int, default=25)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--d-model", type=int, default=128)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--beta1", type=float, default=0.9)
    p.add_argument("--beta2", type=float, default=0.95)
    p.add_argument("--eps", type=float, default=1e-8)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--schedule", default="cosine", choices=["constant", "cosine"])
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--min-lr-ratio", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=1, help="data order (Stretto's train.seed)")
    p.add_argument("--init-seed", type=int, default=0, help="numpy seed of the initial weights")
    p.add_argument("--val-fraction", type=float, default=0.1)
    p.add_argument("--eval-interval", type=int, default=100000)
    p.add_argument("--eval-batches", type=int, default=8)
    # f32 tolerances (see README.md for the measured values).
    p.add_argument("--loss-tol", type=float, default=1e-4)
    p.add_argument("--param-tol", type=float, default=1e-4)
    p.add_argument("--full-curve", action="store_true",
                   help="train both for --steps and print the validation curves (no check); "
                        "under delay both validate x(t-1), the version the step read, as "
                        "Stretto does")
    p.add_argument("--optimizer", default="adamw", choices=["adamw", "muon"])
    p.add_argument("--muon-lr", type=float, default=0.01)
    p.add_argument("--muon-scale", default="rms", choices=["shape", "rms"])
    p.add_argument("--muon-momentum", type=float, default=0.95)
    p.add_argument("--work", help="keep the files here (default: a temporary folder)")


# --smoke's GPT: one layer (the framework's compile of the model is most of
# the time), in the mode with the most machinery (the delay, error
# feedback, 2 micro-batches), 10 steps, parameters compared at steps 5 and
# 10. (test/lit/Train/parity-optax-gpt.test runs 2 layers on 2 stages.)
GPT_SMOKE = dict(layers=1, d_model=16, heads=2, seq_len=8, batch=8, vocab=128, steps=10,
                 warmup=3, param_every=5, eps=1e-6, mode="delay-ef", ef_lambda=0.5, stages=1,
                 micro_batches=2)


def finish_gpt_arguments(p, a, name=None):
    if a.smoke:
        for k, v in GPT_SMOKE.items():
            setattr(a, k, v)
        smoke_work(a, name or os.path.splitext(os.path.basename(sys.argv[0]))[0])
    if a.dtype == "f64":
        a.executor = "reference"
    if a.batch % a.micro_batches:
        p.error("--micro-batches must divide --batch")
    if a.full_curve or a.dtype == "f64":
        a.snapshot_steps = {a.steps}
        a.checkpoints = [a.steps]
    else:
        a.checkpoints = sorted(set(list(range(a.param_every, a.steps + 1, a.param_every)) +
                                   [a.steps]))
        a.snapshot_steps = set(a.checkpoints)


def gpt_data(a):
    # One micro-batch is batch / micro_batches rows (lib/Frontend/Import.cpp).
    return TokenData(a.corpus, a.batch // a.micro_batches, a.seq_len, a.val_fraction, a.seed)


def opt_label(a):
    if getattr(a, "optimizer", "adamw") == "muon":
        return "Muon (muon_lr %g, scale %s; AdamW group)" % (a.muon_lr, a.muon_scale)
    return "AdamW"


def without_key_bias(name, v, d):
    """The key third of an attention qkv bias has a zero gradient in exact
    arithmetic (softmax is invariant to it): it follows rounding noise."""
    if name.endswith("attn.qkv.b"):
        return np.concatenate([v[:d], v[2 * d:]])
    return v


def gpt_check(a, framework, train):
    """Runs Stretto and `train(a, init, data) -> (losses, {step: params},
    {step: val loss})` from the same weights on the same batches; prints
    the table; 0 within the tolerances, else 1."""
    name = framework.split()[0]
    checkpoints = a.checkpoints
    work = a.work or tempfile.mkdtemp(prefix="stretto-parity-gpt-")
    os.makedirs(work, exist_ok=True)
    try:
        init = gpt_initial_params(a)
        init_path = os.path.join(work, "init.safetensors")
        write_safetensors(init_path, init, a.dtype)
        data = gpt_data(a)
        s_losses, s_params, s_vals = run_stretto_config(
            a, work, gpt_config_toml(a), init_path, checkpoints)
        o_losses, o_params, o_vals = train(a, init, data)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)

    mode = a.mode + (" lambda %g" % a.ef_lambda if a.mode == "delay-ef" else "")
    print("%s; %s executor; GPT %d layers, d %d, %d heads, T %d, batch %d x %d "
          "micro-batches, %d stage(s); %s lr %g (%s, warm-up %d) betas (%g, %g) eps %g wd %g; "
          "mode %s; %d steps" % (framework, a.executor, a.layers,
                                 a.d_model, a.heads, a.seq_len, a.batch, a.micro_batches, a.stages,
                                 opt_label(a), a.lr, a.schedule, a.warmup, a.beta1, a.beta2, a.eps,
                                 a.weight_decay, mode, a.steps))
    if len(s_losses) != a.steps:
        print("FAIL: Stretto wrote %d losses for %d steps" % (len(s_losses), a.steps))
        return 1
    if a.full_curve:
        print("step | stretto val | %s val" % name)
        for t in sorted(o_vals):
            print("%5d | %s | %.4f" % (t, "%.4f" % s_vals[t] if t in s_vals else "   -  ", o_vals[t]))
        k = max(1, a.steps // 10)
        print("train loss, mean of the last %d steps: stretto %.4f, %s %.4f"
              % (k, float(np.mean(s_losses[-k:])), name, float(np.mean(o_losses[-k:]))))
        return 0
    print("step | stretto loss | %s loss | rel diff | max param rel diff" % name)
    worst_loss, worst_param, worst_name = 0.0, 0.0, ""
    for t in range(1, a.steps + 1):
        ls, lo = s_losses[t - 1], o_losses[t - 1]
        d = abs(ls - lo) / abs(lo)
        worst_loss = max(worst_loss, d)
        line = "%4d | %.9f | %.9f | %.2e" % (t, ls, lo, d)
        if t in s_params:
            diffs = {k: rel(without_key_bias(k, s_params[t][k], a.d_model),
                            without_key_bias(k, o_params[t][k], a.d_model))
                     for k in o_params[t]}
            k = max(diffs, key=diffs.get)
            line += " | %.2e (%s)" % (diffs[k], k)
            if diffs[k] > worst_param:
                worst_param, worst_name = diffs[k], k
        print(line)
    first = abs(s_losses[0] - o_losses[0]) / abs(o_losses[0])
    print("first-step loss (same weights, same batch: the model and data match): rel diff %.2e"
          % first)
    print("max loss rel diff %.2e (tolerance %.0e); parameters at steps %s: max ‖Δθ‖/‖θ‖ %.2e "
          "in %s (tolerance %.0e)" % (worst_loss, a.loss_tol,
                                      ",".join(map(str, sorted(s_params))), worst_param,
                                      worst_name, a.param_tol))
    if a.mutate != "none":
        print("%s side mutated: %s" % (name, a.mutate))
    ok = worst_loss <= a.loss_tol and worst_param <= a.param_tol
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1
