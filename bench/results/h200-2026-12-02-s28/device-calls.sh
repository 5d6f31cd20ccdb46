#!/bin/bash
# The twenty-eighth session's device calls (experiments.txt), run on the
# device machine from the repository root: bash device-calls.sh N.
# Libraries (carried):
#   new    build/kernels: the pair kernel's CTA barrier before its dq store,
#          the union kernel's pair_width (rows of W >= 2K slots)
#   oldws  scratch/s28/oldk: HEAD's (9fe4d30) cubins, built by smla-compile
#          with HEAD's GpuMap.cpp and LowerPairUnion.cpp; run with
#          SMLA_PAIRS_ROWS=workspace (its union kernel writes rows of 2K)
#   newws  build/kernels with SMLA_PAIRS_ROWS=workspace
# scratch/tl: the TileLang peer (see the twenty-seventh session's script).
set -u
call=$1
T0=$SECONDS
. bench/device-calls-lib.sh
lib() { case $1 in oldws) echo $PWD/scratch/s28/oldk ;; *) echo $PWD/build/kernels ;; esac; }
runv() { # name shapes: run() with the name's rows placement
  case $1 in *ws) export SMLA_PAIRS_ROWS=workspace ;; *) export SMLA_PAIRS_ROWS=dq ;; esac
  run $1 "$2"; unset SMLA_PAIRS_ROWS
}
roundsv() { # n limit shapes name...
  local n=$1 limit=$2 shapes=$3; shift 3
  for i in $(seq $n); do for l in "$@"; do [ $((SECONDS-T0)) -lt $limit ] && runv $l "$shapes"; done; done
}
tl() {
  [ -d /tmp/tlsite ] || tar -xJf scratch/tl/tlsite.tar.xz -C /tmp
  export SMLA_TILELANG_EXAMPLE=$PWD/scratch/tl/tl_sparse_mla_bwd.py
  export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  export PYTHONPATH=$PWD/python:/tmp/tlsite:$PWD/bench
}
harness() { # shape...: the whole harness (TileLang where set), one process per shape
  for s in "$@"; do
    SMLA_KERNEL_DIR=$(lib new) timeout 400 python3 bench/bench_bwd.py --shapes $s \
      ${SMLA_TILELANG_EXAMPLE:+--tilelang tilelang_peer:sparse_mla_bwd} --json $OUT/bench-$s.json > $OUT/bench-$s.txt 2>&1
    echo "harness $s rc=$? $((SECONDS-T0))s"; grep -E "device|TFLOP|MiB|rror" $OUT/bench-$s.txt | tail -9
  done
}
case $call in
1) # the new library's GPU validation (tests, replay, sanitizers), then
   # B2 in alternating rounds: old cubins / new cubins with the rows in a
   # workspace / new cubins with the rows in dq
  binding
  SMLA_GPU_STEPS="tests replay sanitize" bash scripts/gpu.sh $OUT/gpu build/kernels > $OUT/gpu.txt 2>&1
  echo "gpu.sh rc=$? $((SECONDS-T0))s"; tail -14 $OUT/gpu.txt
  roundsv 3 520 B2 oldws newws new
  cat $OUT/bench.txt ;;
2) # B3 in alternating rounds as call 1's B2; the extra memory of B1 and
   # B2r; the harness on B2 with the TileLang peer
  binding
  roundsv 3 300 B3 oldws newws new
  runv new B1; runv new B2r
  cat $OUT/bench.txt
  tl; harness B2 ;;
3) # the harness with every peer (TileLang where the shape has no query
   # positions) on the other shapes: their times and extra memory
  binding; tl; harness B3 B1 B2r ;;
4) # the sorted walk sorting into the outputs' memory (binding only, the
   # same cubins): the GPU tests, memcheck and initcheck on the sorted walk
   # in chunks of 2 tokens (H = 16), B2r's time and memory
  binding
  tests new
  for tool in memcheck initcheck; do
    SMLA_WALK=sorted SMLA_WALK_CHUNK_TOKENS=2 SMLA_WALK_PERIOD=7 SMLA_SANITIZE_HEADS=16 \
      SMLA_KERNEL_DIR=$(lib new) timeout 120 compute-sanitizer --tool $tool --error-exitcode 3 \
      python3 scripts/sanitizer_cases.py > $OUT/sorted-$tool.txt 2>&1
    echo "sorted $tool rc=$?"; grep -E "configurations|ERROR SUMMARY" $OUT/sorted-$tool.txt | tail -2
  done
  runv new B2r; runv new B2r
  cat $OUT/bench.txt ;;
esac
