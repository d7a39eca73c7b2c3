"""What the bench scripts share: where the binaries are, the smoke mode's
scratch folder and tiny model, and how a script says "skipped".

Not a script: `import benchutil` from a script in bench/ (bench/ is the
script's own folder, so it is on sys.path; scripts in subfolders add it).

Smoke mode (`--smoke` on every bench script, run by ctest with the label
`bench-smoke`, bench/smoke/CMakeLists.txt): the script's own code path at
tiny sizes and steps, finishing in seconds, exiting non-zero on any failure
and writing only into a scratch folder, never over bench/results or docs.
A script that needs something missing here (root, PyTorch, JAX, a GPU)
prints "SKIPPED: why" and exits 77, which ctest reports as skipped.

Environment:
  STRETTO_BUILD      the build folder (default: build/ in the repository)
  STRETTO_SMOKE_DIR  the smoke mode's scratch folder (default: a new
                     temporary folder); ctest gives each test its own
"""
import os
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(os.environ.get("STRETTO_BUILD") or os.path.join(ROOT, "build"))
BIN = os.path.join(BUILD, "bin")
RESULTS = os.path.join(ROOT, "bench", "results")
DOCS = os.path.join(ROOT, "docs")
SKIP = 77

# The smoke mode's model: gpt-tiny's kind at a size whose kernels compile
# and train in a second or two (overrides for stretto-train and the
# benches that take them; bench/configs/smoke-*.toml for those that take a
# config file only). One name and vocabulary for every config it shrinks:
# the kernels' sources (hence the shared kernel cache's entries) then
# differ only where the training settings do, and compiling kernels is
# most of a smoke test's time.
SMOKE_MODEL = ["model.name=smoke", "model.layers=1", "model.heads=2", "model.d_model=16",
               "model.seq_len=8", "model.batch=4", "model.vocab=256"]


def smoke_model(overrides=()):
    """SMOKE_MODEL, with a layer per pipeline stage when `overrides` ask
    for train.stages=S > 1 (a stage holds at least one layer)."""
    stages = [int(x.split("=", 1)[1]) for x in overrides if x.startswith("train.stages=")]
    layers = max(stages + [1])
    return [x if not x.startswith("model.layers=") else "model.layers=%d" % layers
            for x in SMOKE_MODEL]


def smoke_dims():
    """The smoke model's {key: int} (layers, heads, d_model, ...)."""
    return {x.split("=")[0][6:]: int(x.split("=")[1]) for x in SMOKE_MODEL
            if x.split("=")[1].isdigit()}
SMOKE_CONFIG = os.path.join(ROOT, "bench", "configs", "smoke-gpt.toml")
SMOKE_PIPE_CONFIG = os.path.join(ROOT, "bench", "configs", "smoke-pipe.toml")


def binary(name):
    """build/bin/NAME (or $STRETTO_BUILD/bin/NAME)."""
    return os.path.join(BIN, name)


def require(*names):
    """Exits 1 (a failure, not a skip: the build made them) when a binary is missing."""
    missing = [n for n in names if not os.access(binary(n), os.X_OK)]
    if missing:
        sys.exit("error: %s missing in %s: build first (make build, or cmake --build %s)"
                 % (", ".join(missing), BIN, os.path.relpath(BUILD, os.getcwd())))


def skip(why):
    """Prints why and exits 77: ctest's SKIP_RETURN_CODE, never a pass."""
    print("SKIPPED: " + why, flush=True)
    sys.exit(SKIP)


def scratch(name):
    """The smoke mode's output folder for NAME: $STRETTO_SMOKE_DIR/NAME, or
    a new temporary folder. Never inside bench/results or docs."""
    base = os.environ.get("STRETTO_SMOKE_DIR")
    if base:
        path = os.path.join(os.path.abspath(base), name)
        os.makedirs(path, exist_ok=True)
    else:
        path = tempfile.mkdtemp(prefix="stretto-smoke-%s-" % name)
    refuse_committed(path)
    return path


def refuse_committed(path):
    """A smoke run must not write over committed results or pages."""
    p = os.path.realpath(path)
    for guarded in (RESULTS, DOCS):
        g = os.path.realpath(guarded)
        if p == g or p.startswith(g + os.sep):
            sys.exit("error: a smoke run would write into %s" % os.path.relpath(path, ROOT))


def fresh(path):
    """An empty folder at `path` (removed first when it exists): a run's
    --out, so that no run meets an earlier run's files."""
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def smoke_env(scratch_dir, threads=1):
    """The environment of a smoke run's children: few threads, and a
    kernel cache that the smoke tests share (atomic writes: runtime/exec/
    JitCache.h) unless STRETTO_CACHE_DIR is set."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    if "STRETTO_CACHE_DIR" not in env:
        base = os.environ.get("STRETTO_SMOKE_DIR")
        env["STRETTO_CACHE_DIR"] = os.path.join(os.path.abspath(base) if base else scratch_dir,
                                                "kernel-cache")
    return env


def check(ok, what):
    """A smoke check: prints it, and exits 1 when it fails."""
    print("%s: %s" % ("ok" if ok else "FAILED", what), flush=True)
    if not ok:
        sys.exit(1)
