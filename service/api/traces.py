"""``/v1/traces``: upload a profiler trace of a sample run; analysis, projections, advice.

A trace is the uploading key's: that key and the administrators read it, project it and
recommend from it; anyone else (a request without a key too) is told there is none (404).
"""

from __future__ import annotations

from typing import IO, Any

from flask import request
from flask.views import MethodView
from marshmallow import Schema, fields, post_load, validate

from profiles.trace.read import CAPTURE_HINT
from profiles.trace.stream import TraceFormatError
from service import jobs
from service.api.base import Blueprint
from service.api.jobs import JobAcceptedSchema, accepted
from service.api.trace_schemas import (
    GpuProjectionSchema,
    TraceAdviceSchema,
    TraceAnalysisSchema,
    TraceEfficiencySchema,
)
from service.engine.estimating.traces import TraceOptions
from service.engine.requests import ProjectionRequest
from service.errors import ApiError, InvalidInput, NotFound, PayloadTooLarge, TooManyRequests
from service.infra.local_jobs import OwnerBusy
from service.infra.uploads import Upload, job_payload
from service.security import caller, reader
from service.state import state

blp = Blueprint("traces", __name__, url_prefix="/v1/traces", description="Traced sample runs")

UPLOAD_DOC = {
    "description": "A Kineto / Chrome-trace JSON file from torch.profiler, plain or gzipped: "
    "as multipart/form-data (field `file`) or as the raw body.",
    "content": {
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "properties": {"file": {"type": "string", "format": "binary"}},
                "required": ["file"],
            }
        },
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        "application/gzip": {"schema": {"type": "string", "format": "binary"}},
        "application/json": {"schema": {"type": "object"}},
    },
}


class TraceQuerySchema(Schema):
    reference_gpu = fields.String(
        validate=validate.Length(max=100),
        metadata={"description": "GPU id of the machine traced (default: from deviceProperties)"},
    )
    step_marker = fields.String(
        validate=validate.Length(max=200),
        metadata={
            "description": "name prefix of the spans that mark steps (default ProfilerStep#N)"
        },
    )
    precision = fields.String(
        validate=validate.OneOf(["fp32", "tf32", "bf16", "fp16", "fp8"]),
        metadata={"description": "what the run computed in"},
    )
    batch_size = fields.Integer(validate=validate.Range(1, 100_000_000))
    profile_id = fields.String(
        validate=validate.Length(max=100),
        metadata={
            "description": "profile of the traced model and workload (POST /v1/profiles), "
            "to match its FLOPs to the measured step"
        },
    )


class TraceFormatProblem(ApiError):
    status, slug, title = 422, "not-a-trace", "Unprocessable Content"


class TraceSchema(Schema):
    trace_id = fields.String()
    reference_gpu_id = fields.String(allow_none=True)
    analysis = fields.Nested(
        TraceAnalysisSchema,
        metadata={
            "description": "steps, GPU time by kind, idle by cause, "
            "kernels, FLOPs, memory (times in µs)"
        },
    )
    efficiency = fields.Nested(
        TraceEfficiencySchema,
        metadata={
            "description": "achieved TFLOPS (from recorded FLOPs or the attached profile) "
            "and their fraction of the reference GPU's peak"
        },
    )
    advice = fields.List(
        fields.Nested(TraceAdviceSchema),
        metadata={"description": "software fixes, predicted effect"},
    )
    options = fields.Dict(
        metadata={
            "description": "the upload's options, and owner: the id of the key that uploaded "
            "it (a trace is read by that key and the administrators alone)"
        }
    )
    notes = fields.List(fields.String())
    parse_seconds = fields.Float()


class ProjectionRequestSchema(Schema):
    gpus = fields.List(
        fields.String(),
        required=True,
        validate=validate.Length(1, 100),
        metadata={"description": "target GPU ids or names"},
    )
    count = fields.Integer(
        load_default=ProjectionRequest.count,
        validate=validate.Range(1, 1024),
        metadata={"description": "GPUs per node on the target"},
    )
    reference_gpu = fields.String(metadata={"description": "override the trace's reference GPU"})

    @post_load
    def _typed(self, data: dict[str, Any], **_: Any) -> ProjectionRequest:
        return ProjectionRequest(**{**data, "gpus": tuple(data["gpus"])})


class ProjectionSchema(Schema):
    trace_id = fields.String()
    reference_gpu_id = fields.String()
    reference_step_time_us = fields.Float()
    projections = fields.List(
        fields.Nested(GpuProjectionSchema),
        metadata={"description": "the traced step on each target GPU, in the order asked"},
    )
    assumptions = fields.List(fields.String())
    knowledge_version = fields.String()


