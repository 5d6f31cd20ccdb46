# Step bookkeeping for the GPU machine's scripts (scripts/gpu.sh,
# scripts/gpu-install-check.sh), sourced with OUT set:
#   step NAME LOG CMD...   runs CMD, appending its output to OUT/LOG, and
#                          records "ok" or "FAILED(rc)" and the seconds;
#   summary                writes the table of steps to OUT/summary.txt.
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
