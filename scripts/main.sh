#!/usr/bin/env bash
# The main job: install, build, run the full compiler pipeline on the shipped
# GLM-5.2 example, run the CPU execution check, and, on a machine with a GPU,
# replay a GLM-5.2-shaped backward against the reference.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
BUILD=${SMLA_BUILD_DIR:-build}
OPT="$BUILD/bin/smla-opt"

echo "== guarded tile IR of examples/glm52_bwd.mlir =="
"$OPT" --smla-guarded examples/glm52_bwd.mlir -o "$BUILD/glm52_guarded.mlir"
grep -c "smla.index_mask" "$BUILD/glm52_guarded.mlir" | sed 's/^/index masks: /'
echo "== CPU pipeline (LLVM dialect) =="
"$OPT" --smla-cpu examples/glm52_bwd.mlir -o "$BUILD/glm52_cpu.mlir"
echo "wrote $BUILD/glm52_cpu.mlir"

echo "== CPU execution check against the reference =="
SMLA_OPT="$PWD/$OPT" PYTHONPATH="$PWD/python" python3 -m pytest -q test/execution

if python3 -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  echo "== GPU: kernel library, extension, GLM-5.2-shaped replay (compiled vs reference) =="
  bash scripts/build.sh smla-kernels
  # A compiler with a shared libstdc++, as smla/_extension.py picks one.
  CXX_ARG=$(PYTHONPATH="$PWD/python" python3 -c 'from smla._extension import _cxx_compiler as c; x = c(); print(f"-DCMAKE_CXX_COMPILER={x}" if x else "")')
  cmake -S python -B build-py -G Ninja -DCMAKE_BUILD_TYPE=Release $CXX_ARG \
    -DPython_EXECUTABLE="$(command -v python3)" -DSMLA_KERNEL_DIR="$PWD/$BUILD/kernels"
  cmake --build build-py
  # One context-parallel rank of 4 of a 16384-token sequence: T=4096, top-k 2048.
  PYTHONPATH="$PWD/python" python3 -m smla.synthetic "$BUILD/glm52_dump.pt" \
    --kv 16384 --topk 2048 --device cuda
  SMLA_KERNEL_DIR="$PWD/$BUILD/kernels" PYTHONPATH="$PWD/python" \
    python3 -m smla.replay "$BUILD/glm52_dump.pt" --backend compiled
else
  echo "== no GPU: synthetic GLM-5.2-shaped call, fp32 reference vs float64 =="
  PYTHONPATH="$PWD/python" python3 -m smla.synthetic "$BUILD/glm52_dump.pt" \
    --tokens 64 --kv 1024 --topk 256
  PYTHONPATH="$PWD/python" python3 -m smla.replay "$BUILD/glm52_dump.pt" \
    --backend reference --device cpu
fi
