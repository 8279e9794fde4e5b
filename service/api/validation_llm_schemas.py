"""The validation report's LLM and stack sections (``llm`` and ``stacks`` of
``GET /v1/validation``), every field described.

``llm`` (:func:`service.engine.validating.llm_validation.report`): MLPerf Training and
Inference rows and vidur's operator timings, each GPU held out, and the published tables'
MFU. ``stacks`` (:func:`service.engine.validating.stack_validation.report`): the named
stacks on their maintainers' published runs, each publication held out. Errors are
fractions as in :mod:`service.api.validation_schemas`; gaps are in points of the peak.
"""

from __future__ import annotations

from marshmallow import Schema, fields

from service.api.described import flag, integer, keyed, nested_list, number, text
from service.api.recommendation_schemas import LayoutAnswerSchema
from service.api.validation_schemas import (
    MEAN,
    MEDIAN,
    ApeFiguresSchema,
    ApeGroupSchema,
    NotScoredRowSchema,
)


class ValidatedLayoutSchema(LayoutAnswerSchema):
    """A training layout (``Layout.to_dict()``): the layout answer without its serving
    fields (a subclass, not ``exclude=``: the spec then names it apart)."""

    class Meta:
        exclude = ("weight_precision", "kv_precision", "batch_size")

    sequence_parallel = flag("activations split over the tensor-parallel GPUs too (Megatron)")
    ends_as_layers = flag("the pipeline split counts the embedding and the loss as a layer each")


SUBMITTER = "the submitting organisation (null: not recorded)"
SIGNED = "signed error: predicted over measured, minus one"


class OptimizedStackConstantsSchema(Schema):
    """The constants the optimized stack times its kernels with, as shipped."""

    efficiency_16bit = number("share of the dense 16-bit tensor peak its GEMMs reach, 0-1")
    efficiency_8bit = number("share of the dense FP8 peak its FP8 GEMMs reach, 0-1")
    memory_share = number("share of the eager step's bytes left after fusion, 0-1")
    attention_share = number("fused attention's rate over the GEMMs', 0-1")
    native_attention_speedup = number("attention's speed-up on the GPU's fastest kernels, x")
    host_s = number("the training loop's time per optimizer step no GPU work hides, s")
    source = text("where the constants come from")


class LlmPredictionSchema(Schema):
    """One MLPerf Training LLM row against its fastest planned layout."""

    workload = text("gpt3-175b-c4 or llama2-70b-lora-govreport")
    suite = text("the MLPerf round")
    submitter = text(SUBMITTER, True)
    gpu_id = text("GPU id")
    count = integer("GPUs the row ran on")
    precision = text("fp8 where the GPU has it, else bf16")
    global_batch = integer("sequences per optimizer step")
    measured_tokens_per_s = number("tokens to converge over the time to train, all GPUs")
    predicted_tokens_per_s = number("the fastest fitting layout's tokens/s (null: none fits)", True)
    error = number(SIGNED + " (null: no prediction)", True)
    layout = fields.Nested(
        ValidatedLayoutSchema, allow_none=True, metadata={"description": "the layout predicted"}
    )
    mfu = number("the layout's model FLOPs utilisation, 0-1 (null: none fits)", True)
    efficiency = number("the stack's GEMM efficiency at the row's precision, 0-1")


class MlperfTrainingLlmSchema(Schema):
    rows = integer("rows predicted")
    median_ape = number(MEDIAN, True)
    mean_ape = number(MEAN, True)
    predictions = nested_list(LlmPredictionSchema, "each row, GPU by GPU")


class OfflineRowSchema(Schema):
    """One MLPerf Inference Offline row against the inference estimate."""

    workload = text("the MLPerf Inference workload")
    accuracy = text("the accuracy target, e.g. '99.9' (null: one target)", True)
    gpu_id = text("GPU id")
    count = integer("GPUs in the system")
    precision = text("the precision it is estimated in (int8, fp16, fp8)")
    submitter = text(SUBMITTER, True)
    measured_per_gpu = number("measured samples/s per GPU")
    predicted_per_gpu = number("estimated samples/s per GPU")
    error = number(SIGNED)


