"""The embedded default's store: SQLite on disk, so that a restart loses nothing.

Without Redis the service kept what it answered in the worker's memory, and gunicorn
replaces a worker after ``RIGHTSIZE_MAX_REQUESTS`` requests (anyone could send 100,000 to
``/healthz`` in about 90 s): every recommendation, trace and profile acknowledged before
then answered 404, and shared ``/?id=`` links died. Here every entry is a row of one
SQLite file (``RIGHTSIZE_STORE_FILE``), read and written by the workers, their compute
processes and the background jobs alike, so the compute processes answer recommendations
in the embedded set-up too (what they store, the worker reads).

- **Durable entries** (``durable=True``: recommendations, traces, profiles: what a client
  was given an id for) are committed with ``synchronous=FULL`` before the answer, and kept
  until they expire; cached answers (estimates, plans) with ``NORMAL``, which survives a
  killed process but not a power cut, and may be dropped to make room.
- **Size**: past ``RIGHTSIZE_STORE_MAX_BYTES`` the expired entries go, then the oldest
  cached answers; a durable write that still finds no room is refused
  (:class:`service.infra.files.StoreFull`: 507, nothing stored), as is one the disk refuses.
- **Connections**: one per thread and process (a connection never crosses a fork), in WAL
  mode so that readers never wait for a writer.

Jobs (:mod:`service.infra.local_jobs`) keep their states in the same file.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from service.infra.files import StoreFull

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS entries (
    key TEXT PRIMARY KEY,
    value BLOB NOT NULL,
    expires_at REAL NOT NULL,
    size_bytes INTEGER NOT NULL,
    durable INTEGER NOT NULL,
    written_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS entries_by_expiry ON entries (expires_at);
CREATE INDEX IF NOT EXISTS entries_by_age ON entries (durable, written_at);
"""
BUSY_TIMEOUT_S = 10.0  # a writer waits this long for another (processes share the file)
SIZE_CHECK_S = 5.0  # how often a writer adds up the stored bytes
ROOM = 0.9  # evicting makes room down to this share of the limit


class EmbeddedStore:
    """The :class:`service.infra.cache.Cache` of the embedded default: entries in SQLite."""

    backend = "sqlite"
    reachable = True
    shared = True  # every process of this machine reads what another wrote

    def __init__(self, path: Path | str, max_bytes: int) -> None:
        self.path = Path(path)
        self.max_bytes = max_bytes
        self._local = threading.local()
        self._checked = 0.0
        self._stored_bytes = 0
        self._lock = threading.Lock()

    def connection(self) -> sqlite3.Connection:
        """This thread's connection (a new one after a fork: never the parent's)."""
        found: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if found is not None and self._local.pid == os.getpid():
            return found
        self.path.parent.mkdir(parents=True, exist_ok=True)
        connection = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_S, isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=NORMAL")
        connection.executescript(SCHEMA)
        self._local.connection, self._local.pid = connection, os.getpid()
        return connection

    @contextmanager
    def writing(self, durable: bool) -> Iterator[sqlite3.Connection]:
        """A write transaction; a full disk is :class:`StoreFull` with nothing written."""
        connection = self.connection()
        if durable:
            connection.execute("PRAGMA synchronous=FULL")
        try:
            connection.execute("BEGIN IMMEDIATE")
            try:
                yield connection
                connection.execute("COMMIT")
            except BaseException:
                if connection.in_transaction:  # SQLite has rolled back some failures itself
                    connection.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            if _full(exc):
                message = f"the store {self.path} cannot grow ({exc}): nothing was stored"
                raise StoreFull(message) from None
            raise
        finally:
            if durable:
                connection.execute("PRAGMA synchronous=NORMAL")

    def get(self, key: str) -> bytes | None:
        row = (
            self.connection()
            .execute("SELECT value, expires_at FROM entries WHERE key = ?", (key,))
            .fetchone()
        )
        if row is None or row[1] < time.time():
            return None
        return bytes(row[0])

    def set(self, key: str, value: bytes, ttl_s: int, durable: bool = False) -> bool:
        now = time.time()
        if not self._make_room(len(value), durable, now):
            log.warning("the store is full of kept entries; a cached answer was not kept")
            return True
        with self.writing(durable) as connection:
            connection.execute(
                "INSERT OR REPLACE INTO entries VALUES (?, ?, ?, ?, ?, ?)",
                (key, value, now + ttl_s, len(value), int(durable), now),
            )
        with self._lock:
            self._stored_bytes += len(value)
        return True

    def delete(self, key: str) -> None:
        with self.writing(False) as connection:
            connection.execute("DELETE FROM entries WHERE key = ?", (key,))

    def __len__(self) -> int:
        return int(self.connection().execute("SELECT COUNT(*) FROM entries").fetchone()[0])

    def health(self) -> dict[str, object]:
        try:
            rows, stored = (
                self.connection()
                .execute("SELECT COUNT(*), COALESCE(SUM(size_bytes), 0) FROM entries")
                .fetchone()
            )
        except sqlite3.Error as exc:
            return {"backend": self.backend, "ok": False, "fallback": False, "error": str(exc)}
        return {
            "backend": self.backend,
            "ok": True,
            "fallback": False,
            "items": rows,
            "path": str(self.path),
            "stored_bytes": stored,
            "max_bytes": self.max_bytes,
        }

    def _make_room(self, size: int, durable: bool, now: float) -> bool:
        """Whether this write fits below the size limit, once expired entries and then the
        oldest cached answers are gone; a durable entry that still has no room is refused."""
        with self._lock:
            if now - self._checked > SIZE_CHECK_S:
                self._stored_bytes = self._sum()
                self._checked = now
            if self._stored_bytes + size <= self.max_bytes:
                return True
        with self.writing(False) as connection:
            connection.execute("DELETE FROM entries WHERE expires_at < ?", (now,))
            target = int(self.max_bytes * ROOM) - size
            stored = self._sum(connection)
            for key, bytes_ in connection.execute(
                "SELECT key, size_bytes FROM entries WHERE durable = 0 ORDER BY written_at"
            ).fetchall():
                if stored <= target:
                    break
                connection.execute("DELETE FROM entries WHERE key = ?", (key,))
                stored -= bytes_
        with self._lock:
            self._stored_bytes, self._checked = stored, now
        if stored + size > self.max_bytes and durable:
            raise StoreFull(
                f"the store holds {stored} bytes of kept answers, traces and profiles, of its "
                f"{self.max_bytes} (RIGHTSIZE_STORE_MAX_BYTES); nothing was stored: they make "
                "room as they expire"
            )
        return stored + size <= self.max_bytes

    def _sum(self, connection: sqlite3.Connection | None = None) -> int:
        source = connection or self.connection()
        found = source.execute("SELECT COALESCE(SUM(size_bytes), 0) FROM entries").fetchone()
        return int(found[0])


ROOMLESS = frozenset(
    {sqlite3.SQLITE_FULL, sqlite3.SQLITE_IOERR_WRITE, sqlite3.SQLITE_IOERR_TRUNCATE}
)


def _full(error: sqlite3.OperationalError) -> bool:
    """Whether SQLite refused a write for want of room: a full disk is ``SQLITE_FULL``, a
    quota or the file-size limit a failed write (``SQLITE_IOERR_WRITE``)."""
    return getattr(error, "sqlite_errorcode", None) in ROOMLESS
