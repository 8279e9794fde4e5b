"""``/v1/benchmarks``: the stored measurements the estimates are learned from, the
rows users submit (a separate, labelled layer), and retraining on them.

A submitted row is its sender's: listed and read by that key and the administrators, and
by everyone when the batch was sent with ``share`` (then without ``submitted_by``); a
batch another key may not see is not found (404). A retrain fits every row."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from flask.views import MethodView
from marshmallow import Schema, ValidationError, fields, post_load, pre_load, validate

from knowledge.benchmark_schemas import SubmittedRowSchema
from knowledge.records import Benchmark
from knowledge.schemas import BENCHMARK_KINDS
from knowledge.submitted import labelled
from service import jobs
from service.api.base import Blueprint, StrictBoolean
from service.api.jobs import JobAcceptedSchema, accepted, no_queue
from service.api.lookups import gpu_filter, workload_filter
from service.api.pagination import PageQuerySchema, page_schema, paginate
from service.api.schemas import BenchmarkSchema
from service.errors import InvalidInput, NotFound, RejectedRows, TooManyRequests
from service.security import caller, reader
from service.state import state
from service.submissions import MAX_ROWS, OverQuota, RejectedBatch

blp = Blueprint(
    "benchmarks", __name__, url_prefix="/v1/benchmarks", description="Stored benchmark results"
)


class BenchmarkQuerySchema(PageQuerySchema):
    model = fields.String(
        validate=validate.Length(1, 100),
        metadata={"description": "workload id, model catalog name or source alias (resnet50)"},
    )
    gpu = fields.String(
        validate=validate.Length(1, 100), metadata={"description": "GPU id or any of its names"}
    )
    precision = fields.String(
        validate=validate.Length(max=100),
        metadata={"description": "fp16, fp32, ... as the source labels it"},
    )
    kind = fields.String(validate=validate.OneOf(BENCHMARK_KINDS))
    suite = fields.String(
        validate=validate.Length(max=100),
        metadata={"description": "e.g. lambda-v1, mlperf-training-v4.0"},
    )
    gpu_count = fields.Integer(validate=validate.Range(1, 100_000))
    layer = fields.String(
        load_default="all",
        validate=validate.OneOf(["all", "curated", "submitted"]),
        metadata={
            "description": "curated (knowledge/), submitted (POST /v1/benchmarks: the "
            "caller's own rows and those shared), all"
        },
    )


class SubmittedRowRequestSchema(SubmittedRowSchema):
    """A row as submitted; ``trace_id`` fills the GPU, batch and throughput from a stored
    trace of one GPU (its reference GPU, the traced batch over the median step)."""

    trace_id = fields.String(
        load_only=True,
        metadata={"description": "a stored trace (POST /v1/traces) to take the row from"},
    )


class _Rows(fields.List):
    """A list documented as rows of :class:`SubmittedRowRequestSchema` but loaded as sent:
    the handler checks every row itself (:func:`knowledge.submitted.check_rows`), so that
    one answer names every fault of every row, the GPU and workload links included."""

    def _deserialize(self, value: Any, attr: Any, data: Any, **kwargs: Any) -> Any:
        if not isinstance(value, list):
            raise ValidationError("Not a valid list.")
        return value


@dataclass(frozen=True)
class RetrainRequest:
    """``POST /v1/benchmarks/retrain``'s body, typed."""

    validate_after: bool = False


@dataclass(frozen=True)
class BenchmarkBatch:
    """``POST /v1/benchmarks``'s body, typed: rows as the knowledge's row schema loaded
    them (records of the submitted table), and whether every caller may list them."""

    rows: list[dict[str, Any]]
    share: bool = False


class BenchmarkBatchSchema(Schema):
    rows = _Rows(
        fields.Nested(SubmittedRowRequestSchema),
        required=True,
        validate=validate.Length(1, MAX_ROWS),
        metadata={"description": "training-throughput rows; one row may also be sent alone"},
    )
    share = StrictBoolean(
        load_default=BenchmarkBatch.share,
        metadata={
            "description": "list the rows for every caller (without who sent them); by "
            "default only this key and the administrators see them. Either way the next "
            "retrain fits them"
        },
    )

    @pre_load
    def _one_row(self, data: Any, **_: Any) -> Any:
        if isinstance(data, dict) and "rows" not in data:
            row = {k: v for k, v in data.items() if k != "share"}
            data = {"rows": [row], **({"share": data["share"]} if "share" in data else {})}
        if isinstance(data, dict) and isinstance(data["rows"], list):
            data = {**data, "rows": [_from_trace(r, i) for i, r in enumerate(data["rows"])]}
        return data

    @post_load
    def _typed(self, data: dict[str, Any], **_: Any) -> BenchmarkBatch:
        return BenchmarkBatch(**data)


class StoredRowSchema(Schema):
    id = fields.String()
    batch_id = fields.String()
    submitted_by = fields.String(
        metadata={
            "description": "id of the API key that sent it (shown to that key and the "
            "administrators alone)"
        }
    )
    submitted_at = fields.String()
    shared = fields.Boolean(metadata={"description": "listed for every caller (share)"})
    row = fields.Dict()


class BatchSchema(Schema):
    batch_id = fields.String()
    rows = fields.List(fields.Nested(StoredRowSchema))
    used = fields.String(
        metadata={"description": "when the rows reach the estimates: on the next retrain"}
    )


class RetrainRequestSchema(Schema):
    validate_after = StrictBoolean(
        load_default=RetrainRequest.validate_after,
        metadata={"description": "also run the validation (minutes) on the retrained model"},
    )

    @post_load
    def _typed(self, data: dict[str, Any], **_: Any) -> RetrainRequest:
        return RetrainRequest(**data)


