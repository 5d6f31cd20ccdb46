"""The floor of one backward call, measured in the process that times it
(bench_bwd.py; issue 47): the larger of

* the reduction floor: the fp32 dKV rows a per-token kernel must add (one
  row of D + Dt floats per valid slot), timed as `red.global.add.v4.f32`
  of whole 128-byte lines into a buffer of the shape's dKV size, in the
  shape's own index order (bench/red_layout.cu measures the same
  instruction by layout; this probe is that measurement on the shape);
* the tensor floor: the shape's flops on its valid slots
  (smla.contract.flop_count per slot) at the bf16 GEMM rate measured in
  the same process.

The union sizes of pairs and of groups of 4 neighbouring tokens
(smla.indices.overlap_stats over every query) say what summing shared keys
on chip would leave of the reduction bytes; the floor itself assumes one
reduction per (token, valid slot), as today's kernels do.

The probe kernel is compiled at run time by NVRTC (torch.cuda's kernel
compiler, no nvcc needed), else by nvcc through
torch.utils.cpp_extension.load_inline; without either (or without a CUDA
device) the reduction floor is reported as not measured and the floor is
the tensor floor.
"""

from __future__ import annotations

import torch

from smla.contract import flop_count, slot_validity
from smla.indices import overlap_stats

_KERNEL_NAME = "smla_red_rows"
# One CTA per token at a time; its warps split the token's slots four at a
# time: lanes 8i..8i+7 hold slot j0+i's row, one 16-byte quarter-line each,
# so every instruction adds 4 whole 128-byte lines (for widths that are a
# multiple of 32 floats, as 576 and 512 are). Invalid slots (-1) add nothing.
_KERNEL = r"""
extern "C" __global__ void __launch_bounds__(512)
smla_red_rows(float* dkv, const int* rows, int tokens, int slots, int width, int kv_rows) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int sub = lane >> 3, quad = lane & 7;
  const int lines = (width + 31) / 32;
  const float v = 1.0f / 1024.0f;
  for (int t = blockIdx.x; t < tokens; t += gridDim.x) {
    const int* row = rows + (long long)t * slots;
    for (int j0 = warp * 4; j0 < slots; j0 += warps * 4) {
      const int j = j0 + sub;
      const int r = j < slots ? row[j] : -1;
      if (r < 0 || r >= kv_rows) continue;
      float* base = dkv + (long long)r * width + quad * 4;
      for (int l = 0; l < lines; ++l)
        if (l * 32 + quad * 4 < width)
          asm volatile("red.global.add.v4.f32 [%0], {%1, %1, %1, %1};"
                       :: "l"(base + l * 32), "f"(v) : "memory");
    }
  }
}
"""
_LAUNCHER = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
""" + _KERNEL + r"""
void launch(torch::Tensor dkv, torch::Tensor rows, int64_t tokens, int64_t slots,
            int64_t width, int64_t kv_rows, int64_t grid, int64_t block) {
  smla_red_rows<<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
      dkv.data_ptr<float>(), rows.data_ptr<int>(), tokens, slots, width, kv_rows);
}
"""
_BLOCK = 512
_probe = None  # (launch, how) or the reason it is unavailable, once per process


def kernel_source() -> str:
    """The probe kernel's CUDA source (NVRTC-compilable)."""
    return _KERNEL


def probe():
    """(launch, how): launch(dkv, rows, tokens, slots, width, kv_rows, grid,
    block) runs the probe on the current stream; ``how`` names the compiler.
    Raises RuntimeError saying why when it cannot be built."""
    global _probe
    if _probe is None:
        _probe = _build()
    if isinstance(_probe, str):
        raise RuntimeError(_probe)
    return _probe


