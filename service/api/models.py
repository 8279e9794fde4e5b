"""``/v1/models``: the named model catalog."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from marshmallow import Schema, fields, validate

from service.api.answers import memoised
from service.api.base import Blueprint
from service.api.pagination import PageQuerySchema, page_schema, paginate
from service.state import state

blp = Blueprint("models", __name__, url_prefix="/v1/models", description="The model catalog")


class ModelQuerySchema(PageQuerySchema):
    q = fields.String(
        validate=validate.Length(max=200),
        metadata={
            "description": "search: every word must occur in the name, an alias or the family, "
            "case and punctuation ignored (`llama 3.2`, `Qwen2.5-7B`, `whisper`, "
            "`meta-llama/Llama-3.2-1B`); ranked exact name or alias matches first, then "
            "names and aliases that start with the query, then the rest by name"
        },
    )


class ModelSchema(Schema):
    name = fields.String()
    aliases = fields.List(fields.String())
    family = fields.String()
    parameters = fields.Integer(
        allow_none=True, metadata={"description": "published parameter count"}
    )
    source = fields.String()
    as_of = fields.String()
    notes = fields.String(allow_none=True, metadata={"description": "what is approximated"})


class ModelDetailSchema(ModelSchema):
    description = fields.Dict(metadata={"description": "the description the catalog resolves to"})


@blp.route("")
class Models(MethodView):
    @memoised
    @blp.arguments(ModelQuerySchema, location="query")
    @blp.response(200, page_schema(ModelSchema, "ModelPage"))
    @blp.problem(422)
    def get(self, args: dict[str, Any]) -> dict[str, Any]:
        """List the catalog's models by name, or those matching a search, a page at a time"""
        catalog = state().catalog
        if "q" in args:
            entries = catalog.search(args["q"])
        else:
            entries = sorted(catalog.entries.values(), key=lambda e: e.name)
        return paginate([e.summary() for e in entries], args)


@blp.route("/<string:name>")
class ModelByName(MethodView):
    @memoised
    @blp.response(200, ModelDetailSchema)
    @blp.problem(404)
    def get(self, name: str) -> dict[str, Any]:
        """One catalog model, by name or alias (404 lists close matches)"""
        entry = state().catalog.get(name)
        return {**entry.summary(), "description": entry.description}
