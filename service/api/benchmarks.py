"""``/v1/benchmarks``: the stored measurements the estimates are learned from."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from marshmallow import fields, validate

from knowledge.schemas import BENCHMARK_KINDS
from service.api.base import Blueprint
from service.api.lookups import gpu_filter, workload_filter
from service.api.pagination import PageQuerySchema, page_schema, paginate
from service.api.schemas import BenchmarkSchema
from service.state import state

blp = Blueprint(
    "benchmarks", __name__, url_prefix="/v1/benchmarks", description="Stored benchmark results"
)


class BenchmarkQuerySchema(PageQuerySchema):
    model = fields.String(
        metadata={"description": "workload id, model catalog name or source alias (resnet50)"}
    )
    gpu = fields.String(metadata={"description": "GPU id or any of its names"})
    precision = fields.String(metadata={"description": "fp16, fp32, ... as the source labels it"})
    kind = fields.String(validate=validate.OneOf(BENCHMARK_KINDS))
    suite = fields.String(metadata={"description": "e.g. lambda-v1, mlperf-training-v4.0"})
    gpu_count = fields.Integer(validate=validate.Range(min=1))


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
            for b in knowledge.benchmarks
            if (workloads is None or b.workload in workloads)
            and (gpu_id is None or b.gpu_id == gpu_id)
            and all(
                getattr(b, k) == args[k]
                for k in ("precision", "kind", "suite", "gpu_count")
                if k in args
            )
        ]
        return paginate(rows, args, knowledge.version)
