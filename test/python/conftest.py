"""pytest setup: make python/ importable when no smla is installed (a run
against the installed distribution, as CI's, tests that; with
SMLA_EXPECT_INSTALLED=1 the source tree is never added), keep the caller's
SMLA_MODE and SMLA_DUMP_DIR out of the tests, give every test the
settings it started with back (smla.configure: tests change the walk, the
pairs, the kernel directory), and undo what a test adds to sys.path
(bench/bench_bwd.py puts python/ first when imported), so that
subprocesses given this process's path import the same smla.

On a GPU machine the GPU commands set SMLA_REQUIRE_GPU=1: a test that
skips because it found no CUDA device or no compiled backward then fails,
so a broken extension build cannot pass as a run of skipped tests."""

import importlib.util
import os
import sys

import pytest

_PY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "python"))
if importlib.util.find_spec("smla") is None and os.environ.get("SMLA_EXPECT_INSTALLED") != "1":
    sys.path.insert(0, _PY)


@pytest.fixture(autouse=True)
def _settings_restored(monkeypatch):
    import smla

    monkeypatch.delenv("SMLA_MODE", raising=False)
    monkeypatch.delenv("SMLA_DUMP_DIR", raising=False)
    previous = smla.configure(mode=None, dump_dir=None)
    yield
    smla.configure(**previous)


@pytest.fixture(autouse=True)
def _restore_sys_path():
    saved = list(sys.path)
    yield
    sys.path[:] = saved


_GPU_SKIPS = ("needs a CUDA device",)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("SMLA_REQUIRE_GPU") != "1" or not report.skipped:
        return
    reason = str(report.longrepr[-1]) if isinstance(report.longrepr, tuple) else str(report.longrepr)
    if any(s in reason for s in _GPU_SKIPS):
        report.outcome = "failed"
        report.longrepr = f"SMLA_REQUIRE_GPU=1 and the test skipped: {reason}"
