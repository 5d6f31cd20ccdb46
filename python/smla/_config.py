"""smla's configuration: every SMLA_* environment variable, read once.

The variables are read when smla is imported and again on an explicit
``smla.reload_config()``; nothing reads the environment per call, in
Python or in the C++ op. ``smla.config`` shows the values in force (one
attribute per variable: SMLA_WALK_PERIOD is ``smla.config.walk_period``),
and ``smla.configure(**values)`` changes some of them for this process
(checked by the same rules; it returns the previous values, so
``smla.configure(**previous)`` restores them). The C++ op's settings (the
kernel directory, the slot walk, the token pairs) are handed to smla._C
whenever they change (``push``), so torch.compile and CUDA graphs see the
values in force when they trace or capture.

VARIABLES is the one table of them: python/USAGE.md lists the same.
"""

from __future__ import annotations

import os
import threading
from typing import Any, Callable, Dict, NamedTuple, Optional

# The choices of the enumerated settings, in the order smla._C numbers them.
MODES = ("compiled", "checked", "reference")
WALKS = ("auto", "sorted", "given")
PAIRS = ("auto", "on", "off")
PAIRS_ROWS = ("dq", "workspace")
INT32_MAX = 2 ** 31 - 1


def _path(text) -> str:
    """A directory, absolute: a relative one is taken relative to the
    working directory at the time the configuration is read."""
    if not isinstance(text, (str, os.PathLike)) or not os.fspath(text):
        raise ValueError(f"must be a path, got {text!r}")
    return os.path.abspath(os.fspath(text))


def _choice(choices) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if text not in choices:
            raise ValueError(f"must be {', '.join(choices[:-1])} or {choices[-1]}, "
                             f"got {text!r}")
        return text
    return parse


def _integer(low: int, high: int = INT32_MAX) -> Callable[[Any], int]:
    def parse(text) -> int:
        try:
            if isinstance(text, bool):
                raise ValueError
            value = int(text)
        except (TypeError, ValueError):
            raise ValueError(f"must be an integer in [{low}, {high}], got {text!r}") from None
        if not low <= value <= high:
            raise ValueError(f"must be an integer in [{low}, {high}], got {text!r}")
        return value
    return parse


def _default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.abspath(os.path.join(base, "smla"))


class Variable(NamedTuple):
    env: str                  # the environment variable
    parse: Callable           # its text (or a configure() value) -> the value; ValueError
    default: Any              # the value when unset or empty (a function: called then)
    doc: str                  # what it sets (python/USAGE.md says more)

    def unset(self):
        return self.default() if callable(self.default) else self.default


# One entry per variable; the setting's name is the variable's without
# SMLA_, in lower case. A default of None means "unset" (the setting's
# own default applies where it is used, e.g. the device's L2 size).
VARIABLES = (
    Variable("SMLA_MODE", _choice(MODES), None, "the default mode of smla.sparse_mla_bwd"),
    Variable("SMLA_KERNEL_DIR", _path, None,
             "a kernel directory used instead of the package's library"),
    Variable("SMLA_CACHE_DIR", _path, _default_cache_dir,
             "the cache: the built extension, kernels compiled on first use "
             "(default $XDG_CACHE_HOME/smla, else ~/.cache/smla)"),
    Variable("SMLA_COMPILER", str, None, "the kernel compiler (else smla-compile on PATH)"),
    Variable("SMLA_PTXAS", str, None, "the ptxas the kernel compiler runs"),
    Variable("SMLA_CHECK_LSE", _integer(0), 4, "checked mode: lse rows recomputed per call"),
    Variable("SMLA_CHECK_AGREEMENT", _integer(0), 0,
             "checked mode: tokens compared with the reference per call"),
    Variable("SMLA_DUMP_DIR", _path, None, "checked mode: where repaired calls are dumped"),
    Variable("SMLA_DUMP_MAX_FILES", _integer(0, 2 ** 63 - 1), 8, "cap on that directory's dumps"),
    Variable("SMLA_DUMP_MAX_BYTES", _integer(0, 2 ** 63 - 1), 4 << 30,
             "cap on that directory's bytes"),
    Variable("SMLA_WALK", _choice(WALKS), "auto", "the slot walk"),
    Variable("SMLA_WALK_PERIOD", _integer(0), None, "the kernel's rotation period in CTAs"),
    Variable("SMLA_WALK_CHUNK_TOKENS", _integer(1), None, "tokens per sorted chunk"),
    Variable("SMLA_WALK_L2_BYTES", _integer(1), None, "the L2 size the auto walk assumes"),
    Variable("SMLA_PAIRS", _choice(PAIRS), "auto", "key sharing between token pairs"),
    Variable("SMLA_PAIRS_CHUNK", _integer(1), None, "token pairs per launch"),
    Variable("SMLA_PAIRS_ROWS", _choice(PAIRS_ROWS), "dq", "where the pairs' index rows live"),
)
_BY_NAME: Dict[str, Variable] = {v.env[len("SMLA_"):].lower(): v for v in VARIABLES}

