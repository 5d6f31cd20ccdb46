#!/bin/bash
# Call 4: the clock-predicated no-reduction library (nored2) and the no-scatter one vs base.
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
for i in 1 2; do for l in base nored2 noscatter; do run $l "B1 B2"; done; done
for l in base nored2; do run $l "B3 H128 B2r"; done
cat $OUT/bench.txt
echo "bench done $((SECONDS-T0))s"
