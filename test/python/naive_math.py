"""Independent, deliberately naive float64 formulations used as test oracles.

Nothing here imports smla: the loops restate the contract (docs/contract.md)
slot by slot, and the dense formulation is an ordinary masked softmax that autograd
differentiates. Shapes must be tiny.
"""

import math

import torch

CLAMP = 32.0  # the documented exponent bound (contract.EXP2_CLAMP)


def _is_slot(j, t, topk_length):
    """Slot j of token t exists: every j without lengths, else j < topk_length[t]."""
    return topk_length is None or j < int(topk_length[t])


def naive_bwd(q, kv, o, do, indices, lse, scale, lse_base=2, q_positions=None, delta=None,
              attn_sink=None, topk_length=None):
    """Slot-by-slot loops. Returns (dq, dkv, counters) in float64, and
    d_sink after dkv when attn_sink is given (lse then includes the sink).
    Slots j >= topk_length[t] are not slots."""
    q, kv, o, do = (t.double() for t in (q, kv, o, do))
    T, H, W = q.shape
    S, G, _ = kv.shape
    D = o.shape[-1]
    K = indices.shape[-1]
    hpg = H // G
    dq = torch.zeros(T, H, W, dtype=torch.float64)
    dkv = torch.zeros(S, G, W, dtype=torch.float64)
    d_sink = torch.zeros(H, dtype=torch.float64)
    invalid = dead = clamped = 0
    for t in range(T):
        for g in range(G):
            for j in range(K):
                if not _is_slot(j, t, topk_length):
                    continue
                i = int(indices[t, g, j])
                ok = 0 <= i < S and (q_positions is None or i <= int(q_positions[t]))
                invalid += not ok
    for t in range(T):
        for h in range(H):
            g = h // hpg
            slots = []
            for j in range(K):
                i = int(indices[t, g, j])
                if _is_slot(j, t, topk_length) and 0 <= i < S and \
                        (q_positions is None or i <= int(q_positions[t])):
                    slots.append(i)
            l = float(lse[t, h])
            if not math.isfinite(l):
                dead += 1  # the lse guard fired
                continue
            l2 = l if lse_base == 2 else l / math.log(2.0)
            dlt = float((o[t, h] * do[t, h]).sum()) if delta is None else float(delta[t, h])
            if attn_sink is not None:
                x = float(attn_sink[h]) / math.log(2.0) - l2
                d_sink[h] -= 2.0 ** min(x, CLAMP) * dlt
            if not slots:
                continue  # counted as invalid slots
            for i in slots:
                k = kv[i, g]
                x = float(q[t, h] @ k) * scale / math.log(2.0) - l2
                if x > CLAMP:
                    clamped += 1
                    x = CLAMP
                p = 2.0 ** x
                dp = float(do[t, h] @ k[:D])
                ds = p * (dp - dlt) * scale
                dq[t, h] += ds * k
                dkv[i, g] += ds * q[t, h]
                dkv[i, g, :D] += p * do[t, h]
    nonfinite = int((~torch.isfinite(dq)).any(-1).sum() + (~torch.isfinite(dkv)).any(-1).sum())
    counters = {"invalid_slots": invalid, "dead_rows": dead, "clamped": clamped,
                "nonfinite_rows": nonfinite}
    if attn_sink is not None:
        return dq, dkv, d_sink, counters
    return dq, dkv, counters


def slot_counts(indices, S, q_positions=None, topk_length=None):
    """[T, G, S] multiplicity of each key among a query's valid slots."""
    T, G, K = indices.shape
    cnt = torch.zeros(T, G, S, dtype=torch.float64)
    for t in range(T):
        for g in range(G):
            for j in range(K):
                if not _is_slot(j, t, topk_length):
                    continue
                i = int(indices[t, g, j])
                if 0 <= i < S and (q_positions is None or i <= int(q_positions[t])):
                    cnt[t, g, i] += 1
    return cnt


def dense_forward(q, kv, indices, scale, d_v, q_positions=None, attn_sink=None,
                  topk_length=None):
    """Differentiable dense masked softmax: out [T, H, d_v], natural lse [T, H].
    A key selected m times has weight m*exp(score) (each slot counts once).
    With attn_sink ([H]) the sink is one more logit of the softmax with no
    value (lse includes it; a row without valid slots then has lse = sink);
    without it every row must have at least one valid slot."""
    T, H, W = q.shape
    S, G, _ = kv.shape
    cnt = slot_counts(indices, S, q_positions, topk_length)  # [T, G, S]
    cnt_h = cnt.repeat_interleave(H // G, dim=1)  # [T, H, S]
    k_h = kv.permute(1, 0, 2).repeat_interleave(H // G, dim=0)  # [H, S, W]
    scores = torch.einsum("thw,hsw->ths", q, k_h) * scale
    logits = scores + torch.log(cnt_h)  # log(0) = -inf masks unselected keys
    if attn_sink is not None:
        sink = attn_sink.to(logits.dtype).view(1, H, 1).expand(T, H, 1)
        lse = torch.logsumexp(torch.cat([logits, sink], dim=-1), dim=-1)
    else:
        lse = torch.logsumexp(logits, dim=-1)
    p = torch.exp(logits - lse.unsqueeze(-1))
    out = torch.einsum("ths,hsd->thd", p, k_h[..., :d_v])
    return out, lse
