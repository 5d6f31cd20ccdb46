#!/bin/bash
# The twenty-second session's device calls (experiments.txt), run on the
# device machine from the repository root: bash device-calls.sh N. The
# libraries named below were built here into scratch/s22/<name>
# (experiments.txt says how) and carried.
set -u
call=$1
export PYTHONPATH=$PWD/python
T0=$SECONDS
if [ $call = 1 ] || [ $call = 2 ]; then # call 3 and 4: the GPU command builds it
  { [ -f build-py/build.ninja ] || cmake -S python -B build-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(command -v python3) > $OUT/cmake.log 2>&1 ; cmake --build build-py -j16 >> $OUT/cmake.log 2>&1; } || { tail -30 $OUT/cmake.log; exit 1; }
fi
echo "binding built $((SECONDS-T0))s"
lib() { echo $PWD/scratch/s22/$1; }
run() { # lib shapes: one bench_bwd.py line into bench.txt
  local t=$SECONDS
  echo -n "$1 " >> $OUT/bench.txt
  SMLA_KERNEL_DIR=$(lib $1) timeout 90 python3 bench/bench_bwd.py --shapes $2 --backends compiled --no-compile --iters 10 2>&1 | grep -E "measured|rror" | sed 's/measured compiled://' | tr '\n' ' ' >> $OUT/bench.txt
  echo " [$((SECONDS-t))s]" >> $OUT/bench.txt
}
rounds() { # n limit_s shapes lib...: n alternating rounds, none started past limit_s
  local n=$1 limit=$2 shapes=$3; shift 3
  for i in $(seq $n); do for l in "$@"; do [ $((SECONDS-T0)) -lt $limit ] && run $l "$shapes"; done; done
}
tests() { # lib: the GPU tests
  SMLA_KERNEL_DIR=$(lib $1) timeout 200 python3 -m pytest -q -x test/python/test_gpu.py > $OUT/pytest-$1.txt 2>&1; echo "$1 pytest rc=$?"; tail -3 $OUT/pytest-$1.txt
}
sanitize() { # lib: both sanitizers on it
  export SMLA_KERNEL_DIR=$(lib $1)
  SMLA_SANITIZE_HEADS=64,128 SMLA_SANITIZE_LIMIT=2 timeout 150 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 3 python3 scripts/sanitizer_cases.py > $OUT/race-$1.txt 2>&1; echo "$1 racecheck rc=$?"; tail -2 $OUT/race-$1.txt
  SMLA_SANITIZE_LIMIT=100 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 python3 scripts/sanitizer_cases.py > $OUT/mem-$1.txt 2>&1; echo "$1 memcheck rc=$?"; tail -2 $OUT/mem-$1.txt
  unset SMLA_KERNEL_DIR
}
spills() { # lib kernel: where its spills are (SASS around STL / LDL)
  cuobjdump -sass $(lib $1)/$2.cubin > $OUT/sass-$2.txt 2>&1
  grep -n -B12 -A4 "STL\|LDL" $OUT/sass-$2.txt > $OUT/spills-$2.txt; gzip $OUT/sass-$2.txt
}
case $call in
1) # softmax, dS and the pack fused into the products' warpgroup ("fused",
   # built with --allow-spills) vs the twenty-first session's library
   tests fused
   rounds 3 200 "B1 B2" base fused
   rounds 2 330 "B3 H128 B2r" base fused
   sanitize fused
   spills fused smla_d512_dt64_h64_g1_b64_s2_natural_pos_bf16_bf16 ;;
2) # the fused epilogue with its 16 clamp counts as one ("fused2") and
   # with chunk 1 before the key gather ("v2"; fused's counts), against
   # base and fused; all built with --allow-spills
   rounds 2 250 "B1 B2" base fused fused2 v2
   rounds 1 330 "B3 B2r" base fused fused2 v2 ;;
3) # the adopted library (build/kernels = scratch/s22/epi: epilogue=fused
   # for the 32-head and token-pair kernels, the aggregated clamp count):
   # the GPU command's tests, replay and sanitizers, then timing against
   # base on the shapes whose kernels changed (B1 and H128 are
   # byte-identical)
  SMLA_GPU_STEPS="tests replay sanitize" bash scripts/gpu.sh $OUT/gpu build/kernels > $OUT/gpu.txt 2>&1; echo "gpu.sh rc=$?"
  cat $OUT/gpu/summary.txt
  rounds 3 520 "B2 B3 B2r H32" base epi ;;
4) # the harness with the peers on the changed shapes
  SMLA_GPU_STEPS="bench" SMLA_BENCH_SHAPES="B2 B2r B3" bash scripts/gpu.sh $OUT/gpu build/kernels > $OUT/gpu.txt 2>&1; echo "gpu.sh rc=$?"
  cat $OUT/gpu/summary.txt ;;
5) # racecheck on the adopted library's fused kernels (32 heads: the
   # H32 kernels and the H = 16 token pairs)
  { cmake -S python -B build-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(command -v python3) > $OUT/cmake.log 2>&1 ; cmake --build build-py -j16 >> $OUT/cmake.log 2>&1; } || { tail -30 $OUT/cmake.log; exit 1; }
  export SMLA_KERNEL_DIR=$PWD/build/kernels
  SMLA_SANITIZE_HEADS=32 SMLA_SANITIZE_LIMIT=4 timeout 200 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 3 python3 scripts/sanitizer_cases.py > $OUT/race-epi.txt 2>&1; echo "racecheck rc=$?"; tail -3 $OUT/race-epi.txt
  # (run as its own call on the warm machine after this one:)
  SMLA_SANITIZE_TOKENS=2 SMLA_SANITIZE_LIMIT=2 timeout 150 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 3 python3 scripts/sanitizer_cases.py > $OUT/race-epi-t2.txt 2>&1; echo "racecheck rc=$?" ;;
esac
# At most 8 files come back: the GPU command's folder as one archive.
[ -d $OUT/gpu ] && tar czf $OUT/gpu.tgz -C $OUT gpu && rm -rf $OUT/gpu
cat $OUT/bench.txt 2>/dev/null
echo "done $((SECONDS-T0))s"
