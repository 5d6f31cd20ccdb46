"""Context parallelism with an all-gathered kv: one sparse-MLA attention step
under torch.distributed, checked against the unsharded sequence.

Layout (Megatron's load-balanced CP): the sequence of S tokens is cut into 2N
equal chunks and rank r of N holds chunks r and 2N-1-r
(smla.indices.cp_positions) of q, kv and the output gradient. Each rank

  1. all-gathers kv (all_gather_into_tensor, so the buffer is rank-major)
     and puts the rows in sequence order: row p is the key at position p;
  2. selects its own top-k keys, as absolute positions into that buffer;
  3. calls SparseMLA (or the forward and sparse_mla_bwd) with its q shard,
     the gathered kv, those indices and q_positions = the absolute positions
     of its tokens, so that a slot is valid iff 0 <= idx < S and idx <= pos;
  4. reduces the gathered kv's gradient back to its own kv shard: the rows
     are put back in rank-major order and reduce-scattered (or all-reduced,
     keeping its own rows). dq needs no communication.

The indices model a raw top-k over causally masked scores: where a token
has fewer than K earlier keys, the remaining slots hold future keys, which
q_positions must mask; tokens at positions p % 37 == 11 select nothing
(dead rows).

  python examples/cp_allgather.py --world 4 --check              # gloo, CPU
  python examples/cp_allgather.py --world 2 --device cuda --check # NCCL, kernels
  torchrun --standalone --nproc-per-node 2 examples/cp_allgather.py --device cuda --check

--check gathers every rank's dq, dkv shard and guard counters on rank 0 and
compares them with the whole sequence computed in one process; --out FILE
saves them. The launcher starts --world local processes itself unless it
runs under torchrun (RANK and WORLD_SIZE set).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
from typing import Dict, List, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

try:
    import smla
except ImportError:  # run from a checkout without PYTHONPATH=python
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
    import smla
from smla.contract import COUNTER_NAMES
from smla.indices import cp_positions, dsa_like
from smla.replay import DEFAULT_TOL, compare

# Tokens at positions p with p % EMPTY_PERIOD == EMPTY_PHASE select no key.
EMPTY_PERIOD, EMPTY_PHASE = 37, 11
REDUCTIONS = ("reduce_scatter", "all_reduce")


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--world", type=int, default=2,
                   help="ranks to launch (ignored under torchrun)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--backend", default=None, help="default: gloo on cpu, nccl on cuda")
    p.add_argument("--mode", choices=smla.MODES, default=None,
                   help="backward mode (default: reference on cpu, compiled on cuda)")
    p.add_argument("--reduce", choices=REDUCTIONS, default="reduce_scatter",
                   help="how the autograd step reduces the gathered kv's gradient")
    p.add_argument("--seq-len", type=int, default=None,
                   help="S (default: 256 on cpu, 8192 on cuda)")
    p.add_argument("--heads", type=int, default=None, help="default: 4 on cpu, 16 on cuda")
    p.add_argument("--d", type=int, default=None, help="default: 32 on cpu, 512 on cuda")
    p.add_argument("--dt", type=int, default=None, help="default: 16 on cpu, 64 on cuda")
    p.add_argument("--topk", type=int, default=None, help="default: 48 on cpu, 2048 on cuda")
    p.add_argument("--groups", type=int, default=1)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=1,
                   help="timed backward calls per rank (the median is reported)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds for the process group's collectives and for the launch")
    p.add_argument("--check", action="store_true",
                   help="compare with the whole sequence on rank 0; exit 1 on a mismatch")
    p.add_argument("--json", default=None, help="with --check: write the figures to this file")
    p.add_argument("--out", default=None,
                   help="save every rank's results (torch.save, on rank 0) to this file")
    args = p.parse_args(argv)
    small = args.device == "cpu"
    for name, cpu, gpu in (("seq_len", 256, 8192), ("heads", 4, 16), ("d", 32, 512),
                           ("dt", 16, 64), ("topk", 48, 2048)):
        if getattr(args, name) is None:
            setattr(args, name, cpu if small else gpu)
    if under_torchrun():
        args.world = int(os.environ["WORLD_SIZE"])
    if args.world < 1 or args.seq_len % (2 * args.world) != 0:
        p.error(f"--seq-len {args.seq_len} must be divisible by 2 * world = {2 * args.world}")
    for name in ("heads", "d", "topk", "groups", "repeat"):
        if getattr(args, name) < 1:
            p.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.heads % args.groups != 0:
        p.error(f"--heads {args.heads} must be a multiple of --groups {args.groups}")
    args.backend = args.backend or ("gloo" if small else "nccl")
    args.mode = args.mode or ("reference" if small else "compiled")
    return args


# ---------------------------------------------------------------- inputs

def rank_indices(cfg, rank: int, world: int) -> torch.Tensor:
    """The top-k keys rank ``rank`` selects for its tokens, int32 [T, G, K] in
    absolute kv positions (the rank's own indexer: DSA-like scores)."""
    S, K = cfg.seq_len, cfg.topk
    pos = cp_positions(S, rank, world)
    idx = dsa_like(pos.numel(), S, K, seed=cfg.seed * 1009 + rank, groups=cfg.groups,
                   positions=pos, W=max(1, K // 2)).long()
    # A top-k over causally masked scores fills the slots past a token's
    # causal keys with future keys; smla's generators write -1 there.
    n_causal = (idx >= 0).sum(-1, keepdim=True)
    future = pos.view(-1, 1, 1) + 1 + torch.arange(K).view(1, 1, K) - n_causal
    idx = torch.where((idx < 0) & (future < S), future, idx)
    idx[pos % EMPTY_PERIOD == EMPTY_PHASE] = -1
    return idx.to(torch.int32)


def make_tensors(cfg) -> Dict[str, torch.Tensor]:
    """q, kv and do of the whole sequence, in position order, on the CPU,
    and the sm_scale (every rank builds them and keeps its own rows)."""
    S, H, G, D, Dt = cfg.seq_len, cfg.heads, cfg.groups, cfg.d, cfg.dt
    gen = torch.Generator().manual_seed(cfg.seed)

    def randn(*shape):
        return torch.randn(*shape, generator=gen).to(torch.bfloat16)

    return dict(q=randn(S, H, D + Dt), kv=randn(S, G, D + Dt), do=randn(S, H, D),
                sm_scale=(D + Dt) ** -0.5)


def make_problem(cfg, world: int) -> Dict[str, torch.Tensor]:
    """The whole sequence: make_tensors and the indices every rank selects,
    in position order."""
    prob = make_tensors(cfg)
    indices = torch.empty(cfg.seq_len, cfg.groups, cfg.topk, dtype=torch.int32)
    for r in range(world):
        indices[cp_positions(cfg.seq_len, r, world)] = rank_indices(cfg, r, world)
    prob["indices"] = indices
    return prob


# ---------------------------------------------------------- communication

class CPGroup:
    """The zigzag layout of one CP group: ``order[i]`` is the absolute
    position of row i of the rank-major all-gather buffer."""

    def __init__(self, seq_len: int, rank: int, world: int, group=None):
        self.rank, self.world, self.group = rank, world, group
        self.order = torch.cat([cp_positions(seq_len, r, world) for r in range(world)])
        self.positions = cp_positions(seq_len, rank, world)

    def gather_kv(self, kv_local: torch.Tensor) -> torch.Tensor:
        """[S/N, G, W] shard -> [S, G, W] in position order."""
        buf = kv_local.new_empty((self.world * kv_local.shape[0], *kv_local.shape[1:]))
        dist.all_gather_into_tensor(buf, kv_local.contiguous(), group=self.group)
        full = torch.empty_like(buf)
        full[self.order.to(buf.device)] = buf
        return full

    def reduce_dkv(self, dkv_full: torch.Tensor, how: str = "reduce_scatter") -> torch.Tensor:
        """Gradient of the gathered kv [S, G, W] -> this rank's shard, summed
        over the ranks."""
        if how == "reduce_scatter":
            rank_major = dkv_full.index_select(0, self.order.to(dkv_full.device)).contiguous()
            out = rank_major.new_empty((rank_major.shape[0] // self.world, *rank_major.shape[1:]))
            dist.reduce_scatter_tensor(out, rank_major, group=self.group)
            return out
        if how == "all_reduce":
            total = dkv_full.clone()
            dist.all_reduce(total, group=self.group)
            return total.index_select(0, self.positions.to(total.device))
        raise ValueError(f"argument 'how' must be one of {REDUCTIONS}, got {how!r}")


class GatheredKV(torch.autograd.Function):
    """All-gather kv in the forward, reduce its gradient in the backward."""

    @staticmethod
    def forward(ctx, kv_local, cp: CPGroup, how: str):
        ctx.cp, ctx.how = cp, how
        return cp.gather_kv(kv_local)

    @staticmethod
    def backward(ctx, dkv_full):
        return ctx.cp.reduce_dkv(dkv_full, ctx.how), None, None


# ------------------------------------------------------------ one CP step

def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def cp_step(cfg, tensors, idx: torch.Tensor, cp: CPGroup,
            device: torch.device) -> Dict[str, torch.Tensor]:
    """One rank's attention step with its indices ``idx``, twice: through
    autograd (SparseMLA on the gathered kv) and spelled out (forward,
    sparse_mla_bwd, reduction)."""
    pos = cp.positions
    q, do, kv_local = (tensors[k][pos].to(device) for k in ("q", "do", "kv"))
    idx = idx.to(device)
    q_positions = pos.to(device=device, dtype=torch.int32)
    scale, D = tensors["sm_scale"], cfg.d

    # The autograd step a model runs.
    smla.set_backward_mode(cfg.mode)
    q_leaf = q.clone().requires_grad_()
    kv_leaf = kv_local.clone().requires_grad_()
    kv_full = GatheredKV.apply(kv_leaf, cp, cfg.reduce)
    out, _ = smla.SparseMLA.apply(q_leaf, kv_full, idx, scale, D, q_positions)
    loss = (out.float() * do.float()).sum()  # d loss / d out = do
    loss.backward()

    # The same step spelled out, with the guard counters and timings.
    kv_full = cp.gather_kv(kv_local)
    with torch.no_grad():
        out, lse = smla.get_forward().fn(q, kv_full, idx, scale, d_v=D, q_positions=q_positions)
    times = []
    for _ in range(max(1, cfg.repeat)):
        _sync(device)
        t0 = time.perf_counter()
        dq, dkv_full, counters = smla.sparse_mla_bwd(
            q, kv_full, out, do, idx, lse, sm_scale=scale, q_positions=q_positions,
            diagnostics=True, mode=cfg.mode)
        _sync(device)
        t1 = time.perf_counter()
        dist.barrier(group=cp.group)  # time the reduction, not the wait for slower ranks
        _sync(device)
        t2 = time.perf_counter()
        dkv_rs = cp.reduce_dkv(dkv_full, "reduce_scatter")
        _sync(device)
        times.append((t1 - t0, time.perf_counter() - t2))
    bwd_s, reduce_s = (sorted(ts)[len(ts) // 2] for ts in zip(*times))
    dkv_ar = cp.reduce_dkv(dkv_full, "all_reduce")
    local = torch.tensor([counters[k] for k in COUNTER_NAMES], dtype=torch.int64, device=device)
    summed = local.clone()
    dist.all_reduce(summed, group=cp.group)
    return dict(dq=dq, dkv=dkv_rs, dkv_all_reduce=dkv_ar, dq_autograd=q_leaf.grad,
                dkv_autograd=kv_leaf.grad, counters=local, counters_summed=summed,
                times=torch.tensor([bwd_s, reduce_s], dtype=torch.float64, device=device))


def gather_results(res: Dict[str, torch.Tensor], cp: CPGroup) -> Optional[Dict[str, List]]:
    """Every rank's results as CPU tensors, on rank 0 (None elsewhere)."""
    gathered = {}
    for name, t in res.items():
        parts = [torch.empty_like(t) for _ in range(cp.world)]
        dist.all_gather(parts, t.contiguous(), group=cp.group)
        gathered[name] = [p.cpu() for p in parts]
    return gathered if cp.rank == 0 else None


# ---------------------------------------------------- the unsharded check

def whole_sequence(prob, device, mode: str, q_positions: bool = True):
    """The unsharded step in one process: the forward, then the backward in
    ``mode`` (dq, dkv, counters) and the fp32 reference (the baseline)."""
    q, kv, do, idx = (prob[k].to(device) for k in ("q", "kv", "do", "indices"))
    S = q.shape[0]
    pos = torch.arange(S, dtype=torch.int32, device=device) if q_positions else None
    scale, D = prob["sm_scale"], prob["do"].shape[-1]
    with torch.no_grad():
        out, lse = smla.sparse_mla_fwd_reference(q, kv, idx, scale, d_v=D, q_positions=pos)
    kw = dict(sm_scale=scale, q_positions=pos, diagnostics=True)
    run = smla.sparse_mla_bwd(q, kv, out, do, idx, lse, mode=mode, **kw)
    base = smla.sparse_mla_bwd(q, kv, out, do, idx, lse, mode="reference",
                               dq_dtype=torch.float32, dkv_dtype=torch.float32, **kw)
    return dict(mode=[t.cpu() if torch.is_tensor(t) else t for t in run],
                reference=[t.cpu() if torch.is_tensor(t) else t for t in base])


def figures(cfg, world: int, gathered, whole) -> Dict:
    """Per-rank and overall errors of the CP results against the whole
    sequence's fp32 reference, guard counters, and the single-process error
    of the same mode (the single-rank tolerance applies to both)."""
    ref_dq, ref_dkv, ref_cnt = whole["reference"]
    fig: Dict = {"world": world, "mode": cfg.mode, "seq_len": cfg.seq_len, "heads": cfg.heads,
                 "d": cfg.d, "dt": cfg.dt, "topk": cfg.topk, "groups": cfg.groups,
                 "tol": DEFAULT_TOL, "ranks": []}
    dq_cp = torch.empty_like(ref_dq, dtype=gathered["dq"][0].dtype)
    dkv_cp = torch.empty_like(ref_dkv, dtype=gathered["dkv"][0].dtype)
    for r in range(world):
        pos = cp_positions(cfg.seq_len, r, world)
        dq_cp[pos], dkv_cp[pos] = gathered["dq"][r], gathered["dkv"][r]
        rank = {name: compare(gathered[name][r], (ref_dq if name.startswith("dq") else ref_dkv)[pos])
                for name in ("dq", "dkv", "dkv_all_reduce", "dq_autograd", "dkv_autograd")}
        rank["counters"] = dict(zip(COUNTER_NAMES, gathered["counters"][r].tolist()))
        rank["counters_summed"] = dict(zip(COUNTER_NAMES, gathered["counters_summed"][r].tolist()))
        rank["bwd_ms"], rank["reduce_ms"] = (1e3 * x for x in gathered["times"][r].tolist())
        fig["ranks"].append(rank)
    fig["dq"], fig["dkv"] = compare(dq_cp, ref_dq), compare(dkv_cp, ref_dkv)
    fig["single_process_dq"] = compare(whole["mode"][0], ref_dq)
    fig["single_process_dkv"] = compare(whole["mode"][1], ref_dkv)
    fig["counters_single_process"] = dict(ref_cnt)
    fig["counters_cp"] = {k: sum(r["counters"][k] for r in fig["ranks"]) for k in COUNTER_NAMES}
    return fig


def failures(fig: Dict) -> List[str]:
    """What a CP run got wrong against the whole sequence (empty: pass)."""
    bad = []
    for r, rank in enumerate(fig["ranks"]):
        for name, st in rank.items():
            if isinstance(st, dict) and "rel_fro" in st:
                if st["nan"] or st["inf"]:
                    bad.append(f"rank {r} {name}: {st['nan']} NaN, {st['inf']} Inf")
                elif st["rel_fro"] > fig["tol"]:
                    bad.append(f"rank {r} {name}: rel_fro {st['rel_fro']:.3e} > {fig['tol']:.0e}")
        if rank["counters_summed"] != fig["counters_cp"]:
            bad.append(f"rank {r}: all-reduced counters {rank['counters_summed']} != "
                       f"{fig['counters_cp']}")
    if fig["counters_cp"] != fig["counters_single_process"]:
        bad.append(f"counters summed over ranks {fig['counters_cp']} != single process "
                   f"{fig['counters_single_process']}")
    return bad


def summary(cfg, fig: Dict) -> str:
    """The figures as a table: relative Frobenius errors against the whole
    sequence's fp32 reference, guard counters and per-rank times."""
    lines = [f"all-gather CP: {fig['world']} ranks, {cfg.backend}, {cfg.device}, backward "
             f"{fig['mode']}; S={fig['seq_len']} H={fig['heads']} D={fig['d']}+{fig['dt']} "
             f"G={fig['groups']} K={fig['topk']}; rel_fro vs the fp32 reference, tol "
             f"{fig['tol']:.0e}",
             "rank  dq        dkv(rs)   dkv(ar)   dq(ag)    dkv(ag)   invalid  dead  clamped"
             "  bwd ms  reduce ms"]
    for r, rank in enumerate(fig["ranks"]):
        errs = "".join(f"{rank[k]['rel_fro']:<10.2e}" for k in
                       ("dq", "dkv", "dkv_all_reduce", "dq_autograd", "dkv_autograd"))
        c = rank["counters"]
        lines.append(f"{r:<6}{errs}{c['invalid_slots']:<9}{c['dead_rows']:<6}"
                     f"{c['clamped']:<9}{rank['bwd_ms']:<8.2f}{rank['reduce_ms']:.2f}")
    lines.append(f"all ranks: dq {fig['dq']['rel_fro']:.2e}, dkv {fig['dkv']['rel_fro']:.2e}; "
                 f"one process ({fig['mode']}): dq {fig['single_process_dq']['rel_fro']:.2e}, "
                 f"dkv {fig['single_process_dkv']['rel_fro']:.2e}")
    lines.append(f"counters: sum over ranks {fig['counters_cp']}, one process "
                 f"{fig['counters_single_process']}")
    return "\n".join(lines)


# ------------------------------------------------------------- launching

def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def worker(local_rank: int, cfg, init_method: Optional[str]) -> None:
    rank = int(os.environ["RANK"]) if under_torchrun() else local_rank
    world = cfg.world
    if cfg.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", local_rank)))
        device = torch.device("cuda", torch.cuda.current_device())
    else:
        device = torch.device("cpu")
        # The ranks share this host's cores.
        local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local_world))
    dist.init_process_group(cfg.backend, init_method=init_method or "env://", rank=rank,
                            world_size=world, timeout=datetime.timedelta(seconds=cfg.timeout),
                            device_id=device if device.type == "cuda" else None)
    try:
        cp = CPGroup(cfg.seq_len, rank, world)
        res = cp_step(cfg, make_tensors(cfg), rank_indices(cfg, rank, world), cp, device)
        gathered = gather_results(res, cp)
        ok = True
        if rank == 0:
            if cfg.out:
                torch.save(dict(gathered, world=world), cfg.out)
            if cfg.check:
                whole = whole_sequence(make_problem(cfg, world), device, cfg.mode)
                fig = figures(cfg, world, gathered, whole)
                bad = failures(fig)
                print(summary(cfg, fig))
                print("result: PASS" if not bad else "result: FAIL\n  " + "\n  ".join(bad))
                if cfg.json:
                    with open(cfg.json, "w") as f:
                        json.dump(dict(fig, failures=bad), f, indent=1)
                ok = not bad
        flag = torch.tensor([int(ok)], device=device)
        dist.broadcast(flag, 0)
        if not int(flag):
            raise SystemExit(1)
    finally:
        dist.destroy_process_group()


def launch(cfg) -> None:
    """Start cfg.world local processes (fork: no re-import per rank) that
    meet at a file store, and wait for them within cfg.timeout."""
    if cfg.backend == "gloo" and "GLOO_SOCKET_IFNAME" not in os.environ \
            and os.path.exists("/sys/class/net/lo"):
        os.environ["GLOO_SOCKET_IFNAME"] = "lo"  # every rank is on this host
    with tempfile.TemporaryDirectory(prefix="smla-cp-") as tmp:
        init = "file://" + os.path.join(tmp, "store")
        ctx = mp.start_processes(worker, args=(cfg, init), nprocs=cfg.world, join=False,
                                 start_method="fork")
        deadline = time.monotonic() + cfg.timeout + 60
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    if p.is_alive():
                        p.kill()
                raise TimeoutError(f"the {cfg.world} ranks did not finish within "
                                   f"{cfg.timeout + 60:.0f} s")


def main(argv=None) -> int:
    cfg = parse_args(argv)
    if under_torchrun():
        worker(int(os.environ.get("LOCAL_RANK", 0)), cfg, None)
        return 0
    try:
        launch(cfg)
    except (mp.ProcessExitedException, mp.ProcessRaisedException, TimeoutError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
