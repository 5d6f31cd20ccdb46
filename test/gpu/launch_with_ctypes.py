#!/usr/bin/env python3
"""The kernel library's cubins on the GPU without the runtime or the torch
extension: a check of the cubins alone.

Loads out/kernels/manifest.json (built on the compiler machine by
smla-compile), launches the kernels with the CUDA driver API through ctypes
on torch's context, and compares dq/dkv to an fp32 PyTorch reference of the
contract on random inputs with -1 padding, out-of-range and non-causal
indices, and dead rows (lse = -inf, +inf, NaN; rows with no valid slot).

  python3 test/gpu/launch_with_ctypes.py --kernels out/kernels            # GLM-5.2 shape
  python3 test/gpu/launch_with_ctypes.py --kernels out/kernels --small    # memcheck size

sm_scale is a run-time f32 kernel parameter (not in the manifest config):
the cases use non-default scales (--scale, default 0.1352 for the GLM shape)
so a kernel that ignored it would fail.
"""
import argparse
import ctypes
import json
import math
import os
import sys
import time

import torch

LOG2E = 1.4426950408889634
CLAMP = 32.0

_cuda = ctypes.CDLL("libcuda.so.1")


def check(rc, what):
    if rc != 0:
        name = ctypes.c_char_p()
        _cuda.cuGetErrorName(rc, ctypes.byref(name))
        raise RuntimeError(f"{what} failed: {rc} {name.value}")


