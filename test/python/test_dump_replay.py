"""dump_call / load_call round trip, corrupted dumps, the synthetic generator
and the replay CLI (exit codes via subprocess)."""

import os
import re
import subprocess
import sys

import pytest
import torch

import smla
from smla import replay, synthetic
from smla.dump import FORMAT, VERSION, DumpError

PYROOT = os.path.dirname(os.path.dirname(os.path.abspath(smla.__file__)))
TINY = dict(tokens=12, s_kv=128, heads=4, d=32, dt=16, topk=48, cp_rank=1, cp_world=4,
            dead_rows=1, empty_rows=1)
TINY_ARGS = ["--tokens", "12", "--kv", "128", "--heads", "4", "--d", "32", "--dt", "16",
             "--topk", "48", "--cp-rank", "1"]


def run_cli(*args):
    env = dict(os.environ, PYTHONPATH=PYROOT)
    env.pop("SMLA_MODE", None)
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True,
                          env=env, timeout=120)


@pytest.fixture
def tiny_dump(tmp_path):
    call = synthetic.make_call(**TINY)
    path = tmp_path / "call.pt"
    smla.dump_call(path, **call)
    return path, call


def test_round_trip(tiny_dump):
    path, call = tiny_dump
    rec = smla.load_call(path)
    assert rec["format"] == FORMAT and rec["version"] == VERSION
    for k in ("q", "kv", "o", "do", "indices", "q_positions"):
        assert torch.equal(rec[k], call[k]), k
    assert torch.equal(rec["lse"].nan_to_num(), call["lse"].nan_to_num())
    assert rec["sm_scale"] == pytest.approx(48 ** -0.5)
    assert rec["lse_base"] == 2 and rec["delta"] is None and rec["dq_dtype"] is None
    assert rec["meta"]["cp_rank"] == 1


def test_sm_scale_none_is_resolved_and_dtypes_kept(tmp_path):
    c = synthetic.make_call(**TINY)
    c.pop("sm_scale")
    c.pop("lse_base")
    path = smla.dump_call(tmp_path / "a.pt", **c, dq_dtype=torch.float32, lse_base="e")
    rec = smla.load_call(path)
    assert rec["sm_scale"] == pytest.approx(48 ** -0.5)
    assert rec["dq_dtype"] == torch.float32 and rec["lse_base"] == "e"


def _rewrite(path, **changes):
    rec = torch.load(path, weights_only=True)
    for k, v in changes.items():
        if v is KeyError:
            del rec[k]
        else:
            rec[k] = v
    torch.save(rec, path)


def test_missing_key(tiny_dump):
    path, _ = tiny_dump
    _rewrite(path, lse=KeyError)
    with pytest.raises(DumpError, match=re.escape(f"smla dump '{path}': missing key 'lse'")):
        smla.load_call(path)


def test_wrong_dtype(tiny_dump):
    path, call = tiny_dump
    _rewrite(path, indices=call["indices"].long())
    with pytest.raises(TypeError, match=re.escape(
            f"smla dump '{path}': key 'indices' must have dtype torch.int32, got torch.int64")):
        smla.load_call(path)


def test_wrong_shape(tiny_dump):
    path, call = tiny_dump
    _rewrite(path, lse=call["lse"][:, :3].contiguous())
    with pytest.raises(ValueError, match=re.escape(
            f"smla dump '{path}': key 'lse' must have shape (12, 4) [T, H], got (12, 3)")):
        smla.load_call(path)


def test_wrong_format_version_and_observed(tiny_dump):
    path, call = tiny_dump
    _rewrite(path, version=99)
    with pytest.raises(DumpError, match="key 'version' must be 1, got 99"):
        smla.load_call(path)
    _rewrite(path, version=VERSION, format="something.else")
    with pytest.raises(DumpError, match="key 'format' must be"):
        smla.load_call(path)
    _rewrite(path, format=FORMAT, observed_dq=torch.zeros(3))
    with pytest.raises(DumpError, match=re.escape("key 'observed_dq' must have shape (12, 4, 48)")):
        smla.load_call(path)


class _NotAllowed:
    pass


