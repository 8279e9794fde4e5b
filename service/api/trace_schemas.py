"""The answers of ``/v1/traces``: a traced run's analysis, efficiency, advice and projections.

Every object the trace engine returns is typed here (:mod:`profiles.trace.read` builds the
analysis, :mod:`service.engine.estimating.traces` the efficiency,
:mod:`service.engine.estimating.projection` the advice and the projections). Times are in
microseconds per step, shares are fractions of the step's wall time, rates in TFLOPS.

GPU activity is split into the kinds of :data:`profiles.trace.kinds.KINDS` and idle time into
the causes of :data:`profiles.trace.timeline.IDLE_CAUSES`; the schemas below name each one, so
an object keyed by kind says in its field's description what its numbers are (µs, a share, a
ratio or TFLOPS).
"""

from __future__ import annotations

from marshmallow import Schema, fields

from service.api.described import integer, nested, number, text
from service.api.recommendation_schemas import AdviceSchema


class ComputeKindsSchema(Schema):
    """The kinds of GPU kernel that compute (FLOPs can be recorded for these)."""

    tensor_gemm = number("matrix multiplications on tensor cores (cuBLAS, CUTLASS, attention)")
    simt_gemm = number("matrix multiplications on the fp32 vector units (no tensor cores)")
    convolution = number("cuDNN and implicit-GEMM convolutions")
    elementwise = number("element-wise kernels (activations, adds, casts, optimizer updates)")
    reduction = number("reductions: softmax, normalisation, sums, losses")
    other = number("kernels no rule classifies")


class GpuKindsSchema(ComputeKindsSchema):
    """Every kind of GPU activity: the computing kernels, NCCL, copies and memsets."""

    communication = number("NCCL collectives and peer-to-peer transfers (exposed only)")
    memcpy_h2d = number("host-to-device copies")
    memcpy_d2h = number("device-to-host copies")
    memcpy_d2d = number("device-to-device and peer copies")
    memset = number("memsets")


class IdleCausesSchema(Schema):
    """Why the GPU was idle: what the host was doing meanwhile."""

    input = number("loading input (DataLoader spans)")
    synchronisation = number("synchronising (device, stream or event synchronise; blocking copies)")
    launch = number("launching kernels: within 20 µs of a launch call")
    host = number("other host work")


class TracePartsSchema(GpuKindsSchema):
    """The step in parts that add up to it: each kind of GPU activity, each cause of idle."""

    idle_input = number("GPU idle while the host loads input")
    idle_synchronisation = number("GPU idle while the host synchronises")
    idle_launch = number("GPU idle while the host launches kernels")
    idle_host = number("GPU idle during other host work")


class TraceBreakdownSchema(Schema):
    wall_us = number("the window's wall time, µs (a step: the mean over the steps used)")
    busy_us = nested(GpuKindsSchema, "GPU time by kind, µs; overlaps counted once")
    idle_us = nested(IdleCausesSchema, "idle GPU time by cause, µs")
    idle_total_us = number("idle GPU time in all, µs")
    shares = nested(TracePartsSchema, "each part's share of wall_us (they sum to 1)")


class TraceDeviceSchema(Schema):
    """The traced GPU as Kineto's ``deviceProperties`` lists it, under Kineto's own names
    (a field it lacks is absent)."""

    id = integer("device ordinal")
    name = text("device name, e.g. NVIDIA H100 80GB HBM3")
    totalGlobalMem = integer("memory, bytes")
    computeMajor = integer("compute capability, major")
    computeMinor = integer("compute capability, minor")
    numSms = integer("streaming multiprocessors")


class TensorPrecisionSchema(Schema):
    """Share of tensor-core GEMM time by the precision in the kernel names (present only)."""

    tf32 = number("TF32")
    sixteen_bit = fields.Float(
        attribute="16-bit",
        data_key="16-bit",
        metadata={"description": "fp16 or bf16 (names rarely say which)"},
    )
    fp8 = number("FP8")
    int8 = number("INT8")
    fp32 = number("FP32 (sgemm-style names)")


class StepSpreadSchema(Schema):
    min_us = number("shortest step, µs")
    max_us = number("longest step, µs")
    mean_us = number("mean step, µs")
    std_us = number("standard deviation, µs")
    cv = number("coefficient of variation (std / mean); null where the mean is 0", True)


