#!/usr/bin/env bash
# Times kernel libraries against each other on one shape, in alternating
# rounds (A B C A B C ...), so that a drift of the GPU's clocks over the
# run lands on every library alike. Each run is one bench_bwd.py process
# timing the compiled op only; each output line is the library's name and
# the median time (and device memory beyond the outputs) of that run.
# Needs the torch extension built (scripts/gpu.sh's build step, or
# `cmake -S python -B build-py -G Ninja && cmake --build build-py`).
#
#   bash bench/compare-libs.sh ROUNDS SHAPE NAME=KERNEL_DIR...
#   bash bench/compare-libs.sh 3 B1 library=build/kernels \
#     no-reductions=diag/no-reductions no-scatter=diag/no-scatter
set -euo pipefail
cd "$(dirname "$0")/.."
usage="usage: bench/compare-libs.sh ROUNDS SHAPE NAME=KERNEL_DIR..."
rounds=${1:?$usage}
shape=${2:?$usage}
shift 2
[ $# -gt 0 ] || { echo "$usage" >&2; exit 1; }
export PYTHONPATH=$PWD/python
python3 -c "import smla._C" || { echo "the torch extension smla._C is not built" >&2; exit 1; }
for _ in $(seq "$rounds"); do
  for lib in "$@"; do
    name=${lib%%=*}
    dir=${lib#*=}
    [ -f "$dir/manifest.json" ] || { echo "$name: no manifest.json in $dir" >&2; exit 1; }
    line=$(SMLA_KERNEL_DIR=$(realpath "$dir") python3 bench/bench_bwd.py --shapes "$shape" \
      --backends compiled --no-compile --iters 10 2>&1 | grep -E "measured compiled|rror" |
      sed 's/ *measured compiled: *//' | tr '\n' ' ')
    echo "$name $shape $line"
  done
done
