"""The engine's own errors: what a request asked for that the engine cannot answer.

Every error keeps the offending value, the field it came from and, where there are any,
close matches; :mod:`service.errors` maps this tree to HTTP in one place (the engine
knows nothing of HTTP).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class EngineError(Exception):
    """Root of the engine's errors."""

    def __init__(self, message: str, field: str | None = None, value: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field
        self.value = value


class NotFound(EngineError):
    """A stored object (a profile, a trace) the request names does not exist (any more)."""

    def __init__(self, kind: str, value: str, suggestions: Sequence[str] = ()) -> None:
        hint = f"; close matches: {', '.join(suggestions)}" if suggestions else ""
        super().__init__(f"no {kind} '{value}'{hint}", None, value)
        self.kind = kind
        self.suggestions = list(suggestions)


class InvalidRequest(EngineError):
    """A field holds a value the engine cannot estimate from; the message says what it
    expected."""

    def __init__(self, field: str, message: str, value: Any = None) -> None:
        super().__init__(message, field, value)


class UnsupportedPrecision(InvalidRequest):
    """The GPU cannot run the workload's precision; names the precisions it has."""

    def __init__(self, gpu_id: str, precision: str, supported: Sequence[str]) -> None:
        super().__init__(
            "workload.precision",
            f"{gpu_id} does not support {precision}; it supports {', '.join(supported)}",
            precision,
        )
        self.gpu_id = gpu_id
        self.precision = precision
        self.supported = list(supported)


class UnknownReference(InvalidRequest):
    """A trace cannot be projected: its reference GPU is unknown or it has no GPU work."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            "reference_gpu",
            f"cannot project the trace ({reason}): name the traced GPU with reference_gpu",
            reason,
        )
        self.reason = reason


class ModelUnavailable(EngineError):
    """The performance model could not be built (the detail says why)."""


class TooSlow(EngineError):
    """The request's computation passed its time limit (:mod:`service.engine.deadline`)."""

    def __init__(self, limit_s: float) -> None:
        super().__init__(
            f"the computation passed its limit of {limit_s:g} s: narrow the request (fewer "
            "GPUs or a lower max_gpus / max_count, a smaller model)",
        )
        self.limit_s = limit_s


class Busy(EngineError):
    """New work that could not start: the compute processes were busy past its time, or
    its client already has its share of them running or waiting (``shared``). Nothing was
    computed; ``retry_after_s`` says when to ask again."""

    def __init__(self, message: str, retry_after_s: int, shared: bool = False) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.shared = shared


class Abandoned(EngineError):
    """The caller went away before the computation ended: it was stopped, since nobody
    would read its answer."""

    def __init__(self) -> None:
        super().__init__("the client closed the connection; the computation was stopped")
