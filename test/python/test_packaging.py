"""The distribution: the build backend (python/backend/smla_backend.py)
packs the Python package, the extension's C++ sources and the kernel
library into a wheel and a source distribution; the source distribution
builds the same wheel; the installed package builds its extension into a
cache entry named after what the module depends on (smla/_extension.py).
Standard library and torch only, no GPU."""

import hashlib
import base64
import importlib.util
import json
import os
import sys
import tarfile
import zipfile

import pytest

import smla
from smla import _extension, _sources

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BACKEND = os.path.join(ROOT, "python", "backend", "smla_backend.py")


def load_backend(path=BACKEND):
    spec = importlib.util.spec_from_file_location(f"smla_backend_{abs(hash(path))}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def kernel_dir(path, cubin_name="k.cubin"):
    """A library of two kernels sharing one cubin, plus files it does not
    name (a stray cubin, the PTX)."""
    path.mkdir()
    (path / "k.cubin").write_bytes(b"cubin bytes")
    (path / "stray.cubin").write_bytes(b"not in the manifest")
    (path / "k.ptx").write_text("// ptx")
    kernels = [dict(name=n, kind=kind, cubin=cubin_name, sha256="0" * 64, entry=n,
                    config={"d": 512}, launch={}, params=[])
               for n, kind in (("a_bwd", "bwd"), ("a_dkv_cast", "dkv_cast"))]
    (path / "manifest.json").write_text(json.dumps(
        {"format": "smla-manifest", "version": 1, "target": "sm_90a",
         "compiler": {"name": "smla-compile", "commit": "abc"}, "kernels": kernels}))
    return str(path)


def wheel_files(path):
    with zipfile.ZipFile(path) as zf:
        return {n: zf.read(n) for n in zf.namelist()}


@pytest.fixture(scope="module")
def backend():
    if not os.path.isfile(BACKEND):
        pytest.skip("not a source checkout")
    return load_backend()


def test_wheel_holds_the_package_sources_and_library(backend, tmp_path):
    name = backend.build_wheel(str(tmp_path), {"kernels": kernel_dir(tmp_path / "lib")})
    assert name == f"smla-{smla.__version__}-py3-none-any.whl"
    files = wheel_files(tmp_path / name)
    for expected in ("smla/__init__.py", "smla/_extension.py", "smla/_native/CMakeLists.txt",
                     "smla/_native/csrc/Module.cpp", "smla/_native/runtime/CMakeLists.txt",
                     "smla/_native/runtime/lib/LibraryFiles.cpp",
                     "smla/_native/runtime/include/smla/runtime/Launcher.h",
                     "smla/kernels/manifest.json", "smla/kernels/k.cubin",
                     "smla/_build_info.json"):
        assert expected in files, expected
    assert not any(n.endswith(("stray.cubin", ".ptx", ".so")) or "/test/" in n for n in files)
    dist_info = f"smla-{smla.__version__}.dist-info"
    meta = files[f"{dist_info}/METADATA"].decode()
    assert f"Version: {smla.__version__}" in meta and "Requires-Dist: torch>=2.4" in meta
    assert "Tag: py3-none-any" in files[f"{dist_info}/WHEEL"].decode()
    # Every file is in RECORD with its digest and size.
    for line in files[f"{dist_info}/RECORD"].decode().splitlines():
        path, digest, size = line.split(",")
        if path.endswith("RECORD"):
            continue
        data = files[path]
        want = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert digest == f"sha256={want}" and int(size) == len(data)
    info = json.loads(files["smla/_build_info.json"])
    native = _sources.native_files(os.path.join(ROOT, "python"))
    assert info["native_sha256"] == _sources.native_digest(native)
    assert info["kernel_library"]["kernels"] == 2
    assert info["kernel_library"]["compiler"]["commit"] == "abc"


def test_source_distribution_builds_the_same_wheel(backend, tmp_path):
    lib = kernel_dir(tmp_path / "lib")
    sdist = backend.build_sdist(str(tmp_path), {"kernels": lib})
    direct = wheel_files(tmp_path / backend.build_wheel(str(tmp_path), {"kernels": lib}))
    with tarfile.open(tmp_path / sdist) as tf:
        tf.extractall(tmp_path / "x")
    top = tmp_path / "x" / sdist[: -len(".tar.gz")]
    assert (top / "kernels" / "k.cubin").is_file() and (top / "runtime" / "lib").is_dir()
    (tmp_path / "w").mkdir()
    rebuilt = load_backend(str(top / "backend" / "smla_backend.py"))
    from_sdist = wheel_files(tmp_path / "w" / rebuilt.build_wheel(str(tmp_path / "w")))
    assert sorted(from_sdist) == sorted(direct)
    for name, data in direct.items():
        if not name.endswith("RECORD"):
            assert from_sdist[name] == data, name


def test_library_must_name_cubins_in_its_directory(backend, tmp_path):
    lib = kernel_dir(tmp_path / "lib", cubin_name="sub/k.cubin")
    with pytest.raises(RuntimeError, match="names the cubin 'sub/k.cubin', not a file name"):
        backend.build_wheel(str(tmp_path), {"kernels": lib})
    with pytest.raises(RuntimeError, match="has no manifest.json"):
        backend.build_wheel(str(tmp_path), {"kernels": str(tmp_path)})


def test_wheel_without_a_library(backend, tmp_path, monkeypatch):
    monkeypatch.delenv("SMLA_DIST_KERNELS", raising=False)
    files = wheel_files(tmp_path / backend.build_wheel(str(tmp_path)))
    assert not any(n.startswith("smla/kernels/") for n in files)
    assert json.loads(files["smla/_build_info.json"])["kernel_library"] is None


def test_extension_cache_tag_names_what_the_module_depends_on():
    import torch

    tag = _extension.cache_tag()
    assert tag.startswith(f"smla{smla.__version__}-")
    assert f"torch{torch.__version__}".replace("+", "+") in tag
    assert sys.implementation.cache_tag in tag
    digest = _extension.build_info().get("native_sha256") or _sources.native_digest(
        _sources.native_files(_extension.native_source_dir()))
    assert digest[:12] in tag


def test_installed_package_is_under_test():
    """With SMLA_EXPECT_INSTALLED=1 (CI's run against the distribution), the
    package under test must be the installed one, not python/ of this tree."""
    if os.environ.get("SMLA_EXPECT_INSTALLED") != "1":
        pytest.skip("runs against the installed distribution only")
    assert not os.path.abspath(smla.__file__).startswith(os.path.join(ROOT, "python") + os.sep)
    assert os.path.isdir(os.path.join(os.path.dirname(smla.__file__), "_native"))
    assert _extension.build_info()["version"] == smla.__version__


def _fake_compiler(path, libstdcxx):
    """A compiler driver that answers -print-file-name=libstdc++.so as GCC
    does: a path where the shared library exists, the bare name where not."""
    path.write_text(f"#!/bin/sh\necho '{libstdcxx}'\n")
    path.chmod(0o755)
    return str(path)


def test_extension_avoids_a_compiler_with_only_a_static_libstdcxx(tmp_path, monkeypatch):
    """A toolchain whose libstdc++ is static-only would put a second
    libstdc++ into smla._C next to torch's: the build takes a compiler with a
    shared one, or stops with the reason, naming CXX."""
    static = _fake_compiler(tmp_path / "static-g++", "libstdc++.so")
    shared = _fake_compiler(tmp_path / "shared-g++", "/usr/lib/libstdc++.so")
    monkeypatch.setattr(_extension, "_tool", lambda name: None)
    monkeypatch.setenv("CXX", static)
    monkeypatch.setattr(_extension, "_FALLBACK_COMPILERS", (shared,))
    assert _extension._cxx_compiler() == shared
    monkeypatch.setattr(_extension, "_FALLBACK_COMPILERS", ())
    with pytest.raises(_extension.ExtensionBuildError, match="static-g.. links libstdc.. statically.*set CXX"):
        _extension._cxx_compiler()
    monkeypatch.setenv("CXX", shared)
    assert _extension._cxx_compiler() is None  # CMake's own choice stands
