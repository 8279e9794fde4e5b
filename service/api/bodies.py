"""What a request body may be, endpoint by endpoint, checked before a byte of it is read.

Each view method that takes a body says so (:meth:`service.api.base.Blueprint.body`; a
JSON arguments schema says it for its method): the media types it reads (415 for any
other) and its size limit (413 beyond, whether the body states its length or comes
chunked: werkzeug stops reading at the limit). Every other request, a read, may send at
most :data:`JSON_BODY_LIMIT`: so a large body is accepted only where it is an upload, and
a read never parses one (``POST /v1/traces/{id}/projections`` once took 513 MiB).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from flask import Flask, current_app, request
from werkzeug.exceptions import HTTPException

from service.errors import PayloadTooLarge, UnsupportedType
from service.security import view_handler

F = TypeVar("F", bound=Callable[..., Any])
JSON_BODY_LIMIT = 2**20
JSON = ("application/json",)
MARK = "body_rule"


@dataclass(frozen=True)
class BodyRule:
    """``types``: the media types read (None: any, the view sniffs it); ``limit``: bytes,
    or the name of the setting that holds them."""

    types: tuple[str, ...] | None = JSON
    limit: int | str = JSON_BODY_LIMIT

    def limit_bytes(self) -> int:
        if isinstance(self.limit, str):
            return int(current_app.config[self.limit])
        return self.limit

    def accepts(self, mimetype: str) -> bool:
        if self.types is None:
            return True
        if mimetype in self.types:
            return True
        return "application/json" in self.types and mimetype.endswith("+json")


READS = BodyRule(types=None)  # a request whose view takes no body: only the size is held


def mark(method: F, rule: BodyRule) -> F:
    setattr(method, MARK, rule)
    return method


def limit_for(app: Flask, method: str, path: str) -> int:
    """The most bytes a body of ``method path`` may have (the front reads no more; a path
    no view answers takes a read's): the same rule :func:`check` holds the request to."""
    try:
        endpoint, _ = app.url_map.bind("rightsize").match(path, method)
    except HTTPException:
        return JSON_BODY_LIMIT
    view = app.view_functions.get(str(endpoint))
    owner = getattr(view, "view_class", None)
    handler = getattr(owner, method.lower(), None) if owner is not None else view
    rule: BodyRule = getattr(handler, MARK, None) or READS
    if isinstance(rule.limit, str):
        return int(app.config[rule.limit]) + 1  # an upload's reader reads one byte past
    return rule.limit


def _has_body() -> bool:
    length = request.content_length
    if length is not None:
        return length > 0
    return "chunked" in request.headers.get("Transfer-Encoding", "").lower()


def check() -> None:
    """Hold the request's body to its view's rule (before the view or its parser reads it)."""
    rule: BodyRule = getattr(view_handler(), MARK, None) or READS
    limit = rule.limit_bytes()
    # an upload read as a stream may be read a byte past its limit: its reader tells a
    # body that ends at the limit from one that goes on (werkzeug's stream would stop)
    request.max_content_length = limit + 1 if rule.types is None else limit
    length, stated = request.content_length, True
    if length is None and _has_body() and rule.types is not None:
        length, stated = _buffer(limit), False
    if length is not None and length > limit:
        size = f"{length} bytes" if stated else "longer (chunked)"
        raise PayloadTooLarge(
            f"{request.method} {request.path} takes a body of at most {limit} bytes; "
            f"this one is {size}",
            limit_bytes=limit,
        )
    if _has_body() and not rule.accepts(request.mimetype):
        sent = request.mimetype or "no Content-Type"
        raise UnsupportedType(
            f"{request.method} {request.path} reads {' or '.join(rule.types or ())}, not {sent}"
        )


def _buffer(limit: int) -> int:
    """Read a chunked body of a parsed kind (JSON, CSV: at most a few MiB) up to one byte
    past ``limit``, and hand it on with its length (past the limit: the length, refused).

    werkzeug's limited stream ends a read at the limit without an error (the parser then
    sees JSON cut short: a 400); reading it here tells a body that ends at the limit from
    one that goes on. Uploads (any type, read as a stream) keep their own limit.
    """
    source = request.environ["wsgi.input"]
    parts, size = [], 0
    while size <= limit:
        chunk = source.read(min(2**16, limit + 1 - size))
        if not chunk:
            break
        parts.append(chunk)
        size += len(chunk)
    if size <= limit:
        request.environ["wsgi.input"] = io.BytesIO(b"".join(parts))
        request.environ["CONTENT_LENGTH"] = str(size)
        request.__dict__.pop("content_length", None)  # werkzeug caches the header's value
    return size
