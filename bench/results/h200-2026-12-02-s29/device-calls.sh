#!/bin/bash
# The twenty-ninth session's device calls (experiments.txt), run on the
# device machine from the repository root: bash device-calls.sh N.
# Libraries (carried):
#   new     build/kernels (HEAD's library)
#   nored   scratch/diag/no-reductions: every dKV reduction predicated off
#           at run time, the products kept (bench/diagnostic-libs.sh)
#   noscat  scratch/diag/no-scatter: the dKV products gone too
# The diagnostic libraries' dkv is wrong: timed, never tested.
# scratch/tl (carried, not in the repository) for the TileLang peer:
#   tlsite.tar.xz         bench/tilelang-site.sh scratch/tl/tlsite.tar.xz
#                         (tilelang 0.1.15 and its dependencies)
#   tl_sparse_mla_bwd.py  the three kernels (preprocess, bwd, postprocess)
#                         of TileLang's examples/deepseek_v32/sparse_mla_bwd.py
#                         at 0a81280, as in the twenty-seventh session
#   utils.py              a stand-in for the example's utils import (its
#                         assert_tensors_similar, which the peer never calls)
set -u
call=$1
T0=$SECONDS
. bench/device-calls-lib.sh
lib() { case $1 in nored) echo $PWD/scratch/diag/no-reductions ;; noscat) echo $PWD/scratch/diag/no-scatter ;; *) echo $PWD/build/kernels ;; esac; }
tl() {
  [ -d /tmp/tlsite ] || tar -xJf scratch/tl/tlsite.tar.xz -C /tmp
  export SMLA_TILELANG_EXAMPLE=$PWD/scratch/tl/tl_sparse_mla_bwd.py
  export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  export PYTHONPATH=$PWD/python:/tmp/tlsite:$PWD/bench
}
harness() { # shape...: the whole harness, one process per shape; TileLang
  # only where the shape has no query positions (B3 has them)
  for s in "$@"; do
    local peer="--tilelang tilelang_peer:sparse_mla_bwd"
    [ $s = B3 ] && peer=""
    SMLA_KERNEL_DIR=$(lib new) timeout 290 python3 bench/bench_bwd.py --shapes $s \
      $peer --json $OUT/bench-$s.json > $OUT/bench-$s.txt 2>&1
    echo "harness $s rc=$? $((SECONDS-T0))s"; grep -E "device|TFLOP|MiB|rror" $OUT/bench-$s.txt | tail -9
  done
}
case $call in
1) # the bounds: each shape against the two diagnostic libraries,
   # alternating rounds (B1 and B2 three, B2r and B3 one)
  binding
  rounds 3 300 B1 new nored noscat
  rounds 3 450 B2 new nored noscat
  rounds 1 540 B2r new nored noscat
  rounds 1 570 B3 new nored noscat
  cat $OUT/bench.txt ;;
2) # HEAD's binding (tokenRowBytes shared by the pairs' rows and the sorted
   # walk's sort space): the GPU tests and the GLM-5.2 replay
  SMLA_GPU_STEPS="tests replay" bash scripts/gpu.sh $OUT/gpu build/kernels > $OUT/gpu.txt 2>&1
  echo "gpu.sh rc=$? $((SECONDS-T0))s"; tail -14 $OUT/gpu.txt
  # then ncu on B1's launch, the library and the kernel without its scatter
  profile new B1 "h64_g1_b64_s2_base2.*_bwd" B1-new
  profile noscat B1 "h64_g1_b64_s2_base2.*_bwd" B1-noscat
  for n in new noscat; do grep -E "Duration|Executed Instructions  |Issued Ipc|Eligible Warps|No Eligible|Registers Per|Achieved Occ" $OUT/ncu-B1-$n-details.txt | head -9; done ;;
4|5) # the harness with every peer, one process per shape (TileLang where
   # the shape has no query positions): 4 B1 B2, 5 B2r (not run: device time)
  binding; tl
  if [ $call = 4 ]; then harness B1 B2; else harness B2r; fi ;;
3) # HEAD's binding under compute-sanitizer (memcheck, racecheck, initcheck)
  SMLA_GPU_STEPS="sanitize" bash scripts/gpu.sh $OUT/gpu build/kernels > $OUT/gpu.txt 2>&1
  echo "gpu.sh rc=$? $((SECONDS-T0))s"; tail -8 $OUT/gpu.txt ;;
esac
