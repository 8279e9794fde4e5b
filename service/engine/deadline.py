"""A time limit on one request's computation, checked between units of work.

The service sets it around each request (``RIGHTSIZE_COMPUTE_TIME_LIMIT_S``); the planner
and the ranking call :func:`check` between GPUs, counts and candidates, so that a request
that would compute for too long ends in :class:`TooSlow` (a 422 saying how to narrow it)
rather than holding a worker until the server kills it. Profiles have their own limit.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from service.engine.errors import EngineError

_deadline: ContextVar[tuple[float, float] | None] = ContextVar("deadline", default=None)


class TooSlow(EngineError):
    """The request's computation passed its time limit."""

    def __init__(self, limit_s: float) -> None:
        super().__init__(
            f"the computation passed its limit of {limit_s:g} s: narrow the request (fewer "
            "GPUs or a lower max_gpus / max_count, a smaller model)",
        )
        self.limit_s = limit_s


@contextmanager
def limited(seconds: float) -> Iterator[None]:
    token = start(seconds)
    try:
        yield
    finally:
        stop(token)


def check() -> None:
    """Raise :class:`TooSlow` if this request's time is up (no limit: nothing)."""
    found = _deadline.get()
    if found is not None and time.monotonic() > found[0]:
        raise TooSlow(found[1])


def start(seconds: float) -> object:
    """Set the limit for the work that follows in this context; :func:`stop` ends it."""
    return _deadline.set((time.monotonic() + seconds, seconds))


def stop(token: object) -> None:
    _deadline.reset(token)  # type: ignore[arg-type]
