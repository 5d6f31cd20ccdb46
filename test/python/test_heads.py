"""Head counts outside the library: the padding the op hands the kernel of
a larger head count (smla._op.kernel_arguments) contributes exactly
nothing, checked on the CPU with the reference (the definition of what any
kernel computes): dq of the caller's heads, dkv and every guard counter
are those of the unpadded call, and the padded heads' dq rows are zero.
The choice of the head count is test_extension.py's (it needs the
extension); the kernels on the padded arguments are test_gpu_heads.py's."""

import math

import pytest
import torch

from smla._library import MAX_PADDED_HEADS, describe_heads, head_ranges, padded_heads
from smla._op import kernel_arguments, pad_heads
from smla.reference import sparse_mla_bwd_reference

from cases import make_inputs


def run(inputs, heads, lse_base, delta=None):
    """The reference on the arguments as the kernel of `heads` heads gets
    them (base-2 lse, padded to `heads`)."""
    q, o, do, lse, delta = kernel_arguments(inputs["q"], inputs["o"], inputs["do"],
                                            inputs["lse"], delta, lse_base == "e", heads)
    return sparse_mla_bwd_reference(q, inputs["kv"], o, do, inputs["indices"], lse,
                                    inputs["scale"], lse_base=2,
                                    q_positions=inputs["q_positions"], delta=delta,
                                    diagnostics=True)


@pytest.mark.parametrize("H,heads", [(1, 8), (3, 8), (12, 16), (24, 32), (20, 32)])
@pytest.mark.parametrize("lse_base", [2, "e"])
@pytest.mark.parametrize("with_delta", [False, True])
def test_padded_heads_contribute_nothing(H, heads, lse_base, with_delta):
    inputs = make_inputs(T=7, H=H, G=1, S=19, K=9, D=8, Dt=4, seed=H, lse_base=lse_base,
                         q_positions=torch.tensor([3, 5, 8, 9, 12, 15, 18], dtype=torch.int32))
    # Dead rows of every kind among the caller's heads.
    inputs["lse"][1, 0] = math.inf
    inputs["lse"][2, H - 1] = -math.inf
    inputs["lse"][4, :] = math.nan
    delta = None
    if with_delta:  # a folded lse gradient: Delta - c * grad_lse
        delta = (inputs["o"] * inputs["do"]).sum(-1) - torch.randn(7, H, dtype=torch.float64)
    want = sparse_mla_bwd_reference(
        inputs["q"], inputs["kv"], inputs["o"], inputs["do"], inputs["indices"], inputs["lse"],
        inputs["scale"], lse_base=lse_base, q_positions=inputs["q_positions"], delta=delta,
        diagnostics=True)
    got = run(inputs, heads, lse_base, delta)
    assert got[2] == want[2]  # every guard counter, padded rows fire none
    assert torch.equal(got[0][:, H:], torch.zeros_like(got[0][:, H:]))
    torch.testing.assert_close(got[0][:, :H], want[0], rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(got[1], want[1], rtol=1e-12, atol=1e-12)
    assert want[2]["dead_rows"] >= H + 2 and want[2]["invalid_slots"] > 0


def test_the_same_heads_are_not_copied():
    """At the kernel's own head count the arguments go through as they are
    (contiguous, aligned), a natural-log lse becomes lse * log2(e)."""
    inputs = make_inputs(T=4, H=8, G=1, dtype=torch.float32)
    q, o, do, lse, delta = kernel_arguments(inputs["q"], inputs["o"], inputs["do"],
                                            inputs["lse"], None, False, 8)
    assert q is inputs["q"] and o is inputs["o"] and do is inputs["do"]
    assert lse is inputs["lse"] and delta is None
    _, _, _, lse2, _ = kernel_arguments(inputs["q"], inputs["o"], inputs["do"], inputs["lse"],
                                        None, True, 8)
    assert torch.equal(lse2, inputs["lse"] * (1 / math.log(2)))


def test_pad_heads_of_a_strided_tensor():
    t = torch.arange(2 * 3 * 4, dtype=torch.float32).view(3, 2, 4).transpose(0, 1)
    padded = pad_heads(t, 5)
    assert padded.shape == (2, 5, 4) and padded.is_contiguous()
    assert torch.equal(padded[:, :3], t) and not padded[:, 3:].any()
    assert pad_heads(None, 5) is None


def test_head_count_rule():
    served = [8, 16, 32, 64, 128]
    assert [padded_heads(h, served) for h in (1, 8, 9, 17, 48, 96, 127, 128, 129)] == \
        [8, 8, 16, 32, 64, 128, 128, 128, None]
    assert padded_heads(5, []) is None
    assert MAX_PADDED_HEADS == 128
    assert head_ranges([8, 32]) == [(1, 7, 8), (8, 8, 8), (9, 31, 32), (32, 32, 32)]
    assert describe_heads([8, 16, 32, 64, 128], 1) == (
        "H 1-7 on 8 (padded), H 8 (exact), H 9-15 on 16 (padded), H 16 (exact), "
        "H 17-31 on 32 (padded), H 32 (exact), H 33-63 on 64 (padded), H 64 (exact), "
        "H 65-127 on 128 (padded), H 128 (exact)")
    assert describe_heads([4, 20], 2) == "H 4 (exact), H 20 (exact)"
