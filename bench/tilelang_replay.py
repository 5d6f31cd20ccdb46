"""Non-finite gradients of TileLang's example backward and of the compiled
op on one dumped call (e.g. the synthetic GLM-5.2 event that scripts/gpu.sh
replays): counts of non-finite values in dq (over rows with a finite lse,
and over the rest) and in dkv.

    python3 -m smla.synthetic /tmp/glm52.pt --kv 16384 --topk 2048 --device cuda
    python3 bench/tilelang_replay.py /tmp/glm52.pt
        (tilelang importable, SMLA_TILELANG_EXAMPLE set as for
         bench/tilelang_peer.py, bench/ and python/ on PYTHONPATH)

The example takes no query positions (it masks keys above the query's
index), so its values are not compared with the reference; only whether
they are finite.
"""
import sys

import torch

import tilelang_peer
from smla.api import sparse_mla_bwd
from smla.dump import call_kwargs, load_call


def report(name, dq, dkv, live):
    bad_dq = ~torch.isfinite(dq.float())
    rows = bad_dq.any(-1)  # [T, H]
    print(f"{name}: dq non-finite {int(bad_dq.sum())} values; rows (token, head) with any: "
          f"{int(rows[live].sum())} of {int(live.sum())} live, {int(rows[~live].sum())} of "
          f"{int((~live).sum())} dead; dkv non-finite {int((~torch.isfinite(dkv.float())).sum())} "
          f"values in {int((~torch.isfinite(dkv.float())).any(-1).any(-1).sum())} rows", flush=True)


kw = call_kwargs(load_call(sys.argv[1]), "cuda")
idx, lse = kw["indices"], kw["lse"]
live = torch.isfinite(lse)
print(f"T={idx.shape[0]} K={idx.shape[2]} S_kv={kw['kv'].shape[0]}: -1 slots "
      f"{int((idx == -1).sum())}, other out-of-range {int(((idx < -1) | (idx >= kw['kv'].shape[0])).sum())}, "
      f"dead (token, head) rows {int((~live).sum())}", flush=True)
dq, dkv, _ = sparse_mla_bwd(**kw, diagnostics=True, mode="compiled")
torch.cuda.synchronize()
report("compiled", dq, dkv, live)
args = [kw[k] for k in ("q", "kv", "o", "do", "indices", "lse")]
dq, dkv = tilelang_peer.sparse_mla_bwd(*args, sm_scale=kw["sm_scale"])
torch.cuda.synchronize()
report("tilelang", dq, dkv, live)
