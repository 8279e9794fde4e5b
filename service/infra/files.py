"""The service's own small files (API keys, submitted rows, the retrain marker, refreshed
prices): written whole or not at all, changed under one lock, watched by modification
time. Replicas share them on one volume."""

from __future__ import annotations

import errno
import fcntl
import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)  # the disk, the file-size limit, a quota


class StoreFull(Exception):
    """A write that could not be made whole (the disk, the file-size limit or a quota is
    full): nothing of it was kept."""


def write_atomically(path: Path, text: str, mode: int | None = None) -> None:
    """Replace ``path`` by ``text``: written beside it, fsynced, renamed over it (a reader
    sees the old file or the new one, never part of one)."""
    write_all_atomically({path: text}, mode)


def write_all_atomically(texts: dict[Path, str], mode: int | None = None) -> None:
    """Replace each path by its text, all or none: every file is written beside its path
    and fsynced before the first is renamed over its path. A full disk is
    :class:`StoreFull`, with every file as it was."""
    written: list[tuple[str, Path]] = []
    try:
        for path, text in texts.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}-")
            written.append((tmp, path))
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
                out.flush()
                os.fsync(out.fileno())
            if mode is not None:
                os.chmod(tmp, mode)
    except BaseException as exc:
        for tmp, _ in written:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and exc.errno in FULL:
            raise StoreFull(f"{path} cannot be written ({os.strerror(exc.errno or 0)})") from None
        raise
    for tmp, path in written:
        os.replace(tmp, path)


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


class FileTooLarge(ValueError):
    """A file the service reads on request is larger than it will read."""

    def __init__(self, path: Path, size: int, limit: int) -> None:
        super().__init__(f"{path} is {size} bytes; the service reads at most {limit}")
        self.path, self.size, self.limit = path, size, limit


def read_bounded(path: Path, limit: int) -> str:
    """The text of ``path`` (UTF-8), refused (:class:`FileTooLarge`) past ``limit`` bytes:
    a file that grew without bound must not take a worker's memory with it."""
    with open(path, "rb") as source:
        data = source.read(limit + 1)
    if len(data) > limit:
        raise FileTooLarge(path, os.stat(path).st_size, limit)
    return data.decode("utf-8")
