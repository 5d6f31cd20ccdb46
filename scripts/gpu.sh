#!/usr/bin/env bash
# The GPU command: on an H200 machine with PyTorch, nvcc, CMake, ninja and
# compute-sanitizer (no LLVM, no network needed), given the kernel library
# built on a CPU machine (scripts/build.sh smla-kernels -> build/kernels):
#   1. builds the runtime's GPU smoke test (SMLA_RUNTIME_GPU_TESTS: a cubin
#      loaded and launched through a manifest by the driver API) and runs it
#      (on this machine a skip, exit 77, is a failure), and builds the torch
#      extension against this torch,
#   2. runs the GPU test suite (compiled vs reference, opcheck, graphs, the
#      output guards, a q beyond 2^31 elements, ...) and replays a synthetic
#      dump of the reported GLM-5.2 event,
#   3. runs compute-sanitizer memcheck/racecheck/initcheck on a reduced suite
#      that still holds every kind of invalid index,
#   4. runs the benchmarks (docs/performance.md shapes, peers in the same process),
# writes logs and JSON to OUT and prints a summary table last.
#
#   bash scripts/gpu.sh OUT [KERNEL_DIR]        (KERNEL_DIR: build/kernels)
#   SMLA_GPU_STEPS="runtime tests replay sanitize bench" selects steps; SMLA_BENCH_SHAPES
#   selects shapes (default: B2 B2r B1 B3). With SMLA_TILELANG_EXAMPLE set
#   (and tilelang importable), the benchmarks time TileLang's example too
#   (bench/tilelang_peer.py says what to point it at).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${1:?usage: scripts/gpu.sh OUT [KERNEL_DIR]}
KDIR=$(realpath "${2:-build/kernels}")
STEPS=${SMLA_GPU_STEPS:-runtime tests replay sanitize bench}
mkdir -p "$OUT"
export SMLA_KERNEL_DIR="$KDIR" PYTHONPATH="$PWD/python" PYTHONUNBUFFERED=1 SMLA_REQUIRE_GPU=1
source scripts/steps.sh

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/gpu.txt" 2>&1
python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' >>"$OUT/gpu.txt"
[ -f "$KDIR/manifest.json" ] || { echo "no manifest.json in $KDIR" | tee "$OUT/summary.txt"; exit 1; }

if [[ " $STEPS " == *" runtime "* ]]; then
  step runtime-gpu runtime-gpu.log runtime_gpu
fi

# The compiler smla/_extension.py would take: one with a shared libstdc++
# (python/CMakeLists.txt refuses one without).
cxx_arg() {
  python3 -c 'from smla._extension import _cxx_compiler as c; x = c(); print(f"-DCMAKE_CXX_COMPILER={x}" if x else "")'
}
build_ext() {
  local cxx
  cxx=$(cxx_arg) &&
  cmake -S python -B build-py -G Ninja -DCMAKE_BUILD_TYPE=Release $cxx \
    -DPython_EXECUTABLE="$(command -v python3)" -DSMLA_KERNEL_DIR="$KDIR" &&
    cmake --build build-py -j "$(nproc)"
}
step build build.log build_ext

if [[ " $STEPS " == *" tests "* ]]; then
  step tests tests.log python3 -m pytest -q -rs test/python \
    --junitxml="$OUT/tests.xml"
fi
if [[ " $STEPS " == *" replay "* ]]; then
  # The reported event: one context-parallel rank (of 4) of GLM-5.2, H=16,
  # 512+64, top-k 2048, -1 padding for early tokens, dead rows with
  # lse = +inf/-inf/NaN; compiled vs reference, 0 NaN/Inf required.
  replay() {
    python3 -m smla.synthetic "$OUT/glm52_dump.pt" --kv 16384 --topk 2048 --device cuda &&
      python3 -m smla.replay "$OUT/glm52_dump.pt" --backend compiled
  }
  step replay replay.log replay
  rm -f "$OUT/glm52_dump.pt"
fi
if [[ " $STEPS " == *" sanitize "* ]]; then
  # memcheck on every configuration; racecheck and initcheck, much slower,
  # on the first SMLA_SANITIZE_LIMIT (default 4).
  slow_limit=${SMLA_SANITIZE_LIMIT:-4}
  for tool in memcheck racecheck initcheck; do
    limit=1000; [ "$tool" != memcheck ] && limit=$slow_limit
    export SMLA_SANITIZE_LIMIT=$limit
    step "sanitize-$tool" "sanitize-$tool.log" \
      compute-sanitizer --tool "$tool" --error-exitcode 3 --target-processes all \
      python3 scripts/sanitizer_cases.py
  done
fi
if [[ " $STEPS " == *" bench "* ]]; then
  peer=()
  [ -n "${SMLA_TILELANG_EXAMPLE:-}" ] && peer=(--tilelang tilelang_peer:sparse_mla_bwd)
  for shape in ${SMLA_BENCH_SHAPES:-B2 B2r B1 B3}; do
    step "bench-$shape" "bench.log" python3 bench/bench_bwd.py --shapes "$shape" \
      --json "$OUT/bench-$shape.json" "${peer[@]}"
  done
  step plot bench.log python3 bench/plot.py "$OUT/bench.png" "$OUT"/bench-*.json
fi

summary
if ls "$OUT"/bench-*.json >/dev/null 2>&1; then
  echo | tee -a "$OUT/summary.txt"
  python3 bench/plot.py --table "$OUT"/bench-*.json | tee -a "$OUT/summary.txt"
fi
grep -q FAILED "$OUT/summary.txt" && exit 1 || exit 0
