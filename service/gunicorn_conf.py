"""gunicorn settings for the service: ``gunicorn -c python:service.gunicorn_conf
'service:create_app()'`` (``rightsize serve`` reads the same file, then applies its own
``--host``, ``--port``, ``--workers`` and ``--threads``).

Environment: ``WEB_CONCURRENCY`` (worker processes; default 2 with Redis, 1 without, since
a second process would not share the in-process cache), ``RIGHTSIZE_THREADS`` (threads a
worker, default 16), ``RIGHTSIZE_BIND`` (default 0.0.0.0:8000), ``RIGHTSIZE_MAX_REQUESTS``
(requests a worker serves before it is replaced, default 100,000; 0: never).
"""

from __future__ import annotations

import os
from typing import Any

bind = os.environ.get("RIGHTSIZE_BIND", "0.0.0.0:8000")
workers = int(
    os.environ.get("WEB_CONCURRENCY") or (2 if os.environ.get("RIGHTSIZE_REDIS_URL") else 1)
)
# many threads: most of a worker's threads wait (for Redis, or for a compute process,
# without the interpreter lock) while a few send cached answers
threads = int(os.environ.get("RIGHTSIZE_THREADS", "16"))
worker_class = "gthread"
# a profile is stopped after RIGHTSIZE_PROFILE_TIME_LIMIT_S (20 s); the slowest answers
# (a cold recommendation over every GPU) take under a second: 60 s kills only a stuck worker
timeout = 60
graceful_timeout = 30
keepalive = 5
# recycle each worker after this many requests (with jitter, not all at once): bounds any
# slow growth of a long-lived process. Not too often: a new worker builds the performance
# model again and starts with none of what a worker keeps (profiles' batch lines, rule
# results, catalog answers); at 5,000 a worker serving 250 requests/s was replaced every
# 20 s, which cost bench_load a third of its throughput (320 against 502 requests/s)
max_requests = int(os.environ.get("RIGHTSIZE_MAX_REQUESTS", "100000"))
max_requests_jitter = max_requests // 10
# the app logs every request itself, as JSON with its request id
accesslog = None
errorlog = "-"
# refuse absurd request lines and headers before Flask sees them
limit_request_line = 8190
limit_request_fields = 100
limit_request_field_size = 8190


def post_worker_init(worker: Any) -> None:
    """Each worker builds the performance model in the background as it starts (not the
    master: a fork after OpenMP has run in the parent can hang the child), and starts its
    compute processes (service/compute.py)."""
    from service.state import state

    with worker.wsgi.app_context():
        state().estimates.warm()
        state().layers.watch()  # the retrained model and refreshed prices, when they change
        state().compute.start()


def worker_exit(server: Any, worker: Any) -> None:
    """A worker leaving (replaced, or the server stopping) stops its compute processes."""
    from service.state import state

    with worker.wsgi.app_context():
        state().compute.stop()
