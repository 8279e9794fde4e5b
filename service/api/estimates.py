"""``/v1/estimates`` and ``/v1/validation``: how fast on which GPU, and how right that is."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from profiles.workload import WorkloadSchema
from service.api.base import Blueprint
from service.api.profiles import MODEL_DESCRIPTION
from service.engine.estimates import EstimateInputError
from service.engine.roofline import UnsupportedPrecision
from service.engine.traces import UnknownReference
from service.errors import InvalidInput, NotFound
from service.state import state

blp = Blueprint("estimates", __name__, url_prefix="/v1", description="Performance estimates")


class EstimateRequestSchema(Schema):
    model = fields.Dict(metadata={"description": MODEL_DESCRIPTION})
    workload = fields.Nested(
        WorkloadSchema, metadata={"description": "batch_size is per GPU (per replica)"}
    )
    profile_id = fields.String(metadata={"description": "instead of model and workload"})
    trace_id = fields.String(metadata={"description": "instead of model and workload"})
    gpu = fields.String(required=True, metadata={"description": "GPU id or name, see /v1/gpus"})
    count = fields.Integer(
        load_default=1,
        validate=validate.Range(1, 4096),
        metadata={"description": "GPUs, data parallel; throughput is for all of them"},
    )
    nvlink = fields.Boolean(
        load_default=None,
        allow_none=True,
        metadata={"description": "NVLink bridges fitted (cards that take them)"},
    )
    input_samples_per_s = fields.Float(
        load_default=None,
        allow_none=True,
        validate=validate.Range(min=0, min_inclusive=False),
        metadata={"description": "samples/s per GPU the input pipeline can deliver"},
    )
    reference_gpu = fields.String(metadata={"description": "with trace_id: the traced GPU"})

    @validates_schema
    def _one_source(self, data: dict[str, Any], **_: Any) -> None:
        given = [k for k in ("profile_id", "trace_id") if data.get(k)]
        has_model = "model" in data or "workload" in data
        if len(given) > 1 or (given and has_model):
            raise ValidationError(
                "give model and workload, or profile_id, or trace_id (only one of them)",
                given[0] if given else "model",
            )
        if not given:
            missing = [k for k in ("model", "workload") if k not in data]
            if missing:
                raise ValidationError(
                    "required (or give profile_id or trace_id instead)", missing[0]
                )


class IntervalSchema(Schema):
    low = fields.Float()
    high = fields.Float()


class ThroughputSchema(Schema):
    samples_per_s = fields.Float(allow_none=True)
    tokens_per_s = fields.Float(allow_none=True)
    prefill_tokens_per_s = fields.Float()
    decode_tokens_per_s = fields.Float(allow_none=True)


class EstimateSchema(Schema):
    gpu = fields.String()
    count = fields.Integer()
    step_time_s = fields.Float(metadata={"description": "one step (inference: the request)"})
    throughput = fields.Nested(ThroughputSchema, metadata={"description": "all GPUs together"})
    fits = fields.Boolean(metadata={"description": "memory fits with 10% headroom"})
    memory_per_gpu_bytes = fields.Float()
    gpu_memory_bytes = fields.Float()
    memory_headroom = fields.Float()
    bound = fields.String(
        metadata={
            "description": "what bounds the step: compute, memory_bandwidth, communication or "
            "input; from a trace also host (launches, synchronisation) or host_transfer"
        }
    )
    bound_part = fields.String(
        metadata={"description": "trace estimates: the largest part of the projected step"}
    )
    interval = fields.Nested(IntervalSchema, metadata={"description": "of step_time_s, 80%"})
    throughput_interval = fields.Dict()
    time_to_train_s = fields.Float()
    time_to_train_interval = fields.Nested(IntervalSchema)
    latency_s = fields.Float()
    prefill_s = fields.Float()
    decode_per_token_s = fields.Float(allow_none=True)
    precision = fields.String()
    math_mode = fields.String()
    breakdown = fields.Dict()
    breakdown_us = fields.Dict()
    input_stall_s = fields.Float()
    profile_id = fields.String(allow_none=True)
    trace_id = fields.String()
    reference_gpu = fields.String()
    assumptions = fields.List(fields.String())
    knowledge_version = fields.String()


@blp.route("/estimates")
class Estimates(MethodView):
    @blp.arguments(EstimateRequestSchema)
    @blp.response(200, EstimateSchema)
    @blp.problem(404)
    @blp.problem(422)
    def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """Estimate step time, throughput, memory and the bound on a GPU (and n of them)"""
        knowledge = state().knowledge
        if knowledge.resolve_gpu(body["gpu"]) is None:
            close = ", ".join(knowledge.gpu_index.suggest(body["gpu"])) or "none"
            raise InvalidInput("gpu", f"unknown GPU '{body['gpu']}' (close matches: {close})")
        try:
            return state().estimates.request(body)
        except UnsupportedPrecision as exc:
            raise InvalidInput("workload.precision", str(exc)) from None
        except EstimateInputError as exc:
            raise InvalidInput(exc.field, str(exc)) from None
        except UnknownReference as exc:
            raise InvalidInput(
                "reference_gpu",
                f"cannot project the trace ({exc}): name the traced GPU with reference_gpu",
            ) from None


class ValidationReportSchema(Schema):
    knowledge_version = fields.String(metadata={"description": "the knowledge it was made on"})
    made_at = fields.String()
    model = fields.Dict()
    single_gpu = fields.Dict(metadata={"description": "leave-one-GPU-out, single-GPU rows"})
    multi_gpu = fields.Dict(metadata={"description": "2x, 4x, 8x rows with the scaling model"})
    leave_one_architecture_out = fields.Dict()
    interval = fields.Dict(metadata={"description": "coverage of the 80% interval"})
    input_ceilings = fields.Dict()
    worst = fields.List(fields.Dict())
    skipped = fields.List(fields.Dict())
    targets = fields.Dict()
    seconds = fields.Float()


@blp.route("/validation")
class Validation(MethodView):
    @blp.response(200, ValidationReportSchema)
    @blp.problem(404)
    def get(self) -> dict[str, Any]:
        """The last validation report (leave-one-GPU-out), with its knowledge version"""
        report = state().estimates.report()
        if report is None:
            raise NotFound("validation report", "(none yet: run `rightsize validate`)", [])
        return report
