"""Which kernel a call runs: the one rule, shared by the op and the loader.

The compiled backward takes its kernels from the package's library (or
smla.config.kernel_dir, SMLA_KERNEL_DIR), then from kernel directories
added at run time; every kernel takes a base-2 lse (the op hands a
natural-log lse over as lse * log2(e)). ``plan`` chooses, for a call's
configuration (D, Dt, H, G, positions, output types):

1. the bwd kernel of H heads, when a library has one;
2. else, for G = 1 and H <= MAX_PADDED_HEADS, the kernel of the smallest
   larger head count a library has: the op pads the heads with zero rows
   (smla._op), which contribute nothing;
3. else a kernel compiled on first use into the cache
   (``<cache>/kernels/smla<version>/<configuration>``, smla._cache), when
   the kernel compiler is available (smla.config.compiler, SMLA_COMPILER,
   else ``smla-compile`` on PATH): one process per cache compiles (the
   others wait for it), into a private directory published with one
   rename;
4. else an error that names the configuration and the command that
   builds it.

The lookups are smla._C's (python/csrc/KernelChoice.h): the op's launch
selects by the same function, for the head count planned here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from typing import Dict, List, Optional, Sequence, Tuple

import torch

from . import _cache, _config
from ._log import logger
from ._version import __version__

# Head counts up to this run on a larger kernel with padded heads (G = 1).
MAX_PADDED_HEADS = 128

_plans: Dict[Tuple, int] = {}
_lock = threading.Lock()


def compiler() -> Optional[str]:
    """The kernel compiler: smla.config.compiler (SMLA_COMPILER), else
    smla-compile on PATH."""
    return _config.get("compiler") or shutil.which("smla-compile")


def _ptxas() -> str:
    """The ptxas smla-compile runs: smla.config.ptxas (SMLA_PTXAS), on PATH,
    under CUDA_HOME, or the compiler's default (/usr/local/cuda/bin/ptxas)."""
    for candidate in (_config.get("ptxas"), shutil.which("ptxas"),
                      os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "bin", "ptxas")):
        if candidate and os.path.isfile(candidate):
            return candidate
    return "/usr/local/cuda/bin/ptxas"


def padded_heads(heads: int, served: Sequence[int]) -> Optional[int]:
    """The head count a call of `heads` heads runs on, given the head counts
    `served` by the libraries' kernels of its configuration (G = 1): heads
    itself when served, else the smallest larger one (heads at most
    MAX_PADDED_HEADS), else None."""
    if heads in served:
        return heads
    if heads > MAX_PADDED_HEADS:
        return None
    larger = [h for h in served if h > heads]
    return min(larger) if larger else None


def head_ranges(served: Sequence[int]) -> List[Tuple[int, int, int]]:
    """(first, last, kernel heads) for H in 1..MAX_PADDED_HEADS and every
    served head count: the ranges of H that run on each kernel (first ==
    last == kernel heads for the kernel's own H). smla.info prints them."""
    out: List[Tuple[int, int, int]] = []
    for h in range(1, max([MAX_PADDED_HEADS, *served]) + 1):
        k = padded_heads(h, served)
        if k is None:
            continue
        if out and out[-1][2] == k and out[-1][1] == h - 1 and h != k and out[-1][1] != k:
            out[-1] = (out[-1][0], h, k)
        else:
            out.append((h, h, k))
    return out


def describe_heads(served: Sequence[int], groups: int) -> str:
    """How each head count of a configuration runs, e.g. "H 1-7 on 8
    (padded), H 8 (exact), ..." (G > 1: the served counts, exact only)."""
    if groups != 1:
        return ", ".join(f"H {h} (exact)" for h in served)
    parts = []
    for first, last, kernel in head_ranges(served):
        if first == last == kernel:
            parts.append(f"H {kernel} (exact)")
        else:
            span = str(first) if first == last else f"{first}-{last}"
            parts.append(f"H {span} on {kernel} (padded)")
    return ", ".join(parts)


def served_configurations(module) -> List[Tuple[str, str]]:
    """(configuration, describe_heads) for every configuration but the head
    count that the libraries of `module` (smla._C) have one-token bwd
    kernels of."""
    families = {}
    for kernel in module.kernels():
        if kernel["kind"] != "bwd":
            continue
        fields = dict(item.split("=", 1) for item in kernel["config"].split())
        if fields.get("tokens", "1") != "1" or fields.get("lse_base", "2") != "2":
            continue
        key = (int(fields["d"]), int(fields["dt"]), int(fields["g"]),
               fields.get("positions") == "1", fields.get("dq_type", "bf16") == "f32",
               fields.get("dkv_type", "bf16") == "f32")
        families.setdefault(key, None)
    out = []
    for d, dt, g, positions, dq_f32, dkv_f32 in sorted(families):
        served = module.served_heads(d, dt, g, positions, dq_f32, dkv_f32,
                                     max(MAX_PADDED_HEADS, 1024))
        name = (f"d={d} dt={dt} g={g} positions={int(positions)} "
                f"dq={'f32' if dq_f32 else 'bf16'} dkv={'f32' if dkv_f32 else 'bf16'}")
        out.append((name, describe_heads(served, g)))
    return out


def plan(module, dims, positions: bool, dq_dtype: torch.dtype, dkv_dtype: torch.dtype) -> int:
    """The head count the call of `dims` (smla.checks.Dims) runs on (see the
    module docstring), making sure a library has its kernel: dims.H, or a
    larger count with padded heads. Raises RuntimeError naming the
    configuration when there is none and none can be compiled. Remembers
    its answer per configuration and kernel directory."""
    dq_f32, dkv_f32 = dq_dtype == torch.float32, dkv_dtype == torch.float32
    key = (_config.get("kernel_dir"), dims.D, dims.Dt, dims.H, dims.G, positions, dq_f32,
           dkv_f32)
    heads = _plans.get(key)
    if heads is not None:
        return heads
    args = (dims.D, dims.Dt, dims.H, dims.G, positions, dq_f32, dkv_f32)
    with _lock:
        found, config, why = module.find_kernel(*args)
        heads = dims.H
        if not found and dims.G == 1:
            served = module.served_heads(dims.D, dims.Dt, dims.G, positions, dq_f32, dkv_f32,
                                         MAX_PADDED_HEADS)
            heads = padded_heads(dims.H, served) or dims.H
            found = heads != dims.H
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
        _plans[key] = heads
    return heads


def cache_entry(config: str) -> str:
    """The cache directory of the kernels for `config` (an smla-compile
    --config string); a new smla version compiles its own."""
    name = config.replace("=", "").replace(",", "_")
    return _cache.entry_path("kernels", f"smla{__version__}", name)


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
