"""Background jobs in this process, for a service without a job queue (no Redis): large
trace uploads are analysed after the 202, as a worker would, one at a time.

A job is a function of one argument (a callback that takes its progress) returning what
``GET /v1/jobs/{id}`` shows when it is finished; it runs in a daemon thread that the first
job starts, and what it computes heavily runs in a process of its own
(:mod:`profiles.trace.bounded`), so the thread only waits. Job states are the same as the
queue's (queued, started, finished, failed) and kept for ``ttl_s``, the newest
:data:`KEPT` at most; they live in this process only, as its cache does.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)
KEPT = 1000
Work = Callable[[Callable[[str], None]], dict[str, Any]]


class JobFailed(Exception):
    """A job's own failure: ``kind`` and the message are what the job's state shows."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class LocalJobs:
    def __init__(self, ttl_s: int) -> None:
        self.ttl_s = ttl_s
        self._states: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        self._waiting: queue.Queue[tuple[str, Work]] = queue.Queue()
        self._lock = threading.Lock()
        self._runner: threading.Thread | None = None

    def submit(self, work: Work) -> str:
        """Queue ``work``; returns its job id."""
        job_id = uuid.uuid4().hex
        self._set(job_id, {"job_id": job_id, "status": "queued"})
        self._waiting.put((job_id, work))
        with self._lock:
            if self._runner is None or not self._runner.is_alive():
                self._runner = threading.Thread(target=self._run, name="local-jobs", daemon=True)
                self._runner.start()
        return job_id

    def status(self, job_id: str) -> dict[str, Any] | None:
        """The job's state (None: not one of this process's, or expired)."""
        with self._lock:
            found = self._states.get(job_id)
        if found is None or time.monotonic() - found[0] > self.ttl_s:
            return None
        return dict(found[1])

    def _set(self, job_id: str, state: dict[str, Any]) -> None:
        with self._lock:
            self._states[job_id] = (time.monotonic(), state)
            self._states.move_to_end(job_id)
            while len(self._states) > KEPT:
                self._states.popitem(last=False)

    def _run(self) -> None:
        while True:
            job_id, work = self._waiting.get()
            state: dict[str, Any] = {"job_id": job_id, "status": "started"}
            self._set(job_id, state)

            def progress(step: str, state: dict[str, Any] = state) -> None:
                state["progress"] = step  # read under the lock by status()'s copy

            try:
                result = {**work(progress), "status": "finished"}
            except JobFailed as exc:
                result = {"status": "failed", "error": {"kind": exc.kind, "message": str(exc)}}
            except Exception:
                log.exception("background job %s failed", job_id)
                result = {"status": "failed", "error": {"kind": "failed", "message": "it failed"}}
            self._set(job_id, {**state, **result})