def _build():
    reasons = []
    compile_kernel = getattr(torch.cuda, "compile_kernel", None) or getattr(
        torch.cuda, "_compile_kernel", None)
    if compile_kernel is not None:
        try:
            k = compile_kernel(_KERNEL, _KERNEL_NAME)

            def launch(dkv, rows, tokens, slots, width, kv_rows, grid, block):
                k(grid=(grid, 1, 1), block=(block, 1, 1),
                  args=[dkv, rows, tokens, slots, width, kv_rows])
            _check(launch)
            return launch, "NVRTC (torch.cuda kernel compiler)"
        except Exception as e:  # no libnvrtc, or a compile error: try nvcc
            reasons.append(f"NVRTC: {_last_line(e)}")
    else:
        reasons.append("NVRTC: this torch has no torch.cuda kernel compiler")
    print(f"  floors: {reasons[-1]}; building the reduction probe with nvcc "
          f"(torch.utils.cpp_extension, a minute or more)", flush=True)
    try:
        from torch.utils.cpp_extension import load_inline

        mod = load_inline(
            "smla_red_probe",
            cpp_sources="void launch(torch::Tensor, torch::Tensor, int64_t, int64_t, int64_t, "
                        "int64_t, int64_t, int64_t);",
            cuda_sources=_LAUNCHER, functions=["launch"], extra_cuda_cflags=["-O3"])
        _check(mod.launch)
        return mod.launch, "nvcc (torch.utils.cpp_extension.load_inline)"
    except Exception as e:  # no nvcc / ninja / CUDA headers
        reasons.append(f"nvcc: {_last_line(e)}")
    return "could not build the reduction probe (" + "; ".join(reasons) + ")"


def _last_line(e):
    text = str(e).strip()
    return text.splitlines()[-1] if text else repr(e)


def _check(launch):
    """One small launch: slots [1, -1, 1] of one token add two 40-float rows
    (a whole line and a part line) to row 1 of three."""
    dkv = torch.zeros(3, 40, dtype=torch.float32, device="cuda")
    launch(dkv, torch.tensor([[1, -1, 1]], dtype=torch.int32, device="cuda"), 1, 3, 40, 3, 1, 64)
    want = torch.zeros_like(dkv)
    want[1] = 2 / 1024
    if not torch.equal(dkv, want):
        raise RuntimeError("the probe's test launch added the wrong values")


def slot_rows(indices, s_kv, q_positions=None):
    """int32 [T*G, K]: the fp32 dKV row ([S_kv*G, D+Dt], group-major rows
    s*G+g) each slot adds to, or -1 for an invalid slot; and the count of
    valid slots."""
    T, G, K = indices.shape
    valid = slot_validity(indices, s_kv, q_positions)
    g = torch.arange(G, device=indices.device, dtype=torch.int64).view(1, G, 1)
    rows = torch.where(valid, indices.long() * G + g, -1)
    return rows.to(torch.int32).reshape(T * G, K).contiguous(), int(valid.sum())


