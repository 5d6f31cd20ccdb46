"""smla's build backend (PEP 517): builds the source distribution and a
pure-Python wheel with the standard library alone, so ``pip install`` of
either needs no network and no build tools (pyproject.toml names it with
``backend-path``).

The wheel holds the Python package, the extension's C++ sources as
``smla/_native`` (smla._extension builds them against the installed torch
on first use) and the kernel library as ``smla/kernels``. The kernel
library comes from ``kernels/`` in a source distribution, or, in a source
tree, from the directory given by ``--config-settings kernels=DIR`` (or the
environment variable SMLA_DIST_KERNELS); ``bash scripts/dist.sh`` builds
the library and passes it. A wheel built without one installs a package
that reports why it cannot run the compiled kernels.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import io
import json
import os
import subprocess
import tarfile
import time
import zipfile

NAME = "smla"
SUMMARY = ("Compiled, guarded sparse multi-latent attention backward "
           "(DeepSeek Sparse Attention) for sm_90a")
REQUIRES_PYTHON = ">=3.9"
REQUIRES = ["torch>=2.4"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # python/ or the sdist


def _load(name: str):
    """A stdlib-only module of the package, loaded on its own (the package's
    __init__ imports torch, which a build environment need not have)."""
    spec = importlib.util.spec_from_file_location(name, os.path.join(ROOT, "smla", name + ".py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def version() -> str:
    return _load("_version").__version__


def _commit() -> str:
    """The source commit: recorded in a source distribution, else git's."""
    info = os.path.join(ROOT, "BUILD_INFO.json")
    if os.path.isfile(info):
        with open(info, encoding="utf-8") as f:
            return json.load(f).get("commit", "unknown")
    try:
        out = subprocess.run(["git", "-C", ROOT, "describe", "--always", "--dirty", "--abbrev=12"],
                             capture_output=True, text=True, check=True)
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _kernel_dir(config_settings) -> str:
    packed = os.path.join(ROOT, "kernels")
    if os.path.isfile(os.path.join(packed, "manifest.json")):
        return packed
    given = (config_settings or {}).get("kernels") or os.environ.get("SMLA_DIST_KERNELS", "")
    if given and not os.path.isfile(os.path.join(given, "manifest.json")):
        raise RuntimeError(f"smla build backend: kernels={given!r} has no manifest.json "
                           "(build the library with: ninja -C build smla-kernels)")
    return given


def _kernel_files(directory: str):
    """(path, name) of the library's manifest.json and of the cubins it
    names (plain file names in its directory, runtime/MANIFEST.md)."""
    if not directory:
        return []
    with open(os.path.join(directory, "manifest.json"), encoding="utf-8") as f:
        cubins = sorted({k["cubin"] for k in json.load(f)["kernels"]})
    for name in cubins:
        if "/" in name or name in ("", ".", ".."):
            raise RuntimeError(f"smla build backend: {directory}/manifest.json names the cubin "
                               f"{name!r}, not a file name in its directory")
    return [(os.path.join(directory, n), n) for n in ["manifest.json"] + cubins]


def _kernel_summary(directory: str):
    if not directory:
        return None
    with open(os.path.join(directory, "manifest.json"), "rb") as f:
        raw = f.read()
    manifest = json.loads(raw)
    return {"target": manifest.get("target"), "kernels": len(manifest.get("kernels", [])),
            "compiler": manifest.get("compiler"),
            "manifest_sha256": hashlib.sha256(raw).hexdigest()}


def _python_files():
    out = []
    top = os.path.join(ROOT, "smla")
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames[:] = sorted(d for d in dirnames if d not in ("__pycache__", "kernels", "_native"))
        for name in sorted(filenames):
            if name.endswith(".py"):
                full = os.path.join(dirpath, name)
                out.append((full, "smla/" + os.path.relpath(full, top).replace(os.sep, "/")))
    return out


