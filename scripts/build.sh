#!/usr/bin/env bash
# Configures and builds the compiler (smla-opt), the runtime and its tests
# into build/. MLIR 22 comes from the Debian packages (install-deps.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${SMLA_BUILD_DIR:-build}
if [ ! -f "$BUILD/build.ninja" ]; then
  cmake -G Ninja -S . -B "$BUILD" \
    -DCMAKE_BUILD_TYPE=Release \
    -DMLIR_DIR=/usr/lib/llvm-22/lib/cmake/mlir \
    -DLLVM_EXTERNAL_LIT=/usr/lib/llvm-22/bin/lit
fi
ninja -C "$BUILD" "$@"
