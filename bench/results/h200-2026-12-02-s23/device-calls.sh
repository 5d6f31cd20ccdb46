#!/bin/bash
# The twenty-third session's device calls (experiments.txt), run on the
# device machine from the repository root: bash device-calls.sh N. The
# libraries were built here into scratch/s23/<name> with scratch/s17/lib.sh
# (experiments.txt says how) and carried with scratch/s22/epi (the base).
set -u
call=$1
export PYTHONPATH=$PWD/python
T0=$SECONDS
binding() {
  { [ -f build-py/build.ninja ] || cmake -S python -B build-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(command -v python3) > $OUT/cmake.log 2>&1 ; cmake --build build-py -j16 >> $OUT/cmake.log 2>&1; } || { tail -30 $OUT/cmake.log; exit 1; }
  echo "binding built $((SECONDS-T0))s"
}
lib() { case $1 in base) echo $PWD/scratch/s22/epi ;; *) echo $PWD/scratch/s23/$1 ;; esac; }
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
spills() { # lib kernel: where its spills are (SASS around STL / LDL)
  cuobjdump -sass $(lib $1)/$2.cubin > /tmp/sass-$2.txt 2>&1
  grep -n -B12 -A4 "STL\|LDL" /tmp/sass-$2.txt > $OUT/spills-$2.txt
}
mem() { # lib: memcheck on every configuration
  SMLA_KERNEL_DIR=$(lib $1) SMLA_SANITIZE_LIMIT=100 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 python3 scripts/sanitizer_cases.py > $OUT/mem-$1.txt 2>&1; echo "$1 memcheck rc=$?"; tail -2 $OUT/mem-$1.txt
}
case $call in
1) # the cluster kernels (H = 64, 128) with the fused epilogue for a base-2
   # lse ("fc"), and the same with the fused kernels' S / dP tiles given no
   # shared memory ("dt"), against the twenty-second session's library
   binding
   tests dt
   rounds 3 230 "B1 B2" base fc dt
   rounds 2 330 "H128 B3 H32" base fc dt
   race dt h64 SMLA_SANITIZE_HEADS=64 SMLA_SANITIZE_LIMIT=2
   race dt h128 SMLA_SANITIZE_HEADS=128 SMLA_SANITIZE_LIMIT=1
   race dt t2 SMLA_SANITIZE_TOKENS=2 SMLA_SANITIZE_LIMIT=1
   race dt h32 SMLA_SANITIZE_HEADS=32 SMLA_SANITIZE_LIMIT=1 SMLA_SANITIZE_TOKENS=0
   mem dt ;;
2) # the adopted library (build/kernels = scratch/s23/dt): the GPU
   # command's tests, replay and sanitizers; two more rounds on the
   # cluster shapes, the new library first; ncu on B1's kernel
  SMLA_GPU_STEPS="tests replay sanitize" bash scripts/gpu.sh $OUT/gpu build/kernels > $OUT/gpu.txt 2>&1; echo "gpu.sh rc=$?"
  cat $OUT/gpu/summary.txt
  rounds 2 330 "B1 H128" dt base
  SMLA_KERNEL_DIR=$(lib dt) timeout 200 ncu --set full -k regex:_bwd -c 1 -o /tmp/ncu-dt python3 bench/bench_bwd.py --shapes B1 --backends compiled --no-compile --iters 1 --warmup 0 --rotate 1 > /tmp/ncu-dt.log 2>&1
  echo "ncu rc=$?"
  ncu -i /tmp/ncu-dt.ncu-rep --page details > $OUT/ncu-B1-details.txt 2>&1
  ncu -i /tmp/ncu-dt.ncu-rep --page source --csv --print-source sass 2>/dev/null | gzip -c > $OUT/ncu-B1-sass.csv.gz ;;
3) # the harness with the peers on the shapes whose kernels changed
  SMLA_GPU_STEPS="bench" SMLA_BENCH_SHAPES="B1" bash scripts/gpu.sh $OUT/gpu build/kernels > $OUT/gpu.txt 2>&1; echo "gpu.sh rc=$?"
  cat $OUT/gpu/summary.txt ;;
4) # the last dKV chunk on warpgroups 1-3 alongside warpgroup 0's fused run
   # ("ov": epilogue=overlap wherever the library has epilogue=fused; the
   # cluster kernels spill 8-16 bytes) against the adopted library
   binding
   tests ov
   race ov h64 SMLA_SANITIZE_HEADS=64 SMLA_SANITIZE_LIMIT=1
   race ov t2 SMLA_SANITIZE_TOKENS=2 SMLA_SANITIZE_LIMIT=1
   race ov h32 SMLA_SANITIZE_HEADS=32 SMLA_SANITIZE_LIMIT=1 SMLA_SANITIZE_TOKENS=0
   rounds 3 330 "B1 B2" dt ov
   rounds 2 450 "H128 B3 H32" ov dt ;;
5) # the adopted library (build/kernels = scratch/s23/ov2: epilogue=overlap
   # on every fused kernel, the warpgroup-0 stores and sends after the named
   # barrier with their addresses computed there; the clusters' 8-16 bytes
   # of spill accepted by max_spill=16): the GPU command but the benchmarks,
   # racecheck on the overlap kernels, two rounds against dt, where the
   # clusters spill (SASS), the harness on B1
  SMLA_GPU_STEPS="tests replay sanitize" bash scripts/gpu.sh $OUT/gpu build/kernels > $OUT/gpu.txt 2>&1; echo "gpu.sh rc=$?"
  cat $OUT/gpu/summary.txt
  tar czf $OUT/gpu.tgz -C $OUT gpu && rm -rf $OUT/gpu
  race ov2 h64 SMLA_SANITIZE_HEADS=64 SMLA_SANITIZE_LIMIT=2
  race ov2 h128 SMLA_SANITIZE_HEADS=128 SMLA_SANITIZE_LIMIT=1
  race ov2 t2 SMLA_SANITIZE_TOKENS=2 SMLA_SANITIZE_LIMIT=2
  race ov2 h32 SMLA_SANITIZE_HEADS=32 SMLA_SANITIZE_LIMIT=1 SMLA_SANITIZE_TOKENS=0
  cat $OUT/race-ov2-* > $OUT/races.txt && rm $OUT/race-ov2-*
  rounds 2 300 "B1 B2" ov2 dt
  rounds 2 380 "H128 B3 H32" dt ov2
  spills ov2 smla_d512_dt64_h64_g1_b64_s2_base2_bf16_bf16
  SMLA_GPU_STEPS="bench" SMLA_BENCH_SHAPES="B1" bash scripts/gpu.sh $OUT/gpu2 build/kernels > $OUT/gpu2.txt 2>&1; echo "gpu.sh bench rc=$?"
  grep -A4 "^shape" $OUT/gpu2/summary.txt; rm -rf $OUT/gpu2 $OUT/gpu2.txt $OUT/cmake.log ;;
esac
# At most 8 files come back: the GPU command's folder as one archive.
[ -d $OUT/gpu ] && tar czf $OUT/gpu.tgz -C $OUT gpu && rm -rf $OUT/gpu
cat $OUT/bench.txt 2>/dev/null
echo "done $((SECONDS-T0))s"
