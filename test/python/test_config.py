"""smla.config: every SMLA_* environment variable read once (at import and
on smla.reload_config()), checked by one table, changed with
smla.configure, listed in python/USAGE.md, and never read per call (the
C++ op reads nothing from the environment)."""

import os
import re
import subprocess
import sys

import pytest

import smla
from smla import _config

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def fresh(code, **env):
    """stdout of `code` in a new process with `env` added to the environment."""
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p), **env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True,
                          text=True)


def test_read_at_import_and_on_reload():
    out = fresh("import os, smla\n"
                "print(smla.config.walk, smla.config.pairs_chunk, smla.config.check_lse)\n"
                "os.environ['SMLA_WALK'] = 'given'\n"
                "print(smla.config.walk)\n"
                "smla.reload_config()\n"
                "print(smla.config.walk)\n",
                SMLA_WALK="sorted", SMLA_PAIRS_CHUNK="5", SMLA_CHECK_LSE="0")
    assert out.stdout.split("\n")[:3] == ["sorted 5 0", "sorted", "given"], out.stderr


def test_a_malformed_variable_names_itself_at_import():
    out = fresh("import smla", SMLA_PAIRS="sometimes")
    assert out.returncode != 0
    assert "ValueError: smla: environment variable SMLA_PAIRS must be auto, on or off, got " \
        "'sometimes'" in out.stderr


@pytest.mark.parametrize("env,value,message", [
    ("SMLA_WALK", "backwards", "must be auto, sorted or given, got 'backwards'"),
    ("SMLA_WALK_PERIOD", "-1", "must be an integer in [0, 2147483647], got '-1'"),
    ("SMLA_WALK_CHUNK_TOKENS", "0", "must be an integer in [1, 2147483647], got '0'"),
    ("SMLA_WALK_L2_BYTES", "lots", "must be an integer in [1, 2147483647], got 'lots'"),
    ("SMLA_PAIRS", "sometimes", "must be auto, on or off, got 'sometimes'"),
    ("SMLA_PAIRS_CHUNK", "0", "must be an integer in [1, 2147483647], got '0'"),
    ("SMLA_PAIRS_ROWS", "elsewhere", "must be dq or workspace, got 'elsewhere'"),
    ("SMLA_MODE", "fast", "must be compiled, checked or reference, got 'fast'"),
    ("SMLA_CHECK_LSE", "-2", "must be an integer in [0, 2147483647], got '-2'"),
    ("SMLA_DUMP_MAX_BYTES", "4G", "must be an integer in [0, 9223372036854775807], got '4G'"),
])
def test_every_malformed_value_is_refused(monkeypatch, env, value, message):
    """A malformed variable is a ValueError naming it, and changes nothing;
    smla.configure checks a value by the same rule, naming the setting."""
    before = _config.values()
    monkeypatch.setenv(env, value)
    with pytest.raises(ValueError, match="^" + re.escape(
            f"smla: environment variable {env} {message}") + "$"):
        smla.reload_config()
    assert _config.values() == before
    name = env[len("SMLA_"):].lower()
    with pytest.raises(ValueError, match="^" + re.escape(
            f"smla.configure: argument '{name}' {message}") + "$"):
        smla.configure(**{name: value})
    assert _config.values() == before


def test_configure_returns_what_restores():
    previous = smla.configure(walk="sorted", walk_period=7, pairs="off")
    assert (smla.config.walk, smla.config.walk_period, smla.config.pairs) == ("sorted", 7, "off")
    smla.configure(**previous)
    assert _config.values() == previous
    with pytest.raises(TypeError, match="smla.configure: unknown setting 'walks'"):
        smla.configure(walks="sorted")
    with pytest.raises(AttributeError, match="smla.config is read-only"):
        smla.config.walk = "given"
    with pytest.raises(AttributeError, match="smla.config has no setting 'walks'"):
        smla.config.walks
    assert "walk_l2_bytes=None" in repr(smla.config)


def test_paths_are_absolute_when_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    smla.configure(dump_dir="dumps", kernel_dir="lib")
    assert smla.config.dump_dir == str(tmp_path / "dumps")
    assert smla.config.kernel_dir == str(tmp_path / "lib")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    smla.configure(cache_dir=None)
    assert smla.config.cache_dir == str(tmp_path / "xdg" / "smla")


def test_every_variable_is_in_the_table_and_the_usage_notes():
    """The table in smla._config is the one list: every SMLA_* variable the
    package's code names is in it, and python/USAGE.md lists each."""
    table = set(_config.environment_variables())
    named = set()
    for base, _, names in os.walk(os.path.join(ROOT, "python", "smla")):
        for n in names:
            if n.endswith(".py"):
                with open(os.path.join(base, n), encoding="utf-8") as f:
                    named |= set(re.findall(r"\bSMLA_[A-Z0-9_]*[A-Z0-9]\b", f.read()))
    assert named <= table, named - table
    with open(os.path.join(ROOT, "python", "USAGE.md"), encoding="utf-8") as f:
        usage = f.read()
    assert [v for v in sorted(table) if f"`{v}`" not in usage] == []


def test_the_cpp_op_reads_no_environment():
    csrc = os.path.join(ROOT, "python", "csrc")
    if not os.path.isdir(csrc):
        pytest.skip("not a source checkout")
    for name in os.listdir(csrc):
        with open(os.path.join(csrc, name), encoding="utf-8") as f:
            assert "getenv" not in f.read(), name