def reduction_bytes(p, spec):
    """Bytes of fp32 dKV rows per token (valid slots), and what the unions
    of pairs and of groups of 4 neighbouring tokens would leave."""
    T, S, H, G, D, Dt, K, kind = spec
    row = (D + Dt) * 4
    _, valid = slot_rows(p["indices"], S, p["q_positions"])
    out = {"valid_slots": valid, "row_bytes": row, "token": valid * row}
    for b, name in ((2, "pair"), (4, "group4")):
        union = 0.0
        for g in range(G):
            st = overlap_stats(p["indices"], group=g, block_sizes=(b,), s_kv=S)
            union += st[f"union_{b}"] * K * (T // b)
        out[f"{name}_union_per_k"] = union / (G * (T // b) * K)
        out[name] = union * row
    return out


def reduction_rate(p, spec, timer):
    """The probe on this shape: {"ms", "tbps", "how", "grid"} for its
    per-token reductions, or {"error": why} when it cannot run here."""
    T, S, H, G, D, Dt, K, kind = spec
    if not p["q"].is_cuda:
        return {"error": "not measured: no CUDA device"}
    try:
        launch, how = probe()
    except RuntimeError as e:
        return {"error": f"not measured: {e}"}
    rows, valid = slot_rows(p["indices"], S, p["q_positions"])
    width = D + Dt
    dkv = torch.zeros(S * G, width, dtype=torch.float32, device=p["q"].device)
    sms = torch.cuda.get_device_properties(p["q"].device).multi_processor_count
    runs = [0]
    best = None
    for ctas in (sms, 2 * sms, 4 * sms):
        def run(ctas=ctas):
            launch(dkv, rows, T * G, K, width, S * G, ctas, _BLOCK)
            runs[0] += 1
        ms = timer(run, p["q"].device, 1, 3)
        if best is None or ms < best[0]:
            best = (ms, ctas)
    # Every run added 1/1024 to every element of every valid slot's row:
    # exact in fp32 at these counts, so the sum checks the probe's coverage.
    got, want = float(dkv.double().sum()), runs[0] * valid * width / 1024
    if abs(got - want) > 1e-6 * want:
        raise RuntimeError(f"floors: the reduction probe added {got}, expected {want}")
    nbytes = valid * width * 4
    return {"ms": best[0], "tbps": nbytes / best[0] / 1e9, "how": how, "grid": best[1]}


def floor(p, spec, gemm_tflops, timer):
    """The shape's floor: reduction and tensor floors, the larger and its kind."""
    T, S, H, G, D, Dt, K, kind = spec
    red = reduction_bytes(p, spec)
    rate = reduction_rate(p, spec, timer)
    flops = flop_count(1, H // G, 1, D, Dt) * red["valid_slots"]
    out = {"bytes": red, "rate": rate, "flops_valid": flops,
           "tensor_ms": flops / (gemm_tflops * 1e9)}
    if "ms" in rate:
        out["reduction_ms"] = rate["ms"]
        # what the unions would take at the same rate (their bytes scale it)
        for name in ("pair", "group4"):
            out[f"{name}_reduction_ms"] = rate["ms"] * red[name] / max(red["token"], 1)
    if out.get("reduction_ms", 0.0) > out["tensor_ms"]:
        out["ms"], out["kind"] = out["reduction_ms"], "reduction"
    else:
        out["ms"], out["kind"] = out["tensor_ms"], "tensor"
    return out


def describe(f, gemm_tflops) -> str:
    """The floor as the harness prints it (two lines)."""
    red, rate = f["bytes"], f["rate"]
    gb = red["token"] / 1e9
    if "ms" in rate:
        head = (f"reduction {rate['ms']:.3f} ms ({gb:.3g} GB at {rate['tbps']:.2f} TB/s: "
                f"red.global.add.v4.f32 of whole 128-byte lines, this shape's dKV and indices, "
                f"{rate['how']})")
    else:
        head = f"reduction of {gb:.3g} GB {rate['error']}"
    at = {n: (f", {f[f'{n}_reduction_ms']:.3f} ms" if f"{n}_reduction_ms" in f else "")
          for n in ("pair", "group4")}
    share = (f"one reduction per (token, valid slot): {red['valid_slots']} slots x "
             f"{red['row_bytes']} B; pairs' key unions would leave "
             f"{red['pair'] / max(red['token'], 1):.0%} ({red['pair_union_per_k']:.2f} K per "
             f"pair{at['pair']}), groups of 4 {red['group4'] / max(red['token'], 1):.0%} "
             f"({red['group4_union_per_k']:.2f} K per group{at['group4']})")
    return (f"  floor {f['ms']:.3f} ms ({f['kind']}): {head}; tensor {f['tensor_ms']:.3f} ms "
            f"({f['flops_valid'] / 1e12:.3g} TFLOP on valid slots at {gemm_tflops:.3g} "
            f"TFLOP/s)\n  floor's sharing assumption: {share}")
