"""Schemas for the stored benchmark tables; each row becomes a :class:`records.Benchmark`.

The ``gpu`` column keeps the name as the source wrote it; the loader resolves it through
the GPU aliases and reports the rows it cannot resolve.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

from marshmallow import Schema, ValidationError, fields, post_load, validate, validates_schema

from knowledge import records

_POSITIVE = validate.Range(min=0, min_inclusive=False)


def _positive(**kw: Any) -> fields.Float:
    return fields.Float(validate=_POSITIVE, **kw)


class _BenchmarkRowSchema(Schema):
    """Columns shared by every benchmark table."""

    KIND: ClassVar[str]
    DETAILS: ClassVar[tuple[str, ...]] = ()

    gpu = fields.String(required=True, validate=validate.Length(min=1))
    gpu_count = fields.Integer(required=True, validate=validate.Range(1, 100000))
    workload = fields.String(required=True)
    source = fields.String(required=True, validate=validate.Length(min=3))
    as_of = fields.Date(required=True)
    note = fields.String(required=True, allow_none=True)

    def _details(self, data: dict[str, Any]) -> dict[str, Any]:
        return {k: data[k] for k in self.DETAILS if data.get(k) is not None}


class LambdaRowSchema(_BenchmarkRowSchema):
    KIND = "training-throughput"
    DETAILS = ("nvlink", "batch_size_global", "watt_total", "price_usd")

    suite = fields.String(
        required=True,
        validate=validate.OneOf(["lambda-v0", "lambda-v1", "lambda-v2", "lambda-v2-host"]),
    )
    nvlink = fields.Boolean(required=True, allow_none=True)
    precision = fields.String(required=True, validate=validate.OneOf(["fp16", "fp32"]))
    batch_size_global = fields.Integer(required=True, allow_none=True, validate=_POSITIVE)
    batch_size_per_gpu = _positive(required=True, allow_none=True)
    throughput = _positive(required=True)
    throughput_unit = fields.String(required=True, validate=validate.Length(min=1))
    system = fields.String(required=True)
    watt_total = _positive(required=True, allow_none=True)
    price_usd = _positive(required=True, allow_none=True)

    @validates_schema
    def _batch(self, data: dict[str, Any], **_: Any) -> None:
        if data["batch_size_per_gpu"] is None and data["suite"] != "lambda-v2-host":
            raise ValidationError("required outside the lambda-v2-host suite", "batch_size_per_gpu")
        glob, per = data["batch_size_global"], data["batch_size_per_gpu"]
        if None not in (glob, per) and abs(glob - per * data["gpu_count"]) > 1e-6:
            raise ValidationError("must be batch_size_global / gpu_count", "batch_size_per_gpu")

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.Benchmark:
        return records.Benchmark(
            kind=self.KIND,
            suite=data["suite"],
            workload=data["workload"],
            gpu=data["gpu"],
            gpu_id=None,
            gpu_count=data["gpu_count"],
            precision=data["precision"],
            batch_size_per_gpu=data["batch_size_per_gpu"],
            metric="throughput",
            value=data["throughput"],
            unit=data["throughput_unit"],
            system=data["system"],
            source=data["source"],
            as_of=data["as_of"],
            note=data["note"],
            details=self._details(data),
        )


class MlperfTrainingRowSchema(_BenchmarkRowSchema):
    KIND = "time-to-train"
    DETAILS = (
        "division",
        "availability",
        "submitter",
        "nodes",
        "framework",
        "global_batch_size",
        "samples_to_converge",
    )

    round = fields.String(required=True, validate=validate.Regexp(r"^v\d+\.\d+$"))
    division = fields.String(required=True, validate=validate.OneOf(["closed", "open"]))
    availability = fields.String(required=True)
    submitter = fields.String(required=True)
    system = fields.String(required=True)
    nodes = fields.Integer(required=True, validate=validate.Range(1, 100000))
    framework = fields.String(required=True, allow_none=True)
    time_to_train_minutes = _positive(required=True)
    global_batch_size = fields.Integer(required=True, allow_none=True, validate=_POSITIVE)
    samples_to_converge = _positive(required=True, allow_none=True)

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.Benchmark:
        gbs = data["global_batch_size"]
        return records.Benchmark(
            kind=self.KIND,
            suite=f"mlperf-training-{data['round']}",
            workload=data["workload"],
            gpu=data["gpu"],
            gpu_id=None,
            gpu_count=data["gpu_count"],
            precision=None,
            batch_size_per_gpu=gbs / data["gpu_count"] if gbs else None,
            metric="time_to_train",
            value=data["time_to_train_minutes"],
            unit="minutes",
            system=data["system"],
            source=data["source"],
            as_of=data["as_of"],
            note=data["note"],
            details=self._details(data),
        )


class MlperfInferenceRowSchema(_BenchmarkRowSchema):
    KIND = "inference-throughput"
    DETAILS = ("submitter", "scenario", "software", "accuracy")

    round = fields.String(required=True, validate=validate.Regexp(r"^v\d+\.\d+$"))
    submitter = fields.String(required=True)
    system = fields.String(required=True)
    scenario = fields.String(required=True, validate=validate.OneOf(["Offline", "Server"]))
    accuracy = fields.String(load_default=None, allow_none=True)
    throughput = _positive(required=True)
    throughput_unit = fields.String(required=True, validate=validate.Length(min=1))
    software = fields.String(required=True, allow_none=True)

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.Benchmark:
        return records.Benchmark(
            kind=self.KIND,
            suite=f"mlperf-inference-{data['round']}",
            workload=data["workload"],
            gpu=data["gpu"],
            gpu_id=None,
            gpu_count=data["gpu_count"],
            precision=None,
            batch_size_per_gpu=None,
            metric="throughput",
            value=data["throughput"],
            unit=data["throughput_unit"],
            system=data["system"],
            source=data["source"],
            as_of=data["as_of"],
            note=data["note"],
            details=self._details(data),
        )


class LlmOpRowSchema(_BenchmarkRowSchema):
    KIND = "operator-timing"
    DETAILS = ("model", "op", "num_tokens", "tensor_parallel", "mean_ms", "std_ms", "dtype")

    gpu_count = fields.Integer(load_default=1, validate=validate.Range(1, 1))
    model = fields.String(required=True)
    op = fields.String(required=True)
    num_tokens = fields.Integer(required=True, validate=_POSITIVE)
    tensor_parallel = fields.Integer(required=True, validate=validate.OneOf([1, 2, 4, 8]))
    median_ms = _positive(required=True)
    mean_ms = _positive(required=True)
    std_ms = fields.Float(required=True, validate=validate.Range(min=0))
    dtype = fields.String(required=True, allow_none=True)

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.Benchmark:
        return records.Benchmark(
            kind=self.KIND,
            suite="vidur",
            workload=data["workload"],
            gpu=data["gpu"],
            gpu_id=None,
            gpu_count=1,
            precision=data["dtype"],
            batch_size_per_gpu=None,
            metric="op_time",
            value=data["median_ms"],
            unit="ms",
            system=f"vidur {data['model']} {data['op']}",
            source=data["source"],
            as_of=data["as_of"],
            note=data["note"],
            details=self._details(data),
        )


BENCHMARK_TABLES: dict[str, type[_BenchmarkRowSchema]] = {
    "benchmarks/lambda.csv": LambdaRowSchema,
    "benchmarks/mlperf_training.csv": MlperfTrainingRowSchema,
    "benchmarks/mlperf_inference.csv": MlperfInferenceRowSchema,
    "benchmarks/llm_ops.csv": LlmOpRowSchema,
}


SUBMITTED_SUITE = "submitted"


class _Whole(fields.Integer):
    """An integer that refuses a fractional number (``Integer`` turns 2.5 into 2)."""

    def _validated(self, value: Any) -> int:
        if isinstance(value, float) and math.isfinite(value) and not value.is_integer():
            raise self.make_error("invalid", input=value)
        return super()._validated(value)


class SubmittedRowSchema(LambdaRowSchema):
    """A training-throughput measurement a user submits (``POST /v1/benchmarks``): the
    columns and checks of Lambda's table, which is what the performance model learns
    from, with the suite fixed and the columns only Lambda publishes optional."""

    suite = fields.String(load_default=SUBMITTED_SUITE, validate=validate.Equal(SUBMITTED_SUITE))
    nvlink = fields.Boolean(load_default=None, allow_none=True)
    gpu_count = _Whole(required=True, validate=validate.Range(1, 100000))
    # at most 100,000 GPUs × the largest memory over 16 bytes a sample (knowledge.row_bounds)
    batch_size_global = _Whole(
        load_default=None, allow_none=True, validate=validate.Range(1, 10**16)
    )
    batch_size_per_gpu = _positive(required=True)
    throughput_unit = fields.String(load_default="samples/s", validate=validate.Length(1, 40))
    system = fields.String(load_default="", validate=validate.Length(max=200))
    watt_total = _positive(load_default=None, allow_none=True)
    price_usd = _positive(load_default=None, allow_none=True)
    source = fields.String(
        required=True,
        validate=validate.Length(3, 500),
        metadata={"description": "where the figure comes from: who ran what, with which stack"},
    )
    note = fields.String(load_default=None, allow_none=True, validate=validate.Length(max=1000))
    gpu = fields.String(required=True, validate=validate.Length(1, 100))
    workload = fields.String(required=True, validate=validate.Length(1, 100))
