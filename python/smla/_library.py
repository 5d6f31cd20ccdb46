"""Kernels outside the shipped library: compiled on first use into the cache.

The compiled backward takes its kernels from the package's library (or
SMLA_KERNEL_DIR), then from kernel directories added at run time. For a
configuration none of them has, ``ensure_kernel`` looks in the cache
(``<cache>/kernels/smla<version>/<configuration>``, smla._cache) and, when
the kernel compiler is available (``SMLA_COMPILER``, else ``smla-compile``
on PATH), compiles it there first: one process per cache compiles (the
others wait for it), into a private directory published with one rename.
Without a compiler the call fails with an error that names the
configuration and the command that builds it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from typing import Optional, Tuple

import torch

from . import _cache
from ._log import logger
from ._version import __version__

_ready: set = set()
_lock = threading.Lock()


def compiler() -> Optional[str]:
    """The kernel compiler: $SMLA_COMPILER, else smla-compile on PATH."""
    given = os.environ.get("SMLA_COMPILER")
    if given:
        return given
    return shutil.which("smla-compile")


def _ptxas() -> str:
    """The ptxas smla-compile runs: $SMLA_PTXAS, on PATH, under CUDA_HOME, or
    the compiler's default (/usr/local/cuda/bin/ptxas)."""
    for candidate in (os.environ.get("SMLA_PTXAS"), shutil.which("ptxas"),
                      os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ptxas")):
        if candidate and os.path.isfile(candidate):
            return candidate
    return "/usr/local/cuda/bin/ptxas"


def cache_entry(config: str) -> str:
    """The cache directory of the kernels for `config` (an smla-compile
    --config string); a new smla version compiles its own."""
    name = config.replace("=", "").replace(",", "_")
    return _cache.entry_path("kernels", f"smla{__version__}", name)


def ensure_kernel(module, d: int, dt: int, heads: int, groups: int, lse_base_e: bool,
                  positions: bool, dq_f32: bool, dkv_f32: bool) -> None:
    """Makes sure some library of `module` (smla._C) has a bwd kernel for the
    configuration, compiling it into the cache if needed and possible.
    Without one and without a compiler it raises RuntimeError naming the
    configuration and how to build it. Remembers configurations found."""
    key = (os.environ.get("SMLA_KERNEL_DIR", ""), d, dt, heads, groups, lse_base_e, positions,
           dq_f32, dkv_f32)
    if key in _ready:
        return
    args = (d, dt, heads, groups, lse_base_e, positions, dq_f32, dkv_f32)
    with _lock:
        found, config, why = module.find_kernel(*args)
        if not found:
            entry = cache_entry(config)
            if not os.path.isfile(os.path.join(entry, "manifest.json")):
                tool = compiler()
                if tool is None:
                    raise RuntimeError(_missing_message(config, entry, why))
                _compile(tool, config, entry)
            module.add_kernel_directory(entry)
            found, config, why = module.find_kernel(*args)
            if not found:
                raise RuntimeError(f"smla: the kernels compiled into {entry} do not serve "
                                   f"{config}: {why}")
        _ready.add(key)


def _missing_message(config: str, entry: str, why: str) -> str:
    return (f"{why}\nTo build it: on a machine with smla's compiler (LLVM/MLIR 22, "
            f"scripts/build.sh smla-compile), run\n"
            f"    smla-compile --config {config} -o DIR\n"
            f"and copy DIR to {entry} here; or make smla-compile available here (on PATH, or "
            f"SMLA_COMPILER=/path/to/smla-compile) and smla compiles it into that cache "
            f"directory on first use.")


def _compile(tool: str, config: str, entry: str) -> None:
    with _cache.locked(entry, f"the kernels for {config}"):
        if os.path.isfile(os.path.join(entry, "manifest.json")):
            return
        private = _cache.private_dir(entry)
        cmd = [tool, "--config", config, "-o", private, "--ptxas", _ptxas(), "--quiet"]
        logger.warning("smla: compiling the kernels for %s into %s (once per cache)", config, entry)
        run = subprocess.run(cmd, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        if run.returncode != 0:
            shutil.rmtree(private, ignore_errors=True)
            raise RuntimeError(f"smla: compiling the kernels for {config} failed "
                               f"({' '.join(cmd)}):\n{run.stdout}{run.stderr}")
        _cache.publish(private, entry)
