"""The service's error tree and the one place where errors become HTTP responses.

Every error body is RFC 9457 ``application/problem+json``: ``type``, ``title``,
``status``, ``detail``, plus ``errors`` (one entry per bad field: where it was, which
field, what was expected) and ``suggestions`` (close matches) where they apply.
"""

from __future__ import annotations

import logging
from typing import Any

from flask import Flask, Response, current_app, g, json
from redis import RedisError
from werkzeug.exceptions import HTTPException

from knowledge import KnowledgeError, UnknownId
from profiles.errors import InvalidDescription, ProfileError, ProfileTooSlow, UnknownModel
from service.engine import errors as engine
from service.infra.files import StoreFull
from service.state import EXTENSION

PROBLEM_MIME = "application/problem+json"
# what is kept in the shared store by id: while it is away, "not found" is not known
STORED = frozenset({"profile", "trace", "recommendation", "job"})
PROBLEM_BASE = "https://rightsize.readthedocs.io/problems/"
log = logging.getLogger(__name__)


class ApiError(Exception):
    """Root of the errors a request can end in; subclasses set the status."""

    status = 500
    slug = "internal-error"
    title = "Internal Server Error"

    def __init__(self, detail: str, **extra: Any) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra


class NotFound(ApiError):
    status, slug, title = 404, "not-found", "Not Found"

    def __init__(self, kind: str, value: str, suggestions: list[str]) -> None:
        hint = f"; close matches: {', '.join(suggestions)}" if suggestions else ""
        super().__init__(f"no {kind} '{value}'{hint}", value=value, suggestions=suggestions)
        self.kind = kind


class InvalidInput(ApiError):
    """A field holds a value the service cannot accept; says what was expected."""

    status, slug, title = 422, "invalid-input", "Unprocessable Content"

    def __init__(self, field: str, message: str, location: str = "json", value: Any = None) -> None:
        super().__init__(
            f"{field}: {message}",
            errors=[{"location": location, "field": field, "message": message}],
        )
        self.value = value


class RejectedRows(ApiError):
    """A batch (benchmark rows, a price catalog) with faults: each named, by row
    (``rows.<index>.<field>``), the first :data:`SHOWN` of them (a 50,000-row catalog
    wrong in every row would otherwise answer with a few hundred thousand), and nothing of
    the batch kept."""

    status, slug, title = 422, "invalid-input", "Unprocessable Content"
    SHOWN = 100

    def __init__(self, faults: list[Any], location: str, outcome: str) -> None:
        errors = [
            {"location": location, "field": f"rows.{e.index}.{e.field}", "message": e.message}
            for e in faults[: self.SHOWN]
        ]
        shown = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:5])
        more = (
            f"; {len(faults) - self.SHOWN} more faults not listed"
            if len(faults) > self.SHOWN
            else ""
        )
        super().__init__(f"{shown}{more} ({outcome})", errors=errors)


class TooExpensive(ApiError):
    status, slug, title = 422, "too-expensive", "Unprocessable Content"


class UnsupportedType(ApiError):
    status, slug, title = 415, "unsupported-media-type", "Unsupported Media Type"


class PayloadTooLarge(ApiError):
    status, slug, title = 413, "payload-too-large", "Content Too Large"


class Unavailable(ApiError):
    """Work that cannot be done now (Redis away, the model not built): try again later."""

    status, slug, title = 503, "unavailable", "Service Unavailable"
    retry_after_s: int | None

    def __init__(self, detail: str, retry_after_s: int | None = 10, **extra: Any) -> None:
        super().__init__(detail, **extra)
        self.retry_after_s = retry_after_s


class TooManyRequests(Unavailable):
    """One client asks for more at once than its share (the rate limit has its own 429)."""

    status, slug, title = 429, "too-many-requests", "Too Many Requests"


class InsufficientStorage(Unavailable):
    """A write that could not be made whole (the disk or a quota is full): nothing of it
    was stored."""

    status, slug, title = 507, "insufficient-storage", "Insufficient Storage"


class ClientClosed(ApiError):
    """The client went away before the answer (nginx's 499): only the log and the metrics
    see it."""

    status, slug, title = 499, "client-closed-request", "Client Closed Request"


def problem(status: int, title: str, detail: str, slug: str, **extra: Any) -> Response:
    """A problem+json response."""
    body = {"type": PROBLEM_BASE + slug, "title": title, "status": status, "detail": detail}
    body.update({k: v for k, v in extra.items() if v is not None})
    return Response(json.dumps(body), status=status, mimetype=PROBLEM_MIME)


def from_api_error(error: ApiError) -> Response:
    if isinstance(error, NotFound) and error.kind in STORED and not _store_reachable():
        error = Unavailable(
            f"{error.kind} '{error.extra['value']}' is not in this process, and the store "
            "that may hold it (Redis) is unreachable: try again later"
        )
    response = problem(error.status, error.title, error.detail, error.slug, **error.extra)
    if isinstance(error, Unavailable) and error.retry_after_s is not None:
        response.headers["Retry-After"] = str(error.retry_after_s)
        g.retry_after = str(error.retry_after_s)  # the limiter rewrites the header later
    return response