def _metadata() -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {NAME}", f"Version: {version()}",
             f"Summary: {SUMMARY}", f"Requires-Python: {REQUIRES_PYTHON}"]
    lines += [f"Requires-Dist: {r}" for r in REQUIRES]
    readme = os.path.join(ROOT, "USAGE.md")
    if os.path.isfile(readme):
        with open(readme, encoding="utf-8") as f:
            lines += ["Description-Content-Type: text/markdown", "", f.read()]
    return "\n".join(lines) + "\n"


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def _zip_write(zf: zipfile.ZipFile, name: str, data: bytes) -> None:
    info = zipfile.ZipInfo(name, date_time=(2020, 1, 1, 0, 0, 0))
    info.external_attr = 0o644 << 16
    info.compress_type = zipfile.ZIP_DEFLATED
    zf.writestr(info, data)


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def _native_files():
    _sources = _load("_sources")
    if not os.path.isfile(os.path.join(_sources.runtime_dir(ROOT), "CMakeLists.txt")):
        raise RuntimeError(
            f"smla build backend: no runtime sources next to {ROOT} (runtime/ or ../runtime); "
            "build from the repository's python/ directory (pip >= 21.3 builds it in place) "
            "or from the source distribution (bash scripts/dist.sh)")
    return _sources, _sources.native_files(ROOT)


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    _sources, native = _native_files()
    ver = version()
    kernels = _kernel_dir(config_settings)
    info = {"version": ver, "commit": _commit(),
            "native_sha256": _sources.native_digest(native),
            "kernel_library": _kernel_summary(kernels)}
    files = [(p, n) for p, n in _python_files()]
    files += [(p, "smla/_native/" + n) for p, n in native]
    files += [(p, "smla/kernels/" + n) for p, n in _kernel_files(kernels)]
    dist_info = f"{NAME}-{ver}.dist-info"
    wheel_name = f"{NAME}-{ver}-py3-none-any.whl"
    record = []
    with zipfile.ZipFile(os.path.join(wheel_directory, wheel_name), "w") as zf:
        def add(name: str, data: bytes) -> None:
            _zip_write(zf, name, data)
            record.append(_record_line(name, data))

        for path, name in files:
            with open(path, "rb") as f:
                add(name, f.read())
        add("smla/_build_info.json", (json.dumps(info, indent=2) + "\n").encode())
        add(f"{dist_info}/METADATA", _metadata().encode())
        add(f"{dist_info}/WHEEL", (f"Wheel-Version: 1.0\nGenerator: {NAME}_backend\n"
                                   "Root-Is-Purelib: true\nTag: py3-none-any\n").encode())
        add(f"{dist_info}/top_level.txt", b"smla\n")
        record.append(f"{dist_info}/RECORD,,")
        _zip_write(zf, f"{dist_info}/RECORD", ("\n".join(record) + "\n").encode())
    return wheel_name


def build_sdist(sdist_directory, config_settings=None):
    _sources, native = _native_files()
    ver = version()
    base = f"{NAME}-{ver}"
    kernels = _kernel_dir(config_settings)
    files = [(os.path.join(ROOT, n), n) for n in ("pyproject.toml", "USAGE.md")]
    files.append((os.path.abspath(__file__), "backend/" + os.path.basename(__file__)))
    files += _python_files()
    files += native
    files += [(p, "kernels/" + n) for p, n in _kernel_files(kernels)]
    info = json.dumps({"commit": _commit()}, indent=2).encode() + b"\n"
    name = base + ".tar.gz"
    mtime = int(os.environ.get("SOURCE_DATE_EPOCH", time.time()))

    def member(arcname: str, data: bytes) -> tarfile.TarInfo:
        ti = tarfile.TarInfo(f"{base}/{arcname}")
        ti.size, ti.mtime, ti.mode = len(data), mtime, 0o644
        return ti

    with tarfile.open(os.path.join(sdist_directory, name), "w:gz", format=tarfile.PAX_FORMAT) as tf:
        for path, arcname in files:
            with open(path, "rb") as f:
                data = f.read()
            tf.addfile(member(arcname, data), io.BytesIO(data))
        for arcname, data in (("BUILD_INFO.json", info), ("PKG-INFO", _metadata().encode())):
            tf.addfile(member(arcname, data), io.BytesIO(data))
    return name
