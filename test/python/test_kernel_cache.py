"""Kernels outside the shipped library that no padding serves
(smla/_library.py): compiled on first use into the cache with the real smla-compile (when this checkout has built
it: build/bin/smla-compile, or SMLA_TEST_COMPILER), found there by the next
process without compiling again, and, without a compiler, an error that
names the configuration and the command that builds it. Also the cache's
publishing and locking (smla/_cache.py). No GPU needed: the kernels are
compiled and opened, not launched."""

import json
import os
import subprocess
import sys

import pytest

from smla import _cache, _compiled

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
COMPILER = os.environ.get("SMLA_TEST_COMPILER") or os.path.join(ROOT, "build", "bin",
                                                                "smla-compile")
PTXAS = "/usr/local/cuda/bin/ptxas"

# A configuration the library does not hold and no padding serves (G = 2:
# the library's test shapes hold H = 4 with positions in bf16, and without
# positions in fp32), and the call arguments of smla._C.find_kernel for it.
CONFIG = "d=64,dt=32,heads=4,groups=2,lse=base2,positions=0,dq=bf16,dkv=bf16"
ARGS = (64, 32, 4, 2, False, False, False)

ENSURE = """
import torch
from smla import _compiled, _library
from smla.checks import Dims
ext = _compiled.load()
print("before", ext.find_kernel(*{args})[0])
try:
    heads = _library.plan(ext, Dims(T=1, H=4, G=2, K=1, S_kv=1, D=64, Dt=32), False,
                          torch.bfloat16, torch.bfloat16)
    print("after", ext.find_kernel(*{args})[0], heads)
except RuntimeError as e:
    print("RuntimeError:", e)
"""


def run(code, **env):
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True, check=True)


def _needs_extension():
    try:
        _compiled.load()
    except RuntimeError as exc:
        pytest.skip(f"the extension smla._C is unavailable ({exc})")


def test_config_string_and_lookup():
    _needs_extension()
    ext = _compiled.load()
    found, config, why = ext.find_kernel(*ARGS)
    assert config == CONFIG
    if not found:
        assert "no kernel variant matches the request kind=bwd d=64 dt=32 h=4 g=2" in why
        assert f"has no kernel for the configuration {CONFIG}" in why


def test_missing_configuration_names_the_build_command(tmp_path):
    _needs_extension()
    out = run(ENSURE.format(args=ARGS), SMLA_CACHE_DIR=str(tmp_path), SMLA_COMPILER="",
              PATH="/usr/bin:/bin").stdout
    entry = tmp_path / "kernels" / f"smla{_compiled._extension.__version__}" / \
        CONFIG.replace("=", "").replace(",", "_")
    assert "before False" in out
    assert f"smla-compile --config {CONFIG} -o DIR" in out
    assert f"copy DIR to {entry} here" in out


@pytest.mark.skipif(not (os.access(COMPILER, os.X_OK) and os.path.isfile(PTXAS)),
                    reason="needs this checkout's smla-compile and ptxas")
def test_compiles_a_missing_configuration_on_first_use(tmp_path):
    _needs_extension()
    env = dict(SMLA_CACHE_DIR=str(tmp_path), SMLA_COMPILER=COMPILER, SMLA_PTXAS=PTXAS)
    first = run(ENSURE.format(args=ARGS), **env)
    assert "before False" in first.stdout and "after True 4" in first.stdout, first
    assert f"compiling the kernels for {CONFIG}" in first.stderr
    (entry,) = [p for p in (tmp_path / "kernels").glob("smla*/*") if p.is_dir()]
    manifest = json.loads((entry / "manifest.json").read_text())
    bwd = [k for k in manifest["kernels"] if k["kind"] == "bwd"]
    assert bwd[0]["spec"].startswith(CONFIG) and bwd[0]["compiler"].startswith("smla-compile ")
    assert not list((tmp_path / "kernels").glob("smla*/*.tmp-*"))
    # The next process finds it in the cache: nothing is compiled again.
    second = run(ENSURE.format(args=ARGS), **dict(env, SMLA_COMPILER="/nonexistent"))
    assert "after True 4" in second.stdout and "compiling" not in second.stderr


def test_publish_keeps_the_first_entry(tmp_path):
    entry = str(tmp_path / "entry")
    for content in ("first", "second"):
        private = _cache.private_dir(entry)
        with open(os.path.join(private, "f"), "w") as f:
            f.write(content)
        _cache.publish(private, entry)
        assert not os.path.exists(private)
    with open(os.path.join(entry, "f")) as f:
        assert f.read() == "first"
    assert sorted(os.listdir(tmp_path)) == ["entry"]


HOLD = """
import os, sys, time
from smla import _cache
path, first = sys.argv[1], sys.argv[2] == "first"
if not first:
    open(path + ".ready", "w").close()
with _cache.locked(path, "a test entry"):
    print(time.time(), flush=True)
    while first and not os.path.exists(path + ".ready"):
        time.sleep(0.01)
    time.sleep(0.5)  # the second process is at the lock by now
    print(time.time(), flush=True)
"""


def test_lock_serialises_builders(tmp_path):
    """Two processes building one entry: the second gets the lock only after
    the first let it go, and says it is waiting."""
    path = str(tmp_path / "entry")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    first = subprocess.Popen([sys.executable, "-c", HOLD, path, "first"], env=env,
                             stdout=subprocess.PIPE, text=True)
    started = float(first.stdout.readline())
    second = subprocess.run([sys.executable, "-c", HOLD, path, "second"], env=env,
                            capture_output=True, text=True, check=True)
    ended = float(first.stdout.readline())
    assert first.wait() == 0
    assert started < ended <= float(second.stdout.split()[0])
    assert "waiting for another process that is building a test entry" in second.stderr
