#!/usr/bin/env bash
# Runs every test that needs no GPU: the lit/FileCheck suite of the compiler,
# the runtime's gtest suite, the CPU execution of the compiled IR against the
# reference, and the Python suite (reference, API, checked mode, replay).
# GPU tests skip cleanly here; scripts/gpu.sh runs them on an H200.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
bash scripts/build.sh
BUILD=${SMLA_BUILD_DIR:-build}

echo "== generated docs are current =="
bash scripts/gen-docs.sh --check
echo "== lit (compiler) =="
/usr/lib/llvm-22/bin/lit -sv "$BUILD/test"
echo "== ctest (runtime) =="
ctest --test-dir "$BUILD" --output-on-failure
echo "== torch extension smla._C (in place) =="
if [ ! -f build-py/build.ninja ]; then
  cmake -S python -B build-py -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DPython_EXECUTABLE="$(command -v python3)"
fi
cmake --build build-py
echo "== pytest (CPU execution of the lowered IR, Python package) =="
SMLA_OPT="$PWD/$BUILD/bin/smla-opt" PYTHONPATH="$PWD/python" \
  python3 -m pytest -q test/execution test/python
echo "== fuzz: the dump loader (smla.dump.load_call, replay's exit codes) =="
python3 test/fuzz/dump_header.py --seconds "${SMLA_FUZZ_SECONDS:-20}" \
  --seed "${SMLA_FUZZ_SEED:-0}"
