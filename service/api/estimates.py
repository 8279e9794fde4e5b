"""``/v1/estimates`` and ``/v1/validation``: how fast on which GPU, and how right that is."""

from __future__ import annotations

import functools
from typing import Any

from flask.views import MethodView
from marshmallow import Schema, fields, post_load, validate

from profiles.workload import WorkloadSchema
from service import jobs
from service.api.answers import answer_version, cached
from service.api.base import Blueprint, StrictBoolean
from service.api.constraints import OneSource
from service.api.jobs import JobAcceptedSchema, accepted, no_queue
from service.api.lookups import gpu_filter
from service.api.plan_schemas import InferenceEstimateSchema, LayoutSchema, PlannedLayoutSchema
from service.api.plans import layout_options
from service.api.profiles import MemorySchema, model_field
from service.api.stack_schemas import StackUsedSchema
from service.api.traces import must_read
from service.api.validation_llm_schemas import LlmValidationSchema, StackValidationSchema
from service.api.validation_schemas import (
    DeliveredInputSchema,
    FlagshipSpeedupSchema,
    ForwardInTimeSchema,
    HeldInSchema,
    HeldOutErrorsSchema,
    IntervalCoverageSchema,
    LeaveOneGpuOutSchema,
    MemoryFitCheckSchema,
    MultiGpuValidationSchema,
    NotScoredRowSchema,
    StepModelSummarySchema,
    ValidationTargetSchema,
)
from service.engine.planning.estimates import check_traced, estimate_request
from service.engine.requests import EstimateRequest
from service.errors import NotFound
from service.security import reader
from service.state import state

blp = Blueprint("estimates", __name__, url_prefix="/v1", description="Performance estimates")


class EstimateRequestSchema(OneSource, Schema.from_dict(layout_options())):  # type: ignore[misc]
    SOURCES = (("model", "workload"), ("profile_id",), ("trace_id",))

    model = model_field()
    workload = fields.Nested(
        WorkloadSchema, metadata={"description": "batch_size is per GPU (per replica)"}
    )
    profile_id = fields.String(
        validate=validate.Length(1, 100), metadata={"description": "instead of model and workload"}
    )
    trace_id = fields.String(
        validate=validate.Length(1, 100),
        metadata={
            "description": "instead of model and workload; a trace is projected as traced: "
            "no layout, interconnect, weight_precision, kv_precision, concurrency, stack or "
            "stack_options beside it"
        },
    )
    gpu = fields.String(required=True, metadata={"description": "GPU id or name, see /v1/gpus"})
    count = fields.Integer(
        load_default=EstimateRequest.count,
        validate=validate.Range(1, 4096),
        strict=True,
        metadata={"description": "GPUs, data parallel; throughput is for all of them"},
    )
    nvlink = StrictBoolean(
        load_default=None,
        allow_none=True,
        metadata={"description": "NVLink bridges fitted (cards that take them)"},
    )
    input_samples_per_s = fields.Float(
        load_default=None,
        allow_none=True,
        validate=validate.Range(min=0.001, max=1e9),  # steps divide by it
        metadata={"description": "samples/s per GPU the input pipeline can deliver"},
    )
    reference_gpu = fields.String(metadata={"description": "with trace_id: the traced GPU"})
    layout = fields.Nested(
        LayoutSchema,
        metadata={
            "description": "a parallel layout instead of plain data parallel (count is then "
            "its GPUs); see POST /v1/plans for every valid one"
        },
    )

    @post_load
    def _typed(self, data: dict[str, Any], **_: Any) -> EstimateRequest:
        return EstimateRequest(**data)


class IntervalSchema(Schema):
    low = fields.Float()
    high = fields.Float()


class ThroughputIntervalSchema(Schema):
    samples_per_s = fields.Nested(IntervalSchema, metadata={"description": "80%"})


class MemoryReportedSchema(Schema):
    allocated_peak_bytes = fields.Float(
        metadata={"description": "the step's tensors: torch.cuda.max_memory_allocated"}
    )
    reserved_bytes = fields.Float(
        metadata={"description": "what the caching allocator holds: max_memory_reserved"}
    )
    nvidia_smi_bytes = fields.Float(
        metadata={"description": "what nvidia-smi shows: the CUDA context and workspaces too"}
    )


class ThroughputSchema(Schema):
    samples_per_s = fields.Float(allow_none=True)
    tokens_per_s = fields.Float(allow_none=True)
    prefill_tokens_per_s = fields.Float()
    decode_tokens_per_s = fields.Float(allow_none=True)


def _seconds(description: str) -> fields.Float:
    return fields.Float(metadata={"description": description})


