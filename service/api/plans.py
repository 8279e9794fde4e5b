"""``/v1/plans``: every valid parallel layout of a workload on a GPU type, ranked."""

from __future__ import annotations

import functools
from typing import Any

from flask import has_app_context
from flask.views import MethodView
from marshmallow import Schema, ValidationError, fields, post_load, validate

from knowledge.stack_schemas import LIST_VALUES, PROPERTIES, property_error
from profiles.workload import WorkloadSchema
from service.api.answers import answer_version, cached
from service.api.base import Blueprint, StrictBoolean
from service.api.constraints import OneSource
from service.api.lookups import gpu_filter
from service.api.plan_schemas import (
    InferenceOptionSchema,
    LayoutAtCountSchema,
    OtherLinksSchema,
    PlanNetworkSchema,
    RankedLayoutSchema,
)
from service.api.profiles import model_field
from service.api.stack_schemas import StackUsedSchema
from service.engine.planning.plans import plan_request
from service.engine.planning.serving import WEIGHT_PRECISIONS
from service.engine.requests import Links, PlanRequest, StepRequest
from service.state import state

blp = Blueprint("plans", __name__, url_prefix="/v1", description="Parallel layouts")


class InterconnectChoiceSchema(Schema):
    @post_load
    def _typed(self, data: dict[str, Any], **_: Any) -> Links:
        return Links(**data)

    intra_node = fields.String(
        metadata={"description": "interconnect id inside a node (default: the GPU's own)"}
    )
    inter_node = fields.String(
        metadata={"description": "interconnect id between nodes (default infiniband-ndr)"}
    )


def _known_stack(value: str) -> None:
    if not has_app_context():  # the schema used outside the app (the engine checks it too)
        return
    knowledge = state().knowledge
    if knowledge.stack_index.resolve(value) is None:
        known = ", ".join(knowledge.stacks)
        raise ValidationError(f"unknown stack {value!r}: one of {known} (GET /v1/stacks)")


def _stack_options(value: dict[str, Any]) -> None:
    problems = {k: msg for k, v in value.items() if (msg := property_error(k, v))}
    if problems:
        raise ValidationError(problems)


def _property_schema(name: str) -> dict[str, Any]:
    """The OpenAPI schema of stack property ``name``'s values (what property_error takes)."""
    allowed = PROPERTIES[name]
    if allowed is bool:
        return {"type": "boolean"}
    if allowed is list:
        values = {"type": "string", "enum": list(LIST_VALUES[name])}
        return {"type": "array", "minItems": 1, "items": values}
    assert isinstance(allowed, tuple)
    return {"type": "string", "enum": list(allowed)}


def stack_fields() -> dict[str, fields.Field]:
    """The request fields that name the software stack and override its properties."""
    return {
        "stack": fields.String(
            validate=[validate.Length(1, 64), _known_stack],
            metadata={
                "description": "the software stack the work runs on, an id or alias from "
                "GET /v1/stacks (e.g. hf-transformers, torchtitan, torchtune, deepspeed, "
                "megatron-te, vllm, tensorrt-llm); default: the most common stack for the "
                "work (pytorch for vision and encoders, hf-trl-peft for LoRA and QLoRA, "
                "hf-transformers for other training of a language model, vllm for "
                "generation)",
                "example": "torchtune",
            },
        ),
        "stack_options": fields.Dict(
            keys=fields.String(),
            values=fields.Raw(),
            validate=_stack_options,
            metadata={
                "description": "the stack's properties to override, e.g. "
                '{"activation_offload": true, "optimizer_states": "8bit"}; '
                f"known: {', '.join(PROPERTIES)} (GET /v1/stacks gives each one's values)",
                "properties": {name: _property_schema(name) for name in PROPERTIES},
                "additionalProperties": False,
            },
        ),
    }