TRACE_PRECISION = {"fp32": "fp32", "tf32": "fp32", "bf16": "fp16", "fp16": "fp16", "fp8": "fp16"}


def _from_trace(row: Any, index: int) -> Any:
    """A row naming ``trace_id``, completed from the stored trace's analysis."""
    if not isinstance(row, dict) or "trace_id" not in row:
        return row
    trace_id = str(row["trace_id"])
    st = state()
    record = st.traces.get(trace_id, reader())
    if record is None:
        raise NotFound("trace", trace_id, [])
    field = f"rows.{index}.trace_id"
    ref = st.traces.reference(record, row.get("gpu"))
    analysis, options = record["analysis"], record["options"]
    batch = row.get("batch_size_per_gpu") or options.get("batch_size")
    step_us = analysis.get("step_time_us")
    if ref is None or not batch or not step_us:
        missing = "its GPU (gpu)" if ref is None else "the batch (batch_size_per_gpu)"
        missing = missing if step_us else "steps (no ProfilerStep spans)"
        raise InvalidInput(field, f"the trace does not give {missing}", value=trace_id)
    derived = {
        "gpu": ref.id,
        "gpu_count": 1,
        "batch_size_per_gpu": batch,
        "throughput": batch * 1e6 / step_us,
        "throughput_unit": "samples/s",
        "precision": TRACE_PRECISION.get(options.get("precision") or "", "fp32"),
        "system": analysis.get("device_name") or ref.name,
        "source": f"trace {trace_id} (POST /v1/traces)",
        "as_of": dt.date.today().isoformat(),
    }
    return {**derived, **{k: v for k, v in row.items() if k != "trace_id"}}


def _rows(layer: str) -> list[Benchmark]:
    """The layer's rows: of the submitted ones, those the caller may see."""
    st = state()
    curated = st.knowledge.benchmarks if layer != "submitted" else []
    if layer == "curated":
        return list(curated)
    return [*curated, *labelled(st.submissions.visible(st.knowledge, reader()))]


@blp.route("")
class Benchmarks(MethodView):
    @blp.arguments(BenchmarkQuerySchema, location="query")
    @blp.response(200, page_schema(BenchmarkSchema, "BenchmarkPage"))
    @blp.problem(422)
    def get(self, args: dict[str, Any]) -> dict[str, Any]:
        """List stored benchmark rows, filtered, in stored order, a page at a time"""
        knowledge = state().knowledge
        workloads = workload_filter(knowledge, args["model"]) if "model" in args else None
        gpu_id = gpu_filter(knowledge, args["gpu"]) if "gpu" in args else None
        rows = [
            b
            for b in _rows(args["layer"])
            if (workloads is None or b.workload in workloads)
            and (gpu_id is None or b.gpu_id == gpu_id)
            and all(
                getattr(b, k) == args[k]
                for k in ("precision", "kind", "suite", "gpu_count")
                if k in args
            )
        ]
        return paginate(rows, args, knowledge.version)

    @blp.needs_key("write")
    @blp.arguments(BenchmarkBatchSchema)
    @blp.response(201, BatchSchema)
    @blp.problem(404)
    @blp.problem(422)
    @blp.problem(507)
    def post(self, body: BenchmarkBatch) -> Any:
        """Submit measured training throughputs (one row or a batch): all stored, or none"""
        st = state()
        key = caller()
        try:
            stored = st.submissions.submit(
                st.knowledge, body.rows, key.key_id if key else "-", body.share
            )
        except RejectedBatch as exc:
            raise RejectedRows(exc.errors, "json", "nothing was stored") from None
        except OverQuota as exc:
            raise TooManyRequests(str(exc), retry_after_s=exc.retry_after_s) from None
        batch = stored[0].batch_id
        out = {
            "batch_id": batch,
            "rows": [s.public() for s in stored],
            "used": "from the next retrain (POST /v1/benchmarks/retrain or rightsize retrain)",
        }
        return out, 201, {"Location": f"/v1/benchmarks/batches/{batch}"}


@blp.route("/batches/<string:batch_id>")
class Batch(MethodView):
    @blp.response(200, BatchSchema)
    @blp.problem(404)
    def get(self, batch_id: str) -> dict[str, Any]:
        """A submitted batch as stored: its rows, who sent them and when"""
        who = reader()
        batch = [s for s in state().submissions.batch(batch_id) if s.visible_to(who)]
        stored = [s.seen_by(who) for s in batch]
        if not stored:  # another key's, unshared: as if there were none
            raise NotFound("benchmark batch", batch_id, [])
        trained = state().submissions.trained() or {}
        used = set(trained.get("row_ids") or [])
        fitted = all(s["id"] in used for s in stored)
        return {
            "batch_id": batch_id,
            "rows": stored,
            "used": f"since the retrain of {trained['trained_at']}"
            if fitted
            else "from the next retrain",
        }


@blp.route("/retrain")
class Retrain(MethodView):
    @blp.needs_key("admin")
    @blp.arguments(RetrainRequestSchema)
    @blp.response(202, JobAcceptedSchema)
    @blp.problem(503)
    def post(self, body: RetrainRequest) -> Any:
        """Queue a retrain on the curated rows and every submitted one, shared or not"""
        st = state()
        if st.redis is None:
            raise no_queue("retraining", "rightsize retrain")
        return accepted(jobs.submit_retrain(st.redis, st.settings, body.validate_after))
