"""CPU-heavy work in child processes at a lower CPU priority, so that cached answers never
queue behind it.

CPython runs one thread of a process at a time. A recommendation ranked anew holds a
gunicorn worker's interpreter lock for 30-100 ms, a profile counted anew for 100 ms or
more, and every cached answer the worker's other threads have to send meanwhile waits
(``bench/bench_load.py``: cached recommendations' p99 about 300 ms with new ones ranked in
the workers, 34 ms with none). A :class:`ComputePool` runs that work in
``RIGHTSIZE_COMPUTE_PROCESSES`` spawned processes per worker, niced by
``RIGHTSIZE_COMPUTE_NICE``: the worker's thread waits for it without the interpreter lock,
and the kernel runs the workers first.

- Profiles: the count alone, a pure function of the resolved model and the workload, runs
  in a child; the worker caches the result as before.
- Recommendations not in the cache: the whole request is answered by the child's own copy
  of the app, when the cache is shared (Redis reachable), so that what the child stores
  (the profile, the answer) every worker reads. With the in-process cache, or while Redis
  is away, the worker ranks them itself.

A child that dies is replaced and the request it had is computed in the worker. Until
:meth:`ComputePool.start` (tests, the CLI, the rq worker) everything runs in the caller.
The profiles a child counts while it ranks come back with its answer, for the worker's
``/metrics`` (nobody scrapes a child's); ``/readyz`` reports the pool
(:meth:`ComputePool.status`).
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from typing import Any, TypeVar

from flask import Flask, Request, Response
from werkzeug.test import EnvironBuilder

from profiles.description import ResolvedModel
from profiles.workload import Workload
from service.engine.errors import TooSlow
from service.engine.profiling import count_here

log = logging.getLogger(__name__)

T = TypeVar("T")
# headers the worker sets itself or that describe the child's connection, not the answer
_NOT_FORWARDED = frozenset({"content-length", "connection", "keep-alive", "transfer-encoding"})
# beyond the request's own limits, how long a worker waits for a child before giving up
_GRACE_S = 10.0

# a child's copy of the app (set by _boot, in the child only)
_APP: Flask | None = None
# the seconds each profile took that a child counted while answering its current request
_SEEN: list[float] = []


def _boot(config: Mapping[str, Any], niceness: int, build: Callable[..., Flask]) -> None:
    """A child's start: lower its priority and build its app with ``build`` (the service's
    own factory, which also starts the performance model). The worker that hands a request
    over has counted it against the rate limits and logs it; the child logs only its
    warnings and errors."""
    global _APP  # noqa: PLW0603 - the child process's one app
    os.nice(niceness)
    _follow(os.getppid())
    level = config.get("RIGHTSIZE_LOG_LEVEL")
    quiet = level if level in ("DEBUG", "ERROR") else "WARNING"
    own = {"RIGHTSIZE_COMPUTE_PROCESSES": 0, "RIGHTSIZE_LOG_LEVEL": quiet}
    _APP = build({**config, **own, "RATELIMIT_ENABLED": False})


def _follow(parent: int, every_s: float = 1.0) -> threading.Thread:
    """End this child when its worker is gone: a worker that gunicorn kills (its timeout)
    cannot stop its children, and a child only waits on its queue, forever."""

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(every_s)
        os._exit(0)

    watcher = threading.Thread(target=watch, name="compute-follows-worker", daemon=True)
    watcher.start()
    return watcher


class ChildTraceback(Exception):
    """Where in the child an error was raised (the cause of the error rebuilt here)."""


@dataclass(frozen=True)
class _Failure:
    """An exception raised in a child, carried back as data: the service's errors take
    their own arguments (a field, a limit), which pickling an exception would not give back."""

    kind: type[BaseException]
    args: tuple[Any, ...]
    state: dict[str, Any]
    trace: str = ""

    def rebuilt(self) -> BaseException:
        exc = self.kind.__new__(self.kind)
        exc.args = self.args
        exc.__dict__.update(self.state)
        exc.__cause__ = ChildTraceback(self.trace) if self.trace else None
        return exc


def _count_in_child(
    model: ResolvedModel, workload: Workload, limit_s: float
) -> dict[str, Any] | _Failure:
    try:
        return count_here(model, workload, limit_s)
    except Exception as exc:  # every error goes back to the worker as it was
        return _Failure(type(exc), exc.args, dict(vars(exc)), traceback.format_exc())


def seen(seconds: float) -> None:
    """A profile this process counted took ``seconds``: in a compute child, kept for the
    answer that goes back to the worker (elsewhere, nothing to do)."""
    if _APP is not None:
        _SEEN.append(seconds)


def _answer(
    method: str, path: str, query: str, headers: list[tuple[str, str]], body: bytes
) -> tuple[int, list[tuple[str, str]], bytes, list[float]]:
    """A request answered by the child's app: status, headers, body, and the seconds of
    each profile it counted meanwhile (a child answers one request at a time)."""
    if _APP is None:
        raise RuntimeError("not a compute child")
    environ = EnvironBuilder(
        method=method, path=path, query_string=query, headers=headers, data=body
    ).get_environ()
    _SEEN.clear()
    response = Response.from_app(_APP, environ, buffered=True)
    status, sent = response.status_code, list(response.headers.items())
    return status, sent, response.get_data(), list(_SEEN)


def _ready() -> bool:
    return _APP is not None


class ComputePool:
    """``processes`` children per worker process (0: none, everything in the caller), each
    with the app ``build(config)`` makes (a module-level function: the children import it)."""

    def __init__(
        self,
        processes: int,
        niceness: int,
        config: Mapping[str, Any],
        build: Callable[..., Flask],
        observe: Callable[[str, str], None] | None = None,
        profiled: Callable[[float], None] | None = None,
    ) -> None:
        self.processes = processes
        self.niceness = niceness
        self._build = build
        self._observe = observe  # (kind, where): where each task ran, child or worker
        self._profiled = profiled  # seconds of each profile a child counted while ranking
        self.replaced = 0  # children replaced after one died
        # the app's settings as given (the child builds the same app from them)
        self._config = {k: v for k, v in config.items() if k.startswith("RIGHTSIZE_")}
        self._executor: ProcessPoolExecutor | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._executor is not None

    def status(self) -> dict[str, Any]:
        """What ``/readyz`` reports: the children this worker should have and has alive."""
        executor = self._executor
        # the executor's own map of its processes (pid -> Process): no public accessor
        children = getattr(executor, "_processes", None) or {}
        alive = sum(child.is_alive() for child in children.values())
        if self.processes == 0:
            detail = "no compute processes: profiles and rankings run in the worker"
        elif executor is None:
            detail = "not started: everything runs in the caller (outside gunicorn)"
        else:
            detail = f"{alive} of {self.processes} per worker alive, at nice {self.niceness}"
        return {
            "processes": self.processes,
            "running": executor is not None,
            "alive": alive,
            "replaced": self.replaced,
            "detail": detail,
        }

    def start(self) -> None:
        """Start the children (in a gunicorn worker, after the fork: never in the master,
        where a fork after OpenMP has run can hang). Their apps build in the background."""
        with self._lock:
            if self.processes > 0 and self._executor is None:
                self._executor = self._new()
                self._executor.submit(_ready)

    def stop(self) -> None:
        with self._lock:
            executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)

    def _new(self) -> ProcessPoolExecutor:
        return ProcessPoolExecutor(
            max_workers=self.processes,
            mp_context=multiprocessing.get_context("spawn"),
            initializer=_boot,
            initargs=(self._config, self.niceness, self._build),
        )

    def _run(
        self, kind: str, timeout_s: float, here: Callable[[], T], fn: Callable[..., T], *args: Any
    ) -> T:
        """``fn(*args)`` in a child (``here()`` in the caller without children, or when the
        child died)."""
        executor = self._executor
        if executor is None:
            return self._here(kind, here)
        try:
            future: Future[T] = executor.submit(fn, *args)
            found = future.result(timeout=timeout_s)
        except TimeoutError:  # the child's own limits did not stop it
            raise TooSlow(timeout_s) from None
        except BrokenProcessPool:
            log.warning("a compute process died; starting another, this request runs here")
            with self._lock:
                if self._executor is executor:
                    executor.shutdown(wait=False, cancel_futures=True)
                    self._executor = self._new()
                    self.replaced += 1
            return self._here(kind, here)
        self._note(kind, "child")
        return found

    def _here(self, kind: str, here: Callable[[], T]) -> T:
        self._note(kind, "worker")
        return here()

    def _note(self, kind: str, where: str) -> None:
        if self._observe is not None:
            self._observe(kind, where)

    def count(self, model: ResolvedModel, workload: Workload, limit_s: float) -> dict[str, Any]:
        """The profile of ``workload`` on ``model`` (a child counts it)."""
        found = self._run(
            "profile",
            limit_s + _GRACE_S,
            lambda: count_here(model, workload, limit_s),
            _count_in_child,
            model,
            workload,
            limit_s,
        )
        if isinstance(found, _Failure):
            raise found.rebuilt()
        return found

    def answer(
        self, request: Request, request_id: str, timeout_s: float, shared: bool
    ) -> Response | None:
        """``request`` answered by a child (its log lines under ``request_id``), or None
        where the caller must answer it: the cache is not ``shared`` (what a child stored,
        the workers would not read), there are no children, or one died."""
        if not shared:
            return self._here("recommendation", lambda: None)
        headers = [(k, v) for k, v in request.headers.items()
                   if k.lower() not in ("host", "x-request-id")]  # fmt: skip
        headers.append(("X-Request-ID", request_id))
        found = self._run(
            "recommendation",
            timeout_s + _GRACE_S,
            lambda: None,
            _answer,
            request.method,
            request.path,
            request.query_string.decode("latin-1"),
            headers,
            request.get_data(),
        )
        if found is None:
            return None
        status, sent, body, profiles = found
        for seconds in profiles:
            self._note("profile", "child")
            if self._profiled is not None:
                self._profiled(seconds)
        kept = [(k, v) for k, v in sent if k.lower() not in _NOT_FORWARDED]
        return Response(body, status=status, headers=kept)