def test_load_uses_weights_only(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": FORMAT, "payload": _NotAllowed()}, path)
    with pytest.raises(Exception, match="[Ww]eights only load failed|weights_only"):
        smla.load_call(path)


def test_synthetic_call_shape_and_adversarial_rows():
    c = synthetic.make_call(s_kv=256, heads=16, d=32, dt=16, topk=64, cp_rank=0, cp_world=4,
                            dead_rows=2, empty_rows=1)
    T = 256 // 4
    assert c["q"].shape == (T, 16, 48) and c["kv"].shape == (256, 1, 48)
    pos = c["q_positions"].long()
    assert torch.equal(pos, torch.cat([torch.arange(0, 32), torch.arange(224, 256)]))
    idx = c["indices"].long()
    assert ((idx < 0) | (idx <= pos.view(-1, 1, 1))).all()  # causal
    assert (idx[pos < 63] < 0).any()  # early tokens are padded with -1
    assert int((idx < 0).all(-1).all(-1).sum()) >= 1  # an empty row
    lse = c["lse"]
    assert int(torch.isposinf(lse).sum()) == 2 and int(torch.isnan(lse).sum()) == 2
    assert int(torch.isneginf(lse).sum()) >= 2 + 16  # planted + the empty token's heads


def test_synthetic_cli_and_replay_pass(tmp_path):
    out = tmp_path / "syn.pt"
    r = run_cli("smla.synthetic", str(out), *TINY_ARGS)
    assert r.returncode == 0, r.stderr
    assert "wrote" in r.stdout and out.exists()
    r = run_cli("smla.replay", str(out), "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "falling back to --backend reference" in r.stdout
    assert re.search(r"dq \(reference\)\s+nan=0 inf=0 \| finite overlap: max_abs=\S+ "
                     r"max_rel=\S+ rel_fro=\S+\s+ok", r.stdout), r.stdout
    assert "counters: reference {'invalid_slots':" in r.stdout
    assert "result: PASS" in r.stdout


def test_replay_exit_codes(tmp_path, tiny_dump):
    path, _ = tiny_dump
    # bf16 reference vs float64 reference differ by rounding: tol 0 must fail.
    r = run_cli("smla.replay", str(path), "--backend", "reference", "--tol", "0", "--device", "cpu")
    assert r.returncode == 1 and "result: FAIL (dq rel_fro" in r.stdout
    _rewrite(path, kv=KeyError)
    r = run_cli("smla.replay", str(path), "--backend", "reference", "--device", "cpu")
    assert r.returncode == 2 and "missing key 'kv'" in r.stderr


def test_replay_reports_observed_outputs(tiny_dump, capsys):
    path, call = tiny_dump
    bad = torch.zeros_like(call["q"])
    bad[3] = float("nan")
    smla.dump_call(path, **call, observed_dq=bad)
    rc = replay.main([str(path), "--backend", "reference64", "--baseline", "reference",
                      "--device", "cpu"])
    text = capsys.readouterr().out
    assert rc == 0
    nan = bad[3].numel()
    assert re.search(rf"observed_dq\s+nan={nan} inf=0", text), text
    assert "time: reference64" in text


def test_a_call_with_a_sink_and_lengths_round_trips_and_replays(tmp_path, capsys):
    """attn_sink and topk_length are part of a dump; replay compares d_sink
    next to dq and dkv, and a sink of the wrong shape is refused naming it."""
    call = synthetic.make_call(**TINY)
    T, H = call["lse"].shape
    gen = torch.Generator().manual_seed(3)
    sink = torch.randn(H, generator=gen)
    lengths = torch.randint(0, 49, (T,), generator=gen, dtype=torch.int32)
    call["lse"] = smla.contract.lse_with_sink(call["lse"], sink, 2)
    path = smla.dump_call(tmp_path / "sink.pt", **call, attn_sink=sink, topk_length=lengths)
    rec = smla.load_call(path)
    assert torch.equal(rec["attn_sink"], sink) and torch.equal(rec["topk_length"], lengths)
    rc = replay.main([str(path), "--backend", "reference", "--device", "cpu"])
    text = capsys.readouterr().out
    assert rc == 0 and re.search(r"d_sink \(reference\)\s+nan=0 inf=0", text), text
    _rewrite(path, attn_sink=torch.zeros(H + 1))
    with pytest.raises(ValueError, match=re.escape("key 'attn_sink' must have shape "
                                                   f"({H},) [H], got ({H + 1},)")):
        smla.load_call(path)


# ---- bounded loading ----------------------------------------------------------

def test_expanded_tensor_is_refused_before_it_is_materialised(tiny_dump):
    """A few KB that declare a huge q through stride 0 (1.5 GB before)."""
    path, call = tiny_dump
    huge = torch.zeros(1, dtype=torch.bfloat16).expand(65536, 128, 48)
    _rewrite(path, q=huge)
    assert os.path.getsize(path) < 1 << 20
    with pytest.raises(DumpError, match=re.escape(
            f"smla dump '{path}': key 'q' must be stored in full (contiguous, as "
            "smla.dump_call writes it), got shape (65536, 128, 48) with strides (0, 0, 0): "
            "805306368 bytes declared, 2 stored")):
        smla.load_call(path)
    r = run_cli("smla.replay", str(path), "--device", "cpu")
    assert r.returncode == 2 and "must be stored in full" in r.stderr


def test_overlapping_strides_are_refused(tiny_dump):
    path, call = tiny_dump
    lse = torch.randn(12).as_strided((12, 4), (1, 0))
    _rewrite(path, lse=lse)
    with pytest.raises(DumpError, match="key 'lse' must be stored in full"):
        smla.load_call(path)


def test_file_over_the_cap_is_not_read(tiny_dump):
    path, _ = tiny_dump
    size = os.path.getsize(path)
    with pytest.raises(DumpError, match=f"the file has {size} bytes, more than the limit of 100"):
        smla.load_call(path, max_bytes=100)
    r = run_cli("smla.replay", str(path), "--device", "cpu", "--max-bytes", "100")
    assert r.returncode == 2 and "more than the limit of 100" in r.stderr


def test_blocked_pickle_exits_2(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format": FORMAT, "payload": _NotAllowed()}, path)
    with pytest.raises(DumpError, match="cannot load it safely"):
        smla.load_call(path)
    r = run_cli("smla.replay", str(path), "--device", "cpu")
    assert r.returncode == 2, r.stderr
    assert "error: cannot use dump" in r.stderr and "Traceback" not in r.stderr


def test_truncated_and_garbage_files_exit_2(tiny_dump, tmp_path):
    path, _ = tiny_dump
    data = path.read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    (tmp_path / "junk.pt").write_bytes(b"\x80\x02not a pickle at all")
    for name in ("cut.pt", "junk.pt"):
        r = run_cli("smla.replay", str(tmp_path / name), "--device", "cpu")
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr


def test_sm_scale_none_in_a_dump_is_the_default(tiny_dump):
    path, _ = tiny_dump
    _rewrite(path, sm_scale=None)
    assert smla.load_call(path)["sm_scale"] == pytest.approx(48 ** -0.5)
    r = run_cli("smla.replay", str(path), "--backend", "reference", "--device", "cpu")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "sm_scale=0.144338" in r.stdout


def test_bad_device_argument_exits_2(tiny_dump):
    path, _ = tiny_dump
    r = run_cli("smla.replay", str(path), "--device", "nonsense")
    assert r.returncode == 2 and "argument --device" in r.stderr


# ---- the dump directory (checked mode's SMLA_DUMP_DIR) ------------------------

def test_dump_directory_caps_files_and_bytes(tmp_path, tiny_dump):
    _, call = tiny_dump
    from smla.dump import dump_bytes, dump_to_dir
    tensors = [call[k] for k in ("q", "kv", "o", "do", "indices", "lse")]
    written = [dump_to_dir(tmp_path, *tensors, max_files=2) for _ in range(3)]
    assert written[0] and written[1] and written[2] is None
    assert len(list(tmp_path.glob("smla_bwd_*.pt"))) == 2
    other = tmp_path / "bytes"
    other.mkdir()
    one = dump_bytes(*tensors)
    assert dump_to_dir(other, *tensors, max_bytes=one - 1) is None
    first = dump_to_dir(other, *tensors, max_bytes=one)
    used = os.path.getsize(first)  # the files present count with their size
    assert dump_to_dir(other, *tensors, max_bytes=used + one - 1) is None
    assert dump_to_dir(other, *tensors, max_bytes=used + one) is not None


def test_dump_directory_caps_from_the_environment(tmp_path, tiny_dump, monkeypatch):
    _, call = tiny_dump
    from smla.dump import dump_to_dir
    tensors = [call[k] for k in ("q", "kv", "o", "do", "indices", "lse")]
    monkeypatch.setenv("SMLA_DUMP_MAX_FILES", "1")
    smla.reload_config()
    assert dump_to_dir(tmp_path, *tensors) is not None
    assert dump_to_dir(tmp_path, *tensors) is None
    monkeypatch.setenv("SMLA_DUMP_MAX_FILES", "many")
    with pytest.raises(ValueError, match="environment variable SMLA_DUMP_MAX_FILES must be an "
                       "integer in"):
        smla.reload_config()
    assert smla.config.dump_max_files == 1


def test_concurrent_dumps_get_distinct_names_within_the_cap(tmp_path, tiny_dump):
    import threading
    from smla.dump import dump_to_dir
    _, call = tiny_dump
    tensors = [call[k] for k in ("q", "kv", "o", "do", "indices", "lse")]
    paths, lock = [], threading.Lock()

    def work():
        for _ in range(4):
            p = dump_to_dir(tmp_path, *tensors, max_files=10)
            with lock:
                paths.append(p)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    written = [p for p in paths if p]
    assert len(written) == 10 == len(set(written)) == len(list(tmp_path.glob("smla_bwd_*.pt")))


@pytest.mark.parametrize("key,value,message", [
    ("version", torch.ones(2), "key 'version' must be 1, got a tensor of shape (2,)"),
    ("version", True, "key 'version' must be 1, got True"),
    ("format", 7, "key 'format' must be 'smla.sparse_mla_bwd.call', got 7"),
    ("lse_base", [2], "key 'lse_base' must be '2' or 'e', got a list"),
    ("dq_dtype", torch.zeros(3), "key 'dq_dtype' must be one of"),
    ("meta", "notes", "key 'meta' must be a dict, got str"),
    ("extra", 1, "unknown key 'extra'"),
])
def test_header_values_of_the_wrong_kind(tiny_dump, key, value, message):
    """What the dump loader's fuzz target (test/fuzz/dump_header.py) found:
    header values of the wrong type were compared as if they were right."""
    path, _ = tiny_dump
    _rewrite(path, **{key: value})
    with pytest.raises(DumpError, match=re.escape(message)):
        smla.load_call(path)
