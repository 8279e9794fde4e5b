"""The front: how connections reach the app, so that no client can hold them.

gunicorn's threaded worker gave each connection one of the worker's 16 threads for as
long as its client kept it: 16 clients sending a body a byte every 5 s, or 160 idle TCP
connections, and every other client timed out for as long as they stayed. Here gunicorn
keeps its master (workers, their recycling, the hooks) but each worker runs an asyncio
event loop (uvicorn's, :mod:`service.front.worker`), where a connection costs a socket
and a little memory, not a thread:

- :mod:`service.front.protocol`: each connection's request line and headers must arrive
  within ``RIGHTSIZE_HEADER_TIMEOUT_S`` (408, or closed if nothing came), within limits
  (414, 431); an address may hold ``RIGHTSIZE_CONNECTIONS_PER_ADDRESS`` connections and a
  worker ``RIGHTSIZE_MAX_CONNECTIONS`` (429, 503 beyond).
- :mod:`service.front.bridge`: the body is read whole before a thread sees the request,
  within its endpoint's size limit (413 before it is read) and at a least rate (408); the
  app then runs in one of ``RIGHTSIZE_THREADS`` threads and its answer is sent from the
  event loop, so a client that reads slowly holds no thread either.

Every answer the front gives itself is ``application/problem+json``, as the app's are.
"""

import os

from service.front.bridge import Bridge, FrontLimits

__all__ = ["Bridge", "FrontLimits", "front"]


def front() -> Bridge:
    """The service as gunicorn serves it: ``gunicorn -c python:service.gunicorn_conf
    'service.front:front()'`` (``rightsize serve`` does the same)."""
    from service import create_app

    app = create_app()
    return Bridge(app, int(os.environ.get("RIGHTSIZE_THREADS", "48")), FrontLimits.of(app.config))
