"""``python -m smla.info``: what this installation of smla runs with.

Prints the version and where it came from, torch and the device, the
extension (building it against the installed torch first if needed), the
kernel library and the bwd kernels that run on the device, the head counts
each configuration serves and how (its own kernel, or a larger one with
padded heads), the settings (smla.config), the cache and the kernel
compiler. Exits 0 when the compiled backward can run (on the
current device, where there is one), 1 otherwise, with the reason.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter
from typing import List

import torch

from . import _cache, _compiled, _config, _extension, _library
from ._version import __version__


def _source() -> str:
    info = _extension.build_info()
    if not info:
        return f"source tree {os.path.dirname(_extension.PACKAGE_DIR)}"
    lib = info.get("kernel_library") or {}
    libtext = (f"; kernel library: {lib.get('kernels')} kernels for {lib.get('target')}"
               if lib else "; no kernel library")
    return f"source commit {info.get('commit', 'unknown')}{libtext}"


def _device_line() -> str:
    if not torch.cuda.is_available():
        return "device: none (torch.cuda.is_available() is False)"
    index = torch.cuda.current_device()
    prop = torch.cuda.get_device_properties(index)
    return f"device: cuda:{index} {prop.name}, compute capability {prop.major}.{prop.minor}"


def _kernel_lines(kernels: List[dict], runs: bool) -> List[str]:
    out = []
    by_dir = Counter(k["directory"] for k in kernels)
    for directory, count in by_dir.items():
        first = next(k for k in kernels if k["directory"] == directory)
        compilers = sorted({k["compiler"] for k in kernels
                            if k["directory"] == directory and k["compiler"]})
        out.append(f"  {directory}: {count} kernels for {first['target']}"
                   + (f", compiled by {', '.join(compilers)}" if compilers else ""))
    bwd = [k for k in kernels if k["kind"] == "bwd"]
    out.append(f"  bwd kernels{' that run on the device' if runs else ''} ({len(bwd)}):")
    out += [f"    {k['config']}  [{k['name']}]" for k in bwd]
    out.append("  head counts each configuration serves (python/USAGE.md, \"Head counts\"):")
    for name, heads in _library.served_configurations(_compiled.load()):
        out.append(f"    {name}: {heads}")
    return out


def report(build: bool = True) -> int:
    print(f"smla {__version__} ({_source()})")
    print(f"python {sys.version.split()[0]}, torch {torch.__version__} (CUDA {torch.version.cuda})")
    print(f"package: {_extension.PACKAGE_DIR}")
    print(_device_line())
    status = 0
    path = _extension.module_path()
    if not build and path is None:
        print("extension smla._C: not built yet (it is built against this torch on first use)")
    else:
        why = _compiled.unavailable_reason(-1)
        if why is not None and "smla._C is unavailable" in why:
            print(f"extension smla._C: unavailable: {why}")
            status = 1
        else:
            print(f"extension smla._C: {_extension.module_path()}")
            print(f"kernel directory: {_compiled.load().kernel_directory()}"
                  + (" (smla.config.kernel_dir)" if _config.get("kernel_dir") else ""))
            if why is not None:
                print(f"  unavailable: {why}")
                status = 1
            else:
                device_why = _compiled.unavailable_reason() if torch.cuda.is_available() else None
                if device_why:
                    print(f"  the device cannot run them: {device_why}")
                    status = 1
                print("\n".join(_kernel_lines(_compiled.load().kernels(), device_why is None
                                              and torch.cuda.is_available())))
    print("settings: " + ", ".join(f"{k}={v}" for k, v in _config.values().items()
                                    if v is not None))
    root = _cache.cache_dir()
    print(f"cache: {root}")
    for sub in ("extension", "kernels"):
        top = os.path.join(root, sub)
        entries = []
        for dirpath, dirnames, filenames in os.walk(top):
            if "manifest.json" in filenames or any(f.startswith("_C") for f in filenames):
                entries.append(os.path.relpath(dirpath, top))
                dirnames[:] = []
        print(f"  {sub}: " + (", ".join(sorted(entries)) if entries else "none"))
    tool = _library.compiler()
    print(f"kernel compiler: {tool}" if tool else
          "kernel compiler: none (smla-compile not on PATH, SMLA_COMPILER unset): a "
          "configuration outside the library fails with the command that builds it")
    return status


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m smla.info", description=__doc__.split("\n")[0])
    parser.add_argument("--no-build", action="store_true",
                        help="do not build the extension if it is not built yet")
    args = parser.parse_args(argv)
    return report(build=not args.no_build)


if __name__ == "__main__":
    sys.exit(main())
