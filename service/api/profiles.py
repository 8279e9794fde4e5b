"""``/v1/profiles``: what a workload needs (FLOPs, bytes, memory), before any hardware."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from marshmallow import Schema, fields, post_load

from profiles.description import FAMILIES
from profiles.workload import WorkloadSchema
from service.api.base import Blueprint
from service.api.profile_schemas import ProfileModelSchema, ResolvedWorkloadSchema
from service.engine.requests import ProfileRequest
from service.errors import NotFound
from service.state import state

blp = Blueprint("profiles", __name__, url_prefix="/v1/profiles", description="Workload profiles")

MODEL_DESCRIPTION = (
    'One of: {"name": "llama-3-8b"} (a catalog name or alias, see /v1/models); '
    '{"hf_config": {...}} (a Hugging Face config.json as is); {"family": "transformer" | '
    '"resnet" | "vit" | "efficientnet" | "cnn" | "unet", ...} (a parametric family); '
    'or {"layers": [...], "input_shape": [...]} (a layer list).'
)


def _model_forms() -> list[dict[str, Any]]:
    """The model's forms as OpenAPI (what profiles.description.resolve takes): a name or
    a wrapped config alone; a family, a layer list or a bare config (``model_type``), each
    without the keys that name another form."""

    def form(key: str, schema: dict[str, Any], *absent: str) -> dict[str, Any]:
        properties = {key: schema} | {k: {"not": {}} for k in absent}
        found: dict[str, Any] = {"required": [key], "properties": properties}
        return found | ({} if absent else {"additionalProperties": False})

    return [
        form("name", {"type": "string"}),
        form("hf_config", {"type": "object"}),
        form("family", {"enum": list(FAMILIES)}, "name", "hf_config"),
        form("layers", {"type": "array"}, "name", "hf_config", "family"),
        form("model_type", {"type": "string"}, "name", "hf_config", "family"),
    ]


def model_field(required: bool = False) -> fields.Dict:
    """The ``model`` of a request, in one of its forms."""
    return fields.Dict(
        required=required, metadata={"description": MODEL_DESCRIPTION, "anyOf": _model_forms()}
    )


class ProfileRequestSchema(Schema):
    model = model_field(required=True)
    workload = fields.Nested(WorkloadSchema, required=True)

    @post_load
    def _typed(self, data: dict[str, Any], **_: Any) -> ProfileRequest:
        return ProfileRequest(**data)


class CostSchema(Schema):
    flops = fields.Float()
    bytes_read = fields.Float()
    bytes_written = fields.Float()
    arithmetic_intensity = fields.Float(
        allow_none=True, metadata={"description": "FLOPs per byte moved"}
    )


class KindCostSchema(CostSchema):
    phase = fields.String(
        metadata={"description": "forward, backward, optimizer, prefill, decode-first, decode-last"}
    )
    kind = fields.String(
        metadata={
            "description": "matmul, attention, convolution, elementwise, "
            "normalisation, reduction, embedding, communication"
        }
    )


class OpCostSchema(CostSchema):
    phase = fields.String()
    op = fields.String(metadata={"description": "aten operator, e.g. aten.mm"})
    calls = fields.Integer()


class MemorySchema(Schema):
    parameters_bytes = fields.Float()
    gradients_bytes = fields.Float()
    optimizer_states_bytes = fields.Float()
    master_weights_bytes = fields.Float(metadata={"description": "fp32 copies (mixed precision)"})
    activations_bytes = fields.Float(
        metadata={"description": "saved for backward, deduplicated by storage, no parameters"}
    )
    kv_cache_bytes = fields.Float()
    temporary_peak_bytes = fields.Float(
        metadata={"description": "transient memory above the activations at the step's peak"}
    )
    runtime_overhead_bytes = fields.Float(metadata={"description": "stated: see assumptions"})
    freed_before_peak_bytes = fields.Float(
        metadata={
            "description": "the lines above are never all alive at once: this much of their "
            "sum is freed by the step's peak (total_bytes subtracts it)"
        }
    )
    total_bytes = fields.Float(metadata={"description": "per replica (one GPU, no sharding)"})


class ProfileSchema(Schema):
    profile_id = fields.String(metadata={"description": "content hash of the request"})
    profiler_version = fields.String()
    cached = fields.Boolean(metadata={"description": "served from the cache"})
    model = fields.Nested(
        ProfileModelSchema,
        metadata={"description": "resolved model: name, family, spec, counts"},
    )
    workload = fields.Nested(
        ResolvedWorkloadSchema,
        metadata={"description": "the workload with every default filled in"},
    )
    samples_per_step = fields.Integer()
    tokens_per_step = fields.Integer()
    flops = fields.Dict(keys=fields.String(), values=fields.Float(allow_none=True))
    phases = fields.Dict(keys=fields.String(), values=fields.Nested(CostSchema))
    by_kind = fields.List(fields.Nested(KindCostSchema))
    by_op = fields.List(fields.Nested(OpCostSchema))
    arithmetic_intensity = fields.Float(
        allow_none=True,
        metadata={"description": "FLOPs per byte, whole training step (inference: prefill)"},
    )
    memory = fields.Nested(MemorySchema)
    launches = fields.Dict(
        keys=fields.String(),
        values=fields.Float(),
        metadata={
            "description": "kernel launches by phase and in all ('total'; inference: the "
            "prefill plus every decode step): one per dispatched operator that does work, "
            "one fused optimizer kernel per parameter, per time step for LSTM/GRU layers"
        },
    )
    dataset = fields.Dict(keys=fields.String(), values=fields.Float(allow_none=True))
    assumptions = fields.List(fields.String())
    seconds = fields.Float(metadata={"description": "time spent counting"})


@blp.route("")
class Profiles(MethodView):
    @blp.arguments(ProfileRequestSchema)
    @blp.response(200, ProfileSchema)
    @blp.problem(404)
    @blp.problem(422)
    @blp.problem(503)
    def post(self, body: ProfileRequest) -> dict[str, Any]:
        """Profile a workload: FLOPs, bytes moved and memory of one step"""
        result, cached = state().profiles.profile(body.model, body.workload)
        return {**result, "cached": cached}


@blp.route("/<string:profile_id>")
class ProfileById(MethodView):
    @blp.response(200, ProfileSchema)
    @blp.problem(404)
    @blp.problem(503)
    def get(self, profile_id: str) -> dict[str, Any]:
        """A profile made earlier (kept for RIGHTSIZE_CACHE_TTL_S)"""
        result = state().profiles.get(profile_id)
        if result is None:
            raise NotFound("profile", profile_id, [])
        return {**result, "cached": True}
