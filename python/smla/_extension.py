"""smla._C, the PyTorch extension, built against the torch that is installed.

The extension links against torch's C++ libraries, whose ABI changes with
every torch release, so smla ships its C++ sources (``smla/_native``) and
builds them where it runs, the way TileLang and DeepGEMM build kernels on
first use. ``load()`` takes the first of:

1. ``smla/_C*.so`` next to the package: an in-place development build
   (``cmake -S python -B build-py``, python/USAGE.md);
2. ``<cache>/extension/<tag>/_C<suffix>`` (smla._cache), where the tag names
   smla's version and native sources, torch's version and CUDA, and the
   Python ABI: a build that another process (or an earlier run) published;
3. a build into that entry now, with CMake (and Ninja where present): about
   a minute on a GPU node, once per torch version and cache. Concurrent
   processes wait for one builder. A failed build is recorded next to the
   entry; processes that were waiting for it report its log instead of
   building again, and a later run retries.

Building needs a C++17 compiler, CMake >= 3.20 and the CUDA headers
(``cuda.h``: ``CUDA_HOME`` or /usr/local/cuda), not LLVM and not a GPU.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from typing import Dict, Optional

from . import _cache, _sources
from ._log import logger
from ._version import __version__

PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
BUILD_INFO = os.path.join(PACKAGE_DIR, "_build_info.json")


class ExtensionBuildError(ImportError):
    """smla._C could not be built; the message says why and where the log is."""


def build_info() -> Dict:
    """What the distribution recorded when it was built (version, source
    commit, native-source digest, kernel library), or {} in a source tree."""
    try:
        with open(BUILD_INFO, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def native_source_dir() -> str:
    """The directory holding CMakeLists.txt and csrc/ of the extension:
    smla/_native in an installed package, python/ in a source tree."""
    installed = os.path.join(PACKAGE_DIR, "_native")
    return installed if os.path.isdir(installed) else os.path.dirname(PACKAGE_DIR)


def cache_tag() -> str:
    """The cache entry's name: what the built module depends on."""
    import torch

    digest = build_info().get("native_sha256") or _sources.native_digest(
        _sources.native_files(native_source_dir()))
    abi = int(bool(getattr(torch._C, "_GLIBCXX_USE_CXX11_ABI", True)))
    tag = (f"smla{__version__}-{digest[:12]}-torch{torch.__version__}-cuda{torch.version.cuda}"
           f"-{sys.implementation.cache_tag}-cxx11abi{abi}")
    return re.sub(r"[^A-Za-z0-9._+-]", "_", tag)


def cached_module_path() -> str:
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return os.path.join(_cache.cache_dir(), "extension", cache_tag(), "_C" + suffix)


def _in_package_module() -> Optional[str]:
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        path = os.path.join(PACKAGE_DIR, "_C" + suffix)
        if os.path.isfile(path):
            return path
    return None


