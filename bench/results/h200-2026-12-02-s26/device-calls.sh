#!/bin/bash
# The twenty-sixth session's device calls (experiments.txt), run on the
# device machine from the repository root: bash device-calls.sh N.
# "lib" is build/kernels (f4784c0's library: no kernel changed this
# session). The probes (quant.py, timeline.py, host.py, clusters.cu) are
# in this folder. Call 3 also needs HEAD's binding before the change:
#   mkdir -p scratch/s26/old && git archive f4784c0 python runtime bench |
#     tar -x -C scratch/s26/old && cp host.py scratch/s26/old/bench/
# (with host.py's sys.path pointed at that tree), carried.
set -u
call=$1
T0=$SECONDS
. bench/device-calls-lib.sh
lib() { case $1 in lib) echo $PWD/build/kernels ;; *) echo $PWD/scratch/s26/$1 ;; esac; }
P=bench/results/h200-2026-12-02-s26
case $call in
1) # wave quantization: the compiled call at token counts whose CTA count
   # is a whole number of waves (132 SMs; B1: 66 clusters of 2), the
   # resident clusters, and the kernel timeline of one B2 call
  nvcc -arch=sm_90a -o /tmp/clusters $P/clusters.cu && /tmp/clusters | tee $OUT/clusters.txt
  binding
  export SMLA_KERNEL_DIR=$(lib lib)
  python3 $P/timeline.py B2 > $OUT/timeline.txt 2>&1; python3 $P/timeline.py B1 >> $OUT/timeline.txt 2>&1; cat $OUT/timeline.txt
  for r in 1 2; do
    python3 $P/quant.py B1 4096 B1 4092 B1 4158 2>&1 | tee -a $OUT/quant.txt
    python3 $P/quant.py B2 8192 B2 8184 B2 8448 2>&1 | sed 's/^/chunked /' | tee -a $OUT/quant.txt
    SMLA_PAIRS_CHUNK=5000 python3 $P/quant.py B2 8192 B2 8184 B2 8448 2>&1 | sed 's/^/one-launch /' | tee -a $OUT/quant.txt
    echo "round $r $((SECONDS-T0))s"
  done ;;
2) # the host's share of a call: enqueue time with the GPU busy, the
   # harness's synchronous time against back-to-back calls, a CPU profile
  binding
  export SMLA_KERNEL_DIR=$(lib lib)
  for s in B2 B1; do python3 $P/host.py $s profile > $OUT/host-$s.txt 2>&1; head -3 $OUT/host-$s.txt; done ;;
3) # the host path without string work per launch (Manifest::match for
   # the optional kernels, packParams' messages built only on error)
   # against HEAD's binding (scratch/s26/old: git archive of HEAD's
   # python, runtime, bench), and B2's pair chunks: 2048 (the default,
   # 15.5 waves each), 1980 (whole waves: 1980 + 1980 + 136), one launch
  binding
  O=$PWD/scratch/s26/old
  { cmake -S $O/python -B $O/build-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(command -v python3) && cmake --build $O/build-py -j16; } > $OUT/cmake-old.log 2>&1 || { tail -20 $OUT/cmake-old.log; exit 1; }
  echo "old binding built $((SECONDS-T0))s"
  export SMLA_KERNEL_DIR=$(lib lib)
  for s in B2 B1; do
    PYTHONPATH=$O/python python3 $O/bench/host.py $s | sed 's/^/old /'
    python3 $P/host.py $s | sed 's/^/new /'
  done 2>&1 | grep -v Warn | tee $OUT/host.txt
  for r in 1 2 3 4; do
    for v in old new; do
      b=bench/bench_bwd.py; [ $v = old ] && b=$O/bench/bench_bwd.py
      echo -n "$v " >> $OUT/bench.txt
      PYTHONPATH= timeout 120 python3 $b --shapes B1 B2 --backends compiled --no-compile --iters 10 2>&1 | grep -E "measured|rror" | sed 's/measured compiled://' | tr '\n' ' ' >> $OUT/bench.txt
      echo >> $OUT/bench.txt
    done
  done
  for r in 1 2 3; do
    for c in 2048 1980 5000; do
      echo -n "chunk $c " >> $OUT/bench.txt
      SMLA_PAIRS_CHUNK=$c timeout 120 python3 bench/bench_bwd.py --shapes B2 --backends compiled --no-compile --iters 10 2>&1 | grep -E "measured|rror" | sed 's/measured compiled://' | tr '\n' ' ' >> $OUT/bench.txt
      echo >> $OUT/bench.txt
    done
  done ;;
