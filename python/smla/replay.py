"""Replay a dumped sparse_mla_bwd call: ``python -m smla.replay DUMP``.

Runs a candidate backend (``--backend``, default "compiled") and a baseline
(``--baseline``), and prints per output (dq, dkv, and d_sink for a call
with an attention sink): NaN/Inf counts, max abs
and max rel error on the finite overlap, the relative Frobenius error, the
guard counters and the time of each backend. If the dump holds the outputs
the failing backend produced (observed_dq/observed_dkv), they are compared
with the baseline too.

Backends: compiled, checked (the CUDA kernels; need smla._C and a GPU),
reference (fp32 PyTorch), reference64 (float64 PyTorch). If the compiled
kernels are unavailable the candidate falls back to "reference", and says so.
The baseline defaults to "reference" for a compiled candidate and to
"reference64" for a reference candidate.

Pass criterion: the candidate is finite and, for dq and dkv, the relative
Frobenius error ||cand - base||_F / ||base||_F <= --tol (default 1e-2: bf16
outputs vs an fp32 reference), and so for d_sink. Max rel error is max|cand - base| / max|base|.

Exit status: 0 pass, 1 non-finite result, mismatch or a backend that
raised, 2 unusable dump (unreadable, refused by the safe unpickler, over
--max-bytes, malformed) or arguments.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Dict

import torch

from . import _compiled
from .api import sparse_mla_bwd
from .dump import DEFAULT_MAX_LOAD_BYTES, call_kwargs, load_call
from .reference import sparse_mla_bwd_reference

BACKENDS = ("compiled", "checked", "reference", "reference64")
DEFAULT_TOL = 1e-2


def run_backend(name: str, kw: Dict, baseline: bool = False):
    """(dq, dkv, d_sink or None, counters). A candidate returns the dump's
    output dtypes (as the compiled kernel would); a baseline returns
    unrounded fp32/fp64."""
    if name in ("compiled", "checked"):
        res = sparse_mla_bwd(**kw, diagnostics=True, mode=name)
    elif name == "reference":
        if baseline:
            kw = dict(kw, dq_dtype=torch.float32, dkv_dtype=torch.float32)
        res = sparse_mla_bwd(**kw, diagnostics=True, mode="reference")
    elif name == "reference64":
        args = [kw[k] for k in ("q", "kv", "o", "do", "indices", "lse")]
        sink = kw["attn_sink"]
        res = sparse_mla_bwd_reference(
            *args, kw["sm_scale"], lse_base=kw["lse_base"], q_positions=kw["q_positions"],
            delta=kw["delta"], attn_sink=None if sink is None else sink.double(),
            topk_length=kw["topk_length"], dq_dtype=torch.float64, dkv_dtype=torch.float64,
            dtype=torch.float64, diagnostics=True,
        )
    else:
        raise ValueError(f"unknown backend {name!r}")
    return res[0], res[1], (res[2] if len(res) == 4 else None), res[-1]


def timed(name: str, kw: Dict, device: torch.device, baseline: bool = False,
          warmup: int = 0, repeat: int = 1):
    """Result of the last run and the median time in ms over ``repeat`` runs."""
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    for _ in range(warmup):
        run_backend(name, kw, baseline)
    times = []
    for _ in range(max(1, repeat)):
        sync()
        t0 = time.perf_counter()
        res = run_backend(name, kw, baseline)
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return res, sorted(times)[len(times) // 2]


def compare(cand: torch.Tensor, base: torch.Tensor) -> Dict[str, float]:
    """NaN/Inf counts of cand and its error vs base on the finite overlap."""
    a, b = cand.double(), base.double()
    both = torch.isfinite(a) & torch.isfinite(b)
    diff = torch.where(both, a - b, torch.zeros((), dtype=a.dtype, device=a.device))
    ref = torch.where(both, b, torch.zeros((), dtype=b.dtype, device=b.device))
    max_abs = float(diff.abs().max()) if diff.numel() else 0.0
    ref_max = float(ref.abs().max()) if ref.numel() else 0.0
    num, den = float(diff.norm()), float(ref.norm())
    return {
        "nan": int(torch.isnan(a).sum()),
        "inf": int(torch.isinf(a).sum()),
        "max_abs": max_abs,
        "max_rel": max_abs / ref_max if ref_max > 0 else (0.0 if max_abs == 0 else float("inf")),
        "rel_fro": num / den if den > 0 else (0.0 if num == 0 else float("inf")),
    }


def _fmt(name: str, st: Dict[str, float]) -> str:
    return (f"{name:<13} nan={st['nan']} inf={st['inf']} | finite overlap: "
            f"max_abs={st['max_abs']:.3e} max_rel={st['max_rel']:.3e} rel_fro={st['rel_fro']:.3e}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m smla.replay", description=__doc__.split("\n")[0])
    p.add_argument("dump", help="file written by smla.dump_call or smla.synthetic")
    p.add_argument("--backend", choices=BACKENDS, default="compiled")
    p.add_argument("--baseline", choices=BACKENDS, default=None)
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--tol", type=float, default=DEFAULT_TOL,
                   help="max relative Frobenius error (default 1e-2)")
    p.add_argument("--warmup", type=int, default=None,
                   help="untimed runs per backend first (default: 1 on cuda, 0 on cpu)")
    p.add_argument("--repeat", type=int, default=1, help="timed runs; the median is shown")
    p.add_argument("--max-bytes", type=int, default=DEFAULT_MAX_LOAD_BYTES,
                   help="refuse dumps larger than this (default 64 GiB)")
    args = p.parse_args(argv)

    try:
        rec = load_call(args.dump, max_bytes=args.max_bytes)
    except (OSError, ValueError, TypeError, RuntimeError) as exc:
        print(f"error: cannot use dump: {exc}", file=sys.stderr)
        return 2
    try:
        device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    except RuntimeError as exc:
        print(f"error: argument --device: {exc}", file=sys.stderr)
        return 2
    cand = args.backend
    why = "no CUDA device" if device.type != "cuda" else _compiled.unavailable_reason(device)
    if cand in ("compiled", "checked") and why is not None:
        print(f"note: backend '{cand}' unavailable ({why}); falling back to --backend reference")
        cand = "reference"
    base = args.baseline or ("reference64" if cand.startswith("reference") else "reference")
    kw = call_kwargs(rec, device)
    warm = args.warmup if args.warmup is not None else int(device.type == "cuda")
    q, kv, idx = kw["q"], kw["kv"], kw["indices"]
    print(f"dump: {args.dump}  T={q.shape[0]} H={q.shape[1]} G={kv.shape[1]} S_kv={kv.shape[0]} "
          f"K={idx.shape[2]} D={kw['o'].shape[2]} Dt={q.shape[2] - kw['o'].shape[2]} "
          f"sm_scale={kw['sm_scale']:.6g} lse_base={kw['lse_base']} "
          f"q_positions={'yes' if kw['q_positions'] is not None else 'no'} device={device}")
    if rec["meta"]:
        print(f"meta: {rec['meta']}")

    try:
        (c_dq, c_dkv, c_sink, c_cnt), c_ms = timed(cand, kw, device, False, warm,
                                                   args.repeat)
    except (RuntimeError, ValueError, TypeError) as exc:
        print(f"result: FAIL (backend {cand} raised {type(exc).__name__}: {exc})")
        return 1
    try:
        (b_dq, b_dkv, b_sink, b_cnt), b_ms = timed(base, kw, device, True, warm,
                                                   args.repeat)
    except (RuntimeError, ValueError, TypeError) as exc:
        print(f"result: FAIL (baseline {base} raised {type(exc).__name__}: {exc})")
        return 1
    print(f"time: {cand} {c_ms:.2f} ms, {base} {b_ms:.2f} ms")
    print(f"counters: {cand} {c_cnt}; {base} {b_cnt}")

    ok, reasons = True, []
    outputs = [("dq", c_dq, b_dq), ("dkv", c_dkv, b_dkv)]
    if c_sink is not None:
        outputs.append(("d_sink", c_sink, b_sink))
    for name, c, b in outputs:
        st = compare(c, b)
        bad = st["nan"] + st["inf"] > 0 or st["rel_fro"] > args.tol
        print(_fmt(f"{name} ({cand})", st) + ("  FAIL" if bad else "  ok"))
        if st["nan"] + st["inf"]:
            reasons.append(f"{name} has {st['nan']} NaN and {st['inf']} Inf")
        elif st["rel_fro"] > args.tol:
            reasons.append(f"{name} rel_fro {st['rel_fro']:.3e} > tol {args.tol:.1e}")
        if not bool(torch.isfinite(b).all()):
            reasons.append(f"baseline {base} {name} is non-finite (non-finite inputs?)")
        ok = ok and not bad
    for name, base_t in (("observed_dq", b_dq), ("observed_dkv", b_dkv)):
        if rec[name] is not None:
            print(_fmt(name, compare(rec[name].to(device), base_t)) + "  (from the dump)")
    ok = ok and not reasons
    print("result: PASS" if ok else f"result: FAIL ({'; '.join(reasons)})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