class TraceStreamSchema(Schema):
    compressed_bytes = integer("bytes uploaded")
    decompressed_bytes = integer("bytes of JSON (the same as uploaded when not gzipped)")
    events = integer("trace events read, flow events included")
    gzipped = fields.Boolean(metadata={"description": "the upload was gzipped"})


class TraceAnalysisSchema(Schema):
    device_name = text("the traced GPU's name (null: the trace lists no GPU)", True)
    device = nested(TraceDeviceSchema, "the traced GPU ({} when the trace lists none)")
    distributed = fields.Dict(
        metadata={
            "description": "the trace's distributedInfo as Kineto wrote it (backend, rank, "
            "world_size, ...; its other keys vary by PyTorch version); {} when absent"
        }
    )
    gpu_events = integer("GPU activities (kernels, copies, memsets) of the traced GPU")
    kernels = integer("kernels (copies and memsets excluded), all GPUs of the trace")
    steps_found = integer("step spans found (ProfilerStep#N, or the step_marker given)")
    steps_used = fields.List(
        fields.String(), metadata={"description": "the steps analysed (the first of 3+ dropped)"}
    )
    step_times_us = fields.List(
        fields.Float(), metadata={"description": "GPU time of each step used, µs"}
    )
    step_time_us = number("median step time, µs (null without step markers)", True)
    step_time_spread = nested(StepSpreadSchema, "the steps' spread (absent without steps)")
    breakdown = nested(
        TraceBreakdownSchema, "mean step (the whole trace without markers); null: no GPU work", True
    )
    whole_trace = nested(
        TraceBreakdownSchema, "first to last GPU activity; null: no GPU activity", True
    )
    short_kernel_share = number("share of kernels under 10 µs (null: no kernels)", True)
    kernels_per_step = number("kernels per step (null: no kernels)", True)
    tensor_core_precision = nested(TensorPrecisionSchema, "{} without tensor-core GEMMs")
    flops_per_step = number("FLOPs recorded (with_flops) per step; null: none recorded", True)
    achieved_tflops = nested(
        ComputeKindsSchema, "TFLOPS achieved by kind, from recorded FLOPs ({} without)"
    )
    memory_peak_bytes = number("allocator peak (profile_memory), bytes; null: not recorded", True)
    events = integer("trace events analysed (flow events skipped)")
    notes = fields.List(fields.String(), metadata={"description": "what the analysis assumed"})
    stream = nested(TraceStreamSchema, "what was read")


class PeakFractionSchema(Schema):
    tensor_gemm = number("of the reference GPU's tensor-core rate at the traced precision mix")
    simt_gemm = number("of its fp32 vector rate")


class TraceEfficiencySchema(Schema):
    achieved_tflops = nested(ComputeKindsSchema, "TFLOPS by kind, from recorded FLOPs")
    fraction_of_peak = nested(
        PeakFractionSchema, "achieved over peak (absent without a reference GPU)"
    )
    profile_flops_per_step = number("FLOPs per step of the attached profile (profile_id)")
    profile_achieved_tflops = number("those FLOPs over the median step time, TFLOPS")
    profile_fraction_of_peak = number(
        "that over the reference GPU's dense peak at the upload's precision (default bf16)"
    )


class TraceAdviceSchema(AdviceSchema):
    """A trace rule that fired (knowledge/rules/trace.yaml), with what it is predicted to save."""

    effect = text("advise")
    message = text("the fix, with the trace's figures")
    predicted_saving_share = number("share of the step the fix is predicted to save")
    predicted_step_time_us = number("the step after the fix, µs")


class GpuProjectionSchema(Schema):
    gpu_id = text("target GPU id")
    count = integer("GPUs per node on the target")
    step_time_us = number("projected step, µs")
    speedup = number("reference step over projected step (null: an empty step)", True)
    breakdown_us = nested(TracePartsSchema, "the projected step in parts, µs (idle unscaled)")
    bound = text("the largest part: a kind of GPU activity or idle_<cause>", True)
    scale = nested(GpuKindsSchema, "time on the target over time on the reference, by kind")
    notes = fields.List(fields.String(), metadata={"description": "caveats of this projection"})
