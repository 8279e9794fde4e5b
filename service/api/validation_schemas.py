"""The parts of the validation report (``GET /v1/validation``), every field described.

The report is made by ``rightsize validate`` (:func:`service.engine.validating.validation.
validate`) and kept as JSON; these schemas say what each part holds, so that none is a
free-form object. Errors are fractions, not percents: an ``ape`` (absolute percentage
error) of 0.1 is 10%; an ``error`` is signed, predicted over measured minus one (positive:
predicted too fast or too large). Medians and means are null where nothing was predicted.
Tables keyed by data names (GPU ids, workloads, suites, stacks) are dicts of one schema.
The LLM and stack sections are in :mod:`service.api.validation_llm_schemas`.
"""

from __future__ import annotations

from marshmallow import Schema, fields

from service.api.described import flag, integer, keyed, nested_list, number, text

MEDIAN = "median absolute percentage error, a fraction (0.1: 10%); null: no rows"
MEAN = "mean absolute percentage error, a fraction; null: no rows"
BY_WORKLOAD = "per 'workload precision', the largest median first"


class ApeFiguresSchema(Schema):
    """How many errors, their median and mean."""

    rows = integer("rows predicted")
    median_ape = number(MEDIAN, True)
    mean_ape = number(MEAN, True)


class ApeGroupSchema(Schema):
    """One group's errors (a GPU, a workload and precision, a GPU count)."""

    name = text("the group: a GPU id, 'workload precision', or 'count=N' / 'nvlink=true'")
    rows = integer("rows in the group")
    median_ape = number("median absolute percentage error, a fraction")
    mean_ape = number("mean absolute percentage error, a fraction")


class NotScoredRowSchema(Schema):
    row = text("the row's label")
    reason = text("why it was not used")


class HeldOutRowSchema(Schema):
    """One benchmark row against its held-out estimate."""

    suite = text("the benchmark suite (e.g. lambda-v1)")
    workload = text("the benchmarked workload")
    gpu = text("GPU id")
    count = integer("GPUs the row ran on")
    nvlink = flag("the GPUs were joined by NVLink (null: the data does not say)", True)
    precision = text("as the benchmark names it: fp16 (mixed) or fp32 (TF32 on Ampere+)")
    batch_per_gpu = number("samples per GPU per step")
    measured = number("measured throughput, the workload's unit a second, all GPUs together")
    predicted = number("estimated throughput, same unit")
    interval = fields.List(
        fields.Float(),
        metadata={"description": "the 80% interval of the estimate, [low, high], same unit"},
    )
    ape = number("absolute percentage error, a fraction")
    error = number("signed error: predicted over measured, minus one")
    bound = text("what bounds the estimated step (compute, memory_bandwidth, host, ...)")


class HeldOutErrorsSchema(ApeFiguresSchema):
    """Held-out errors per GPU and per workload, the worst group first."""

    by_gpu = nested_list(ApeGroupSchema, "per GPU, the largest median first")
    by_workload = nested_list(ApeGroupSchema, BY_WORKLOAD)
    worst = nested_list(HeldOutRowSchema, "the rows with the largest errors, the worst first")


class RankGroupSchema(Schema):
    suite = text("the benchmark suite")
    workload = text("the workload")
    precision = text("the precision")
    gpus = integer("GPUs ranked (4 or more)")
    spearman = number("Spearman correlation of measured and estimated throughputs (-1 to 1)")


class RankAgreementSchema(Schema):
    groups = nested_list(RankGroupSchema, "per (suite, workload, precision) that 4+ GPUs ran")
    median = number("median of the groups' Spearman correlations (null: no group)", True)
    mean = number("mean of the groups' Spearman correlations (null: no group)", True)


class LeaveOneGpuOutSchema(HeldOutErrorsSchema):
    spearman = fields.Nested(
        RankAgreementSchema,
        metadata={"description": "how well the held-out estimates rank the GPUs"},
    )


class ForwardInTimeSchema(HeldOutErrorsSchema):
    fitted_on = text("the rows fitted on ('GPUs released before Y')")
    predicted = text("the rows predicted ('GPUs released in Y or later')")


class DataParallelConstantsSchema(Schema):
    """The data-parallel scaling model's fitted constants."""

    bandwidth_share = number("achieved share of the link's bandwidth (NCCL bus bandwidth), 0-1")
    overlap = number("share of backward during which bucket all-reduces hide, 0-1")
    sync_us = number("per-step cost of synchronising the replicas, microseconds")
    straggler = number("compute slowdown per doubling of GPUs, a fraction")


class MultiGpuValidationSchema(HeldOutErrorsSchema):
    groups = nested_list(ApeGroupSchema, "per GPU count ('count=N') and NVLink ('nvlink=true')")
    scaling_from_measured_single_gpu = keyed(
        ApeFiguresSchema,
        "the scaling model alone, from each row's measured single-GPU throughput: by group "
        "('all', 'all-but-superlinear', 'count=N', 'nvlink=true|false|unknown', "
        "'suite=S'); medians and means unrounded",
    )
    scaling_params = fields.Nested(
        DataParallelConstantsSchema, metadata={"description": "the scaling model's constants"}
    )


