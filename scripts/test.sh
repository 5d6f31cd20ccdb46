#!/usr/bin/env bash
# Runs every test that needs no GPU: the lit/FileCheck suite of the compiler,
# the runtime's gtest suite and a fuzzing run of its parsers, then builds the
# distribution (scripts/dist.sh), installs it into a fresh virtual
# environment and runs the CPU execution of the compiled IR against the
# reference and the Python suite against the installed package (its
# extension built on first use, as on a user's machine), and last a fuzzing
# run of the dump loader. GPU tests skip cleanly here; scripts/gpu.sh and
# scripts/gpu-install-check.sh run them on an H200.
# SMLA_FUZZ_RUNTIME_SECONDS (60) and SMLA_FUZZ_DUMP_SECONDS (20) set the
# fuzzing times.
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
echo "== fuzz (the runtime's manifest, JSON and grid-rule parsers, 60 s) =="
bash scripts/fuzz-runtime.sh "${SMLA_FUZZ_RUNTIME_SECONDS:-60}" 2>&1 | tail -n 8
echo "== distribution (scripts/dist.sh) =="
bash scripts/dist.sh "$BUILD/dist"
echo "== install into a fresh virtual environment =="
# torch comes from the system's site-packages (PyPI's is large); the package
# is importable only from this environment's install. --no-deps: torch is
# present, and pip would otherwise check torch's own dependencies against
# the environment's bundled setuptools.
VENV="$PWD/$BUILD/ci-venv"
rm -rf "$VENV" "$BUILD/ci-cache"
python3 -m venv --system-site-packages "$VENV"
VERSION=$(python3 -c 'exec(open("python/smla/_version.py").read()); print(__version__)')
"$VENV/bin/python" -m pip install -q --no-index --no-deps \
  "$BUILD/dist/smla-$VERSION-py3-none-any.whl"
export SMLA_CACHE_DIR="$PWD/$BUILD/ci-cache"
command -v ccache >/dev/null && export CMAKE_CXX_COMPILER_LAUNCHER=ccache
(cd / && "$VENV/bin/python" -m smla.info) | grep -v '^    d='
echo "== pytest against the installed package (CPU execution of the lowered IR, Python) =="
SMLA_EXPECT_INSTALLED=1 SMLA_OPT="$PWD/$BUILD/bin/smla-opt" \
  SMLA_TEST_COMPILER="$PWD/$BUILD/bin/smla-compile" \
  "$VENV/bin/python" -m pytest -q test/execution test/python
echo "== fuzz: the dump loader (smla.dump.load_call, replay's exit codes), 20 s =="
python3 test/fuzz/dump_header.py --seconds "${SMLA_FUZZ_DUMP_SECONDS:-20}" \
  --seed "${SMLA_FUZZ_SEED:-0}"
