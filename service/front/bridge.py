"""The app (WSGI) behind an asyncio server (ASGI): a whole request, then a thread.

:class:`Bridge` reads a request's body on the event loop, within its endpoint's size limit
(:func:`service.api.bodies.limit_for`: a ``Content-Length`` past it is a 413 before a byte
is read, a chunked body past it one as soon as it passes) and at a least rate (a pause of
``body_timeout_s``, or less than ``body_min_rate_bytes_s`` on average after the first
``body_timeout_s``: 408), spooled to a temporary file past ``in_memory_bytes``. Only then
does the app run, in one of ``threads`` threads, and its answer, read whole, is sent from
the event loop: neither a slow sender nor a slow reader holds a thread.

While the app runs, the bridge listens for the client's departure: ``rightsize.gone`` in
the WSGI environment says whether it went (:mod:`service.infra.connection`), so that work
nobody waits for is called off.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import tempfile
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import IO, Any

from flask import Flask

from service.api.bodies import limit_for
from service.front import problems

log = logging.getLogger(__name__)
Send = Callable[[dict[str, Any]], Any]
Receive = Callable[[], Any]
GONE = "rightsize.gone"
PER_ADDRESS = 64  # connections an address may hold in a worker, unless set


@dataclass(frozen=True)
class FrontLimits:
    """What a connection may take of a worker (``RIGHTSIZE_*`` settings of the same name)."""

    header_timeout_s: float = 10.0
    body_timeout_s: float = 10.0
    body_min_rate_bytes_s: int = 1024
    connections_per_address: int = PER_ADDRESS
    max_connections: int = 4096
    request_nice: int = 5
    url_bytes: int = 8190
    header_fields: int = 100
    header_field_bytes: int = 8190
    in_memory_bytes: int = 2**20

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> FrontLimits:
        """The limits the service's settings give: unless set, the connections an address
        may hold are :data:`PER_ADDRESS`, and not limited behind proxies (every connection
        is theirs)."""
        per_address = settings["RIGHTSIZE_CONNECTIONS_PER_ADDRESS"]
        if per_address is None:
            per_address = 0 if settings["RIGHTSIZE_PROXY_HOPS"] else PER_ADDRESS
        return cls(
            header_timeout_s=settings["RIGHTSIZE_HEADER_TIMEOUT_S"],
            body_timeout_s=settings["RIGHTSIZE_BODY_TIMEOUT_S"],
            body_min_rate_bytes_s=settings["RIGHTSIZE_BODY_MIN_RATE_BYTES_S"],
            connections_per_address=per_address,
            max_connections=settings["RIGHTSIZE_MAX_CONNECTIONS"],
            request_nice=settings["RIGHTSIZE_REQUEST_NICE"],
        )


def lower_priority(by: int) -> None:
    """Lower this thread's CPU priority ``by`` (Linux: a thread's niceness is its own).

    A busy worker is dozens of threads taking turns with the interpreter lock, each waking
    as often as a process would, and the scheduler shares the CPU between threads: on a
    2-core machine serving cached reads, the light-only compute process (at the workers'
    priority) got a sixth of a core, and a quiet client's new profile, 0.15 CPU-s, took
    2 s. The threads that answer requests run lower; the loop, the workers' main thread
    and whatever they start (compute processes included) keep the worker's own priority."""
    if by <= 0:
        return
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + by))
    except (OSError, AttributeError):  # not Linux, or not allowed: the same priority
        log.debug("request threads keep the worker's priority")