4) # the adopted binding (pair rows up to 128 MiB: B2 and B3 in one
   # launch; Manifest::match; lazy packParams messages): the GPU command
   # but the benchmarks, then alternating rounds of the default against
   # SMLA_PAIRS_CHUNK=2048 (the 64 MiB chunks before)
  binding
  SMLA_GPU_STEPS="tests replay sanitize" bash scripts/gpu.sh $OUT/gpu $(lib lib) > $OUT/gpu.txt 2>&1; echo "gpu.sh rc=$? $((SECONDS-T0))s"
  cat $OUT/gpu/summary.txt
  tar czf $OUT/gpu.tgz -C $OUT gpu && rm -rf $OUT/gpu
  export SMLA_KERNEL_DIR=$(lib lib)
  for r in 1 2 3; do
    for c in default 2048; do
      [ $((SECONDS-T0)) -gt 540 ] && break
      echo -n "chunk $c " >> $OUT/bench.txt
      env $([ $c = default ] || echo SMLA_PAIRS_CHUNK=$c) timeout 120 python3 bench/bench_bwd.py --shapes B2 B3 B2r --backends compiled --no-compile --iters 10 2>&1 | grep -E "measured|rror" | sed 's/measured compiled://' | tr '\n' ' ' >> $OUT/bench.txt
      echo " [$((SECONDS-T0))s]" >> $OUT/bench.txt
    done
  done ;;
5) # the harness with the peers on B2 and B3 (the shapes the change
   # touches)
  binding
  SMLA_GPU_STEPS="bench" SMLA_BENCH_SHAPES="B2 B3" bash scripts/gpu.sh $OUT/bench $(lib lib) > $OUT/bench-gpu.txt 2>&1; echo "gpu.sh bench rc=$? $((SECONDS-T0))s"
  cat $OUT/bench/summary.txt ;;
6) # the host's exposed share of the harness's time: each call timed with
   # the GPU idle at its start (as bench_bwd.py) and behind a GPU sleep
   # queued first, alternating, 15 each
  binding
  export SMLA_KERNEL_DIR=$(lib lib)
  python3 $P/hidden.py B2 B1 B3 B2r 2>&1 | tee $OUT/hidden.txt ;;
7) # no ATen slices for a launch that takes every token, dkv allocated
   # after the bwd launches: test_gpu.py, then the exposed host time of
   # B2 and B1 against HEAD's binding (scratch/s26/old2 = git archive of
   # 4870a6f's python, runtime, bench, with hidden.py at its root)
  binding
  export SMLA_KERNEL_DIR=$(lib lib)
  timeout 100 python3 -m pytest -q -x test/python/test_gpu.py > $OUT/pytest.txt 2>&1; echo "pytest rc=$?"; tail -2 $OUT/pytest.txt
  python3 $P/hidden.py B2 B1 2>&1 | sed 's/^/new /' | tee $OUT/hidden.txt
  O=$PWD/scratch/s26/old2
  { cmake -S $O/python -B $O/build-py -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE=$(command -v python3) && cmake --build $O/build-py -j16; } > $OUT/cmake-old.log 2>&1 || { tail -20 $OUT/cmake-old.log; exit 1; }
  (cd $O && python3 hidden.py B2 B1) 2>&1 | sed 's/^/old /' | tee -a $OUT/hidden.txt
  python3 $P/hidden.py B2 2>&1 | sed 's/^/new /' | tee -a $OUT/hidden.txt ;;
esac
cat $OUT/bench.txt 2>/dev/null
echo "done $((SECONDS-T0))s"
