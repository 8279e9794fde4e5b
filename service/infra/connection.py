"""Whether the client of a request is still there, so that work nobody waits for stops.

The front (:mod:`service.front.bridge`) listens to the connection while the app answers
and says in ``rightsize.gone`` whether the client closed it: it gave up (a timeout, a
cancelled page). gunicorn's threaded worker handed the application the client's socket
instead (``gunicorn.socket``): a peek that finds the end of the stream means the same.
Other servers (the test client, werkzeug's) give neither: nothing is known, and the work
runs to its time limit as before.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import Any


def probe(environ: Mapping[str, Any]) -> Callable[[], bool] | None:
    """A function saying whether the client of ``environ`` has gone (None: cannot tell)."""
    told = environ.get("rightsize.gone")
    if callable(told):
        return told
    sock = environ.get("gunicorn.socket")
    if not isinstance(sock, socket.socket):
        return None

    def gone() -> bool:
        try:
            return sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
        except (BlockingIOError, InterruptedError):
            return False  # connected, nothing sent since the request
        except OSError:
            return True  # reset, or the socket is closed

    return gone
