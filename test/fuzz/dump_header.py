"""Fuzzes the dump loader (smla.dump.load_call) and the replay CLI's handling
of what it refuses.

Starting from a small valid dump, each round mutates either the record
(keys dropped or replaced by values of the wrong kind, shapes, dtypes and
strides changed, stride-0 tensors declaring huge sizes, odd scalars) or the
bytes of the file (flips, truncation, insertions, splices), writes it, and
loads it. The loader must either return a record whose tensors are stored
in full, or raise DumpError / ValueError / TypeError (the documented
errors, replay's exit code 2). Every few rounds the replay CLI runs on the
file too and must exit 0, 1 or 2. Anything else fails the run, and the
input is kept in --out for a look.

    python3 test/fuzz/dump_header.py --seconds 20 [--seed N] [--out DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
import warnings

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                "python"))

from smla import replay, synthetic  # noqa: E402
from smla.dump import DumpError, dump_call, load_call  # noqa: E402

KEYS = ("format", "version", "q", "kv", "o", "do", "indices", "lse", "q_positions", "delta",
        "attn_sink", "topk_length",
        "sm_scale", "lse_base", "dq_dtype", "dkv_dtype", "observed_dq", "observed_dkv", "meta")
DTYPES = (torch.bfloat16, torch.float16, torch.float32, torch.float64, torch.int32,
          torch.int64, torch.int8, torch.bool, torch.uint8)
MAX_BYTES = 16 << 20


def base_record(tmp: str) -> dict:
    call = synthetic.make_call(tokens=6, s_kv=32, heads=2, d=8, dt=8, topk=8, cp_rank=0,
                               cp_world=2, dead_rows=1, empty_rows=1)
    path = os.path.join(tmp, "base.pt")
    dump_call(path, **call)
    return torch.load(path, weights_only=True)


def random_tensor(rng: random.Random) -> torch.Tensor:
    dtype = rng.choice(DTYPES)
    shape = tuple(rng.choice((0, 1, 2, 3, 6, 8, 16, 32)) for _ in range(rng.randint(0, 4)))
    t = torch.zeros(shape, dtype=dtype)
    kind = rng.random()
    if kind < 0.25:  # stride 0: a tiny storage declaring a large tensor
        big = tuple(rng.choice((1, 7, 1024, 65536, 1 << 20)) for _ in range(rng.randint(1, 4)))
        return torch.zeros(1, dtype=dtype).expand(*big)
    if kind < 0.4 and t.numel() > 1:  # overlapping / permuted strides
        return t.as_strided((t.numel(), 2), (1, 0)) if rng.random() < 0.5 else t.t() \
            if t.dim() == 2 else t
    if kind < 0.5 and t.numel() > 2:  # a view at an offset
        return t.reshape(-1)[1:]
    if dtype.is_floating_point and t.numel() and rng.random() < 0.3:
        t.view(-1)[0] = rng.choice((float("nan"), float("inf"), 1e30))
    return t


def random_value(rng: random.Random, rec: dict):
    pool = [None, 0, -1, 1, 2, 99, 1.5, float("nan"), float("inf"), -0.0, 1e39, 1e-300, True,
            "", "e", "2", "bfloat16", "float99", "smla.sparse_mla_bwd.call", [1, 2], (3,),
            {"a": 1}, {"nested": {"x": [1]}}, b"bytes"]
    r = rng.random()
    if r < 0.45:
        return random_tensor(rng)
    if r < 0.6:  # another key's tensor, or a reshaped/retyped copy of one
        other = rec.get(rng.choice(KEYS))
        if isinstance(other, torch.Tensor) and other.numel():
            choice = rng.random()
            if choice < 0.3:
                return other.to(rng.choice(DTYPES))
            if choice < 0.6:
                return other.reshape(-1)
            return other[: max(other.shape[0] - 1, 0)] if other.dim() else other
        return other
    return rng.choice(pool)


def mutate_record(rng: random.Random, rec: dict) -> dict:
    rec = dict(rec)
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(KEYS + ("extra",))
        if rng.random() < 0.2:
            rec.pop(key, None)
        else:
            rec[key] = random_value(rng, rec)
    return rec


def mutate_bytes(rng: random.Random, data: bytes) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        op = rng.random()
        if not b:
            break
        at = rng.randrange(len(b))
        if op < 0.5:
            b[at] = rng.randrange(256)
        elif op < 0.65:
            del b[at:]
        elif op < 0.8:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        else:
            src = rng.randrange(len(b))
            n = rng.randint(1, 64)
            b[at:at + n] = b[src:src + n]
    return bytes(b)


def check_loaded(rec: dict, size: int) -> None:
    """What a successful load promises: its tensors are stored in full and
    together take no more than the file."""
    total = 0
    for key, value in rec.items():
        if isinstance(value, torch.Tensor):
            need = value.numel() * value.element_size()
            if not value.is_contiguous() or need > value.untyped_storage().nbytes():
                raise AssertionError(f"key {key!r} loaded without its data in full")
            total += need
    if total > size:
        raise AssertionError(f"loaded {total} bytes of tensors from a {size}-byte file")
    if not isinstance(rec["sm_scale"], float):
        raise AssertionError(f"sm_scale loaded as {type(rec['sm_scale']).__name__}")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--replay-every", type=int, default=25,
                   help="run the replay CLI on every N-th input")
    p.add_argument("--out", default=None, help="keep failing inputs here")
    args = p.parse_args(argv)
    # torch.load warns about the odd pickle protocols that mutated bytes declare.
    warnings.filterwarnings("ignore", category=UserWarning)
    rng = random.Random(args.seed)
    torch.manual_seed(args.seed)
    tmp = tempfile.mkdtemp(prefix="smla-fuzz-")
    failures, rounds, loaded = [], 0, 0
    try:
        base = base_record(tmp)
        buf = io.BytesIO()
        torch.save(base, buf)
        base_bytes = buf.getvalue()
        deadline = time.monotonic() + args.seconds
        path = os.path.join(tmp, "input.pt")
        while time.monotonic() < deadline:
            rounds += 1
            known = len(failures)
            if rng.random() < 0.6:
                try:
                    torch.save(mutate_record(rng, base), path)
                except Exception:  # noqa: BLE001  (no such tensor, or not serialisable)
                    continue
            else:
                with open(path, "wb") as f:
                    f.write(mutate_bytes(rng, base_bytes))
            size = os.path.getsize(path)
            try:
                rec = load_call(path, max_bytes=MAX_BYTES)
                check_loaded(rec, size)
                loaded += 1
            except (DumpError, ValueError, TypeError):
                pass
            except Exception:  # noqa: BLE001
                failures.append((path, traceback.format_exc()))
            if rounds % args.replay_every == 0:
                out, err = io.StringIO(), io.StringIO()
                try:
                    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                        rc = replay.main([path, "--device", "cpu", "--backend", "reference",
                                          "--max-bytes", str(MAX_BYTES)])
                    if rc not in (0, 1, 2):
                        failures.append((path, f"replay exited {rc}\n{err.getvalue()}"))
                except Exception:  # noqa: BLE001
                    failures.append((path, "replay raised\n" + traceback.format_exc()))
            if len(failures) > known and args.out:
                os.makedirs(args.out, exist_ok=True)
                kept = os.path.join(args.out, f"failure_{len(failures)}.pt")
                shutil.copy(failures[-1][0], kept)
                failures[-1] = (kept, failures[-1][1])
            if len(failures) >= 5:
                break
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"dump-header fuzz: {rounds} inputs, {loaded} loaded, {rounds - loaded} refused, "
          f"{len(failures)} failures (seed {args.seed})")
    for path, text in failures:
        print(f"--- {path}\n{text}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
