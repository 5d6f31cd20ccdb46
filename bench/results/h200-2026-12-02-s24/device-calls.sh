#!/bin/bash
# The twenty-fourth session's device calls (experiments.txt), run on the
# device machine from the repository root: bash device-calls.sh N.
# Experiment libraries are built here into scratch/s24/<name> with
# bench/variant-lib.sh and carried; "base" is build/kernels (the library).
set -u
call=$1
T0=$SECONDS
. bench/device-calls-lib.sh
lib() { case $1 in base) echo $PWD/build/kernels ;; *) echo $PWD/scratch/s24/$1 ;; esac; }
case $call in
1) # where the time goes in the library (epilogue=overlap): ncu on B1's
   # cluster kernel and on B2's token-pair kernel
  binding
  profile base B1 "h64_g1_b64_s2_base2.*_bwd" B1
  profile base B2 "t2_base2.*_bwd" B2 ;;
2) # the key gather after chunks 0 and 1 ("lg": SMLA_EXP_LATEGATHER), the
   # gather's row index loaded before chunk 0 ("ei": SMLA_EXP_EARLYIDX),
   # both ("lgei"), against the library
  binding
  tests lgei
  tests lg
  rounds 3 300 "B1 B2" base lg ei lgei
  rounds 2 480 "H128 B3 H32" lgei lg ei base ;;
3) # chunks 1 and 2 both in warpgroups 1-3 alongside the fused run
   # ("ov2c": SMLA_EXP_OVERLAP2), against the library: the GPU command
   # but the benchmarks, racecheck on its overlap kernels, alternating
   # rounds
  binding
  SMLA_GPU_STEPS="tests replay sanitize" bash scripts/gpu.sh $OUT/gpu $(lib ov2c) > $OUT/gpu.txt 2>&1; echo "gpu.sh rc=$? $((SECONDS-T0))s"
  cat $OUT/gpu/summary.txt
  tar czf $OUT/gpu.tgz -C $OUT gpu && rm -rf $OUT/gpu
  rounds 3 330 "B1 B2" base ov2c
  rounds 2 420 "H128 B3 H32" ov2c base
  race ov2c h64 SMLA_SANITIZE_HEADS=64 SMLA_SANITIZE_LIMIT=1
  race ov2c t2 SMLA_SANITIZE_TOKENS=2 SMLA_SANITIZE_LIMIT=1
  cat $OUT/race-ov2c-* > $OUT/races.txt && rm $OUT/race-ov2c-* ;;
4) # the adopted library (build/kernels: overlap_chunks=2 on the four
   # base-2 cluster configurations, cubins byte-identical to ov2c's; every
   # other cubin byte-identical to the twenty-third session's): racecheck
   # on H = 128's, then the harness with the peers on B1, B2, B2r
  race base h128 SMLA_SANITIZE_HEADS=128 SMLA_SANITIZE_LIMIT=1
  SMLA_GPU_STEPS="bench" SMLA_BENCH_SHAPES="B1 B2 B2r" bash scripts/gpu.sh $OUT/gpu build/kernels > $OUT/gpu.txt 2>&1; echo "gpu.sh rc=$? $((SECONDS-T0))s"
  cat $OUT/gpu/summary.txt ;;
5) # call 4's racecheck ran before the extension was built (no binding
   # step): racecheck on H = 128's adopted kernel
  binding
  race base h128 SMLA_SANITIZE_HEADS=128 SMLA_SANITIZE_LIMIT=1 ;;
6) # ncu on the adopted library's B1 kernel (two chunks alongside)
  binding
  profile base B1 "h64_g1_b64_s2_base2.*_bwd" B1 ;;
esac
cat $OUT/bench.txt 2>/dev/null
echo "done $((SECONDS-T0))s"
