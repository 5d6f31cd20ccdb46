"""The package's logger ("smla") and its once-per-process warnings.

``logging.getLogger("smla")`` at DEBUG reports, for each new shape, the
kernel, the slot walk and the token pairing the compiled backward chose
(smla._compiled); at WARNING (shown without any logging setup) it reports
the extension being built and kernels being compiled on first use.
"""

from __future__ import annotations

import logging
import threading
import warnings

logger = logging.getLogger("smla")

_warned: set = set()
_lock = threading.Lock()


class SmlaSlowPathWarning(UserWarning):
    """A call runs smla's PyTorch reference on a CUDA tensor (correct but
    far slower than the compiled kernels); the message says why and how to
    fix it. Issued once per process and cause."""


def warn_once(key: str, message: str, category=SmlaSlowPathWarning, stacklevel: int = 3) -> bool:
    """Issue `message` the first time `key` is seen in this process; later
    calls with the same key do nothing. Returns whether it was issued."""
    with _lock:
        if key in _warned:
            return False
        _warned.add(key)
    warnings.warn(message, category, stacklevel=stacklevel)
    return True
