"""scratch/pair.py: emulate key sharing on B2 (2 tokens x 16 heads per CTA, union of sorted keys)
with the existing 32-head kernel (no per-token mask: timing only), time the union build, and
check that aligned per-token rows (non-members -1) give the same result as the original rows."""
import sys, os, torch, time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))
import bench_bwd as bb
from smla import _compiled
dev = torch.device("cuda")
spec = bb.SHAPES["B2"] if hasattr(bb, "SHAPES") else (8192, 32768, 16, 1, 512, 64, 2048, "dsa")
T, S, H, G, D, Dt, K, kind = spec
ps = [bb.make_problem(spec, dev, seed=i) for i in range(2)]
W = D + Dt
def call(q, kv, o, do, idx, lse, scale):
    return _compiled.sparse_mla_bwd(q, kv, o, do, idx, lse, sm_scale=scale, lse_base=2, q_positions=None,
                                    delta=None, dq_dtype=torch.bfloat16, dkv_dtype=torch.bfloat16)
BIG = 2**31 - 1
def union_build(idx, R=2):
    x = idx[:, 0, :]
    Tn = x.shape[0] // R
    s, _ = torch.sort(x.reshape(Tn, R * K), dim=1)
    drop = (s < 0) | (s >= S)
    drop[:, 1:] |= s[:, 1:] == s[:, :-1]
    key, _ = torch.sort(torch.where(drop, BIG, s), dim=1)
    n = (~drop).sum(1)
    U = int(n.max())
    Up = (U + 63) // 64 * 64
    u = key[:, :Up].clone()
    u[u == BIG] = -1
    rs, _ = torch.sort(x, dim=1)
    uu = u.repeat_interleave(R, dim=0)
    pos = torch.searchsorted(rs, uu).clamp_(max=K - 1)
    member = (rs.gather(1, pos) == uu) & (uu >= 0)
    aligned = torch.where(member, uu, -1)
    return u, aligned, n.float().mean().item(), U, Up
for p in ps:
    u, al, mean_n, U, Up = union_build(p["indices"])
    p["u"], p["al"] = u.unsqueeze(1).contiguous(), al.unsqueeze(1).contiguous()
    print(f"union of 2: mean {mean_n:.0f} = {mean_n/K:.3f} K, max {U}, padded {Up}")
torch.cuda.synchronize()
t0 = time.perf_counter()
for _ in range(10):
    union_build(ps[0]["indices"])
torch.cuda.synchronize()
print(f"union build (torch, incl. .item sync): {(time.perf_counter()-t0)*100:.2f} ms")
# correctness of aligned rows (per-token kernel, K' = Up)
p = ps[0]
a = call(p["q"], p["kv"], p["o"], p["do"], p["indices"], p["lse"], p["scale"])
b = call(p["q"], p["kv"], p["o"], p["do"], p["al"], p["lse"], p["scale"])
for n, x, y in (("dq", a[0], b[0]), ("dkv", a[1], b[1])):
    x, y = x.float(), y.float()
    print(f"aligned vs given {n}: rel {((x-y).norm()/x.norm()).item():.2e}")
def per_token(p): return lambda: call(p["q"], p["kv"], p["o"], p["do"], p["indices"], p["lse"], p["scale"])
def pair(p):
    q2 = p["q"].view(T // 2, 32, W); o2 = p["o"].view(T // 2, 32, D); do2 = p["do"].view(T // 2, 32, D)
    l2 = p["lse"].view(T // 2, 32)
    return lambda: call(q2, p["kv"], o2, do2, p["u"], l2, p["scale"])
def aligned(p): return lambda: call(p["q"], p["kv"], p["o"], p["do"], p["al"], p["lse"], p["scale"])
def build(p): return lambda: union_build(p["indices"])
for rep in range(2):
    for name, mk in (("B2 per-token", per_token), ("B2 pair-emulated (H32 kernel on unions)", pair),
                     ("B2 aligned rows, per-token kernel", aligned), ("union build", build)):
        ms = bb.bench([mk(p) for p in ps], dev, 2, 10)
        print(f"{name}: {ms:.2f} ms")
