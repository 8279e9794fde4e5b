"""Background jobs of the embedded set-up (no Redis, no queue): large trace uploads
analysed after the 202, as a worker would, their states kept in the store's SQLite file.

A job is a kind (``trace``), a JSON payload (the upload's path, the options) and its owner
(the key that sent it). Its state (queued, started, finished, failed, as on the queue)
lives in the ``jobs`` table beside the store's entries, so a restart of the worker or of
the service loses none: a job queued or started when its process ended is run again (its
upload is kept beside the store until the job ends), and one whose upload is gone fails
saying so. What a job computes heavily runs in a process of its own
(:mod:`profiles.trace.bounded`); the runner threads only wait.

Fair between keys: :attr:`LocalJobs.runners` threads run jobs, a key never runs more than
``runners - 1`` at once (one runner stays free for the others: one key's 1 GiB trace made
another's 4-s trace wait 69 s), the next job is the oldest of the key running fewest, and
a key may have :attr:`LocalJobs.per_owner` jobs queued or running (429 beyond).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from service.infra.embedded_store import EmbeddedStore

log = logging.getLogger(__name__)

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    id TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL,
    runner TEXT,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS jobs_by_owner ON jobs (owner, state);
"""
POLL_S = 1.0  # a runner looks for jobs another process queued this often
ACTIVE = ("queued", "started")
Progress = Callable[[str], None]
Handler = Callable[[dict[str, Any], Progress], dict[str, Any]]


