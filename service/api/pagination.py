"""``page`` / ``page_size`` query arguments and the envelope every list response uses."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from marshmallow import Schema, fields, validate

MAX_PAGE_SIZE = 500
MAX_PAGE = 100_000  # past every list's end: an answer of no items, not a huge integer parsed
DEFAULT_PAGE_SIZE = 50


class PageQuerySchema(Schema):
    page = fields.Integer(
        load_default=1,
        validate=validate.Range(min=1, max=MAX_PAGE),
        metadata={"description": "1-based page number"},
    )
    page_size = fields.Integer(
        load_default=DEFAULT_PAGE_SIZE,
        validate=validate.Range(min=1, max=MAX_PAGE_SIZE),
        metadata={"description": f"items per page, at most {MAX_PAGE_SIZE}"},
    )


class PageSchema(Schema):
    """Fields of every paginated response; subclasses add ``items``."""

    knowledge_version = fields.String(
        allow_none=True,
        metadata={"description": "content hash of the knowledge base the answer comes from"},
    )
    total = fields.Integer(metadata={"description": "items matching the query, all pages"})
    page = fields.Integer()
    page_size = fields.Integer()
    pages = fields.Integer(metadata={"description": "number of pages at this page_size"})


def page_schema(item: type[Schema], name: str) -> type[Schema]:
    """A named envelope schema ``{..., items: [item]}`` for the OpenAPI document."""
    return type(name, (PageSchema,), {"items": fields.List(fields.Nested(item))})


def paginate(
    items: Sequence[Any], args: dict[str, Any], version: str | None = None
) -> dict[str, Any]:
    """One page of ``items``; ``version``: the knowledge version the items come from."""
    page, size = args["page"], args["page_size"]
    start = (page - 1) * size
    return {
        "knowledge_version": version,
        "total": len(items),
        "page": page,
        "page_size": size,
        "pages": (len(items) + size - 1) // size,
        "items": items[start : start + size],
    }
