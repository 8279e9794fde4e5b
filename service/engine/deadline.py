"""A time limit on one request's computation, checked between units of work.

The service sets it around each request (``RIGHTSIZE_COMPUTE_TIME_LIMIT_S``); the planner
and the ranking call :func:`check` between GPUs, counts and candidates, so that a request
that would compute for too long ends in :class:`TooSlow` (a 422 saying how to narrow it)
rather than holding a worker until the server kills it. Profiles have their own limit.
"""

from __future__ import annotations

import time
from contextvars import ContextVar, Token

from service.engine.errors import TooSlow

Limit = tuple[float, float] | None  # (monotonic deadline, the limit in seconds)
_deadline: ContextVar[Limit] = ContextVar("deadline", default=None)


def check() -> None:
    """Raise :class:`TooSlow` if this request's time is up (no limit: nothing)."""
    found = _deadline.get()
    if found is not None and time.monotonic() > found[0]:
        raise TooSlow(found[1])


def start(seconds: float) -> Token[Limit]:
    """Set the limit for the work that follows in this context; :func:`stop` ends it."""
    return _deadline.set((time.monotonic() + seconds, seconds))


def stop(token: Token[Limit]) -> None:
    _deadline.reset(token)
