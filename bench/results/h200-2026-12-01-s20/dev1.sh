#!/bin/bash
# Call 1: split / c2 / c12 vs base (B1 B2, alternating), then the GPU tests and sanitizers on split.
export PYTHONPATH=$PWD/python
T0=$SECONDS
{ [ -f build-py/build.ninja ] || cmake -S python -B build-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(command -v python3) > $OUT/cmake.log 2>&1 ; cmake --build build-py -j16 >> $OUT/cmake.log 2>&1; } || { tail -30 $OUT/cmake.log; exit 1; }
echo "binding built $((SECONDS-T0))s"
run() { # lib shapes
  d=$PWD/scratch/s20/$1; [ $1 = base ] && d=$PWD/build/kernels
  local t=$SECONDS
  echo -n "$1 " >> $OUT/bench.txt
  SMLA_KERNEL_DIR=$d timeout 90 python3 bench/bench_bwd.py --shapes $2 --backends compiled --no-compile --iters 10 2>&1 | grep -E "measured|rror" | sed 's/measured compiled://' | tr '\n' ' ' >> $OUT/bench.txt
  echo " [$((SECONDS-t))s]" >> $OUT/bench.txt
}
for i in 1 2 3; do for l in base split c2 c12; do [ $((SECONDS-T0)) -lt 240 ] && run $l "B1 B2"; done; done
for l in base split base split; do run $l "B3 H128"; done
cat $OUT/bench.txt
echo "bench done $((SECONDS-T0))s"
export SMLA_KERNEL_DIR=$PWD/scratch/s20/split
timeout 200 python3 -m pytest -q -x test/python/test_gpu.py > $OUT/pytest.txt 2>&1; echo "pytest rc=$? $((SECONDS-T0))s"; tail -3 $OUT/pytest.txt
SMLA_SANITIZE_HEADS=64,128 SMLA_SANITIZE_LIMIT=2 timeout 150 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 3 python3 scripts/sanitizer_cases.py > $OUT/race.txt 2>&1; echo "racecheck rc=$? $((SECONDS-T0))s"; tail -4 $OUT/race.txt
SMLA_SANITIZE_LIMIT=100 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 python3 scripts/sanitizer_cases.py > $OUT/mem.txt 2>&1; echo "memcheck rc=$? $((SECONDS-T0))s"; tail -3 $OUT/mem.txt
