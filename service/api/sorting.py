"""The ``sort`` query argument: a field name, ``-`` in front for descending."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from marshmallow import fields, validate

T = TypeVar("T")


def sort_field(keys: Sequence[str], default: str) -> fields.String:
    choices = [*keys, *(f"-{k}" for k in keys)]
    return fields.String(
        load_default=default,
        validate=validate.OneOf(choices),
        metadata={
            "description": f"sort key, '-' prefix for descending; one of {', '.join(keys)}. "
            "Missing values sort last; ties keep the default order."
        },
    )


def sorted_by(items: Sequence[T], sort: str) -> list[T]:
    """Stable sort of ``items`` by the attribute (or key) ``sort`` names; nulls last."""
    key = sort.removeprefix("-")
    descending = sort.startswith("-")

    def get(item: T) -> Any:
        return item[key] if isinstance(item, dict) else getattr(item, key)

    present = [i for i in items if get(i) is not None]
    missing = [i for i in items if get(i) is None]
    return sorted(present, key=get, reverse=descending) + missing