def layout_options() -> dict[str, fields.Field]:
    """The request fields plans and layout estimates share."""
    return {
        **stack_fields(),
        "gpus_per_node": fields.Integer(
            load_default=None,
            strict=True,
            validate=validate.Range(1, 72),
            metadata={
                "description": "GPUs one NVLink or PCIe domain joins (default: the GPU's "
                "NVLink domain, 72 for GB200 NVL72, else 8, one server)"
            },
        ),
        "submitted_benchmarks": StrictBoolean(
            load_default=StepRequest.submitted_benchmarks,
            metadata={
                "description": "use the model fitted with user-submitted benchmark rows "
                "(POST /v1/benchmarks, as of the last retrain); false: the curated rows only"
            },
        ),
        "interconnect": fields.Nested(InterconnectChoiceSchema),
        "weight_precision": fields.String(
            validate=validate.OneOf(WEIGHT_PRECISIONS),
            metadata={"description": "inference: precision the weights are stored in"},
        ),
        "kv_precision": fields.String(
            validate=validate.OneOf(("fp16", "bf16", "fp8", "int8", "int4")),
            metadata={"description": "inference: precision of the KV cache"},
        ),
        "concurrency": fields.Integer(
            validate=validate.Range(1, 1_000_000),
            strict=True,
            metadata={"description": "inference: sequences decoded together (default: most)"},
        ),
    }


class PlanRequestSchema(OneSource, Schema.from_dict(layout_options())):  # type: ignore[misc]
    SOURCES = (("model", "workload"), ("profile_id",))

    model = model_field()
    workload = fields.Nested(
        WorkloadSchema,
        metadata={"description": "batch_size is the micro-batch per model replica"},
    )
    profile_id = fields.String(
        validate=validate.Length(1, 100), metadata={"description": "instead of model and workload"}
    )
    gpu = fields.String(required=True, metadata={"description": "GPU id or name, see /v1/gpus"})
    count = fields.Integer(
        validate=validate.Range(1, 4096),
        strict=True,
        metadata={"description": "GPUs to rank layouts at (default: the fewest that fit)"},
    )
    max_count = fields.Integer(
        load_default=PlanRequest.max_count,
        validate=validate.Range(1, 1024),
        strict=True,
        metadata={"description": "fastest layout at each power of two up to this"},
    )
    global_batch_size = fields.Integer(
        validate=validate.Range(1, 10_000_000),
        strict=True,
        metadata={"description": "samples per optimizer step (default: one micro-batch per GPU)"},
    )
    limit = fields.Integer(
        load_default=PlanRequest.limit,
        validate=validate.Range(1, 500),
        strict=True,
        metadata={"description": "layouts returned at the count (best first)"},
    )

    @post_load
    def _typed(self, data: dict[str, Any], **_: Any) -> PlanRequest:
        return PlanRequest(**data)


class PlanSchema(Schema):
    gpu = fields.String()
    stack = fields.Nested(
        StackUsedSchema, metadata={"description": "the stack assumed, with its properties"}
    )
    task = fields.String()
    count = fields.Integer(metadata={"description": "the count the layouts are ranked at"})
    smallest_count = fields.Integer(
        allow_none=True, metadata={"description": "fewest GPUs (a power of two) a layout fits"}
    )
    layouts = fields.List(
        fields.Nested(RankedLayoutSchema),
        metadata={
            "description": "ranked: fitting first, then by throughput; each with its layout, "
            "memory per GPU and headroom, step time, throughput, MFU, bound, breakdown and "
            "the traffic on each link with the bandwidth it needs"
        },
    )
    layouts_total = fields.Integer()
    fastest_by_count = fields.List(
        fields.Nested(LayoutAtCountSchema),
        metadata={
            "description": "the fastest fitting layout at each power of two up to max_count "
            "(and at count); where none fits, only count and fits"
        },
    )
    on_other_links = fields.List(
        fields.Nested(OtherLinksSchema),
        metadata={"description": "the best layout's step on other links, and what it loses"},
    )
    inference = fields.List(
        fields.Nested(InferenceOptionSchema),
        metadata={
            "description": "inference: per tensor-parallel group, time to first token, time "
            "per output token, throughput at the concurrency and the KV cache's limit on it"
        },
    )
    interconnect = fields.Nested(
        PlanNetworkSchema, metadata={"description": "the links the layouts run over"}
    )
    profile_id = fields.String(allow_none=True)
    assumptions = fields.List(fields.String())
    knowledge_version = fields.String()


@blp.route("/plans")
class Plans(MethodView):
    @blp.arguments(PlanRequestSchema)
    @blp.response(200, PlanSchema)
    @blp.problem(404)
    @blp.problem(422)
    @blp.problem(503)
    def post(self, body: PlanRequest) -> Any:
        """Rank every valid parallel layout of a workload on a GPU type"""
        st = state()
        gpu_filter(st.knowledge, body.gpu, location="json")
        service = st.layers.service(body.submitted_benchmarks)
        compute = functools.partial(plan_request, service, body)
        return cached("plan", answer_version(service), PlanSchema, compute)