class BreakdownSchema(Schema):
    """Where one training step's time goes, in seconds."""

    tensor_s = _seconds("matmul-like work on tensor cores, at the learned efficiency")
    cuda_core_s = _seconds("matmul-like work where the math mode has no tensor cores")
    vector_s = _seconds("other arithmetic at the fp32 vector rate")
    memory_s = _seconds("bytes moved at the bandwidth the GPU's SMs can use")
    gpu_s = _seconds("the four above: the part a faster GPU shortens")
    optimizer_s = _seconds("the optimizer update's share of gpu_s (memory-bound)")
    launch_s = _seconds("kernel launches: no GPU shortens them")
    host_s = _seconds("the training loop's host time per step: no GPU shortens it")
    input_s = _seconds("the input pipeline's time per step (per sample): no GPU shortens it")
    single_gpu_step_s = _seconds("the step on one GPU alone")
    efficiency = fields.Float(
        metadata={"description": "ideal GPU time (each resource at its peak) over gpu_s"}
    )
    allreduce_s = _seconds("the gradient all-reduce (data parallel)")
    exposed_communication_s = _seconds("the part of it backward does not hide")
    sync_s = _seconds("per-step synchronisation of the replicas")
    input_wait_s = _seconds("time the GPUs wait on the input pipeline per step")


class EstimateSchema(Schema):
    gpu = fields.String()
    count = fields.Integer()
    step_time_s = fields.Float(metadata={"description": "one step (inference: the request)"})
    throughput = fields.Nested(ThroughputSchema, metadata={"description": "all GPUs together"})
    fits = fields.Boolean(
        metadata={"description": "the memory per GPU fits in the GPU's usable memory"}
    )
    memory_per_gpu_bytes = fields.Float()
    gpu_memory_bytes = fields.Float(
        metadata={"description": "the datasheet's memory (GPU memory is quoted in GiB)"}
    )
    usable_memory_bytes = fields.Float(
        metadata={"description": "what the driver leaves of it (98.5%)"}
    )
    memory_headroom = fields.Float(
        metadata={"description": "share of the usable memory left (negative: does not fit)"}
    )
    memory = fields.Nested(MemorySchema, metadata={"description": "per GPU, by what holds it"})
    bound = fields.String(
        metadata={
            "description": "what bounds the step (its largest part): compute, "
            "memory_bandwidth, kernel_launches, host, input or communication; from a trace "
            "also host_transfer"
        }
    )
    bound_part = fields.String(
        metadata={"description": "trace estimates: the largest part of the projected step"}
    )
    interval = fields.Nested(IntervalSchema, metadata={"description": "of step_time_s, 80%"})
    throughput_interval = fields.Nested(ThroughputIntervalSchema)
    time_to_train_s = fields.Float()
    time_to_train_interval = fields.Nested(IntervalSchema)
    latency_s = fields.Float()
    prefill_s = fields.Float(allow_none=True)
    decode_per_token_s = fields.Float(allow_none=True)
    precision = fields.String()
    math_mode = fields.String()
    breakdown = fields.Nested(BreakdownSchema)
    breakdown_us = fields.Dict(
        keys=fields.String(),
        values=fields.Float(),
        metadata={"description": "trace estimates: the projected parts, microseconds each"},
    )
    input_stall_s = fields.Float()
    known_workload = fields.String(
        allow_none=True,
        metadata={"description": "the benchmarked workload the estimate was fitted on"},
    )
    profile_id = fields.String(allow_none=True)
    trace_id = fields.String()
    reference_gpu = fields.String()
    assumptions = fields.List(fields.String())
    knowledge_version = fields.String()
    memory_reported = fields.Nested(
        MemoryReportedSchema,
        metadata={
            "description": "memory per GPU as each tool reports it: allocated_peak_bytes "
            "(torch.cuda.max_memory_allocated), reserved_bytes (max_memory_reserved: the "
            "caching allocator's fragmentation too) and nvidia_smi_bytes (the CUDA context "
            "too)"
        },
    )
    stack = fields.Nested(
        StackUsedSchema,
        metadata={
            "description": "the software stack assumed (named, else the default for the "
            "work), its properties and which the request overrode"
        },
    )
    layout = fields.Nested(
        LayoutSchema, metadata={"description": "with a layout: the layout estimated"}
    )
    layout_estimate = fields.Nested(
        PlannedLayoutSchema,
        metadata={
            "description": "with a layout: memory per GPU by part, step breakdown (compute, "
            "recomputation, tensor/context-parallel collectives, pipeline bubble, exposed "
            "data-parallel traffic), MFU and each link's traffic"
        },
    )
    inference = fields.Nested(
        InferenceEstimateSchema,
        metadata={
            "description": "serving a generative model: time_to_first_token_s, "
            "time_per_output_token_s, output_tokens_per_s at the concurrency (by default "
            "max_concurrency, the most the KV cache holds) on one tensor-parallel group, "
            "and, without a layout, the group's size on count GPUs (the fewest that hold "
            "the weights), data_parallel replicas and all_output_tokens_per_s"
        },
    )


