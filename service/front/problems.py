"""The front's own answers, as raw HTTP: ``application/problem+json`` (RFC 9457), the
shape of every error the app gives, with the connection closed after them."""

from __future__ import annotations

import http
import json

PROBLEM_MIME = "application/problem+json"
PROBLEM_BASE = "https://rightsize.readthedocs.io/problems/"
# the titles and types the app gives the same statuses (service.errors)
NAMED = {
    413: ("Content Too Large", "payload-too-large"),
    503: ("Service Unavailable", "unavailable"),
}


def body(status: int, detail: str, **extra: object) -> bytes:
    """The problem document of ``status`` saying ``detail``."""
    phrase = http.HTTPStatus(status).phrase
    title, slug = NAMED.get(status, (phrase, phrase.lower().replace(" ", "-")))
    found = {
        "type": PROBLEM_BASE + slug,
        "title": title,
        "status": status,
        "detail": detail,
        **extra,
    }
    return json.dumps(found).encode()


def headers(size: int, retry_after_s: int | None = None) -> list[tuple[bytes, bytes]]:
    """What the front's answers carry: their type, length, no sniffing, and the
    connection's end (and when to come back)."""
    found = [
        (b"content-type", PROBLEM_MIME.encode()),
        (b"content-length", str(size).encode()),
        (b"x-content-type-options", b"nosniff"),
        (b"connection", b"close"),
    ]
    if retry_after_s is not None:
        found.append((b"retry-after", str(retry_after_s).encode()))
    return found


def raw(status: int, detail: str, retry_after_s: int | None = None) -> bytes:
    """The whole HTTP/1.1 response, for a connection that never reached the app."""
    document = body(status, detail)
    lines = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}".encode("ascii")]
    lines += [name + b": " + value for name, value in headers(len(document), retry_after_s)]
    return b"\r\n".join(lines) + b"\r\n\r\n" + document
