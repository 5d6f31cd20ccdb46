"""The directory that smla's processes share: the extension built against
the installed torch (smla._extension) and kernels compiled on first use
(smla._library).

``smla.config.cache_dir``: SMLA_CACHE_DIR, else ``$XDG_CACHE_HOME/smla``, else
``~/.cache/smla``, as read at import (smla._config).
Every entry is built in a private directory and published with one rename,
so any number of processes (the ranks of a job, on one node or on a shared
file system) may use one cache: a reader sees a whole entry or none. A lock
file keeps them from all building the same entry at once; where the file
system has no flock, they build side by side and the first rename wins.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import tempfile
import time

from . import _config
from ._log import logger


def cache_dir() -> str:
    """The cache root (not created here)."""
    return _config.get("cache_dir")


def entry_path(*parts: str) -> str:
    """A path under the cache root; its parent directory is created."""
    path = os.path.join(cache_dir(), *parts)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    return path


# flock is not available on every shared file system (some NFS and Lustre
# mounts answer with one of these).
_NO_FLOCK = {errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL}


@contextlib.contextmanager
def locked(path: str, what: str):
    """Holds an exclusive lock on ``path + ".lock"``; yields the time the
    wait for it began (a failure recorded after that time was this wait's
    builder's). Logs when another process holds it."""
    began = time.time()
    fd = os.open(path + ".lock", os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644)
    try:
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                logger.warning("smla: waiting for another process that is building %s", what)
                fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            if exc.errno not in _NO_FLOCK:
                raise
            logger.warning("smla: no file lock in %s (%s); building %s without one",
                           os.path.dirname(path), exc.strerror, what)
        yield began
    finally:
        os.close(fd)


def private_dir(path: str) -> str:
    """A new directory next to ``path`` for building its entry."""
    return tempfile.mkdtemp(prefix=os.path.basename(path) + ".tmp-", dir=os.path.dirname(path))


def publish(private: str, path: str) -> None:
    """Makes ``private`` (a file or a directory) the entry ``path`` with one
    rename. If another process published ``path`` first, its entry stays and
    ``private`` is removed."""
    try:
        # A directory's rename fails if `path` exists and is not empty; a
        # file's replaces it (with the same bytes) atomically.
        os.rename(private, path) if os.path.isdir(private) else os.replace(private, path)
    except OSError:
        if not os.path.exists(path):
            raise
    if os.path.lexists(private):
        if os.path.isdir(private):
            shutil.rmtree(private, ignore_errors=True)
        else:
            os.unlink(private)
