"""The service's own small files (API keys, submitted rows, the retrain marker, refreshed
prices): written whole or not at all, changed under one lock, watched by modification
time. Replicas share them on one volume."""

from __future__ import annotations

import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def write_atomically(path: Path, text: str, mode: int | None = None) -> None:
    """Replace ``path`` by ``text``: written beside it, fsynced, renamed over it (a reader
    sees the old file or the new one, never part of one)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (a ``.lock`` file beside it), across processes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def mtime(path: Path) -> float | None:
    """When ``path`` last changed (None: it does not exist)."""
    try:
        return path.stat().st_mtime
    except FileNotFoundError:
        return None
