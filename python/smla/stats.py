"""Process-wide counters of smla calls (``smla.stats()``) and the
rate-limited log of checked mode's repairs (``logging.getLogger("smla")``).

``smla.stats()`` returns a dict of ints, summed over every call in this
process (all threads):

    calls_compiled, calls_checked, calls_reference   calls per mode
    invalid_slots, dead_rows, clamped, nonfinite_rows
        the guard counters (smla.contract.COUNTER_NAMES) of every call whose
        counters were read: checked mode always, the other modes with
        ``diagnostics=True`` (reading them waits for the GPU, so a compiled
        call without diagnostics adds only to calls_compiled)
    repaired_calls, repaired_tokens      checked mode's repairs
    uncounted_rows                       non-finite output rows the kernel's
                                         nonfinite_rows counter missed
    lse_checks, lse_other_base, lse_neither
        checked mode's sampled lse checks (smla.check_lse): calls checked,
        calls whose lse matched the other base (an error), calls whose lse
        matched neither (stale; logged)
    agreement_checks, agreement_failures the sampled agreement checks
    dumps_written, dumps_skipped         SMLA_DUMP_DIR dumps (and those the
                                         directory's caps refused)

Calls traced by torch.compile are not counted (a trace is not a call).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Dict, Optional

from ._log import logger
from .contract import COUNTER_NAMES

STAT_NAMES = (
    "calls_compiled", "calls_checked", "calls_reference", *COUNTER_NAMES,
    "repaired_calls", "repaired_tokens", "uncounted_rows", "lse_checks", "lse_other_base",
    "lse_neither", "agreement_checks", "agreement_failures", "dumps_written", "dumps_skipped",
)

_lock = threading.Lock()
_totals: Dict[str, int] = dict.fromkeys(STAT_NAMES, 0)


def record(**deltas: int) -> Dict[str, int]:
    """Adds ``deltas`` to the process-wide totals; returns the new totals."""
    with _lock:
        for name, value in deltas.items():
            if name not in _totals:
                raise KeyError(f"smla.stats: unknown statistic {name!r}")
            _totals[name] += int(value)
        return dict(_totals)


def record_call(mode: str, counters: Optional[Dict[str, int]] = None) -> None:
    """One call in ``mode``, with its guard counters when they were read."""
    deltas = {f"calls_{mode}": 1}
    if counters:
        deltas.update({k: counters.get(k, 0) for k in COUNTER_NAMES})
    record(**deltas)


def stats() -> Dict[str, int]:
    """The process-wide totals (see the module docstring)."""
    with _lock:
        return dict(_totals)


def reset_stats() -> Dict[str, int]:
    """Sets every total to 0; returns the totals before."""
    with _lock:
        before = dict(_totals)
        for name in _totals:
            _totals[name] = 0
        return before


class RateLimitedLog:
    """Logs every event it is given, up to ``burst`` records per kind of
    event, then at most one record of that kind per ``interval`` seconds; a
    record after a quiet spell says how many events of its kind went
    unlogged since the previous one. Events are counted either way
    (smla.stats() holds the totals each record quotes)."""

    def __init__(self, log: logging.Logger, burst: int = 10, interval: float = 60.0,
                 clock: Callable[[], float] = time.monotonic):
        self.log, self.burst, self.interval, self.clock = log, burst, interval, clock
        self._lock = threading.Lock()
        # kind -> [records emitted, events held back since the last, time of the last]
        self._state: Dict[str, list] = {}

    def event(self, level: int, message: str, kind: str = "repair") -> bool:
        """Logs ``message`` unless the rate limit of ``kind`` holds it back;
        returns whether it was logged."""
        with self._lock:
            now = self.clock()
            state = self._state.setdefault(kind, [0, 0, float("-inf")])
            if state[0] >= self.burst and now - state[2] < self.interval:
                state[1] += 1
                return False
            suppressed = state[1]
            state[0] += 1
            state[1] = 0
            state[2] = now
        if suppressed:
            message += (f" ({suppressed} similar event{'s' if suppressed != 1 else ''} "
                        f"not logged since the previous message)")
        self.log.log(level, message)
        return True
