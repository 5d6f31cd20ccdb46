#!/bin/bash
# Builds the measurement libraries behind the bounds in docs/performance.md
# ("Why B2 and B1 stay short"): build/kernels' configurations compiled again
# with --smla-diagnostic-dkv=no-reductions (every dKV reduction predicated
# off at run time, the products kept) and =no-scatter (the products gone
# too), into OUT/no-reductions and OUT/no-scatter. Their dkv is wrong: time
# them, never test them. Needs a configured build (scripts/build.sh).
#   bash bench/diagnostic-libs.sh OUT
set -euo pipefail
out=${1:?usage: bench/diagnostic-libs.sh OUT}
cd "$(dirname "$0")/.."
# The kernel library's smla-compile command, as CMake wrote it.
cmd=$(grep -m1 -o 'smla-compile -o [^&]*' build/build.ninja)
[ -n "$cmd" ] || { echo "no smla-compile command in build/build.ninja" >&2; exit 1; }
ninja -C build smla-compile > /dev/null
for mode in no-reductions no-scatter; do
  args=${cmd#smla-compile -o * }
  rm -rf "$out/$mode"
  # The switched-off predicate moves ptxas's register allocation: a kernel
  # may spill a few bytes more than its max_spill, which a measurement
  # accepts (each kernel's .ptxas.txt says how much).
  eval "build/bin/smla-compile -o '$out/$mode' $args --allow-spills --smla-diagnostic-dkv=$mode"
  echo "$out/$mode: $(ls "$out/$mode"/*.cubin | wc -l) cubins"
done
