"""Who may call what, how often, and what every response says about itself.

- **Keys and roles** (:mod:`service.infra.keys`): a view method marked :func:`requires` a role;
  any other ``/v1`` call needs ``read``, which is open unless
  ``RIGHTSIZE_REQUIRE_READ_KEY``. A missing or unknown key where one is needed is 401 (with
  ``WWW-Authenticate``), a known key without the role 403; a key that is given but unknown
  is 401 even where none is needed, so that a client learns its key is wrong.
- **Rate limits**: flask-limiter, per key (else per client address), ``RIGHTSIZE_RATE_LIMIT``;
  in Redis (the cache's own connection pool) when it is configured, so that replicas share
  the counts, in memory otherwise or while Redis is away. 429 with ``Retry-After``.
- **Request ids**: ``X-Request-ID`` is echoed (or made) on every response and in each log
  line; logs are JSON by default and never hold a key.
- **Headers**: ``nosniff``, no framing, no referrer, a content security policy on pages;
  CORS only for ``RIGHTSIZE_CORS_ORIGINS``.
"""

from __future__ import annotations

import ipaddress
import json
import logging
import math
import re
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

from flask import Flask, current_app, g, request
from flask_cors import CORS
from flask_limiter import Limiter
from werkzeug.wrappers import Response

from service.engine.owners import NOBODY, Reader
from service.errors import ApiError
from service.infra.keys import ApiKey, KeyFile, allows

LIMITER = "rightsize-limiter"
log = logging.getLogger("rightsize.access")
F = TypeVar("F", bound=Callable[..., Any])
REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
OPEN_PREFIXES = ("/healthz", "/readyz", "/metrics", "/docs", "/openapi.json")
BEARER = "bearerAuth"
PAGE_POLICY = (
    "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; frame-ancestors 'none'"
)
API_POLICY = "default-src 'none'; frame-ancestors 'none'"


class Unauthorised(ApiError):
    status, slug, title = 401, "unauthorised", "Unauthorized"


class Forbidden(ApiError):
    status, slug, title = 403, "forbidden", "Forbidden"


def requires(role: str) -> Callable[[F], F]:
    """Mark a view method as needing a key of ``role`` (or above)."""

    def mark(method: F) -> F:
        method.required_role = role  # type: ignore[attr-defined]
        return method

    return mark


def view_handler() -> Callable[..., Any] | None:
    """The function that answers this request (a view class's method for its HTTP method);
    what it is marked with says what the request needs (a role, a body)."""
    view = current_app.view_functions.get(request.endpoint or "")
    owner = getattr(view, "view_class", None)
    if owner is None:
        return view
    if request.method not in (owner.methods or ()):  # any token is a method: only its own
        return None
    found: Callable[..., Any] | None = getattr(owner, request.method.lower(), None)
    return found


def _needed() -> str | None:
    """The role the request's view needs: its mark, else ``read`` for ``/v1``, else none."""
    marked = getattr(view_handler(), "required_role", None)
    if marked:
        return str(marked)
    return "read" if request.path.startswith("/v1/") else None


def caller() -> ApiKey | None:
    """The key the request carries (None without one); raises 401 for one that is unknown
    or malformed. Looked up once per request."""
    if "api_key" in g:
        found: ApiKey | None = g.api_key
        return found
    header = request.headers.get("Authorization")
    found = None
    if header is not None:
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthorised("Authorization must be 'Bearer <key>'")
        found = keys().find(token.strip())
        if found is None:
            raise Unauthorised("unknown or revoked API key")
    g.api_key = found
    return found


def reader() -> Reader:
    """Who this request reads stored traces and rows as: its key, if any (an admin's reads
    everything)."""
    key = caller()
    return Reader(key.key_id, allows(key.role, "admin")) if key else NOBODY


def keys() -> KeyFile:
    store: KeyFile = current_app.extensions["rightsize-keys"]
    return store


def _authorise() -> None:
    if request.method == "OPTIONS":
        return
    needed = _needed()
    key = caller()
    if needed is None:
        return
    settings = current_app.config
    if needed == "read" and not settings["RIGHTSIZE_REQUIRE_READ_KEY"]:
        return
    if key is None:
        raise Unauthorised(
            f"this needs an API key with the {needed} role: 'Authorization: Bearer <key>' "
            f"(an administrator creates one with: rightsize keys create --role {needed})"
        )
    if not allows(key.role, needed):
        raise Forbidden(f"key {key.key_id} has the {key.role} role; this needs {needed}")


def client_id() -> str:
    """Who is asking, as the limits count clients: the key, else the client's address."""
    try:
        key = caller()
    except Unauthorised:
        key = None
    return f"key:{key.key_id}" if key else f"ip:{request.remote_addr or 'unknown'}"


def tenant() -> str:
    """Who shares the compute processes: the key, else the client's network (a /24, or an
    IPv6 /64), so that the addresses of one network are one client, not one each (twelve
    addresses each queued their own share and starved everyone else)."""
    try:
        key = caller()
    except Unauthorised:
        key = None
    if key is not None:
        return f"key:{key.key_id}"
    address = request.remote_addr or ""
    try:
        found = ipaddress.ip_address(address)
    except ValueError:
        return f"ip:{address or 'unknown'}"
    prefix = 24 if found.version == 4 else 64
    return f"net:{ipaddress.ip_network(f'{found}/{prefix}', strict=False)}"


