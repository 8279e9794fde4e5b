"""The child side of :mod:`service.infra.compute`: a compute process boots its own copy of the app,
then runs the tasks its worker sends, one at a time, and carries errors back as data.

The state here is the child process's own (its app, the seconds of the profiles it counted
for the request it answers): a compute process runs one task at a time and is its owner."""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any

from flask import Flask, Response
from werkzeug.test import EnvironBuilder

from profiles import interrupt
from profiles.resolved import ResolvedModel
from profiles.workload import Workload
from service.engine.errors import TooSlow
from service.engine.estimating.profiling import count_here

READY = "ready"  # what a child says once its app is built, before its first task

# a child's copy of the app (set by _boot, in the child only)
_APP: Flask | None = None

# the seconds each profile took that a child counted while answering its current request
_SEEN: list[float] = []


def _boot(config: Mapping[str, Any], niceness: int, build: Callable[..., Flask]) -> None:
    """A child's start: build its app with ``build`` (the service's own factory, which also
    starts the performance model), then lower its priority. Built at the workers' priority:
    niced from the start, a child under load took minutes to import torch. The worker that
    hands a request over has counted it against the rate limits and logs it; the child
    logs only its warnings and errors."""
    global _APP  # noqa: PLW0603 - the child process's one app
    _follow(os.getppid())
    level = config.get("RIGHTSIZE_LOG_LEVEL")
    quiet = level if level in ("DEBUG", "ERROR") else "WARNING"
    own = {"RIGHTSIZE_COMPUTE_PROCESSES": 0, "RIGHTSIZE_LOG_LEVEL": quiet}
    _APP = build({**config, **own, "RATELIMIT_ENABLED": False})
    os.nice(niceness)


def _child(
    tasks: Connection,
    called_off: Any,
    config: Mapping[str, Any],
    niceness: int,
    build: Callable[..., Flask],
) -> None:
    """A compute process: boot, then run the tasks its worker sends, one at a time, until
    the worker's end of the pipe closes. ``called_off`` (shared memory) holds the number
    of a task the worker called off: the running task's time-limit checks see it."""
    _boot(config, niceness, build)
    tasks.send((0, READY))
    running = [0]
    interrupt.install(lambda: called_off.value == running[0])
    while True:
        try:
            number, fn, args = tasks.recv()
        except (EOFError, OSError):
            return
        running[0] = number
        try:
            result = fn(*args)
        except Exception as exc:  # every error goes back to the worker as it was
            result = _Failure.of(exc)
        running[0] = 0
        tasks.send((number, result))


def _follow(parent: int, every_s: float = 1.0) -> threading.Thread:
    """End this child when its worker is gone: a worker that gunicorn kills (its timeout)
    cannot stop its children, which would wait for a task forever."""

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

    @classmethod
    def of(cls, exc: BaseException) -> _Failure:
        return cls(type(exc), exc.args, dict(vars(exc)), traceback.format_exc())

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
    except Exception as exc:
        return _Failure.of(exc)


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


def _sleep(seconds: float) -> float:
    """A task that takes ``seconds`` unless called off (tests of calling off)."""
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        if interrupt.requested():
            raise TooSlow(seconds)
        time.sleep(0.01)
    return seconds
