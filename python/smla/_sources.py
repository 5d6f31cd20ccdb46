"""The extension's C++ sources and their digest. Standard library only, with
no package imports: the distribution builder (python/backend) loads this
file on its own to pack the same files that smla._extension builds."""

from __future__ import annotations

import hashlib
import os
from typing import List, Tuple


def runtime_dir(root: str) -> str:
    """The runtime's sources next to the extension's: root/runtime in a
    distribution, root/../runtime in a source tree (root = python/)."""
    inside = os.path.join(root, "runtime")
    return inside if os.path.isdir(inside) else os.path.normpath(os.path.join(root, "..", "runtime"))


def native_files(root: str) -> List[Tuple[str, str]]:
    """(path, name in the package) of every file the extension's build
    reads: root's CMakeLists.txt and csrc/, and the runtime's CMakeLists.txt,
    include/ and lib/ (as runtime/...), sorted by name."""
    out = []

    def tree(top: str, subdirs, prefix: str) -> None:
        out.append((os.path.join(top, "CMakeLists.txt"), prefix + "CMakeLists.txt"))
        for sub in subdirs:
            for dirpath, dirnames, filenames in os.walk(os.path.join(top, sub)):
                dirnames.sort()
                for name in sorted(filenames):
                    if name.endswith((".cpp", ".h", ".inc")):
                        full = os.path.join(dirpath, name)
                        out.append((full, prefix + os.path.relpath(full, top).replace(os.sep, "/")))

    tree(root, ("csrc",), "")
    tree(runtime_dir(root), ("include", "lib"), "runtime/")
    return sorted(out, key=lambda pair: pair[1])


def native_digest(files: List[Tuple[str, str]]) -> str:
    """SHA-256 over the names and contents of `files` (native_files)."""
    h = hashlib.sha256()
    for full, name in files:
        with open(full, "rb") as f:
            h.update(name.encode() + b"\0" + hashlib.sha256(f.read()).digest())
    return h.hexdigest()