def _limit_reset() -> str:
    """Seconds until the limit that refused this request lets the client in again. (The
    limiter's own headers are off: they cost two more Redis calls on every request, a
    quarter of the time of a cached answer.)"""
    limiter: Limiter = current_app.extensions[LIMITER]
    found = limiter.current_limit
    wait = found.reset_at - time.time() if found is not None else 1
    return str(max(1, math.ceil(wait)))


def _exempt() -> bool:
    return not request.path.startswith("/v1/")


def _start() -> None:
    given = request.headers.get("X-Request-ID", "")
    g.request_id = given if REQUEST_ID.match(given) else uuid.uuid4().hex
    g.started = time.perf_counter()


def _finish(response: Response) -> Response:
    response.headers["X-Request-ID"] = g.get("request_id", "")
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    response.headers["Referrer-Policy"] = "no-referrer"
    html = response.mimetype == "text/html"
    response.headers.setdefault("Content-Security-Policy", PAGE_POLICY if html else API_POLICY)
    if current_app.config["RIGHTSIZE_CORS_ORIGINS"] and request.path.startswith("/v1/"):
        response.vary.add("Origin")  # the CORS headers depend on it: caches must key on it
    if response.status_code == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="rightsize"'
    if "retry_after" in g:  # a 503 saying when to come back
        response.headers["Retry-After"] = g.retry_after
    elif response.status_code == 429:
        response.headers["Retry-After"] = _limit_reset()
    started = g.get("started")
    key = g.get("api_key")
    log.info(
        "request",
        extra={
            "request_id": g.get("request_id"),
            "method": request.method,
            "path": request.path,
            "status": response.status_code,
            "duration_ms": round((time.perf_counter() - started) * 1e3, 2) if started else None,
            "client": request.remote_addr,
            "key_id": key.key_id if key else None,
        },
    )
    return response


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time, level, logger, message and the request's fields."""

    FIELDS = ("request_id", "method", "path", "status", "duration_ms", "client", "key_id")

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S%z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in self.FIELDS:
            value = getattr(record, name, None)
            if value is not None:
                out[name] = value
        if record.exc_info:
            out["error"] = self.formatException(record.exc_info)
        return json.dumps(out, default=str)


class RepeatedWarnings(logging.Filter):
    """At most one warning of a kind (its logger and message template) every ``window_s``;
    the next one says how many were left out. While Redis is away every request warns
    that it fell back (about 100 lines a second under load), which says nothing more
    than the first and buries everything else."""

    KINDS = 1000  # message templates are the code's; others (an f-string's) share the rest

    def __init__(self, window_s: float = 10.0) -> None:
        super().__init__()
        self.window_s = window_s
        self._seen: dict[tuple[str, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING:
            return True
        key = (record.name, str(record.msg))
        now = time.monotonic()
        with self._lock:
            if len(self._seen) > self.KINDS:
                self._seen.clear()
            last, left_out = self._seen.get(key, (-self.window_s, 0))
            if now - last < self.window_s:
                self._seen[key] = (last, left_out + 1)
                return False
            self._seen[key] = (now, 0)
        if left_out:
            record.msg = f"{record.msg} [{left_out} more like this in {self.window_s:g} s]"
        return True


def configure_logging(level: str, form: str) -> None:
    """The root logger at ``level``, in JSON lines or plain text, repeated warnings
    thinned (:class:`RepeatedWarnings`)."""
    root = logging.getLogger()
    root.setLevel(level)
    ours = [h for h in root.handlers if getattr(h, "rightsize", False)]
    if not ours:
        added = logging.StreamHandler()
        added.rightsize = True  # type: ignore[attr-defined]
        added.addFilter(RepeatedWarnings())
        root.addHandler(added)
        ours = [added]
    for handler in ours:
        handler.setFormatter(
            JsonFormatter() if form == "json" else logging.Formatter(logging.BASIC_FORMAT)
        )


def init_app(app: Flask, redis_pool: Any | None) -> Limiter:
    """Keys, limits, request ids, headers and CORS on ``app`` (before the API's routes)."""
    settings = app.config
    app.extensions["rightsize-keys"] = KeyFile(settings["RIGHTSIZE_KEYS_FILE"])
    app.before_request(_start)
    app.after_request(_finish)
    # the limiter counts first (a flood of bad keys is limited per address), then the keys
    uri, options = "memory://", {}
    if redis_pool is not None:
        uri, options = settings["RIGHTSIZE_REDIS_URL"], {"connection_pool": redis_pool}
    limiter = Limiter(
        client_id,
        app=app,
        default_limits=[settings["RIGHTSIZE_RATE_LIMIT"]],
        default_limits_exempt_when=_exempt,
        headers_enabled=False,
        key_prefix=settings["RIGHTSIZE_KEY_PREFIX"] + "limits",
        storage_options=options,
        in_memory_fallback_enabled=True,
        swallow_errors=True,
        storage_uri=uri,
    )
    app.extensions[LIMITER] = limiter
    app.before_request(_authorise)
    if settings["RIGHTSIZE_CORS_ORIGINS"]:
        CORS(
            app,
            resources={r"/v1/*": {"origins": list(settings["RIGHTSIZE_CORS_ORIGINS"])}},
            expose_headers=["X-Request-ID", "Retry-After", "Location"],
            allow_headers=["Authorization", "Content-Type", "X-Request-ID"],
        )
    return limiter
