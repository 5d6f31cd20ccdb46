"""Context parallelism: examples/cp_allgather.py launched under
torch.distributed with 2 and 4 ranks; every rank's dq and reduced dkv shard
(reduce-scatter, all-reduce, and through autograd) against the whole
sequence computed in one process, and the guard counters summed over the
ranks against the single-process counters.

gloo on the CPU (the reference backward) always; NCCL with the compiled
kernels when the machine has that many GPUs and smla._C is built, skipped
otherwise. Each launch is a subprocess leading its own process group, killed
as a group if it outlives its timeout.
"""

import os
import signal
import subprocess
import sys

import pytest
import torch

from smla import _compiled
from smla.contract import COUNTER_NAMES
from smla.replay import DEFAULT_TOL, compare

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
EXAMPLE = os.path.join(ROOT, "examples", "cp_allgather.py")
sys.path.insert(0, os.path.dirname(EXAMPLE))
import cp_allgather as cp  # noqa: E402

RESULTS = ("dq", "dkv", "dkv_all_reduce", "dq_autograd", "dkv_autograd")
LAUNCH_TIMEOUT_S = 240


def launch(tmp_path, world, *options):
    """Run the example with ``world`` ranks; return its config and the
    results rank 0 gathered."""
    out = tmp_path / f"cp{world}.pt"
    argv = ["--world", str(world), "--timeout", "90", *options]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (os.path.join(ROOT, "python"), env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen([sys.executable, EXAMPLE, *argv, "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        log, _ = proc.communicate(timeout=LAUNCH_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        pytest.fail(f"{world} ranks did not finish within {LAUNCH_TIMEOUT_S} s:\n{log}")
    assert proc.returncode == 0, f"the example exited with {proc.returncode}:\n{log}"
    return cp.parse_args(argv), torch.load(out)


def check_against_one_process(cfg, world, res, device):
    """Asserts every rank's results against the whole sequence; returns the
    whole-sequence results."""
    assert res["world"] == world
    whole = cp.whole_sequence(cp.make_problem(cfg, world), device, cfg.mode)
    ref_dq, ref_dkv, ref_counters = whole["reference"]
    for r in range(world):
        pos = cp.cp_positions(cfg.seq_len, r, world)
        for name in RESULTS:
            got = res[name][r]
            want = (ref_dq if name.startswith("dq") else ref_dkv)[pos]
            assert got.shape == want.shape, name
            assert torch.isfinite(got.float()).all(), f"rank {r} {name} is not finite"
            err = compare(got, want)["rel_fro"]
            assert err <= DEFAULT_TOL, f"rank {r} {name}: rel_fro {err:.3e}"
    summed = torch.stack(res["counters"]).sum(0)
    assert dict(zip(COUNTER_NAMES, summed.tolist())) == ref_counters
    for r in range(world):
        assert torch.equal(res["counters_summed"][r], summed), f"rank {r} counters"
    # The problem exercises the guards whose sum is checked.
    assert ref_counters["invalid_slots"] > 0 and ref_counters["dead_rows"] > 0
    assert cp.failures(cp.figures(cfg, world, res, whole)) == []
    return whole


# 2 ranks: one kv group, reduce-scatter in the autograd step; 4 ranks: two
# kv groups, all-reduce (the spelled-out step reduces both ways in each run).
GLOO_RUNS = {2: (), 4: ("--reduce", "all_reduce", "--groups", "2", "--seed", "3")}


@pytest.mark.parametrize("world", sorted(GLOO_RUNS))
def test_gloo_cpu_matches_one_process(tmp_path, world):
    cfg, res = launch(tmp_path, world, *GLOO_RUNS[world])
    assert cfg.backend == "gloo" and cfg.mode == "reference"
    whole = check_against_one_process(cfg, world, res, "cpu")
    # The comparison catches a shard left unreduced and a lost counter.
    res["dkv"][0] = res["dkv"][0] * 0.5
    res["counters"][1] = res["counters"][1] + 1
    bad = cp.failures(cp.figures(cfg, world, res, whole))
    assert any(b.startswith("rank 0 dkv:") for b in bad), bad
    assert any("summed over ranks" in b for b in bad), bad


def test_q_positions_matter():
    """The indices hold future keys where a token has fewer than K earlier
    ones: without q_positions the whole-sequence result is different, so the
    CP comparison depends on each rank passing its absolute positions."""
    cfg = cp.parse_args(["--world", "2"])
    prob = cp.make_problem(cfg, 2)
    pos = torch.arange(cfg.seq_len).view(-1, 1, 1)
    assert (prob["indices"].long() > pos).any()
    with_pos = cp.whole_sequence(prob, "cpu", "reference")["reference"]
    without = cp.whole_sequence(prob, "cpu", "reference", q_positions=False)["reference"]
    assert compare(without[0], with_pos[0])["rel_fro"] > 10 * DEFAULT_TOL
    assert without[2]["invalid_slots"] < with_pos[2]["invalid_slots"]


@pytest.mark.parametrize("world", [2, 4])
def test_nccl_compiled_matches_one_process(tmp_path, world):
    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} CUDA devices, found {torch.cuda.device_count()}")
    if not _compiled.is_available():
        pytest.skip("needs the compiled extension smla._C")
    cfg, res = launch(tmp_path, world, "--device", "cuda", "--seq-len", "4096",
                      "--topk", "1024")
    assert cfg.backend == "nccl" and cfg.mode == "compiled"
    check_against_one_process(cfg, world, res, "cuda")