@blp.route("/estimates")
class Estimates(MethodView):
    @blp.arguments(EstimateRequestSchema)
    @blp.response(200, EstimateSchema)
    @blp.problem(404)
    @blp.problem(422)
    @blp.problem(503)
    def post(self, body: EstimateRequest) -> Any:
        """Estimate step time, throughput, memory and the bound on a GPU (and n of them)"""
        st = state()
        gpu_filter(st.knowledge, body.gpu, location="json")
        service = st.layers.service(body.submitted_benchmarks)
        if body.trace_id:  # the cache keys on the request: the trace is its owner's
            check_traced(body)
            must_read(body.trace_id)
        compute = functools.partial(estimate_request, service, body, reader())
        return cached("estimate", answer_version(service), EstimateSchema, compute)


class ValidationReportSchema(Schema):
    knowledge_version = fields.String(metadata={"description": "the knowledge it was made on"})
    submitted_rows = fields.Integer(
        metadata={"description": "user-submitted benchmark rows the validated model fitted"}
    )
    submitted_rows_in_use = fields.Integer(
        metadata={
            "description": "submitted rows the estimates use now (the last retrain's; 0: "
            "the curated rows only)"
        }
    )
    made_at = fields.String()
    model = fields.Nested(
        StepModelSummarySchema, metadata={"description": "the fitted step model's parameters"}
    )
    single_gpu = fields.Nested(
        LeaveOneGpuOutSchema,
        metadata={"description": "leave-one-GPU-out, single-GPU rows, with the per-GPU table"},
    )
    forward_in_time = fields.Dict(
        keys=fields.String(),
        values=fields.Nested(ForwardInTimeSchema),
        metadata={
            "description": "by year Y: fitted on GPUs released before Y, predicting those "
            "released in Y or later"
        },
    )
    leave_one_architecture_out = fields.Nested(
        HeldOutErrorsSchema,
        metadata={
            "description": "each architecture's single-GPU rows predicted by a fit without it"
        },
    )
    multi_gpu = fields.Nested(
        MultiGpuValidationSchema,
        metadata={"description": "2-16 GPU rows, end to end, GPU held out"},
    )
    speedup_over_previous_flagship = fields.Nested(
        FlagshipSpeedupSchema,
        metadata={"description": "predicted against measured speed-up per workload and GPU"},
    )
    memory_fit = fields.Nested(
        MemoryFitCheckSchema,
        metadata={"description": "share of the stored configurations estimated to fit"},
    )
    interval = fields.Nested(
        IntervalCoverageSchema, metadata={"description": "coverage of the 80% interval"}
    )
    held_in = fields.Nested(
        HeldInSchema,
        metadata={"description": "the rows fitted on, predicted by the fit that saw them"},
    )
    input_ceilings = fields.Dict(
        keys=fields.String(),
        values=fields.Nested(DeliveredInputSchema),
        metadata={
            "description": "per benchmarked workload, what the stored hosts' input pipelines "
            "delivered"
        },
    )
    skipped = fields.List(
        fields.Nested(NotScoredRowSchema),
        metadata={"description": "benchmark rows the model could not use, with the reason"},
    )
    llm = fields.Nested(
        LlmValidationSchema,
        metadata={"description": "MLPerf LLM rows and the published tables (issue 11)"},
    )
    stacks = fields.Nested(
        StackValidationSchema,
        metadata={
            "description": "the named stacks on their maintainers' published runs, each "
            "predicted by a fit that left its publication out: per stack and kind (training "
            "throughput, peak memory, serving throughput and latency) the median and worst "
            "error, the worst rows with their cause, and the rows not scored"
        },
    )
    targets = fields.Dict(
        keys=fields.String(),
        values=fields.Nested(ValidationTargetSchema),
        metadata={
            "description": "per headline figure (TARGETS in "
            "service/engine/validating/validation.py): target, value, met"
        },
    )
    seconds = fields.Float()


@blp.route("/validation")
class Validation(MethodView):
    @blp.response(200, ValidationReportSchema)
    @blp.problem(404)
    def get(self) -> dict[str, Any]:
        """The last validation report (held-out GPUs, forward in time, architectures, memory)"""
        report = state().layers.service(True).report()
        if report is None:
            raise NotFound("validation report", "(none yet: run `rightsize validate`)", [])
        marker = state().layers.marker()
        return {
            **report,
            "submitted_rows": report.get("submitted_rows", 0),
            "submitted_rows_in_use": marker["submitted_rows"] if marker else 0,
        }

    @blp.needs_key("admin")
    @blp.response(202, JobAcceptedSchema)
    @blp.problem(503)
    def post(self) -> Any:
        """Queue a validation of the model in use (a worker runs it, for minutes)"""
        st = state()
        if st.redis is None:
            raise no_queue("validation", "rightsize validate")
        return accepted(jobs.submit_validate(st.redis, st.settings))
