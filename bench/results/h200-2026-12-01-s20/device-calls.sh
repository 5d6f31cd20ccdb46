#!/bin/bash
# The twentieth session's device calls (experiments.txt), as run on the
# device machine from the repository root: bash device-calls.sh N. The
# six scripts that ran are restated here with their shared setup written
# once; the commands are theirs. The libraries named below were built here
# into scratch/s20/<name> (experiments.txt says how) and carried with
# build/kernels.
set -u
call=$1
export PYTHONPATH=$PWD/python
T0=$SECONDS
{ [ -f build-py/build.ninja ] || cmake -S python -B build-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(command -v python3) > $OUT/cmake.log 2>&1 ; cmake --build build-py -j16 >> $OUT/cmake.log 2>&1; } || { tail -30 $OUT/cmake.log; exit 1; }
echo "binding built $((SECONDS-T0))s"
lib() { [ $1 = base ] && echo $PWD/build/kernels || echo $PWD/scratch/s20/$1; }
run() { # lib shapes: one bench_bwd.py line into bench.txt
  local t=$SECONDS
  echo -n "$1 " >> $OUT/bench.txt
  SMLA_KERNEL_DIR=$(lib $1) timeout 90 python3 bench/bench_bwd.py --shapes $2 --backends compiled --no-compile --iters 10 2>&1 | grep -E "measured|rror" | sed 's/measured compiled://' | tr '\n' ' ' >> $OUT/bench.txt
  echo " [$((SECONDS-t))s]" >> $OUT/bench.txt
}
rounds() { # n limit_s lib...: n alternating rounds of B1 B2, none started past limit_s
  local n=$1 limit=$2; shift 2
  for i in $(seq $n); do for l in "$@"; do [ $((SECONDS-T0)) -lt $limit ] && run $l "B1 B2"; done; done
}
case $call in
1) # split / c2 / c12 vs base, then the GPU tests and sanitizers on split
  rounds 3 240 base split c2 c12
  for l in base split base split; do run $l "B3 H128"; done
  export SMLA_KERNEL_DIR=$(lib split)
  timeout 200 python3 -m pytest -q -x test/python/test_gpu.py > $OUT/pytest.txt 2>&1; echo "pytest rc=$?"
  SMLA_SANITIZE_HEADS=64,128 SMLA_SANITIZE_LIMIT=2 timeout 150 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 3 python3 scripts/sanitizer_cases.py > $OUT/race.txt 2>&1; echo "racecheck rc=$?"
  SMLA_SANITIZE_LIMIT=100 timeout 100 compute-sanitizer --tool memcheck --error-exitcode 3 python3 scripts/sanitizer_cases.py > $OUT/mem.txt 2>&1; echo "memcheck rc=$?" ;;
2) # gathers without L2 reads (odd head blocks / all), no scatter ("nored", see experiments.txt 2), both
  rounds 2 1000 base ng-odd ng-all nored nored-ng
  for l in base ng-odd nored; do run $l "H128"; done ;;
3) # ncu on B1's bwd kernel: base vs the no-scatter library
  for l in base nored; do
    SMLA_KERNEL_DIR=$(lib $l) timeout 200 ncu --set full -k regex:_bwd -c 1 -o /tmp/ncu-$l python3 bench/bench_bwd.py --shapes B1 --backends compiled --no-compile --iters 1 --warmup 0 --rotate 1 > /tmp/ncu-$l.log 2>&1
    echo "$l ncu rc=$?"
    ncu -i /tmp/ncu-$l.ncu-rep --page details > $OUT/ncu-B1-$l-details.txt 2>&1
    ncu -i /tmp/ncu-$l.ncu-rep --page raw --csv | gzip -c > $OUT/ncu-B1-$l-raw.csv.gz
  done ;;
4) # clock-predicated no-reduction library (nored2) and the no-scatter one
  rounds 2 1000 base nored2 noscatter
  for l in base nored2; do run $l "B3 H128 B2r"; done ;;
5) # one CTA barrier dropped: before pack_dkv / before dq_packed
  rounds 2 1000 base nobar-pack nobar-dq ;;
6) # each phase lowered to nothing, with and without the scatter
  rounds 2 330 base ns nodq noprod nosm nogat ns-nodq ns-noprod ns-nosm ns-nogat ;;
esac
cat $OUT/bench.txt 2>/dev/null
echo "done $((SECONDS-T0))s"
