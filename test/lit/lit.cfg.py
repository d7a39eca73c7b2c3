# lit configuration for Stretto's IR tests (FileCheck and -verify-diagnostics).
import os
import lit.formats

config.name = "stretto"
config.test_format = lit.formats.ShTest(execute_external=False)
config.suffixes = [".mlir", ".toml", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.stretto_obj_root, "test", "lit")
config.excludes = ["Inputs", "lit.cfg.py", "lit.site.cfg.py", "CMakeLists.txt"]

config.environment["PATH"] = os.pathsep.join(
    [config.stretto_tools_dir, config.llvm_tools_dir, config.environment.get("PATH", os.environ["PATH"])])
config.substitutions.append(("%examples", os.path.join(config.stretto_src_root, "examples")))
config.substitutions.append(("%inputs", os.path.join(config.test_source_root, "Inputs")))

# Python is used by a few tests to make inputs and to check exported files;
# the product itself needs no Python. scripts/setup.sh puts the test-only
# packages (safetensors, numpy) in a virtual environment in the build
# folder: its interpreter runs them when it is there.
import shutil
import subprocess
import sys
python = os.path.join(config.stretto_obj_root, "pyenv", "bin", "python3")
if not os.path.exists(python):
    python = sys.executable
config.substitutions.append(("%python", python))
if subprocess.call([python, "-c", "import safetensors, numpy"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0:
    config.available_features.add("safetensors")
elif os.environ.get("STRETTO_REQUIRE_PYTHON_TESTS"):
    # CI: a test reported unsupported would hide a broken setup.
    lit_config.fatal("%s cannot import safetensors and numpy; run scripts/setup.sh %s"
                     % (python, config.stretto_obj_root))

# JAX and optax (optional, scripts/setup.sh tries them): the AdamW parity
# check against optax runs when they import, else it is unsupported.
if subprocess.call([python, "-c", "import jax, optax, numpy"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0:
    config.available_features.add("optax")
config.substitutions.append(("%bench", os.path.join(config.stretto_src_root, "bench")))

# PyTorch (optional, several GB; never installed by scripts/setup.sh): the
# exporter's tests (test/lit/Export, `REQUIRES: torch`) run with the first
# interpreter that imports torch: $STRETTO_TORCH_PYTHON, the tests' pyenv,
# or the interpreter running lit. Without one they are reported
# unsupported, never passed. %torch-python runs it with python/ (the
# `stretto` package) on its path.
torch_python = None
for candidate in [os.environ.get("STRETTO_TORCH_PYTHON"), python, sys.executable]:
    if candidate and subprocess.call([candidate, "-c", "import torch, numpy"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) == 0:
        torch_python = candidate
        config.available_features.add("torch")
        break
config.substitutions.append(("%torch-python", torch_python or "false"))
config.environment["PYTHONPATH"] = os.path.join(config.stretto_src_root, "python")
for var in ["STRETTO_TORCH_PYTHON"]:
    if var in os.environ:
        config.environment[var] = os.environ[var]

# Compiled kernels go to a cache inside the build tree, not the user's home.
config.environment["STRETTO_CACHE_DIR"] = os.path.join(config.test_exec_root, "kernel-cache")
