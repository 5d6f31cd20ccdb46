#!/usr/bin/env bash
# The installation check on an H200 machine (torch, a C++ compiler, CMake
# and the CUDA headers; nvcc for the runtime step; no LLVM, no network):
# installs the distribution that scripts/dist.sh built into a fresh virtual
# environment with one pip command, then, against that installed package
# (not python/ of this tree):
#   runtime  the runtime's GPU smoke test against the real driver (from
#            runtime/ of this tree; scripts/steps.sh)
#   info     python -m smla.info, which builds the extension against this
#            machine's torch (first use) and lists the kernels for the device
#   replay   the GLM-5.2 replay (synthetic dump of the reported event, H=16,
#            compiled vs reference, 0 NaN/Inf) and the same at H=8 (TP8)
#   configs  test/python/test_gpu_configs.py: every library configuration
#            (H=8..128, both lse bases, positions, bf16 and fp32 dq/dkv) and
#            H=8 token pairs against the reference, the device check, the
#            slow-path warnings, the debug log
#   guards   test/python/test_gpu_guards.py: the non-finite row counter on
#            every kernel form (H=8 and fp32 outputs included), checked mode
#            on the kernels, a q of more than 2^31 elements
#   sync     test/python/test_gpu_sync.py: packed training (T changing every
#            call) under torch.cuda.set_sync_debug_mode("error")
#   heads    test/python/test_gpu_heads.py: every H from 1 to 128 (padded
#            heads), a caller's delta (SparseMLA's lse gradient) on every
#            kernel form, strided and misaligned inputs
#   dsv4     test/python/test_gpu_dsv4.py: DeepSeek-V4's D=512, Dt=0
#            kernels with an attention sink and topk_length, both
#            client-shaped entry points
#   lengths  test/python/test_gpu_lengths.py: topk_length on every other
#            kernel form (masked copies, token pairs, the sorted walk), the
#            op's Delta
#   gpu      test/python/test_gpu.py, the whole GPU suite
# Logs to OUT (NAME.log per step), a summary table last; exit 1 if a step
# failed.
#   bash scripts/gpu-install-check.sh dist/smla-<version>-py3-none-any.whl OUT
#   SMLA_CHECK_STEPS="runtime info replay configs guards sync heads dsv4 lengths gpu" selects
#   steps.
# About 6 to 7 minutes on an H200 (the extension's build and the whole GPU
# suite about a minute each, the new configurations' tests about two, the
# guards and the runtime's build about a minute together).
set -uo pipefail
cd "$(dirname "$0")/.."
DIST=$(realpath "${1:?usage: scripts/gpu-install-check.sh DIST.whl OUT}")
OUT=$(mkdir -p "${2:?usage: scripts/gpu-install-check.sh DIST.whl OUT}" && cd "$2" && pwd)
STEPS=${SMLA_CHECK_STEPS:-runtime info replay configs guards sync heads dsv4 lengths gpu}
source scripts/steps.sh

# The install: the README's `pip install smla-<version>-py3-none-any.whl`,
# into a fresh environment that reuses this machine's torch (no network:
# --no-index; --no-deps keeps pip from checking torch's own dependencies
# against the environment's bundled setuptools).
# Where the image's Python has no ensurepip (Debian's python3-venv missing),
# the environment gets no pip of its own and the system's pip installs into
# it (pip >= 22.3: --python).
VENV="$OUT/venv"
PY="$VENV/bin/python"
rm -rf "$VENV" "$OUT/cache"
# Where python3 itself runs in a virtual environment (torch installed in
# one, as on images that ship /opt/torch/.venv), --system-site-packages
# reaches only the base interpreter's packages: a .pth file puts that
# environment's site-packages after the new one's.
inherit_env() {
  local site parent
  site=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  parent=$(python3 -c 'import site, sys; print("\n".join(site.getsitepackages()) if sys.prefix != sys.base_prefix else "")')
  [ -n "$parent" ] && printf '%s\n' "$parent" >"$site/_smla_check_parent_env.pth"
  return 0
}
install() {
  if python3 -m venv --system-site-packages "$VENV"; then
    inherit_env && "$PY" -m pip install --no-index --no-deps "$DIST"
  else
    rm -rf "$VENV" && python3 -m venv --system-site-packages --without-pip "$VENV" &&
      inherit_env && python3 -m pip --python "$PY" install --no-index --no-deps "$DIST"
  fi
}
step install install.log install
export SMLA_CACHE_DIR="$OUT/cache" SMLA_EXPECT_INSTALLED=1 SMLA_REQUIRE_GPU=1 PYTHONUNBUFFERED=1
unset SMLA_KERNEL_DIR PYTHONPATH
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$OUT/gpu.txt" 2>&1

if [[ " $STEPS " == *" runtime "* ]]; then
  step runtime-gpu runtime-gpu.log runtime_gpu
fi

if [[ " $STEPS " == *" info "* ]]; then
  step info info.log bash -c "cd / && '$PY' -m smla.info"
fi
if [[ " $STEPS " == *" replay "* ]]; then
  replay() {  # the compiled backend, never the reference replay falls back to
    (cd / && "$PY" -m smla.synthetic "$OUT/glm52.pt" --kv 16384 --topk 2048 --device cuda &&
      "$PY" -m smla.replay "$OUT/glm52.pt" --backend compiled &&
      "$PY" -m smla.synthetic "$OUT/glm52_h8.pt" --kv 16384 --topk 2048 --heads 8 \
        --device cuda &&
      "$PY" -m smla.replay "$OUT/glm52_h8.pt" --backend compiled) >"$OUT/replay.out" 2>&1
    local rc=$?
    cat "$OUT/replay.out"
    ! grep -q "falling back" "$OUT/replay.out" && return $rc
  }
  step replay replay.log replay
  rm -f "$OUT/glm52.pt" "$OUT/glm52_h8.pt"
fi
for name in configs guards sync heads dsv4 lengths gpu; do
  [[ " $STEPS " == *" $name "* ]] || continue
  file=test/python/test_gpu_$name.py
  [ "$name" = gpu ] && file=test/python/test_gpu.py
  step "$name" "$name.log" "$PY" -m pytest -q -rs "$file" \
    test/python/test_packaging.py::test_installed_package_is_under_test \
    --junitxml="$OUT/$name.xml"
done

summary
grep -q FAILED "$OUT/summary.txt" && exit 1 || exit 0
