# Step bookkeeping for the GPU machine's scripts (scripts/gpu.sh,
# scripts/gpu-install-check.sh), sourced with OUT set:
#   step NAME LOG CMD...   runs CMD, appending its output to OUT/LOG, and
#                          records "ok" or "FAILED(rc)" and the seconds;
#   summary                writes the table of steps to OUT/summary.txt;
#   runtime_gpu            the runtime's GPU smoke test, a step of both.
declare -A STATUS

step() {
  local name=$1 log=$2; shift 2
  echo "== $name ==" | tee -a "$OUT/$log"
  local t0=$SECONDS
  "$@" >>"$OUT/$log" 2>&1
  local rc=$?
  STATUS[$name]="$([ $rc -eq 0 ] && echo ok || echo "FAILED($rc)") $((SECONDS - t0))s"
  tail -n 5 "$OUT/$log"
}

summary() {
  {
    echo "step                 result"
    for k in "${!STATUS[@]}"; do printf '%-20s %s\n' "$k" "${STATUS[$k]}"; done | sort
  } | tee "$OUT/summary.txt"
}

# The runtime's GPU smoke test (SMLA_RUNTIME_GPU_TESTS: a cubin built by
# nvcc, loaded and launched through a manifest by the driver API), built
# from runtime/ into build-rt-gpu. On the GPU machine a skip (exit 77) is a
# failure.
runtime_gpu() {
  cmake -S runtime -B build-rt-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DSMLA_RUNTIME_GPU_TESTS=ON -DSMLA_RUNTIME_BUILD_TESTS=OFF \
    -DSMLA_RUNTIME_BUILD_TOOLS=OFF &&
    cmake --build build-rt-gpu -j "$(nproc)" &&
    build-rt-gpu/smla_runtime_gpu_smoke build-rt-gpu/smla_smoke.cubin \
      "$OUT/runtime-smoke-kernels"
}
