#!/bin/bash
# Call 3: ncu on B1's bwd kernel, base library vs no-reductions diagnostic.
export PYTHONPATH=$PWD/python
T0=$SECONDS
{ [ -f build-py/build.ninja ] || cmake -S python -B build-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(command -v python3) > $OUT/cmake.log 2>&1 ; cmake --build build-py -j16 >> $OUT/cmake.log 2>&1; } || { tail -30 $OUT/cmake.log; exit 1; }
echo "binding built $((SECONDS-T0))s"
for l in base nored; do
  d=$PWD/scratch/s20/$l; [ $l = base ] && d=$PWD/build/kernels
  SMLA_KERNEL_DIR=$d timeout 200 ncu --set full -k regex:_bwd -c 1 -o /tmp/ncu-$l python3 bench/bench_bwd.py --shapes B1 --backends compiled --no-compile --iters 1 --warmup 0 --rotate 1 > /tmp/ncu-$l.log 2>&1
  echo "$l ncu rc=$? $((SECONDS-T0))s"; tail -2 /tmp/ncu-$l.log
  ncu -i /tmp/ncu-$l.ncu-rep --page details > $OUT/ncu-B1-$l-details.txt 2>&1
  ncu -i /tmp/ncu-$l.ncu-rep --page raw --csv > /tmp/raw-$l.csv 2>&1; gzip -c /tmp/raw-$l.csv > $OUT/ncu-B1-$l-raw.csv.gz
done
echo "done $((SECONDS-T0))s"
