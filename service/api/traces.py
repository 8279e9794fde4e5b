"""``/v1/traces``: upload a profiler trace of a sample run; analysis, projections, advice."""

from __future__ import annotations

from typing import IO, Any

from flask import request
from flask.views import MethodView
from marshmallow import Schema, fields, validate

from profiles.trace.read import CAPTURE_HINT
from profiles.trace.stream import TraceFormatError
from service import jobs
from service.api.base import Blueprint
from service.api.jobs import JobAcceptedSchema, accepted
from service.engine.traces import TraceOptions
from service.errors import ApiError, InvalidInput, NotFound, PayloadTooLarge
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
            }
        },
        "application/octet-stream": {"schema": {"type": "string", "format": "binary"}},
        "application/gzip": {"schema": {"type": "string", "format": "binary"}},
        "application/json": {"schema": {"type": "object"}},
    },
}


class TraceQuerySchema(Schema):
    reference_gpu = fields.String(
        metadata={"description": "GPU id of the machine traced (default: from deviceProperties)"}
    )
    step_marker = fields.String(
        metadata={
            "description": "name prefix of the spans that mark steps (default ProfilerStep#N)"
        }
    )
    precision = fields.String(
        validate=validate.OneOf(["fp32", "tf32", "bf16", "fp16", "fp8"]),
        metadata={"description": "what the run computed in"},
    )
    batch_size = fields.Integer(validate=validate.Range(min=1))
    profile_id = fields.String(
        metadata={
            "description": "profile of the traced model and workload (POST /v1/profiles), "
            "to match its FLOPs to the measured step"
        }
    )


class TraceFormatProblem(ApiError):
    status, slug, title = 422, "not-a-trace", "Unprocessable Content"


class TraceSchema(Schema):
    trace_id = fields.String()
    reference_gpu_id = fields.String(allow_none=True)
    analysis = fields.Dict(
        metadata={
            "description": "steps, GPU time by kind, idle by cause, "
            "kernels, FLOPs, memory (times in µs)"
        }
    )
    efficiency = fields.Dict(
        metadata={
            "description": "achieved TFLOPS (from recorded FLOPs or the attached profile) "
            "and their fraction of the reference GPU's peak"
        }
    )
    advice = fields.List(
        fields.Dict(), metadata={"description": "software fixes, predicted effect"}
    )
    options = fields.Dict()
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
        load_default=1,
        validate=validate.Range(1, 1024),
        metadata={"description": "GPUs per node on the target"},
    )
    reference_gpu = fields.String(metadata={"description": "override the trace's reference GPU"})


class ProjectionSchema(Schema):
    trace_id = fields.String()
    reference_gpu_id = fields.String()
    reference_step_time_us = fields.Float()
    projections = fields.List(fields.Dict())
    assumptions = fields.List(fields.String())
    knowledge_version = fields.String()


def _upload() -> tuple[IO[bytes], int | None]:
    limit = state().traces.limits.compressed_bytes
    if request.content_length is not None and request.content_length > limit:
        raise PayloadTooLarge(f"the upload is {request.content_length} bytes; the limit is {limit}")
    if request.mimetype == "multipart/form-data":
        upload = request.files.get("file")
        if upload is None:
            raise InvalidInput(
                "file", "a multipart upload needs the trace in the field 'file'", "form"
            )
        return upload.stream, request.content_length
    return request.stream, request.content_length


def _options(args: dict[str, Any]) -> TraceOptions:
    names = ("reference_gpu", "step_marker", "precision", "batch_size", "profile_id")
    return TraceOptions(**{k: args.get(k) for k in names})


def format_problem(error: TraceFormatError) -> ApiError:
    if error.kind == "too-large":
        return PayloadTooLarge(str(error))
    return TraceFormatProblem(f"{error}. {CAPTURE_HINT}", kind=error.kind)


@blp.route("")
class Traces(MethodView):
    @blp.needs_key("write")
    @blp.arguments(TraceQuerySchema, location="query")
    @blp.doc(requestBody=UPLOAD_DOC)
    @blp.response(201, TraceSchema)
    @blp.alt_response(202, schema=JobAcceptedSchema, description="queued for a worker")
    @blp.problem(413)
    @blp.problem(422)
    def post(self, args: dict[str, Any]) -> Any:
        """Upload a trace; small ones are analysed at once, large ones by a worker (202)"""
        app = state()
        raw, length = _upload()
        options = _options(args)
        if (
            app.redis is not None
            and length
            and length > app.settings["RIGHTSIZE_TRACE_ASYNC_BYTES"]
        ):
            data = raw.read(app.traces.limits.compressed_bytes + 1)
            if len(data) > app.traces.limits.compressed_bytes:
                raise PayloadTooLarge("the upload exceeds the size limit")
            job_id = jobs.submit(
                app.redis,
                app.settings["RIGHTSIZE_KEY_PREFIX"],
                data,
                options,
                app.traces.ttl_s,
                app.traces.limits,
            )
            return accepted(job_id)  # not the 201 schema
        try:
            record = app.traces.ingest(raw, options)
        except TraceFormatError as exc:
            raise format_problem(exc) from None
        return app.traces.view(record), 201, {"Location": f"/v1/traces/{record['trace_id']}"}


@blp.route("/<string:trace_id>")
class TraceById(MethodView):
    @blp.response(200, TraceSchema)
    @blp.problem(404)
    def get(self, trace_id: str) -> dict[str, Any]:
        """A trace's analysis, with the reference GPU and software advice"""
        record = state().traces.get(trace_id)
        if record is None:
            raise NotFound("trace", trace_id, [])
        return state().traces.view(record)


@blp.route("/<string:trace_id>/projections")
class TraceProjections(MethodView):
    @blp.arguments(ProjectionRequestSchema)
    @blp.response(200, ProjectionSchema)
    @blp.problem(404)
    @blp.problem(422)
    def post(self, body: dict[str, Any], trace_id: str) -> dict[str, Any]:
        """Project the traced step onto other GPUs (each part scaled by what bounds it)"""
        traces = state().traces
        record = traces.get(trace_id)
        if record is None:
            raise NotFound("trace", trace_id, [])
        knowledge = state().knowledge
        for name in body["gpus"]:
            if knowledge.resolve_gpu(name) is None:
                close = ", ".join(knowledge.gpu_index.suggest(name)) or "none"
                raise InvalidInput("gpus", f"unknown GPU '{name}' (close matches: {close})")
        return traces.projections(record, body["gpus"], body["count"], body.get("reference_gpu"))
