"""Whether the client of a request is still there, so that work nobody waits for stops.

gunicorn hands the application the client's socket (``gunicorn.socket`` in the WSGI
environment). While the request is being answered nothing else reads that socket, so a
peek that finds the end of the stream means the client closed its side: it gave up (a
timeout, a cancelled page). Bytes waiting there are a pipelined next request, not a
departure. Other servers (the test client, werkzeug's) give no socket: nothing is known,
and the work runs to its time limit as before.
"""

from __future__ import annotations

import socket
from collections.abc import Callable, Mapping
from typing import Any


def probe(environ: Mapping[str, Any]) -> Callable[[], bool] | None:
    """A function saying whether the client of ``environ`` has gone (None: cannot tell)."""
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
