#!/usr/bin/env bash
# Installs what building and testing smla needs on a fresh Debian 12 machine:
# LLVM/MLIR 22 (compiler), CMake/Ninja/GoogleTest (build, runtime tests),
# clang with libFuzzer (fuzzing the runtime's parsers) and
# PyTorch/numpy/pytest (reference, binding, execution tests). Idempotent.
set -euo pipefail

need_apt=()
for pkg in libmlir-22-dev mlir-22-tools llvm-22-dev llvm-22-tools cmake ninja-build g++ libgtest-dev \
    clang libclang-rt-14-dev; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
if [ "${#need_apt[@]}" -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${need_apt[@]}"
fi

PY=${PYTHON:-python3}
need_pip=()
for mod in torch numpy pytest; do
  $PY -c "import $mod" >/dev/null 2>&1 || need_pip+=("$mod")
done
if [ "${#need_pip[@]}" -gt 0 ]; then
  $PY -m pip install -q "${need_pip[@]}"
fi
# cuobjdump and the nvdisasm it runs (the SASS of the library's cubins:
# scripts/spill_sites.py, test/Target/spill-sites.mlir), as NVIDIA's wheels
# where the CUDA toolkit here lacks them.
if ! $PY "$(dirname "$0")/spill_sites.py" --find >/dev/null 2>&1; then
  $PY -m pip install -q nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
fi
