"""Answer fields with their descriptions, so every schema says what each value is in one
line: ``number("seconds a step takes")``. Tables keyed by the data's own names (GPU ids,
workloads, suites) are :func:`keyed` dicts of one schema."""

from __future__ import annotations

from marshmallow import Schema, fields


def number(description: str, none: bool = False) -> fields.Float:
    return fields.Float(allow_none=none, metadata={"description": description})


def integer(description: str, none: bool = False) -> fields.Integer:
    return fields.Integer(allow_none=none, metadata={"description": description})


def text(description: str, none: bool = False) -> fields.String:
    return fields.String(allow_none=none, metadata={"description": description})


def flag(description: str, none: bool = False) -> fields.Boolean:
    return fields.Boolean(allow_none=none, metadata={"description": description})


def integers(description: str) -> fields.List:
    return fields.List(fields.Integer(), metadata={"description": description})


def nested(schema: type[Schema], description: str, none: bool = False) -> fields.Nested:
    return fields.Nested(schema, allow_none=none, metadata={"description": description})


def nested_list(schema: type[Schema], description: str) -> fields.List:
    return fields.List(fields.Nested(schema), metadata={"description": description})


def keyed(values: fields.Field | type[Schema], description: str) -> fields.Dict:
    """A dict keyed by data names (GPU ids, workloads, suites)."""
    inner = fields.Nested(values) if isinstance(values, type) else values
    return fields.Dict(keys=fields.String(), values=inner, metadata={"description": description})
