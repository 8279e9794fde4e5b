"""Marshmallow pieces shared by the special-family schemas (U-Net, layer lists).

A strict base schema (unknown keys rejected), a field for "an integer or a list of them"
(kernel sizes, per-block head counts), the walk that turns marshmallow's nested error
dict into the first offending field name, and the load that raises it as an error.
"""

from __future__ import annotations

from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields

from profiles.errors import InvalidDescription


class Strict(Schema):
    class Meta:
        unknown = RAISE


class IntOrList(fields.Field):
    """A positive integer, or a list of ``length`` of them (any length when None)."""

    def __init__(
        self, low: int = 1, high: int = 1_000_000, length: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.low, self.high, self.length = low, high, length

    def _one(self, value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValidationError("must be an integer or a list of integers")
        if not self.low <= value <= self.high:
            raise ValidationError(f"must be between {self.low} and {self.high}")
        return value

    def _deserialize(
        self, value: Any, attr: str | None, data: Any, **kwargs: Any
    ) -> int | tuple[int, ...]:
        if isinstance(value, list):
            if not value or (self.length is not None and len(value) != self.length):
                want = f"{self.length} entries" if self.length else "at least one entry"
                raise ValidationError(f"a list here needs {want}")
            return tuple(self._one(v) for v in value)
        return self._one(value)


def first_error(messages: Any, prefix: str = "") -> tuple[str, str]:
    """(dotted field name, message) of the first error in a marshmallow messages tree."""
    if isinstance(messages, dict):
        key, value = next(iter(messages.items()))
        name = prefix if key == "_schema" else (f"{prefix}.{key}" if prefix else str(key))
        return first_error(value, name)
    if isinstance(messages, list) and messages:
        return first_error(messages[0], prefix)
    return prefix, str(messages)


def load_fields(schema: Schema, data: dict[str, Any], where: str = "model") -> dict[str, Any]:
    """``schema.load(data)``, or :class:`InvalidDescription` naming ``<where>.<field>``."""
    try:
        loaded: dict[str, Any] = schema.load(data)
    except ValidationError as exc:
        name, message = first_error(exc.messages)
        field = f"{where}.{name}" if name else where
        raise InvalidDescription(field, message, data.get(name)) from None
    return loaded
