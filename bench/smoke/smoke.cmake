# Every bench script's smoke mode as a ctest, labelled bench-smoke: the
# script's own code path at a tiny size, a few seconds each, failing on any
# error; scripts that need root, PyTorch, JAX or a GPU exit 77 where those
# are missing (reported skipped, never passed). Outputs go to
# BUILD/bench-smoke/<name>, never to bench/results or docs.
#   ctest --test-dir build -L bench-smoke -j2
# Included from test/CMakeLists.txt (after enable_testing()).
set(STRETTO_BENCH_DIR ${PROJECT_SOURCE_DIR}/bench)
set(STRETTO_SMOKE_DIR ${PROJECT_BINARY_DIR}/bench-smoke)
# The tests' Python: scripts/setup.sh's environment (numpy, safetensors,
# JAX where it installed) when it is there, else the one CMake found.
if(EXISTS ${PROJECT_BINARY_DIR}/pyenv/bin/python3)
  set(STRETTO_BENCH_PYTHON ${PROJECT_BINARY_DIR}/pyenv/bin/python3)
else()
  set(STRETTO_BENCH_PYTHON ${Python3_EXECUTABLE})
endif()
# The PyTorch smokes' Python: setup.sh installs no PyTorch (several GB), so
# they are skipped unless this names an interpreter that imports torch
# (and numpy), e.g. -DSTRETTO_TORCH_PYTHON=/path/to/venv/bin/python3.
set(STRETTO_TORCH_PYTHON ${STRETTO_BENCH_PYTHON} CACHE FILEPATH
    "Python with torch and numpy for the bench-smoke PyTorch tests")

function(stretto_bench_smoke name)
  add_test(NAME bench-smoke-${name} COMMAND ${ARGN}
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(bench-smoke-${name} PROPERTIES
    LABELS bench-smoke
    SKIP_RETURN_CODE 77
    TIMEOUT 600
    ENVIRONMENT "STRETTO_BUILD=${PROJECT_BINARY_DIR};STRETTO_SMOKE_DIR=${STRETTO_SMOKE_DIR};STRETTO_CACHE_DIR=${STRETTO_SMOKE_DIR}/kernel-cache;PYTHONUNBUFFERED=1;OMP_NUM_THREADS=1")
endfunction()

set(PY ${STRETTO_BENCH_PYTHON})
set(B ${STRETTO_BENCH_DIR})
stretto_bench_smoke(hostinfo ${PY} ${B}/hostinfo.py --smoke)
stretto_bench_smoke(corpus_stats ${PY} ${B}/corpus_stats.py --smoke)
stretto_bench_smoke(kernel_bench ${PY} ${B}/kernel_bench.py --smoke --no-torch)
stretto_bench_smoke(kernel_bench-torch ${STRETTO_TORCH_PYTHON} ${B}/kernel_bench.py --smoke)
stretto_bench_smoke(train_run ${PY} ${B}/train_run.py --smoke)
stretto_bench_smoke(pipeline_bench ${PY} ${B}/pipeline_bench.py --smoke)
stretto_bench_smoke(pipeline_stages ${PY} ${B}/pipeline_stages.py --smoke)
stretto_bench_smoke(pipeline_experiment ${PY} ${B}/pipeline_experiment.py --smoke)
stretto_bench_smoke(pipeline_experiment_tiny ${PY} ${B}/pipeline_experiment_tiny.py --smoke)
stretto_bench_smoke(gossip_experiment ${PY} ${B}/gossip_experiment.py --smoke)
stretto_bench_smoke(gossip_experiment_tiny ${PY} ${B}/gossip_experiment_tiny.py --smoke)
stretto_bench_smoke(tune_bench ${PY} ${B}/tune_bench.py --smoke)
stretto_bench_smoke(dist_bench-throughput ${PY} ${B}/dist/dist_bench.py throughput --smoke)
# Root, iproute2 and tc (network namespaces, shaped links); else skipped.
stretto_bench_smoke(dist_bench-network ${PY} ${B}/dist/dist_bench.py network --smoke)
# JAX + optax (scripts/setup.sh installs them into build/pyenv); PyTorch
# (not installed by setup.sh); each skipped where missing.
foreach(check optax_adamw optax_gpt)
  stretto_bench_smoke(parity-${check} ${PY} ${B}/parity/${check}.py --smoke)
endforeach()
foreach(check torch_adamw torch_gpt)
  stretto_bench_smoke(parity-${check} ${STRETTO_TORCH_PYTHON} ${B}/parity/${check}.py --smoke)
endforeach()
# The C++ benches (bench/CMakeLists.txt) check nothing themselves: this
# driver runs each at a tiny size and checks what they print and write.
foreach(cxx train pipeline gossip)
  stretto_bench_smoke(cxx-${cxx} ${PY} ${B}/smoke/cxx_benches.py ${cxx})
endforeach()
# The GPU kit without a GPU: bundle.sh packs tiny plans into the scratch
# folder; device-check.sh --dry-run runs its logic on them with the CPU in
# the GPU's place (the comparisons included, and a mutated run they must
# catch) and says which GPU-only parts it left out.
stretto_bench_smoke(gpu-bundle ${B}/gpu/bundle.sh --smoke ${STRETTO_SMOKE_DIR}/gpu)
stretto_bench_smoke(gpu-device-check ${B}/gpu/device-check.sh --dry-run ${STRETTO_SMOKE_DIR}/gpu)
# The GPU speed bench on that bundle: Stretto on the CPU (and PyTorch on the
# CPU where it imports) at the smoke size, checks of its own output; then
# on-device.sh --dry-run, the GPU session's one script, with its phases.
# They share the bundle's folder (device-check.sh unpacks it in place and
# rewrites DIR/gpu-results): one at a time.
stretto_bench_smoke(gpu-speed ${PY} ${B}/gpu/speed.py --smoke --no-torch
                    --bundle ${STRETTO_SMOKE_DIR}/gpu/gpu-bundle)
stretto_bench_smoke(gpu-speed-torch ${STRETTO_TORCH_PYTHON} ${B}/gpu/speed.py --smoke
                    --bundle ${STRETTO_SMOKE_DIR}/gpu/gpu-bundle)
stretto_bench_smoke(gpu-on-device env PYTHON=${PY} ${B}/gpu/on-device.sh --dry-run ${STRETTO_SMOKE_DIR}/gpu)
set_tests_properties(bench-smoke-gpu-bundle PROPERTIES FIXTURES_SETUP gpu-bundle)
set_tests_properties(bench-smoke-gpu-device-check bench-smoke-gpu-speed bench-smoke-gpu-speed-torch
                     bench-smoke-gpu-on-device PROPERTIES FIXTURES_REQUIRED gpu-bundle
                     RESOURCE_LOCK gpu-bundle-folder)
stretto_bench_smoke(gpu-cost_model ${PY} ${B}/gpu/cost_model.py --smoke)
