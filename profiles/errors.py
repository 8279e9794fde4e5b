"""The profiler's error tree: each error keeps the offending field and value."""

from __future__ import annotations

from typing import Any


class ProfileError(Exception):
    """Root of every error raised by :mod:`profiles`."""


class InvalidDescription(ProfileError):
    """A field of the model description or workload cannot be accepted."""

    def __init__(self, field: str, message: str, value: Any = None) -> None:
        self.field = field
        self.message = message
        self.value = value
        super().__init__(f"{field}: {message}")


class LimitExceeded(InvalidDescription):
    """A description beyond the sane limits, refused before anything is built."""

    def __init__(self, field: str, value: float, limit: float, what: str) -> None:
        self.limit = limit
        super().__init__(field, f"{what} {value:.4g} exceeds the limit of {limit:.4g}", value)


class UnknownModel(ProfileError):
    """A catalog name that is not in the catalog; ``suggestions`` holds close names."""

    def __init__(self, name: str, suggestions: list[str]) -> None:
        self.name = name
        self.suggestions = suggestions
        hint = f"; close matches: {', '.join(suggestions)}" if suggestions else ""
        super().__init__(f"no model '{name}' in the catalog{hint}")


class UnsupportedModelType(InvalidDescription):
    """A Hugging Face config whose ``model_type`` the profiler cannot build."""

    def __init__(self, model_type: str, supported: list[str]) -> None:
        self.supported = supported
        super().__init__(
            "model.hf_config.model_type",
            f"unsupported model_type '{model_type}'; supported: {', '.join(supported)}",
            model_type,
        )


class ProfileTooSlow(ProfileError):
    """Counting ran past the time limit."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        super().__init__(
            f"profiling stopped after {limit_s:g} s; reduce the batch, sequence or model size"
        )
