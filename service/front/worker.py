"""The gunicorn worker: an asyncio event loop (uvicorn) serving the :class:`Bridge`, with
the front's :class:`service.front.protocol.Protocol` on every connection.

gunicorn's master stays what it was (``service/gunicorn_conf.py``: workers, their recycling
after ``max_requests``, the hooks that start each worker's compute processes); uvicorn's
own reading of ``X-Forwarded-For`` is off (the app reads it, from
``RIGHTSIZE_PROXY_HOPS`` proxies only), as is its ``Server`` header.
"""

from __future__ import annotations

import contextlib
import resource
from typing import Any

from uvicorn_worker import UvicornWorker


class Worker(UvicornWorker):
    CONFIG_KWARGS: dict[str, Any] = {  # noqa: RUF012 - uvicorn-worker's own attribute
        "loop": "asyncio",
        "http": "service.front.protocol:Protocol",
        "interface": "asgi3",
        "lifespan": "on",
        "proxy_headers": False,
        "server_header": False,
    }

    def init_process(self) -> None:
        """Let the worker hold as many connections as the system allows it (the soft limit
        of open files is often 1,024; the front counts them itself)."""
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        target = hard if hard != resource.RLIM_INFINITY else 2**16
        if soft != resource.RLIM_INFINITY and soft < target:
            with contextlib.suppress(ValueError, OSError):  # else the limit as it is
                resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        super().init_process()