class MlperfTrainingOtherRowSchema(Schema):
    """One MLPerf Training row (not LLM) against the optimized stack."""

    workload = text("the MLPerf Training workload")
    gpu_id = text("GPU id")
    count = integer("GPUs the row ran on")
    batch_per_gpu = number("samples per GPU per optimizer step")
    submitter = text(SUBMITTER, True)
    suite = text("the MLPerf round")
    error = number(SIGNED)


class _PerGpuAndWorkloadSchema(Schema):
    rows_predicted = integer("rows predicted (a workload too few other GPUs ran is left out)")
    median_ape = number(MEDIAN, True)
    mean_ape = number(MEAN, True)
    by_workload = nested_list(ApeGroupSchema, "per workload, by name")
    by_gpu = nested_list(ApeGroupSchema, "per GPU, by name")


class OfflineValidationSchema(_PerGpuAndWorkloadSchema):
    rows = nested_list(OfflineRowSchema, "each row predicted, by GPU and workload")


class MlperfTrainingOtherSchema(_PerGpuAndWorkloadSchema):
    rows = nested_list(MlperfTrainingOtherRowSchema, "each row predicted, by GPU and workload")
    left_out_unit_unknown = integer("rows not predicted: no other GPU ran their round")


class OperatorConstantsSchema(Schema):
    fixed_us = number("fixed time per kernel, microseconds")
    efficiency = number("GEMMs: share of the tensor peak; else bytes per SM cycle / 100")
    bandwidth_share = number("share of the DRAM bandwidth reached, 0-1")


class OperatorValidationSchema(Schema):
    held_out = fields.Nested(ApeFiguresSchema, metadata={"description": "each GPU held out"})
    by_gpu = keyed(ApeFiguresSchema, "GPU id -> its timings' errors, held out")
    by_op = keyed(ApeFiguresSchema, "vidur operator -> its timings' errors, held out")
    fitted_on_all = fields.Nested(
        ApeFiguresSchema, metadata={"description": "the constants fitted on every GPU"}
    )
    constants = keyed(OperatorConstantsSchema, "kind (gemm, or a streaming op) -> constants")


class GoldenRowSchema(Schema):
    """One row of a published table: its printed figure against the predicted one."""

    table = text("the table's id")
    model = fields.Raw(
        allow_none=True,
        metadata={
            "description": "the model: its name (a string), or its size in billions of "
            "parameters (a number, tables that name none); null: the table's one model"
        },
    )
    gpus = integer("GPUs of the run")
    seq = integer("sequence length, tokens", True)
    layout = fields.Nested(ValidatedLayoutSchema, metadata={"description": "the printed layout"})
    figure = text("mfu (0-1) or tflops_per_gpu")
    printed = number("the figure printed")
    predicted = number("the figure predicted, same unit")
    gap_points = number("predicted minus printed, points of the peak (of 312 TFLOP/s for TFLOP/s)")
    bound = text("what bounds the predicted step")
    held = flag("held to the 5-point tolerance (else reported only)")


class GoldenTableSchema(Schema):
    held = flag("held to the 5-point tolerance (else reported only)")
    median_gap_points = number("median absolute gap, points")
    median_signed_gap_points = number("median signed gap, points (positive: predicted too fast)")
    max_gap_points = number("largest absolute gap, points")
    rows = nested_list(GoldenRowSchema, "the table's rows")