def from_http_exception(error: HTTPException) -> Response:
    """Werkzeug / webargs HTTP errors; validation messages become ``errors`` entries."""
    status = error.code or 500
    data = getattr(error, "data", None) or {}
    messages = data.get("errors") or data.get("messages")
    errors = _field_errors(messages) if messages else None
    detail = "; ".join(f"{e['field']}: {e['message']}" for e in errors) if errors else None
    detail = detail or data.get("message") or error.description or error.name
    title, slug = (
        (InvalidInput.title, InvalidInput.slug)
        if status == 422
        else (error.name, _slug(error.name))
    )
    response = problem(status, title, detail, slug, errors=errors)
    for key, value in (data.get("headers") or {}).items():
        response.headers[key] = value
    if status == 405 and hasattr(error, "valid_methods") and error.valid_methods:
        response.headers["Allow"] = ", ".join(error.valid_methods)
    return response


def from_knowledge_error(error: KnowledgeError) -> Response:
    if isinstance(error, UnknownId):
        return from_api_error(NotFound(error.kind, error.value, error.suggestions))
    return from_unexpected(error)


def from_profile_error(error: ProfileError) -> Response:
    """Profiler errors: unknown catalog names are 404s, everything else the client's 422."""
    if isinstance(error, UnknownModel):
        return from_api_error(NotFound("model", error.name, error.suggestions))
    if isinstance(error, InvalidDescription):
        return from_api_error(InvalidInput(error.field, error.message, "json", error.value))
    if isinstance(error, ProfileTooSlow):
        return from_api_error(TooExpensive(str(error)))
    return from_unexpected(error)


def from_engine_error(error: engine.EngineError) -> Response:
    """The engine's errors: unknown stored objects are 404s, requests it cannot answer
    422s naming the field, a model that cannot be built or busy compute processes 503s, a
    client past its share 429, one that went away 499."""
    found = _api_error(error)
    return from_api_error(found) if found is not None else from_unexpected(error)


def _api_error(error: engine.EngineError) -> ApiError | None:
    found: ApiError | None = None
    if isinstance(error, engine.NotFound):
        found = NotFound(error.kind, str(error.value), error.suggestions)
    elif isinstance(error, engine.InvalidRequest):
        assert error.field is not None
        found = InvalidInput(error.field, error.message, "json", error.value)
    elif isinstance(error, engine.TooSlow):
        found = TooExpensive(error.message, limit_s=error.limit_s)
    elif isinstance(error, engine.Abandoned):
        found = ClientClosed(error.message)
    elif isinstance(error, engine.Busy):
        busy = TooManyRequests if error.shared else Unavailable
        found = busy(error.message, retry_after_s=error.retry_after_s)
    elif isinstance(error, engine.ModelUnavailable):
        found = Unavailable(error.message)
    return found


def from_redis_down(error: RedisError) -> Response:
    """Work that needs Redis itself (the job queue, job states) while Redis is away; caches
    never get here (they fall back to this process)."""
    log.warning("redis unavailable: %s", error)
    return from_api_error(
        Unavailable("the job store (Redis) is unreachable; nothing was queued: try again later")
    )


def from_store_full(error: StoreFull) -> Response:
    """A write the disk, the file-size limit or a quota refused: nothing of it was kept."""
    log.warning("a write was refused: %s", error)
    return from_api_error(InsufficientStorage(str(error), retry_after_s=None))


def from_recursion(error: RecursionError) -> Response:
    """A request nested too deeply to parse or validate (e.g. 100,000 nested JSON objects)."""
    return problem(400, "Bad Request", "the request body is nested too deeply", "bad-request")


def from_unexpected(error: Exception) -> Response:
    log.exception("unhandled error", exc_info=error)
    return problem(500, "Internal Server Error", "an unexpected error occurred", "internal-error")


def _field_errors(messages: Any) -> list[dict[str, str]]:
    """webargs's ``{location: {field: [msg]}}`` as a flat list of field errors."""
    out: list[dict[str, str]] = []

    def walk(location: str, node: Any, path: str) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                walk(location, value, f"{path}.{key}" if path else str(key))
        elif isinstance(node, list):
            for item in node:
                walk(location, item, path)
        else:
            field = path.replace("._schema", "").replace("_schema", "") or "(body)"
            out.append({"location": location, "field": field, "message": str(node)})

    if isinstance(messages, dict):
        for location, node in messages.items():
            walk(str(location), node, "")
    else:
        walk("request", messages, "")
    return out


def _store_reachable() -> bool:
    found = current_app.extensions.get(EXTENSION)  # outside the service's app: no store
    return found is None or bool(found.cache.reachable)


def _slug(name: str) -> str:
    return name.lower().replace(" ", "-")


def init_app(app: Flask) -> None:
    """Route every error through the problem renderers above."""
    app.register_error_handler(ApiError, from_api_error)
    app.register_error_handler(KnowledgeError, from_knowledge_error)
    app.register_error_handler(ProfileError, from_profile_error)
    app.register_error_handler(engine.EngineError, from_engine_error)
    app.register_error_handler(HTTPException, from_http_exception)
    app.register_error_handler(RecursionError, from_recursion)
    app.register_error_handler(StoreFull, from_store_full)
    app.register_error_handler(RedisError, from_redis_down)
    app.register_error_handler(Exception, from_unexpected)
