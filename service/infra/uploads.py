"""Trace uploads: received within their limit, answered at once when small, and analysed in
a bounded child process when large.

A request reads the upload into an :class:`Upload` (memory up to the size answered at
once, a temporary file beyond), refusing it past ``RIGHTSIZE_TRACE_MAX_BYTES`` whether
it states its length or comes chunked. One whose JSON (decompressed, for a gzipped one)
is at most ``RIGHTSIZE_TRACE_ASYNC_BYTES`` is analysed in the request: a second or two.
A larger one is a background job (:mod:`service.jobs` on Redis,
:mod:`service.infra.local_jobs` without), whose analysis runs in a child process
(:func:`profiles.trace.bounded.analyse_bounded`) that is killed past
``RIGHTSIZE_TRACE_TIME_LIMIT_S`` or when its memory passes
``RIGHTSIZE_TRACE_MEMORY_LIMIT_BYTES``, and tells its progress on the way: a 5-million-
event trace once took 66 s and 2 GB inside a request, which nothing stopped.
"""

from __future__ import annotations

import io
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from profiles.trace.stream import RATIO_FROM, Limits, StreamStats, TraceFormatError, chunks
from service.engine.estimating.traces import TraceOptions, TraceService
from service.infra.files import FULL, StoreFull
from service.infra.local_jobs import Handler, JobFailed

CHUNK = 1 << 20  # what an upload is read by
GZIP_MAGIC = b"\x1f\x8b"
BOMB_SCAN_BYTES = 128 * 2**20  # inflated in the request at most, to refuse a bomb at once


class Upload:
    """The bytes of one upload, in memory up to ``in_memory`` bytes, else in a temporary
    file (:meth:`path`)."""

    def __init__(self, in_memory: int) -> None:
        self.size = 0
        self._in_memory = in_memory
        self._buffer: io.BytesIO | None = io.BytesIO()
        self._file: IO[bytes] | None = None

    @classmethod
    def read(cls, source: IO[bytes], limit: int, in_memory: int) -> Upload:
        """All of ``source``, refused (``too-large``) past ``limit`` bytes."""
        upload = cls(in_memory)
        try:
            while chunk := source.read(CHUNK):
                upload.size += len(chunk)
                if upload.size > limit:
                    raise TraceFormatError("too-large", f"the upload exceeds {limit} bytes")
                upload._write(chunk)
        except BaseException:
            upload.discard()
            raise
        return upload

    def _write(self, chunk: bytes) -> None:
        try:
            if self._buffer is not None and self.size > self._in_memory:
                self._file = tempfile.NamedTemporaryFile(  # noqa: SIM115 - kept past this call
                    prefix="rightsize-upload-", delete=False
                )
                self._file.write(self._buffer.getvalue())
                self._buffer = None
            (self._file or self._buffer).write(chunk)  # type: ignore[union-attr]
        except OSError as exc:
            if exc.errno in FULL:
                message = f"the upload cannot be kept ({exc.strerror}): nothing stored"
                raise StoreFull(message) from None
            raise

    def stream(self) -> IO[bytes]:
        """The upload from its start (read it before the next call)."""
        if self._buffer is not None:
            return io.BytesIO(self._buffer.getbuffer())
        assert self._file is not None
        self._file.flush()
        return open(self._file.name, "rb")  # the caller closes it

    def path(self) -> Path:
        """A file holding the upload (written out if it was in memory); the caller owns it
        from now on (:meth:`discard` leaves it)."""
        if self._file is None:
            assert self._buffer is not None
            self._file = tempfile.NamedTemporaryFile(  # noqa: SIM115
                prefix="rightsize-upload-", delete=False
            )
            self._file.write(self._buffer.getvalue())
            self._buffer = None
        self._file.close()
        path = Path(self._file.name)
        self._file = None
        return path

    def within(self, json_bytes: int, limits: Limits) -> bool:
        """Whether the trace's JSON (decompressed, if gzipped) is at most ``json_bytes``
        (inflated up to that much by the trace reader's own inflater: a tenth of a second
        for 32 MiB). A gzip bomb small enough to tell at once (its ratio past
        ``limits.ratio`` within :data:`BOMB_SCAN_BYTES`) is refused here, as the reader
        would refuse it, not handed to a job."""
        if self.size > json_bytes:
            return False
        bomb_at = max(RATIO_FROM, int(limits.ratio * self.size))
        look = max(json_bytes, bomb_at) if bomb_at <= BOMB_SCAN_BYTES else json_bytes
        produced = 0
        with self.stream() as raw:
            if raw.read(2) != GZIP_MAGIC:
                return True
            raw.seek(0)
            try:
                for chunk in chunks(raw, limits, StreamStats()):  # type: ignore[arg-type]
                    produced += len(chunk)
                    if produced > look:
                        break
            except TraceFormatError as exc:
                if exc.kind == "too-large":
                    raise
                return True  # a corrupt gzip: its analysis says what is wrong with it
        return produced <= json_bytes

    def keep(self, directory: Path) -> Path:
        """The upload moved into ``directory`` (beside the store: it outlives a restart
        until its job ends); a full disk is :class:`StoreFull`, with nothing kept."""
        directory.mkdir(parents=True, exist_ok=True)
        target = directory / f"upload-{uuid.uuid4().hex}"
        source = self.path()
        try:
            shutil.move(source, target)
        except OSError as exc:
            target.unlink(missing_ok=True)
            source.unlink(missing_ok=True)
            if exc.errno in FULL:
                message = f"the upload cannot be kept ({exc.strerror}): nothing stored"
                raise StoreFull(message) from None
            raise
        return target

    def discard(self) -> None:
        self._buffer = None
        if self._file is not None:
            self._file.close()
            Path(self._file.name).unlink(missing_ok=True)
            self._file = None


def job_payload(path: Path, options: TraceOptions) -> dict[str, Any]:
    """What a background analysis needs, as JSON: it is stored with the job."""
    return {"path": str(path), "options": asdict(options)}


def analysis_job(traces: TraceService) -> Handler:
    """The embedded set-up's trace job (:mod:`service.infra.local_jobs`): the kept upload
    analysed in a bounded process and stored, then removed. A job run again after a
    restart finds its upload where it was kept."""

    def work(payload: dict[str, Any], report: Callable[[str], None]) -> dict[str, Any]:
        path = Path(payload["path"])
        if not path.exists():
            raise JobFailed("lost", "the upload was lost before its analysis: upload it again")
        try:
            record = traces.ingest_file(path, TraceOptions(**payload["options"]), report)
        except TraceFormatError as exc:
            path.unlink(missing_ok=True)
            raise JobFailed(exc.kind, str(exc)) from None
        path.unlink(missing_ok=True)
        trace_id = record["trace_id"]
        return {"trace_id": trace_id, "trace_url": f"/v1/traces/{trace_id}"}

    return work