class LlmValidationSchema(Schema):
    optimized_stack = fields.Nested(
        OptimizedStackConstantsSchema, metadata={"description": "the optimized stack's constants"}
    )
    mlperf_training = fields.Nested(
        MlperfTrainingLlmSchema, metadata={"description": "MLPerf LLM rows, each GPU held out"}
    )
    mlperf_inference_offline = fields.Nested(
        OfflineValidationSchema,
        metadata={"description": "MLPerf Inference Offline, each GPU held out"},
    )
    mlperf_training_other = fields.Nested(
        MlperfTrainingOtherSchema,
        metadata={"description": "other MLPerf Training rows, GPU held out"},
    )
    operators = fields.Nested(
        OperatorValidationSchema, metadata={"description": "vidur's Llama-2-7B operator timings"}
    )
    golden = keyed(GoldenTableSchema, "published table id -> its rows and gaps")


KIND_UNITS = (
    "tokens/s per GPU (training_throughput), bytes (peak_memory), output tokens/s of all "
    "GPUs (serving_throughput), ms per output token (serving_latency)"
)


class StackErrorRowSchema(Schema):
    stack = text("the stack id ('all': every stack)")
    kind = text("training_throughput, peak_memory, serving_throughput or serving_latency")
    rows = integer("rows scored")
    median_ape = number("median absolute percentage error, a fraction")
    worst_ape = number("largest absolute percentage error, a fraction")


class StackKindErrorsSchema(Schema):
    rows = integer("rows scored")
    median_ape = number(MEDIAN, True)
    target = number("the target median, a fraction")


def _kind(description: str) -> fields.Nested:
    return fields.Nested(StackKindErrorsSchema, metadata={"description": description})


class StackKindsErrorsSchema(Schema):
    training_throughput = _kind("training tokens/s per GPU")
    peak_memory = _kind("peak memory per GPU, as the row's figure counts it")
    serving_throughput = _kind("offline output tokens/s of all the GPUs")
    serving_latency = _kind("time per output token at the printed load")


class StackMemoryFitsSchema(Schema):
    rows = integer("peak-memory rows scored (each ran)")
    fit = integer("those whose layout is estimated to fit the GPU")


class StackWorstSchema(Schema):
    row = text("the row's label (table#n)")
    stack = text("the stack id")
    kind = text("what the row printed")
    measured = number("the printed figure: " + KIND_UNITS)
    predicted = number("the predicted figure, same unit")
    ape = number("absolute percentage error, a fraction")
    cause = text("which way it missed, and the row's conditions")


class StackComputeFitSchema(Schema):
    efficiency_16bit = number("share of the dense 16-bit peak its GEMMs reach, 0-1")
    efficiency_8bit = number("share of the dense FP8 peak its FP8 GEMMs reach, 0-1")
    attention_share = number("attention kernels' rate over the GEMMs', 0-1")
    host_s = number("the training loop's host time per step, s")
    fit = text("what it was fitted on")


class StackServingFitSchema(Schema):
    decode_bandwidth_share = number("share of the bandwidth its decode reaches, 0-1")
    prefill_efficiency = number("share of the tensor peak its prefill GEMMs reach, 0-1")
    fit = text("what it was fitted on")


class StackFittedConstantsSchema(Schema):
    compute = fields.Nested(StackComputeFitSchema, metadata={"description": "from training"})
    serving = fields.Nested(StackServingFitSchema, metadata={"description": "from serving"})


class StackValidationSchema(Schema):
    table = nested_list(StackErrorRowSchema, "per stack and kind, 'all' per kind, by name")
    kinds = fields.Nested(StackKindsErrorsSchema, metadata={"description": "every stack, per kind"})
    memory_fits = fields.Nested(
        StackMemoryFitsSchema, metadata={"description": "peak-memory rows estimated to fit"}
    )
    worst = nested_list(StackWorstSchema, "the 10 rows with the largest errors, the worst first")
    publications = integer("publications the rows come from (each held out in turn)")
    fitted_on_all = keyed(
        StackFittedConstantsSchema, "stack id -> its constants fitted on every row"
    )
    architecture_factors = keyed(
        fields.Float(),
        "GPU architecture ('fused:' prefix: fused kernels) -> factor on the GEMM efficiency "
        "over Hopper's",
    )
    skipped = nested_list(NotScoredRowSchema, "published rows not scored, with the reason")