def _upload() -> Upload:
    """The upload, whole (a multipart form's ``file``, else the body), within the size
    limit whether it states its length or comes chunked (413 beyond)."""
    traces = state().traces
    limit = traces.limits.compressed_bytes
    if request.mimetype == "multipart/form-data":
        source = request.files.get("file")
        if source is None:
            raise InvalidInput(
                "file", "a multipart upload needs the trace in the field 'file'", "form"
            )
        stream: IO[bytes] = source.stream
    else:
        stream = request.stream
    try:
        return Upload.read(stream, limit, traces.bounds.inline_bytes)
    except TraceFormatError as exc:
        raise format_problem(exc) from None
    finally:  # werkzeug spools a large form field to a file of its own: closed once copied
        stream.close()


def _options(args: dict[str, Any]) -> TraceOptions:
    """The upload's options, with its owner: the key that sent it (an upload needs one)."""
    names = ("reference_gpu", "step_marker", "precision", "batch_size", "profile_id")
    key = caller()
    return TraceOptions(**{k: args.get(k) for k in names}, owner=key.key_id if key else None)


def must_read(trace_id: str) -> None:
    """404 unless the caller may read the trace ``trace_id``: checked before an answer
    computed from it is looked up in the cache, which keys on the request alone."""
    if state().traces.get(trace_id, reader()) is None:
        raise NotFound("trace", trace_id, [])


def format_problem(error: TraceFormatError) -> ApiError:
    if error.kind == "too-large":
        return PayloadTooLarge(str(error))
    return TraceFormatProblem(f"{error}. {CAPTURE_HINT}", kind=error.kind)


@blp.route("")
class Traces(MethodView):
    @blp.needs_key("write")
    @blp.body(None, "RIGHTSIZE_TRACE_MAX_BYTES")
    @blp.arguments(TraceQuerySchema, location="query")
    @blp.doc(requestBody=UPLOAD_DOC)
    @blp.response(201, TraceSchema)
    @blp.alt_response(202, schema=JobAcceptedSchema, description="queued for a worker")
    @blp.problem(422)
    def post(self, args: dict[str, Any]) -> Any:
        """Upload a trace; small ones are analysed at once, large ones in the background (202)"""
        app = state()
        options = _options(args)
        upload = _upload()
        try:
            if upload.within(app.traces.bounds.inline_bytes, app.traces.limits):
                with upload.stream() as raw:
                    record = app.traces.ingest(raw, options)
                return (
                    app.traces.view(record),
                    201,
                    {"Location": f"/v1/traces/{record['trace_id']}"},
                )
            if app.redis is not None:  # the queue (503 while Redis is away)
                share = app.settings["RIGHTSIZE_TRACE_JOBS_PER_KEY"]
                with upload.stream() as raw:
                    try:
                        job = jobs.submit(app.redis, app.settings["RIGHTSIZE_KEY_PREFIX"], raw,
                                          options, app.traces.ttl_s, app.traces.limits,
                                          app.traces.bounds, share)  # fmt: skip
                    except jobs.OwnerBusy as exc:
                        raise TooManyRequests(str(exc), retry_after_s=30) from None
                return accepted(job)
            assert app.local_jobs is not None  # the embedded set-up has its own jobs
            kept = upload.keep(app.local_jobs.uploads)
            try:
                job = app.local_jobs.submit("trace", job_payload(kept, options), _owner())
            except OwnerBusy as exc:
                kept.unlink(missing_ok=True)
                raise TooManyRequests(str(exc), retry_after_s=30) from None
            return accepted(job)
        except TraceFormatError as exc:
            raise format_problem(exc) from None
        finally:
            upload.discard()


def _owner() -> str:
    """Who a job is kept for: the key that sent it (an upload needs one)."""
    key = caller()
    return key.key_id if key else "-"


@blp.route("/<string:trace_id>")
class TraceById(MethodView):
    @blp.response(200, TraceSchema)
    @blp.problem(404)
    @blp.problem(503)
    def get(self, trace_id: str) -> dict[str, Any]:
        """A trace's analysis, with the reference GPU and software advice"""
        record = state().traces.get(trace_id, reader())
        if record is None:
            raise NotFound("trace", trace_id, [])
        return state().traces.view(record)


@blp.route("/<string:trace_id>/projections")
class TraceProjections(MethodView):
    @blp.arguments(ProjectionRequestSchema)
    @blp.response(200, ProjectionSchema)
    @blp.problem(404)
    @blp.problem(422)
    @blp.problem(503)
    def post(self, body: ProjectionRequest, trace_id: str) -> dict[str, Any]:
        """Project the traced step onto other GPUs (each part scaled by what bounds it)"""
        traces = state().traces
        record = traces.get(trace_id, reader())
        if record is None:
            raise NotFound("trace", trace_id, [])
        knowledge = state().knowledge
        for name in body.gpus:
            if knowledge.resolve_gpu(name) is None:
                close = ", ".join(knowledge.gpu_index.suggest(name)) or "none"
                raise InvalidInput("gpus", f"unknown GPU '{name}' (close matches: {close})")
        return traces.projections(record, list(body.gpus), body.count, body.reference_gpu)