class FlagshipSpeedupRowSchema(Schema):
    suite = text("the benchmark suite")
    workload = text("the workload")
    precision = text("the precision")
    gpu = text("GPU id")
    previous_flagship = text("the previous generation's flagship GPU id")
    measured_speedup = number("measured throughput over the flagship's, x (median of rows)")
    predicted_speedup = number("estimated throughput over the flagship's, x")
    ape = number("absolute error of the predicted speed-up, a fraction")


class FlagshipSpeedupSchema(ApeFiguresSchema):
    flagships = keyed(
        fields.String(), "per architecture (lower case), the previous generation's flagship"
    )
    by_workload = nested_list(ApeGroupSchema, BY_WORKLOAD)
    table = nested_list(FlagshipSpeedupRowSchema, "per (suite, workload, precision, GPU)")


class MemoryFitCheckWorkloadSchema(Schema):
    workload = text("the workload")
    configurations = integer("distinct stored configurations of it")
    share = number("share of them estimated to fit, 0-1")


class MemoryFitMissSchema(Schema):
    """A configuration that ran, yet is estimated not to fit."""

    workload = text("the workload")
    precision = text("the precision")
    batch_per_gpu = number("samples per GPU per step")
    gpu = text("GPU id")
    estimated_bytes = integer("estimated memory needed, bytes")
    usable_bytes = integer("the GPU's usable memory, bytes")
    ratio = number("estimated over usable")


class MemoryFitCheckSchema(Schema):
    configurations = integer("distinct stored single-GPU configurations (each one ran)")
    fit = integer("those estimated to fit")
    share = number("fit over configurations, 0-1")
    by_workload = nested_list(MemoryFitCheckWorkloadSchema, "per workload, by name")
    misses = nested_list(MemoryFitMissSchema, "up to 20 misses, the largest ratio first")


class IntervalCoverageSchema(Schema):
    nominal = number("the interval's nominal coverage (0.8)")
    coverage_held_in = number("share of fitted rows inside their interval, 0-1")
    coverage_held_out = number("share of rows inside the interval with their GPU held out, 0-1")


class HeldInSchema(Schema):
    median_ape = number("median absolute percentage error on the rows fitted on, a fraction", True)


class DeliveredInputSchema(Schema):
    """What the stored hosts' input pipelines are known to deliver for one workload."""

    delivered_samples_per_s_per_gpu = number("the most samples/s per GPU a stored run reached")
    delivered_samples_per_s_per_host = number("the most samples/s one stored host reached")
    ceiling = number("the input ceiling, samples/s per GPU (null: none inferred)", True)
    evidence = fields.List(
        fields.String(),
        metadata={"description": "what shows the ceiling (empty: none is inferred)"},
    )


class StepCoefficientsSchema(Schema):
    """Real seconds per ideal second on each resource (1 / efficiency; 0: not needed)."""

    tensor = number("16-bit (and 8-bit) tensor-core work")
    tf32 = number("fp32 matmuls on TF32 tensor cores")
    cuda_core = number("fp32 work on CUDA cores")
    vector = number("vector arithmetic")
    memory = number("DRAM traffic at the usable bandwidth")


class StepWorkloadFitSchema(Schema):
    """The fitted step of one benchmarked workload."""

    coefficients = fields.Nested(
        StepCoefficientsSchema, metadata={"description": "the workload's own coefficients"}
    )
    host_ms = keyed(fields.Float(), "'precision suite' -> fixed time per step, ms")
    mobile_ms = number("extra per step on laptop parts, ms")
    input_us_per_sample = keyed(fields.Float(), "suite -> input time per sample, microseconds")
    rows = integer("single-GPU rows fitted on")


class IntervalQuantilesSchema(Schema):
    known = number("|log error| quantile of benchmarked workloads, GPUs held out")
    general = number("|log error| quantile of other models (whole workloads held out)")


class StepModelSummarySchema(Schema):
    """The fitted step model's parameters."""

    knowledge_version = text("the knowledge it was fitted on")
    model_version = text("the step model's version")
    observations = integer("benchmark rows used, every GPU count")
    single_gpu_observations = integer("single-GPU rows among them (the step model's fit)")
    skipped_rows = integer("rows that could not be used")
    interval_log_quantiles = fields.Nested(
        IntervalQuantilesSchema, metadata={"description": "what the 80% interval is built from"}
    )
    built_s = number("seconds the fit took")
    bytes_per_sm_cycle = number("usable-bandwidth cap, bytes per SM cycle (null: none)", True)
    launch_us = number("host time per kernel launch, microseconds")
    general_host_ms = keyed(fields.Float(), "suite -> host time per step of other models, ms")
    general_coefficients = fields.Nested(
        StepCoefficientsSchema,
        metadata={"description": "for models the benchmarks did not measure"},
    )
    class_factors = keyed(
        fields.Float(), "GPU class -> factor on the GPU part over GPUs of the same specs"
    )
    workloads = keyed(StepWorkloadFitSchema, "benchmarked workload -> its fit")


class ValidationTargetSchema(Schema):
    target = number("the target (a ceiling; a floor for spearman_median and the fit shares)")
    value = number("the figure reached (null: not computed)", True)
    met = flag("whether the figure meets the target (null: no figure)", True)
