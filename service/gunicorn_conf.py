"""gunicorn settings for the service: ``gunicorn -c python:service.gunicorn_conf
'service.front:front()'`` (``rightsize serve`` reads the same file, then applies its
own ``--host``, ``--port``, ``--workers`` and ``--threads``).

Each worker is an asyncio event loop (:mod:`service.front`): connections cost no thread;
a whole request runs in one of the worker's threads.

Environment: ``WEB_CONCURRENCY`` (worker processes; default 2 with Redis, 1 without),
``RIGHTSIZE_THREADS`` (threads a worker runs requests in, default 48),
``RIGHTSIZE_BIND`` (default 0.0.0.0:8000), ``RIGHTSIZE_MAX_REQUESTS`` (requests a worker
serves before it is replaced, default 100,000; 0: never; nothing stored is lost).
"""

from __future__ import annotations

import os
from typing import Any

bind = os.environ.get("RIGHTSIZE_BIND", "0.0.0.0:8000")
workers = int(
    os.environ.get("WEB_CONCURRENCY") or (2 if os.environ.get("RIGHTSIZE_REDIS_URL") else 1)
)
# many threads: most of a worker's threads wait (for Redis, or for a compute process,
# without the interpreter lock) while a few send cached answers; a connection holds none
threads = int(os.environ.get("RIGHTSIZE_THREADS", "48"))
worker_class = "service.front.worker.Worker"
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
# request lines and headers are held by the front (service.front.protocol)


def post_worker_init(worker: Any) -> None:
    """Each worker builds the performance model in the background as it starts (not the
    master: a fork after OpenMP has run in the parent can hang the child), and starts its
    compute processes (service/infra/compute.py)."""
    from service.state import state

    with worker.wsgi.flask.app_context():
        state().estimates.warm()
        state().layers.watch()  # the retrained model and refreshed prices, when they change
        state().compute.start()
        local_jobs = state().local_jobs
        if local_jobs is not None:  # jobs a restart cut short run again
            local_jobs.start()


def worker_exit(server: Any, worker: Any) -> None:
    """A worker leaving (replaced, or the server stopping) stops its compute processes."""
    from service.state import state

    with worker.wsgi.flask.app_context():
        state().compute.stop()
