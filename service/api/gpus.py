"""``/v1/gpus``: the GPU catalog."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from flask.views import MethodView
from marshmallow import fields, validate

from knowledge.records import PRECISIONS, Gpu
from knowledge.schemas import FORM_FACTORS, SEGMENTS, VENDORS
from service.api.answers import memoised
from service.api.base import Blueprint
from service.api.pagination import PageQuerySchema, page_schema, paginate
from service.api.schemas import GpuDetailSchema, GpuSchema
from service.api.sorting import sort_field, sorted_by
from service.state import state

blp = Blueprint("gpus", __name__, url_prefix="/v1/gpus", description="The GPU catalog")

GPU_SORT_KEYS = (
    "id",
    "name",
    "vendor",
    "architecture",
    "release_year",
    "memory_gb",
    "memory_bandwidth_gb_per_s",
    "fp32_tflops",
    "tf32_tflops",
    "bf16_tflops",
    "fp16_tflops",
    "fp8_tflops",
    "int8_tops",
    "tdp_w",
    "price_usd",
    "nvlink_bandwidth_gb_per_s",
)


class GpuQuerySchema(PageQuerySchema):
    vendor = fields.String(validate=validate.OneOf(VENDORS))
    architecture = fields.String(
        validate=validate.Length(max=100), metadata={"description": "e.g. hopper, ampere, cdna3"}
    )
    segment = fields.String(validate=validate.OneOf(SEGMENTS))
    form_factor = fields.String(validate=validate.OneOf(FORM_FACTORS))
    min_memory_gb = fields.Float(
        validate=validate.Range(min=0), metadata={"description": "at least this much memory, GB"}
    )
    precision = fields.String(
        validate=validate.OneOf(PRECISIONS),
        metadata={"description": "only GPUs with a peak rate at this precision"},
    )
    sort = sort_field(GPU_SORT_KEYS, "id")


def _matches(gpu: Gpu, args: dict[str, Any]) -> bool:
    return (
        all(getattr(gpu, k) == args[k] for k in ("vendor", "segment", "form_factor") if k in args)
        and ("architecture" not in args or gpu.architecture == args["architecture"].lower())
        and gpu.memory_gb >= args.get("min_memory_gb", 0)
        and ("precision" not in args or gpu.peak_tflops(args["precision"]) is not None)
    )


@blp.route("")
class Gpus(MethodView):
    @memoised
    @blp.arguments(GpuQuerySchema, location="query")
    @blp.response(200, page_schema(GpuSchema, "GpuPage"))
    @blp.problem(422)
    def get(self, args: dict[str, Any]) -> dict[str, Any]:
        """List GPUs, filtered and sorted (ties broken by id), a page at a time"""
        knowledge = state().knowledge
        gpus = [g for g in sorted(knowledge.gpus.values(), key=lambda g: g.id) if _matches(g, args)]
        return paginate(sorted_by(gpus, args["sort"]), args, knowledge.version)


@blp.route("/<string:gpu_id>")
class GpuById(MethodView):
    @memoised
    @blp.response(200, GpuDetailSchema)
    @blp.problem(404)
    def get(self, gpu_id: str) -> dict[str, Any]:
        """One GPU, by id or by any of its names (404 lists close matches)"""
        knowledge = state().knowledge
        gpu = knowledge.gpu(gpu_id)
        return {**asdict(gpu), "precisions": gpu.precisions, "knowledge_version": knowledge.version}