class Refused(Exception):
    """A request the front answers itself (``status``), closing the connection."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status


class Departed(Exception):
    """The client went away while sending its request."""


class Bridge:
    """An ASGI application serving the Flask ``app`` from ``threads`` threads."""

    def __init__(self, app: Flask, threads: int, limits: FrontLimits) -> None:
        self.flask = app
        self.threads = threads
        self.limits = limits
        self._pool: ThreadPoolExecutor | None = None
        self._pid = 0

    def pool(self) -> ThreadPoolExecutor:
        """This process's threads (made after the fork: threads do not cross one)."""
        if self._pool is None or self._pid != os.getpid():
            self._pool = ThreadPoolExecutor(
                self.threads,
                thread_name_prefix="rightsize",
                initializer=lower_priority,
                initargs=(self.limits.request_nice,),
            )
            self._pid = os.getpid()
        return self._pool

    async def __call__(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                if self._pool is not None:
                    self._pool.shutdown(wait=False, cancel_futures=True)
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _http(self, scope: dict[str, Any], receive: Receive, send: Send) -> None:
        environ = wsgi_environ(scope)
        try:
            _check_head(scope, self.limits)
            limit = limit_for(self.flask, scope["method"], environ["PATH_INFO"])
            body = await self._body(scope, receive, limit)
        except Refused as refused:
            await _answer(send, refused.status, problems.body(refused.status, str(refused)))
            return
        except Departed:
            return
        environ["wsgi.input"] = body
        environ["CONTENT_LENGTH"] = str(body.seek(0, os.SEEK_END))
        body.seek(0)
        gone = threading.Event()
        environ[GONE] = gone.is_set
        watcher = asyncio.ensure_future(_watch(receive, gone))
        try:
            loop = asyncio.get_running_loop()
            status, headers, data = await loop.run_in_executor(self.pool(), self._call, environ)
        except Exception:  # the app answers its own errors: this is the server's
            log.exception("the app raised past its error handlers")
            status, data = 500, problems.body(500, "an unexpected error occurred")
            headers = problems.headers(len(data))
        finally:
            watcher.cancel()
            body.close()
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    async def _body(self, scope: dict[str, Any], receive: Receive, limit: int) -> IO[bytes]:
        """The request's body, whole, within ``limit`` bytes and the least rate."""
        stated = _header(scope, b"content-length")
        if stated is not None:
            if not stated.isdigit():
                raise Refused(400, "Content-Length must be a number of bytes")
            if int(stated) > limit:
                raise Refused(413, f"this endpoint takes a body of at most {limit} bytes")
        spool = tempfile.SpooledTemporaryFile(  # noqa: SIM115 - handed to the app
            max_size=self.limits.in_memory_bytes, prefix="rightsize-body-"
        )
        try:
            await self._read(receive, spool, limit)
        except BaseException:
            spool.close()
            raise
        return spool

    async def _read(self, receive: Receive, spool: Any, limit: int) -> None:
        limits = self.limits
        loop = asyncio.get_running_loop()
        started, size = loop.time(), 0
        while True:
            # a pause of body_timeout_s, or less than the least rate after the first
            # body_timeout_s (one byte every 5 s held a thread for as long as it went on)
            paced = started + limits.body_timeout_s + size / limits.body_min_rate_bytes_s
            wait = min(limits.body_timeout_s, paced - loop.time())
            try:
                message = await asyncio.wait_for(receive(), max(wait, 0.001))
            except TimeoutError:
                raise Refused(
                    408,
                    f"the body came too slowly ({size} bytes in "
                    f"{loop.time() - started:.0f} s; a body must keep coming at "
                    f"{limits.body_min_rate_bytes_s} bytes/s or more, without a pause of "
                    f"{limits.body_timeout_s:g} s)",
                ) from None
            if message["type"] == "http.disconnect":
                raise Departed()
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise Refused(413, f"this endpoint takes a body of at most {limit} bytes")
            if chunk:
                spool.write(chunk)
            if not message.get("more_body", False):
                return

    def _call(self, environ: dict[str, Any]) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """The app's answer to ``environ``, whole (in a thread of the pool)."""
        found: dict[str, Any] = {}
        parts: list[bytes] = []

        def start_response(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Callable[[bytes], None]:
            found["status"], found["headers"] = int(status.split(" ", 1)[0]), headers
            return parts.append

        result: Iterable[bytes] = self.flask(environ, start_response)
        try:
            parts.extend(result)
        finally:
            close = getattr(result, "close", None)
            if close is not None:
                close()
        sent = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in found["headers"]]
        return found["status"], sent, b"".join(parts)


async def _watch(receive: Receive, gone: threading.Event) -> None:
    """Set ``gone`` when the client leaves (the body is read: what comes next is that)."""
    message = await receive()
    if message["type"] == "http.disconnect":
        gone.set()


async def _answer(send: Send, status: int, document: bytes) -> None:
    headers = problems.headers(len(document))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": document})


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope["headers"]:
        if key.lower() == name:
            return str(value.decode("latin-1").strip())
    return None


def _check_head(scope: dict[str, Any], limits: FrontLimits) -> None:
    """The request line and headers within their limits (the protocol holds them as they
    arrive; this holds them for any server)."""
    target = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
    if target > limits.url_bytes:
        raise Refused(414, f"the request target is {target} bytes; at most {limits.url_bytes}")
    headers = scope["headers"]
    if len(headers) > limits.header_fields:
        raise Refused(431, f"{len(headers)} header fields; at most {limits.header_fields}")
    for name, value in headers:
        if len(name) + len(value) > limits.header_field_bytes:
            raise Refused(
                431,
                f"the header field {name.decode('latin-1')[:64]} is "
                f"{len(name) + len(value)} bytes; at most {limits.header_field_bytes}",
            )


def wsgi_environ(scope: dict[str, Any]) -> dict[str, Any]:
    """The WSGI environment of an ASGI request (PEP 3333), without its body. A header whose
    name holds ``_`` is dropped: it would read as the ``-`` one (``X_Forwarded_For`` as
    ``X-Forwarded-For``)."""
    raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
    client = scope.get("client") or ("", 0)
    server = scope.get("server") or ("localhost", 80)
    environ: dict[str, Any] = {
        "REQUEST_METHOD": scope["method"],
        "SCRIPT_NAME": scope.get("root_path", "").encode("utf-8").decode("latin-1"),
        "PATH_INFO": urllib.parse.unquote_to_bytes(raw_path).decode("latin-1"),
        "QUERY_STRING": scope.get("query_string", b"").decode("latin-1"),
        "SERVER_NAME": str(server[0]),
        "SERVER_PORT": str(server[1] or 80),
        "SERVER_PROTOCOL": f"HTTP/{scope.get('http_version', '1.1')}",
        "REMOTE_ADDR": str(client[0]),
        "REMOTE_PORT": str(client[1]),
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": scope.get("scheme", "http"),
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "wsgi.input_terminated": True,
    }
    for name, value in scope["headers"]:
        key = name.decode("latin-1").upper()
        if "_" in key:
            continue
        key = key.replace("-", "_")
        text = value.decode("latin-1")
        if key == "CONTENT_TYPE":
            environ["CONTENT_TYPE"] = text
        elif key in ("CONTENT_LENGTH", "TRANSFER_ENCODING"):
            continue  # the body is read whole: its length is what was read
        else:
            key = "HTTP_" + key
            environ[key] = f"{environ[key]},{text}" if key in environ else text
    return environ
