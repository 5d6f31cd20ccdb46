"""pytest setup: make python/ importable when no smla is installed (a run
against the installed distribution, as CI's, tests that; with
SMLA_EXPECT_INSTALLED=1 the source tree is never added), and keep
SMLA_MODE from the caller's environment out of the tests."""

import importlib.util
import os
import sys

import pytest

_PY = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "python"))
if importlib.util.find_spec("smla") is None and os.environ.get("SMLA_EXPECT_INSTALLED") != "1":
    sys.path.insert(0, _PY)


@pytest.fixture(autouse=True)
def _no_env_mode(monkeypatch):
    monkeypatch.delenv("SMLA_MODE", raising=False)
    monkeypatch.delenv("SMLA_DUMP_DIR", raising=False)
