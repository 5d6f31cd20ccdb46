#!/bin/bash
# The twenty-first session's device calls (experiments.txt), run on the
# device machine from the repository root: bash device-calls.sh N. The
# libraries named below were built here into scratch/s21/<name>
# (experiments.txt says how) and carried with build/kernels.
set -u
call=$1
export PYTHONPATH=$PWD/python
T0=$SECONDS
if [ $call = 1 ] || [ $call = 4 ]; then # calls 2 and 3: the GPU command builds it
  { [ -f build-py/build.ninja ] || cmake -S python -B build-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(command -v python3) > $OUT/cmake.log 2>&1 ; cmake --build build-py -j16 >> $OUT/cmake.log 2>&1; } || { tail -30 $OUT/cmake.log; exit 1; }
fi
echo "binding built $((SECONDS-T0))s"
lib() { [ $1 = base ] && echo $PWD/build/kernels || echo $PWD/scratch/s21/$1; }
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
checks() { # lib: the GPU tests and both sanitizers on it
  export SMLA_KERNEL_DIR=$(lib $1)
  timeout 200 python3 -m pytest -q -x test/python/test_gpu.py > $OUT/pytest-$1.txt 2>&1; echo "$1 pytest rc=$?"; tail -2 $OUT/pytest-$1.txt
  SMLA_SANITIZE_HEADS=64,128 SMLA_SANITIZE_LIMIT=2 timeout 150 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 3 python3 scripts/sanitizer_cases.py > $OUT/race-$1.txt 2>&1; echo "$1 racecheck rc=$?"; tail -2 $OUT/race-$1.txt
  SMLA_SANITIZE_LIMIT=100 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 python3 scripts/sanitizer_cases.py > $OUT/mem-$1.txt 2>&1; echo "$1 memcheck rc=$?"; tail -2 $OUT/mem-$1.txt
  unset SMLA_KERNEL_DIR
}
case $call in
1) # softmax/dS per thread ("soft") vs base: timing, then the checks on soft
  rounds 3 200 "B1 B2" base soft
  rounds 2 300 "B3 H128 B2r" base soft
  checks soft ;;
2) # the adopted library (build/kernels): the whole GPU command but the
   # B2 B2r B3 benchmarks (racecheck on the cluster kernels: call 1, on
   # the same cubins)
  SMLA_GPU_STEPS="tests replay sanitize bench" SMLA_BENCH_SHAPES="B1 H128" bash scripts/gpu.sh $OUT/gpu build/kernels > $OUT/gpu.txt 2>&1; echo "gpu.sh rc=$?"
  cat $OUT/gpu/summary.txt ;;
3) # the harness on B2 B2r B3
  SMLA_GPU_STEPS="bench" SMLA_BENCH_SHAPES="B2 B2r B3" bash scripts/gpu.sh $OUT/gpu build/kernels > $OUT/gpu.txt 2>&1; echo "gpu.sh rc=$?"
  cat $OUT/gpu/summary.txt ;;
4) # f32 tiles padded by 4 words in the wgmma kernels ("pad4") vs base
   # (base is now the adopted per-thread softmax library)
  rounds 3 200 "B1 B2" base pad4
  rounds 2 320 "B3 H128 B2r" base pad4
  checks pad4 ;;
5) # the final library (build/kernels = pad4): the test suite, the replay
   # and B1 with its peers
  SMLA_GPU_STEPS="tests replay bench" SMLA_BENCH_SHAPES="B1" bash scripts/gpu.sh $OUT/gpu build/kernels > $OUT/gpu.txt 2>&1; echo "gpu.sh rc=$?"
  cat $OUT/gpu/summary.txt ;;
esac
# At most 8 files come back: the GPU command's folder as one archive.
[ -d $OUT/gpu ] && tar czf $OUT/gpu.tgz -C $OUT gpu && rm -rf $OUT/gpu
cat $OUT/bench.txt 2>/dev/null
echo "done $((SECONDS-T0))s"
