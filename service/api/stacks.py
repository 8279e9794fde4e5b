"""``/v1/stacks``: the software stacks estimates are made for, with their properties."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from marshmallow import Schema, fields, validate

from knowledge.stack_schemas import LIST_VALUES, PROPERTIES, TASKS
from service.api.answers import memoised
from service.api.base import Blueprint
from service.api.stack_schemas import (
    StackComputeSchema,
    StackPropertiesSchema,
    StackPropertyValuesSchema,
    StackServingSchema,
)
from service.errors import NotFound
from service.state import state

blp = Blueprint("stacks", __name__, url_prefix="/v1/stacks", description="Software stacks")


def _values(name: str, allowed: Any) -> list[Any] | str:
    if allowed is bool:
        return "true or false"
    if allowed is list:
        return f"a list of {', '.join(LIST_VALUES[name])}"
    return list(allowed)


class StackSchema(Schema):
    id = fields.String()
    name = fields.String()
    tasks = fields.List(
        fields.String(), metadata={"description": "training, fine-tuning, inference"}
    )
    aliases = fields.List(fields.String())
    default_for = fields.List(
        fields.String(),
        metadata={"description": "the work it is the default stack for (a task, lora, qlora, "
                  "vision, encoder)"},
    )  # fmt: skip
    version = fields.String(metadata={"description": "the versions its properties were read at"})
    as_of = fields.Date()
    properties = fields.Nested(
        StackPropertiesSchema,
        metadata={"description": "what the stack does by default; a request overrides any "
                  "of them in stack_options"},
    )  # fmt: skip
    compute = fields.Nested(
        StackComputeSchema,
        metadata={"description": "training constants fitted on its published runs, with "
                  "their fit (empty: the defaults)"},
    )  # fmt: skip
    serving = fields.Nested(
        StackServingSchema,
        metadata={"description": "serving constants fitted on its published runs, with "
                  "their fit (empty: the defaults)"},
    )  # fmt: skip
    sources = fields.List(fields.String())


class StackListSchema(Schema):
    stacks = fields.List(fields.Nested(StackSchema))
    properties = fields.Nested(
        StackPropertyValuesSchema,
        metadata={"description": "each property's allowed values (stack_options takes them)"},
    )
    knowledge_version = fields.String()


class StackQuerySchema(Schema):
    task = fields.String(validate=validate.OneOf(TASKS))


def _dump(stack: Any) -> dict[str, Any]:
    return {
        "id": stack.id,
        "name": stack.name,
        "tasks": list(stack.tasks),
        "aliases": list(stack.aliases),
        "default_for": list(stack.default_for),
        "version": stack.version,
        "as_of": stack.as_of,
        "properties": stack.properties,
        "compute": stack.compute,
        "serving": stack.serving,
        "sources": list(stack.sources),
    }


@blp.route("")
class Stacks(MethodView):
    @memoised
    @blp.arguments(StackQuerySchema, location="query")
    @blp.response(200, StackListSchema)
    @blp.problem(422)
    def get(self, args: dict[str, Any]) -> dict[str, Any]:
        """List the software stacks (training, fine-tuning and serving) and their properties"""
        knowledge = state().knowledge
        task = args.get("task")
        return {
            "stacks": [_dump(s) for s in knowledge.stacks.values() if not task or task in s.tasks],
            "properties": {k: _values(k, v) for k, v in PROPERTIES.items()},
            "knowledge_version": knowledge.version,
        }


@blp.route("/<string:stack_id>")
class OneStack(MethodView):
    @blp.response(200, StackSchema)
    @blp.problem(404)
    def get(self, stack_id: str) -> dict[str, Any]:
        """One software stack by id or alias"""
        knowledge = state().knowledge
        found = knowledge.stack_index.resolve(stack_id)
        if found is None:
            raise NotFound("stack", stack_id, knowledge.stack_index.suggest(stack_id))
        return _dump(knowledge.stacks[found])
