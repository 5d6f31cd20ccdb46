#!/bin/bash
# The twenty-seventh session's device calls (experiments.txt), run on the
# device machine from the repository root: bash device-calls.sh N.
# "lib" is build/kernels (no kernel changed this session). The TileLang
# peer needs scratch/tl carried (not in the repository):
#   tlsite.tar.xz         tilelang 0.1.15 and its dependencies (apache-tvm-ffi
#                         0.1.12, z3-solver 4.15.4.0, torch-c-dlpack-ext,
#                         ml-dtypes, cloudpickle, tqdm, psutil) installed with
#                         pip install --no-deps --target tlsite, tarred (xz);
#                         bench/tilelang-site.sh makes it
#   tl_sparse_mla_bwd.py  the kernels of TileLang's
#                         examples/deepseek_v32/sparse_mla_bwd.py (0a81280)
# bench/tilelang_peer.py gives them Slime's signature for bench_bwd.py.
set -u
call=$1
T0=$SECONDS
. bench/device-calls-lib.sh
lib() { echo $PWD/build/kernels; }
P=bench/results/h200-2026-12-02-s27
tl() {
  [ -d /tmp/tlsite ] || tar -xJf scratch/tl/tlsite.tar.xz -C /tmp
  export SMLA_TILELANG_EXAMPLE=$PWD/scratch/tl/tl_sparse_mla_bwd.py
  export CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
  export PYTHONPATH=$PWD/python:/tmp/tlsite:$PWD/bench
}
peer() { # shape timeout_s: compiled and TileLang only, 10 timed runs
  SMLA_KERNEL_DIR=$(lib lib) timeout $2 python3 bench/bench_bwd.py --shapes $1 \
    --backends compiled tilelang --no-compile --iters 10 \
    --tilelang tilelang_peer:sparse_mla_bwd > $OUT/peer-$1.txt 2>&1
  echo "peer $1 rc=$? $((SECONDS-T0))s"; grep -E "TFLOP|rror|Traceback" $OUT/peer-$1.txt | tail -6
}
harness() { # shape...: the whole harness with the TileLang peer, one process per shape
  for s in "$@"; do
    SMLA_KERNEL_DIR=$(lib lib) timeout 400 python3 bench/bench_bwd.py --shapes $s \
      --tilelang tilelang_peer:sparse_mla_bwd --json $OUT/bench-$s.json > $OUT/bench-$s.txt 2>&1
    echo "harness $s rc=$? $((SECONDS-T0))s"; grep -E "device|TFLOP|rror" $OUT/bench-$s.txt | tail -7
  done
}
case $call in
1) # TileLang installed and timed on B1 next to the compiled op; then
   # HEAD's GPU validation (tests, replay, sanitizers)
  binding
  tl
  python3 -c "import tilelang; print('tilelang', tilelang.__version__)" 2>&1 | tail -3
  peer B1 240
  SMLA_GPU_STEPS="tests replay sanitize" bash scripts/gpu.sh $OUT/gpu build/kernels > $OUT/gpu.txt 2>&1
  tail -12 $OUT/gpu.txt ;;
2) # the harness with the TileLang peer: B1 and B2
  binding; tl; harness B1 B2 ;;
3) # TileLang on B2 at 128 threads (call 2: the example's 256 cannot
   # partition its 16-row gemm), the harness with the peer on B2r; B3
   # without it (packed sequences: the example's kernel has no positions)
  binding; tl; peer B2 200; harness B2r
  SMLA_KERNEL_DIR=$(lib lib) timeout 300 python3 bench/bench_bwd.py --shapes B3 --json $OUT/bench-B3.json > $OUT/bench-B3.txt 2>&1
  echo "harness B3 rc=$? $((SECONDS-T0))s"; grep -E "TFLOP|rror" $OUT/bench-B3.txt | tail -5 ;;
4) # TileLang's example on the synthetic GLM-5.2 event (-1 padding, CP
   # positions, dead rows): finite or not, and memcheck on it; TileLang on
   # B1's shape at H = 128 (DeepSeek-V3.2's heads)
  binding; tl
  python3 -m smla.synthetic /tmp/glm52.pt --kv 16384 --topk 2048 --device cuda > /dev/null 2>&1
  SMLA_KERNEL_DIR=$(lib lib) timeout 120 python3 $P/tl_replay.py /tmp/glm52.pt 2>&1 | grep -v INFO | tee $OUT/tl-replay.txt | tail -6
  echo "replay $((SECONDS-T0))s"
  SMLA_KERNEL_DIR=$(lib lib) timeout 100 compute-sanitizer --tool memcheck --print-limit 4 python3 $P/tl_replay.py /tmp/glm52.pt > $OUT/tl-replay-memcheck.txt 2>&1
  echo "memcheck rc=$? $((SECONDS-T0))s"; grep -E "ERROR SUMMARY|Invalid|of size|at .*sparse|compiled:|tilelang:" $OUT/tl-replay-memcheck.txt | head -12
  peer H128 130 ;;
esac