class Kernels:
    """The manifest's kernels, loaded into torch's current context."""

    def __init__(self, folder):
        torch.cuda.init()
        torch.zeros(1, device="cuda")
        self.folder = folder
        self.manifest = json.load(open(os.path.join(folder, "manifest.json")))
        self.modules = {}

    def find(self, kind, **config):
        for k in self.manifest["kernels"]:
            if k["kind"] != kind:
                continue
            if all(k["config"].get(key) == v for key, v in config.items()):
                return k
        raise KeyError(f"no {kind} kernel with {config}")

    def function(self, entry):
        path = os.path.join(self.folder, entry["cubin"])
        if path not in self.modules:
            data = open(path, "rb").read()
            mod = ctypes.c_void_p()
            check(_cuda.cuModuleLoadData(ctypes.byref(mod), data), "cuModuleLoadData")
            self.modules[path] = mod
        fn = ctypes.c_void_p()
        check(_cuda.cuModuleGetFunction(ctypes.byref(fn), self.modules[path],
                                        entry["entry"].encode()), "cuModuleGetFunction")
        smem = entry["launch"]["dynamic_smem"]
        if smem > 48 * 1024:
            check(_cuda.cuFuncSetAttribute(fn, 8, ctypes.c_int(smem)),
                  "cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)")
        return fn

    def launch(self, entry, fn, sizes, tensors):
        def dim(x):
            if isinstance(x, int):
                return x
            if x.startswith("ceil_div("):
                v, d = x[9:-1].split(",")
                return -(-sizes[v.strip()] // int(d))
            return sizes[x]

        grid = [dim(x) for x in entry["launch"]["grid"]]
        block = entry["launch"]["block"]
        holders = []
        for p in entry["params"]:
            if p["type"] == "ptr":
                t = tensors.get(p["name"])
                holders.append(ctypes.c_uint64(0 if t is None else t.data_ptr()))
            elif p["type"] == "f32":
                holders.append(ctypes.c_float(sizes[p["name"]]))
            else:
                holders.append(ctypes.c_int32(sizes[p["name"]]))
        args = (ctypes.c_void_p * len(holders))(
            *[ctypes.cast(ctypes.pointer(h), ctypes.c_void_p) for h in holders])
        stream = torch.cuda.current_stream().cuda_stream
        check(_cuda.cuLaunchKernel(fn, *grid, *block, entry["launch"]["dynamic_smem"],
                                   ctypes.c_void_p(stream), args, None),
              "cuLaunchKernel " + entry["entry"])


def smla_bwd(lib, cfg, q, kv, o, do, idx, lse, pos, counters, scale):
    T, H, W = q.shape
    S, G, _ = kv.shape
    K = idx.shape[2]
    sizes = {"T": T, "S_kv": S, "K": K, "H": H, "G": G, "sm_scale": scale,
             "walk_period": 0}  # the given slot order (docs/compiler.md)
    ents = {k: lib.find(k, **cfg) for k in ("dkv_zero", "bwd")}
    if cfg["dkv_type"] == "bf16":
        ents["dkv_cast"] = lib.find("dkv_cast", **cfg)
    fns = {k: lib.function(e) for k, e in ents.items()}
    dq = torch.empty(T, H, W, dtype=torch.float32 if cfg["dq_type"] == "f32" else torch.bfloat16, device="cuda")
    acc = torch.empty(S, G, W, dtype=torch.float32, device="cuda")
    dkv = torch.empty(S, G, W, dtype=torch.bfloat16, device="cuda") if "dkv_cast" in ents else acc
    ts = dict(q=q, kv=kv, o=o, do=do, indices=idx, lse=lse, q_positions=pos, dq=dq,
              dkv_accum=acc, dkv=dkv, counters=counters)

    def run():
        lib.launch(ents["dkv_zero"], fns["dkv_zero"], sizes, ts)
        lib.launch(ents["bwd"], fns["bwd"], sizes, ts)
        if "dkv_cast" in ents:
            lib.launch(ents["dkv_cast"], fns["dkv_cast"], sizes, ts)

    assert "sm_scale" not in ents["bwd"]["config"], "stale manifest: sm_scale is baked in"
    return run, dq, dkv


def reference(q, kv, o, do, idx, lse, pos, scale, lse_base2, chunk=128):
    """fp32 contract reference (docs/contract.md), chunked over tokens."""
    T, H, W = q.shape
    S, G, _ = kv.shape
    D = o.shape[2]
    Hg = H // G
    lse2 = lse.float() if lse_base2 else lse.float() * LOG2E
    dq = torch.zeros(T, H, W, device=q.device)
    dkv = torch.zeros(S * G, W, device=q.device)
    for t0 in range(0, T, chunk):
        t1 = min(T, t0 + chunk)
        n = t1 - t0
        ix = idx[t0:t1].long()                                   # n G K
        valid = (ix >= 0) & (ix < S)
        if pos is not None:
            valid &= ix <= pos[t0:t1].long().view(n, 1, 1)
        safe = torch.where(valid, ix, torch.zeros_like(ix))
        flat = safe * G + torch.arange(G, device=q.device).view(1, G, 1)
        k = kv.reshape(S * G, W)[flat].float()                   # n G K W
        k = torch.where(valid.unsqueeze(-1), k, torch.zeros((), device=q.device))
        qc = q[t0:t1].float().view(n, G, Hg, W)
        dc = do[t0:t1].float().view(n, G, Hg, D)
        delta = (o[t0:t1].float() * do[t0:t1].float()).sum(-1).view(n, G, Hg, 1)
        l2 = lse2[t0:t1].view(n, G, Hg, 1)
        live = torch.isfinite(l2) & valid.unsqueeze(2)
        s = torch.einsum("nghw,ngkw->nghk", qc, k)
        x2 = torch.clamp(s * (scale * LOG2E) - l2, max=CLAMP)
        p = torch.where(live, torch.exp2(x2), torch.zeros((), device=q.device))
        dp = torch.einsum("nghd,ngkd->nghk", dc, k[..., :D])
        ds = torch.where(live, p * (dp - delta) * scale, torch.zeros((), device=q.device))
        dq[t0:t1] = torch.einsum("nghk,ngkw->nghw", ds, k).reshape(n, H, W)
        c = torch.einsum("nghk,nghw->ngkw", ds, qc)
        c[..., :D] += torch.einsum("nghk,nghd->ngkd", p, dc)
        c = torch.where(valid.unsqueeze(-1), c, torch.zeros((), device=q.device))
        dkv.index_add_(0, flat.reshape(-1), c.reshape(-1, W))
    return dq, dkv.view(S, G, W)


def make_inputs(T, S, H, G, D, Dt, K, positions, lse_base2, seed, scale):
    g = torch.Generator(device="cuda").manual_seed(seed)
    W = D + Dt
    dev = "cuda"
    q = torch.randn(T, H, W, device=dev, generator=g).bfloat16()
    kv = torch.randn(S, G, W, device=dev, generator=g).bfloat16()
    o = torch.randn(T, H, D, device=dev, generator=g).bfloat16()
    do = torch.randn(T, H, D, device=dev, generator=g).bfloat16()
    # causal random: token t sits at kv position S - T + t
    posv = torch.arange(T, device=dev, dtype=torch.int32) + (S - T)
    r = torch.rand(T, G, K, device=dev, generator=g)
    idx = (r * (posv.view(T, 1, 1).float() + 1)).long().clamp(max=S - 1).int()
    junk = torch.rand(T, G, K, device=dev, generator=g)
    idx = torch.where(junk < 0.05, torch.full_like(idx, -1), idx)          # padding
    idx = torch.where((junk >= 0.05) & (junk < 0.06), idx + S, idx)        # >= S_kv
    idx = torch.where((junk >= 0.06) & (junk < 0.07), torch.full_like(idx, -7), idx)
    if positions:  # some indices past the token's position (masked by the rule)
        idx = torch.where((junk >= 0.07) & (junk < 0.09),
                          (posv.view(T, 1, 1) + 1).clamp(max=S - 1).expand_as(idx).int(), idx)
    idx[3] = -1                                                            # a row with no valid slot
    # a consistent lse from the forward, then dead rows
    pref = posv if positions else None
    lse = torch.empty(T, H, device=dev)
    for t0 in range(0, T, 128):
        t1 = min(T, t0 + 128)
        n = t1 - t0
        ix = idx[t0:t1].long()
        valid = (ix >= 0) & (ix < S)
        if positions:
            valid &= ix <= posv[t0:t1].long().view(n, 1, 1)
        safe = torch.where(valid, ix, torch.zeros_like(ix))
        flat = safe * G + torch.arange(G, device=dev).view(1, G, 1)
        k = kv.reshape(S * G, W)[flat].float()
        s = torch.einsum("nghw,ngkw->nghk", q[t0:t1].float().view(n, G, H // G, W), k)
        s2 = torch.where(valid.unsqueeze(2), s * scale * LOG2E, torch.full_like(s, -math.inf))
        l2 = torch.logsumexp(s2 / LOG2E, dim=-1) * LOG2E  # log2 sum exp2
        lse[t0:t1] = (l2 if lse_base2 else l2 / LOG2E).reshape(n, H)
    lse[5, 0] = -math.inf
    lse[6, H - 1] = math.inf
    lse[7, H // 2] = math.nan
    return q, kv, o, do, idx.contiguous(), lse, (posv if positions else None)


def rel(a, b):
    return (a.float() - b.float()).norm().item() / max(b.float().norm().item(), 1e-30)


def run_case(lib, T, S, H, G, D, Dt, K, positions, base2, dq_type, dkv_type, block, timing, seed,
             scale):
    cfg = dict(d=D, dt=Dt, heads=H, groups=G, positions=positions,
               lse_base=2 if base2 else "e", dq_type=dq_type, dkv_type=dkv_type)
    if block is not None:  # None: whichever block the library was built with
        cfg["block"] = block
    q, kv, o, do, idx, lse, pos = make_inputs(T, S, H, G, D, Dt, K, positions, base2, seed, scale)
    counters = torch.zeros(4, dtype=torch.int64, device="cuda")
    run, dq, dkv = smla_bwd(lib, cfg, q, kv, o, do, idx, lse, pos, counters, scale)
    dq.fill_(float("nan"))  # poison: every element must be written
    dkv.fill_(float("nan"))
    run()
    torch.cuda.synchronize()
    ref_dq, ref_dkv = reference(q, kv, o, do, idx, lse, pos, scale, base2)
    torch.cuda.synchronize()
    nan = int(torch.isnan(dq).sum() + torch.isnan(dkv).sum())
    inf = int(torch.isinf(dq).sum() + torch.isinf(dkv).sum())
    e_dq, e_dkv = rel(dq, ref_dq), rel(dkv, ref_dkv)
    name = f"T={T} S={S} H={H} G={G} D={D}+{Dt} K={K} scale={scale:g} pos={positions} base={'2' if base2 else 'e'} dq={dq_type} dkv={dkv_type}"
    tol = 1e-2  # bf16 tolerance: dS is rounded to bf16 for the dQ mma
    ok = nan == 0 and inf == 0 and e_dq < tol and e_dkv < tol
    print(f"[{'PASS' if ok else 'FAIL'}] {name}: rel err dq {e_dq:.2e} dkv {e_dkv:.2e}, "
          f"NaN {nan}, inf {inf}, counters {counters.tolist()}", flush=True)
    if timing:
        def med(fn, n):
            ts = []
            for _ in range(n):
                a, b = torch.cuda.Event(True), torch.cuda.Event(True)
                a.record(); fn(); b.record(); b.synchronize()
                ts.append(a.elapsed_time(b))
            ts.sort()
            return ts[len(ts) // 2]
        run(); torch.cuda.synchronize()
        t_smla = med(run, 10)
        t_ref = med(lambda: reference(q, kv, o, do, idx, lse, pos, scale, base2), 3)
        flops = 2 * T * H * K * (2 * D + 3 * (D + Dt))
        print(f"  time: smla {t_smla:.2f} ms ({flops / t_smla / 1e9:.1f} TFLOP/s), "
              f"torch eager fp32 reference {t_ref:.2f} ms, speed-up {t_ref / t_smla:.2f}x", flush=True)
    return ok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kernels", default="out/kernels")
    ap.add_argument("--small", action="store_true", help="small cases only (for compute-sanitizer)")
    ap.add_argument("--scale", type=float, default=0.1352, help="sm_scale of the GLM-shape cases")
    ap.add_argument("--glm-only", action="store_true", help="only the timed GLM-5.2 case")
    a = ap.parse_args()
    lib = Kernels(a.kernels)
    ok = True
    if not a.glm_only:
        ok &= run_case(lib, 64, 256, 4, 2, 64, 32, 100, True, True, "bf16", "bf16", 16, False, 1, 0.2)
        ok &= run_case(lib, 48, 200, 20, 2, 64, 32, 70, False, False, "f32", "f32", 32, False, 2,
                       96 ** -0.5)
    if not a.small:
        ok &= run_case(lib, 1024, 4096, 16, 1, 512, 64, 2048, True, True, "bf16", "bf16", None, True, 3,
                       a.scale)
    if not a.small and not a.glm_only:
        ok &= run_case(lib, 256, 4096, 16, 1, 512, 64, 2048, False, False, "bf16", "bf16", None, False, 4,
                       576 ** -0.5)
        ok &= run_case(lib, 64, 4096, 32, 1, 512, 64, 2048, True, True, "bf16", "bf16", None, False, 5,
                       a.scale)
        ok &= run_case(lib, 64, 4096, 64, 1, 512, 64, 2048, False, True, "bf16", "bf16", None, False, 6,
                       a.scale)
    print("ALL PASS" if ok else "SOME FAILED", flush=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