_lock = threading.Lock()
_values: Dict[str, Any] = {}
# Called with the values after every change (smla._compiled hands them to smla._C).
_listeners = []


def _read_environment() -> Dict[str, Any]:
    values = {}
    for name, var in _BY_NAME.items():
        text = os.environ.get(var.env)
        if not text:
            values[name] = var.unset()
            continue
        try:
            values[name] = var.parse(text)
        except ValueError as exc:
            raise ValueError(f"smla: environment variable {var.env} {exc}") from None
    return values


def _apply(values: Dict[str, Any]) -> None:
    with _lock:
        _values.clear()
        _values.update(values)
        listeners = list(_listeners)
    for listener in listeners:
        listener(dict(values))


def reload_config() -> Dict[str, Any]:
    """Reads every SMLA_* environment variable again (a malformed value is
    a ValueError naming the variable, and changes nothing); returns the
    values now in force."""
    _apply(_read_environment())
    return values()


def configure(**changes) -> Dict[str, Any]:
    """Sets the named settings for this process (``walk="sorted"``,
    ``kernel_dir=None`` for the package's library, ...), each checked as
    its environment variable is; returns every previous value, so that
    ``configure(**previous)`` restores them."""
    previous = values()
    new = dict(previous)
    for name, value in changes.items():
        var = _BY_NAME.get(name)
        if var is None:
            raise TypeError(f"smla.configure: unknown setting {name!r}; the settings are "
                            f"{', '.join(_BY_NAME)}")
        if value is None:
            new[name] = var.unset()
            continue
        try:
            new[name] = var.parse(value)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"smla.configure: argument '{name}' {exc}") from None
    _apply(new)
    return previous


def values() -> Dict[str, Any]:
    """Every setting's value in force, by name."""
    with _lock:
        return dict(_values)


def get(name: str) -> Any:
    with _lock:
        return _values[name]


def listen(listener: Callable[[Dict[str, Any]], None]) -> None:
    """Calls `listener(values)` now and after every change."""
    with _lock:
        _listeners.append(listener)
        current = dict(_values)
    listener(current)


class Config:
    """``smla.config``: the settings in force, one read-only attribute per
    SMLA_* variable (``smla.config.walk`` for SMLA_WALK). Change them with
    ``smla.configure(...)`` or ``smla.reload_config()``."""

    __slots__ = ()

    def __getattr__(self, name: str):
        if name not in _BY_NAME:
            raise AttributeError(f"smla.config has no setting {name!r}; the settings are "
                                 f"{', '.join(_BY_NAME)}")
        return get(name)

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"smla.config is read-only: use smla.configure({name}=...)")

    def __dir__(self):
        return list(_BY_NAME)

    def __repr__(self) -> str:
        return "smla.config(" + ", ".join(f"{k}={v!r}" for k, v in values().items()) + ")"


config = Config()
_apply(_read_environment())


def environment_variables() -> Dict[str, Optional[str]]:
    """Each variable's name and what it sets (for smla.info and the docs' test)."""
    return {v.env: v.doc for v in VARIABLES}
