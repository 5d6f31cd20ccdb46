#!/bin/bash
# The twenty-fifth session's device calls (experiments.txt), run on the
# device machine from the repository root: bash device-calls.sh N.
# Libraries are built here into scratch/s25/<name> with
# bench/variant-lib.sh and carried: "base" is the library at a99722d (its
# cubins byte-identical to the twenty-fourth session's validated ones),
# "dl" the same with delta on all warps (LowerTileOps.cpp; as measured,
# the row index passed through an opaque mov, since dropped), "st" dl with
# the q / do staging copies unrolled (StageTokenRows.cpp;
# unrolled-staging.diff). "lib" is build/kernels, the adopted library
# (delta on all warps, max_spill=24 on the four base-2 cluster kernels).
set -u
call=$1
T0=$SECONDS
. bench/device-calls-lib.sh
lib() { case $1 in lib) echo $PWD/build/kernels ;; *) echo $PWD/scratch/s25/$1 ;; esac; }
case $call in
1) # delta = rowsum(o * do) on every warp (16 lanes a row, shfl.xor)
   # instead of one thread a row on warp 0: the GPU tests, then
   # alternating rounds against the library before it
  binding
  tests dl
  rounds 3 330 "B1 B2" base dl
  rounds 2 480 "H128 B3 H32 B2r" dl base ;;
2) # the q / do staging's cp.async unrolled (one copy per thread and
   # round, each with its own registers) on top of dl: the GPU tests, then
   # alternating rounds against dl and base
  binding
  tests st
  rounds 3 300 "B1 B2" dl st base
  rounds 2 450 "H128 B3" st dl base ;;
3) # the adopted library: the GPU command but the benchmarks, one round
   # against base, then the harness with the peers on B1, B2, B2r
  binding
  SMLA_GPU_STEPS="tests replay sanitize" bash scripts/gpu.sh $OUT/gpu $(lib lib) > $OUT/gpu.txt 2>&1; echo "gpu.sh rc=$? $((SECONDS-T0))s"
  cat $OUT/gpu/summary.txt
  tar czf $OUT/gpu.tgz -C $OUT gpu && rm -rf $OUT/gpu
  rounds 1 250 "B1 B2 H128" base lib
  SMLA_GPU_STEPS="bench" SMLA_BENCH_SHAPES="B1 B2 B2r" bash scripts/gpu.sh $OUT/bench $(lib lib) > $OUT/bench-gpu.txt 2>&1; echo "gpu.sh bench rc=$? $((SECONDS-T0))s"
  cat $OUT/bench/summary.txt ;;
4) # ncu on the adopted library's B1 kernel, then B3 with its peers
  binding
  profile lib B1 "h64_g1_b64_s2_base2.*_bwd" B1
  SMLA_GPU_STEPS="bench" SMLA_BENCH_SHAPES="B3" bash scripts/gpu.sh $OUT/bench $(lib lib) > $OUT/bench-gpu.txt 2>&1; echo "gpu.sh bench rc=$? $((SECONDS-T0))s"
  cat $OUT/bench/summary.txt ;;
esac
cat $OUT/bench.txt 2>/dev/null
echo "done $((SECONDS-T0))s"
