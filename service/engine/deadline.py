"""A time limit on one request's computation, checked between units of work.

The service sets it around each request (``RIGHTSIZE_COMPUTE_TIME_LIMIT_S``); the planner
and the ranking call :func:`check` between GPUs, counts and candidates, so that a request
that would compute for too long ends in :class:`TooSlow` (a 422 saying how to narrow it)
rather than holding a worker until the server kills it. Profiles have their own limit.

The same checks stop work nobody waits for: where the service can tell that the client
went away (``gone``, asked at most every :data:`PROBE_EVERY_S`) they raise
:class:`Abandoned`, and in a compute process a task called off by its caller
(:mod:`profiles.interrupt`) ends as if its time were up.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextvars import ContextVar, Token
from dataclasses import dataclass, field

from profiles import interrupt
from service.engine.errors import Abandoned, TooSlow

PROBE_EVERY_S = 0.2


@dataclass
class _Limit:
    until: float  # time.monotonic() deadline
    seconds: float  # the limit as configured, for the message
    gone: Callable[[], bool] | None = None
    probed: float = field(default_factory=time.monotonic)


Limit = _Limit | None
_deadline: ContextVar[Limit] = ContextVar("deadline", default=None)


def check() -> None:
    """Raise :class:`TooSlow` if this request's time is up or its task was called off,
    :class:`Abandoned` if its client went away (no limit: nothing)."""
    found = _deadline.get()
    if found is None:
        return
    now = time.monotonic()
    if now > found.until or interrupt.requested():
        raise TooSlow(found.seconds)
    if found.gone is not None and now - found.probed > PROBE_EVERY_S:
        found.probed = now
        if found.gone():
            raise Abandoned()


def start(seconds: float, gone: Callable[[], bool] | None = None) -> Token[Limit]:
    """Set the limit for the work that follows in this context; :func:`stop` ends it.
    ``gone`` says whether the client has gone away."""
    return _deadline.set(_Limit(time.monotonic() + seconds, seconds, gone))


def stop(token: Token[Limit]) -> None:
    _deadline.reset(token)
