import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The source tree's package only when no smla is installed (test/python's
# conftest does the same), so a run against the installed distribution
# tests that.
if importlib.util.find_spec("smla") is None:
    sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