def _import(path: str):
    spec = importlib.util.spec_from_file_location("smla._C", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["smla._C"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["smla._C"]
        raise
    return module


def module_path() -> Optional[str]:
    """The file smla._C is (or would be) imported from, if it exists."""
    mod = sys.modules.get("smla._C")
    if mod is not None:
        return getattr(mod, "__file__", None)
    path = _in_package_module()
    if path:
        return path
    path = cached_module_path()
    return path if os.path.isfile(path) else None


def load():
    """Imports smla._C (building it into the cache first if needed) and
    returns the module; raises ImportError (ExtensionBuildError for a
    failed build) saying why."""
    if "smla._C" in sys.modules:
        return sys.modules["smla._C"]
    local = _in_package_module()
    if local:
        return _import(local)
    path = cached_module_path()
    if not os.path.isfile(path):
        _build(path)
    return _import(path)


def _tool(name: str) -> Optional[str]:
    return shutil.which(name)


def _build(path: str) -> None:
    failed = os.path.dirname(path) + ".failed.log"
    os.makedirs(os.path.dirname(failed), exist_ok=True)
    with _cache.locked(os.path.dirname(path), "the extension smla._C") as began:
        if os.path.isfile(path):
            return
        if os.path.isfile(failed) and os.path.getmtime(failed) >= began:
            raise ExtensionBuildError(_failure_message(failed))
        _run_build(path, failed)


def _failure_message(log: str) -> str:
    try:
        with open(log, encoding="utf-8", errors="replace") as f:
            tail = "".join(f.readlines()[-25:])
    except OSError:
        tail = ""
    return (f"building smla._C against the installed torch failed (full log: {log}; "
            f"the next run retries):\n{tail}")


# Where a compiler with a shared libstdc++ is looked for first.
_FALLBACK_COMPILERS = ("/usr/bin/c++", "/usr/bin/g++")


def _shares_libstdcxx(cxx: str) -> bool:
    """Whether `cxx` links C++ programs against a shared libstdc++ (GCC and
    Clang answer -print-file-name with a path only where the file exists)."""
    try:
        out = subprocess.run([cxx, "-print-file-name=libstdc++.so"], capture_output=True,
                             text=True, timeout=30, stdin=subprocess.DEVNULL).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return True  # not a GCC-like driver: CMake's own checks decide
    return os.path.isabs(out)


def _cxx_compiler() -> Optional[str]:
    """The C++ compiler for the extension: CMake's choice (CXX, else c++ on
    PATH), unless that toolchain has only a static libstdc++. Linked into
    the extension, a second libstdc++ next to torch's shared one breaks at
    the first stream the two both touch (a device-mismatch error message
    crashed in std::ostream on such an image), so a compiler with a shared
    libstdc++ is taken instead, or the build stops saying why."""
    chosen = os.environ.get("CXX") or _tool("c++") or _tool("g++")
    if chosen is None or _shares_libstdcxx(chosen):
        return None
    for candidate in (*_FALLBACK_COMPILERS, _tool("c++"), _tool("g++")):
        if candidate and os.path.isfile(candidate) and \
                os.path.realpath(candidate) != os.path.realpath(chosen) and \
                _shares_libstdcxx(candidate):
            logger.warning("smla: %s has no shared libstdc++ (the extension would carry a "
                           "second copy next to torch's); building with %s", chosen, candidate)
            return candidate
    raise ExtensionBuildError(
        f"{chosen} links libstdc++ statically (it has no libstdc++.so), so smla._C would carry "
        "a second libstdc++ next to torch's, which crashes; set CXX to a compiler with a "
        "shared libstdc++ (the one torch was built with, e.g. the system's g++)")


def _run_build(path: str, failed: str) -> None:
    import torch

    cmake = _tool("cmake")
    if cmake is None:
        raise ExtensionBuildError(
            "building smla._C needs CMake >= 3.20 on PATH (and Ninja, optional): "
            "pip install cmake ninja, or your system's packages")
    source = native_source_dir()
    entry = os.path.dirname(path)
    private = _cache.private_dir(entry)
    build = os.path.join(private, "build")
    log_path = os.path.join(private, "build.log")
    env = dict(os.environ)
    if not env.get("CUDA_HOME"):
        from torch.utils.cpp_extension import CUDA_HOME

        if CUDA_HOME:
            env["CUDA_HOME"] = CUDA_HOME
    jobs = str(max(1, min(len(os.sched_getaffinity(0)), 32)))
    generator = ["-G", "Ninja"] if _tool("ninja") else []
    cxx = _cxx_compiler()
    compiler = [f"-DCMAKE_CXX_COMPILER={cxx}"] if cxx else []
    commands = [
        [cmake, "-S", source, "-B", build, *generator, *compiler, "-DCMAKE_BUILD_TYPE=Release",
         f"-DPython_EXECUTABLE={sys.executable}", "-DSMLA_PYTHON_INPLACE=OFF"],
        [cmake, "--build", build, "-j", jobs],
    ]
    logger.warning("smla: building the extension smla._C against torch %s into %s "
                   "(once per torch version and cache; about a minute)", torch.__version__, entry)
    t0 = time.time()
    with open(log_path, "w", encoding="utf-8") as log:
        for cmd in commands:
            log.write("$ " + " ".join(cmd) + "\n")
            log.flush()
            rc = subprocess.call(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                 stdin=subprocess.DEVNULL)
            if rc != 0:
                break
    built = [n for n in os.listdir(build) if n.startswith("_C") and n.endswith(".so")] \
        if rc == 0 else []
    if not built:
        os.replace(log_path, failed)
        shutil.rmtree(private, ignore_errors=True)
        raise ExtensionBuildError(_failure_message(failed))
    os.makedirs(entry, exist_ok=True)
    staged = os.path.join(private, os.path.basename(path))
    shutil.copyfile(os.path.join(build, built[0]), staged)
    shutil.copyfile(log_path, os.path.join(entry, "build.log"))
    _cache.publish(staged, path)
    shutil.rmtree(private, ignore_errors=True)
    if os.path.exists(failed):
        os.unlink(failed)
    logger.warning("smla: built smla._C in %.0f s: %s", time.time() - t0, path)