class JobFailed(Exception):
    """A job's own failure: ``kind`` and the message are what the job's state shows."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class OwnerBusy(Exception):
    """The key already has its share of jobs queued or running."""


class LocalJobs:
    """Jobs in ``store``'s file, run by ``handlers[kind](payload, progress)``."""

    def __init__(
        self,
        store: EmbeddedStore,
        ttl_s: int,
        handlers: dict[str, Handler],
        runners: int = 2,
        per_owner: int = 4,
    ) -> None:
        self.store = store
        # uploads waiting for their job, beside the store (they outlive a restart)
        self.uploads = store.path.with_name(store.path.stem + "-uploads")
        self.ttl_s = ttl_s
        self.handlers = handlers
        self.runners = runners
        self.per_owner = per_owner
        self._wake = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._pid = 0
        self._lock = threading.Lock()

    def _db(self) -> Any:
        connection = self.store.connection()
        connection.executescript(SCHEMA)
        return connection

    def submit(self, kind: str, payload: dict[str, Any], owner: str) -> str:
        """Queue a job; returns its id. :class:`OwnerBusy` past the key's share."""
        job_id = uuid.uuid4().hex
        now = time.time()
        state = json.dumps({"job_id": job_id, "status": "queued"})
        self._db()
        with self.store.writing(durable=True) as db:
            db.execute("DELETE FROM jobs WHERE updated_at < ?", (now - self.ttl_s,))
            (active,) = db.execute(
                "SELECT COUNT(*) FROM jobs WHERE owner = ? AND json_extract(state, '$.status') "
                "IN ('queued', 'started')",
                (owner,),
            ).fetchone()
            if active >= self.per_owner:
                raise OwnerBusy(
                    f"this key has {active} background jobs queued or running (its share is "
                    f"{self.per_owner}): wait for one to finish"
                )
            db.execute(
                "INSERT INTO jobs VALUES (?, ?, ?, ?, ?, NULL, ?, ?)",
                (job_id, owner, kind, json.dumps(payload), state, now, now),
            )
        self.start()
        with self._wake:
            self._wake.notify()
        return job_id

    def status(self, job_id: str) -> tuple[dict[str, Any], str] | None:
        """The job's state and owner (None: no such job, or it expired)."""
        row = (
            self._db()
            .execute("SELECT state, owner, updated_at FROM jobs WHERE id = ?", (job_id,))
            .fetchone()
        )
        if row is None or time.time() - row[2] > self.ttl_s:
            return None
        return json.loads(row[0]), row[1]

    def start(self) -> None:
        """Start this process's runners (once per process); jobs left queued or started by
        a process that has ended are run again."""
        with self._lock:
            if self._pid == os.getpid() and all(t.is_alive() for t in self._threads):
                return
            self._pid = os.getpid()
            self._recover()
            self._threads = [
                threading.Thread(target=self._run, name=f"local-jobs-{i}", daemon=True)
                for i in range(self.runners)
            ]
            for thread in self._threads:
                thread.start()

    def _recover(self) -> None:
        """Jobs started by a process that is gone (a restart, a killed worker): queued again."""
        rows = (
            self._db()
            .execute(
                "SELECT id, runner, state FROM jobs WHERE json_extract(state, '$.status') = "
                "'started'"
            )
            .fetchall()
        )
        for job_id, runner, state in rows:
            if runner is None or not _alive(runner):
                log.warning("job %s was cut short by a restart; it runs again", job_id)
                queued = {**json.loads(state), "status": "queued"}
                self._write(job_id, queued, runner=None)

    def _write(self, job_id: str, state: dict[str, Any], runner: str | None = "-") -> None:
        with self.store.writing(durable=True) as db:
            if runner == "-":
                db.execute(
                    "UPDATE jobs SET state = ?, updated_at = ? WHERE id = ?",
                    (json.dumps(state), time.time(), job_id),
                )
            else:
                db.execute(
                    "UPDATE jobs SET state = ?, runner = ?, updated_at = ? WHERE id = ?",
                    (json.dumps(state), runner, time.time(), job_id),
                )

    def _claim(self) -> tuple[str, str, dict[str, Any], dict[str, Any]] | None:
        """The next job to run, marked started by this process: the oldest of the key with
        the fewest running, never one of a key already running ``runners - 1``."""
        most = max(1, self.runners - 1)
        self._db()
        with self.store.writing(durable=True) as db:
            row = db.execute(
                """
                SELECT id, kind, payload, state FROM jobs AS j
                WHERE json_extract(state, '$.status') = 'queued'
                  AND (SELECT COUNT(*) FROM jobs AS r WHERE r.owner = j.owner
                       AND json_extract(r.state, '$.status') = 'started') < ?
                ORDER BY (SELECT COUNT(*) FROM jobs AS r WHERE r.owner = j.owner
                          AND json_extract(r.state, '$.status') = 'started'), created_at
                LIMIT 1
                """,
                (most,),
            ).fetchone()
            if row is None:
                return None
            job_id, kind, payload, state = row
            started = {**json.loads(state), "status": "started"}
            db.execute(
                "UPDATE jobs SET state = ?, runner = ?, updated_at = ? WHERE id = ?",
                (json.dumps(started), _token(os.getpid()), time.time(), job_id),
            )
        return job_id, kind, json.loads(payload), started

    def _run(self) -> None:
        while True:
            try:
                claimed = self._claim()
            except Exception:
                log.exception("the job store could not be read")
                claimed = None
            if claimed is None:
                with self._wake:
                    self._wake.wait(POLL_S)
                continue
            self._one(*claimed)

    def _one(self, job_id: str, kind: str, payload: dict[str, Any], state: dict[str, Any]) -> None:
        def progress(step: str) -> None:
            state["progress"] = step
            self._write(job_id, state)

        try:
            result = {**self.handlers[kind](payload, progress), "status": "finished"}
        except JobFailed as exc:
            result = {"status": "failed", "error": {"kind": exc.kind, "message": str(exc)}}
        except Exception:
            log.exception("background job %s failed", job_id)
            result = {"status": "failed", "error": {"kind": "failed", "message": "it failed"}}
        self._write(job_id, {**state, **result})


def _token(pid: int) -> str | None:
    """A process as ``pid:start``, its start time in clock ticks since boot, so that a
    process that reuses a pid after a restart (small pids in a container) is not taken for
    the one that ran the job (None: no such process)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        return f"{pid}:"  # no /proc: the pid alone
    return f"{pid}:{stat.rsplit(')', 1)[1].split()[19]}"


def _alive(runner: str) -> bool:
    """Whether the process that claimed a job still runs."""
    pid = runner.split(":", 1)[0]
    return pid.isdigit() and _token(int(pid)) == runner
