#!/bin/bash
# Helpers for a session's device calls (bench/results/<session>/device-calls.sh
# sources this from the repository root on the device machine). The caller
# sets OUT, T0 (=$SECONDS at its start) and defines lib NAME -> the kernel
# library directory of NAME. From the twenty-fourth session on; earlier
# sessions' records carry their own copies.
#   binding                   build the torch extension (build-py)
#   run LIB SHAPES            one bench_bwd.py line (compiled only) into bench.txt
#   rounds N LIMIT SHAPES LIB...  N alternating rounds, none started past LIMIT s
#   tests LIB                 test/python/test_gpu.py
#   race LIB NAME ENV...      compute-sanitizer racecheck on the selected cases
#   profile LIB SHAPE RE NAME ncu --set full on one launch: details, SASS view
export PYTHONPATH=$PWD/python
binding() {
  { [ -f build-py/build.ninja ] || cmake -S python -B build-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(command -v python3) > $OUT/cmake.log 2>&1 ; cmake --build build-py -j16 >> $OUT/cmake.log 2>&1; } || { tail -30 $OUT/cmake.log; exit 1; }
  echo "binding built $((SECONDS-T0))s"
}
run() { # lib shapes: one bench_bwd.py line into bench.txt
  local t=$SECONDS
  echo -n "$1 " >> $OUT/bench.txt
  SMLA_KERNEL_DIR=$(lib $1) timeout 120 python3 bench/bench_bwd.py --shapes $2 --backends compiled --no-compile --iters 10 2>&1 | grep -E "measured|rror" | sed 's/measured compiled://' | tr '\n' ' ' >> $OUT/bench.txt
  echo " [$((SECONDS-t))s]" >> $OUT/bench.txt
}
rounds() { # n limit_s shapes lib...: n alternating rounds, none started past limit_s
  local n=$1 limit=$2 shapes=$3; shift 3
  for i in $(seq $n); do for l in "$@"; do [ $((SECONDS-T0)) -lt $limit ] && run $l "$shapes"; done; done
}
tests() { # lib: the GPU tests
  SMLA_KERNEL_DIR=$(lib $1) timeout 200 python3 -m pytest -q -x test/python/test_gpu.py > $OUT/pytest-$1.txt 2>&1; echo "$1 pytest rc=$?"; tail -3 $OUT/pytest-$1.txt
}
race() { # lib name env...: racecheck on the configurations the env selects
  local l=$1 n=$2; shift 2
  env "$@" SMLA_KERNEL_DIR=$(lib $l) timeout 200 compute-sanitizer --tool racecheck --racecheck-report hazard --error-exitcode 3 python3 scripts/sanitizer_cases.py > $OUT/race-$l-$n.txt 2>&1; echo "$l racecheck $n rc=$?"; grep -E "^(ok|BAD)|configurations|ERROR SUMMARY" $OUT/race-$l-$n.txt | tail -6
}
profile() { # lib shape kernel-regex name: ncu --set full on one launch; details and SASS source view
  SMLA_KERNEL_DIR=$(lib $1) timeout 240 ncu --set full -k "regex:$3" -c 1 -o /tmp/ncu-$4 python3 bench/bench_bwd.py --shapes $2 --backends compiled --no-compile --iters 1 --warmup 0 --rotate 1 > /tmp/ncu-$4.log 2>&1
  echo "ncu $4 rc=$? $((SECONDS-T0))s"
  ncu -i /tmp/ncu-$4.ncu-rep --page details > $OUT/ncu-$4-details.txt 2>&1
  ncu -i /tmp/ncu-$4.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip -c > $OUT/ncu-$4-sass.csv.gz
}
