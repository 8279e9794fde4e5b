"""Serving layouts: a model's replicas and tensor-parallel groups answering requests.

Inference per layout (:func:`layout_inference`): prefill is the profile's prefill split over
the tensor-parallel ranks; each decoded token reads the weights (at their precision) and the
KV cache (at its precision) once, at the bandwidth the GPU's SMs can use, and all-reduces
twice per layer; the KV cache left after the weights bounds the concurrency.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from knowledge.records import Gpu
from service.engine.estimating.layout import ACTIVATION_BYTES, ModelShape
from service.engine.estimating.roofline import MathMode, resource_times
from service.engine.estimating.software import (
    EIGHT_BIT,
    OPTIMIZED,
    Stack,
)
from service.engine.estimating.step_model import StepModel
from service.engine.estimating.step_profile import StepProfile
from service.engine.planning.collectives import _group_link, _ring
from service.engine.planning.network import Network
from service.engine.planning.work import WEIGHT_BYTES, wave_efficiency

KV_BYTES = {"fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}

WEIGHT_PRECISIONS = ("fp16", "bf16", "fp8", "int8", "int4")

# decode streams weights and cache: the share of the usable bandwidth it reaches (TensorRT-LLM
# and vLLM decode kernels; eager PyTorch pays its launches on top)
DECODE_BANDWIDTH_SHARE = 0.8


@dataclass(frozen=True, slots=True)
class LayoutInference:
    """Serving ``profile``'s requests on one tensor-parallel group (times in seconds)."""

    tensor_parallel: int
    weight_precision: str
    kv_precision: str
    concurrency: int
    max_concurrency: int  # sequences whose full KV cache fits beside the weights
    weights_bytes_per_gpu: float
    kv_bytes_per_sequence_per_gpu: float
    kv_bytes_held_per_gpu: float  # the cache ``concurrency`` sequences hold (paged: so far)
    time_to_first_token_s: float
    time_per_output_token_s: float  # a decode step of the batch
    inter_token_latency_s: float  # with the prefills of requests joining interleaved
    decode_memory_s: float
    decode_compute_s: float
    decode_communication_s: float
    decode_launch_s: float
    output_tokens_per_s: float  # at ``concurrency``, the whole group
    bound: str  # memory_bandwidth or compute (of a decoded token)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tensor_parallel": self.tensor_parallel,
            "weight_precision": self.weight_precision,
            "kv_precision": self.kv_precision,
            "concurrency": self.concurrency,
            "max_concurrency": self.max_concurrency,
            "weights_bytes_per_gpu": self.weights_bytes_per_gpu,
            "kv_bytes_per_sequence_per_gpu": self.kv_bytes_per_sequence_per_gpu,
            "kv_bytes_held_per_gpu": self.kv_bytes_held_per_gpu,
            "time_to_first_token_s": self.time_to_first_token_s,
            "time_per_output_token_s": self.time_per_output_token_s,
            "inter_token_latency_s": self.inter_token_latency_s,
            "output_tokens_per_s": self.output_tokens_per_s,
            "bound": self.bound,
            "decode_breakdown": {
                "memory_s": self.decode_memory_s,
                "compute_s": self.decode_compute_s,
                "communication_s": self.decode_communication_s,
                "launch_s": self.decode_launch_s,
            },
        }


def tensor_degrees(shape: ModelShape | None, most: int, count: int | None = None) -> list[int]:
    """The tensor-parallel groups a served model may take: 1, 2, 4 or 8 GPUs, at most
    ``most``, dividing its heads (and ``count``, the GPUs whole groups fill); 1 alone for a
    model that is not a transformer (tensor parallelism splits transformers only)."""
    if shape is None:
        return [1]
    return [t for t in (1, 2, 4, 8) if t <= most and shape.heads % t == 0
            and (count is None or count % t == 0)]  # fmt: skip


def _decode_compute_s(
    shape: ModelShape | None, parameters: float, c: int, t: int, mode: MathMode,
    efficiency: float, net: Network,
) -> float:  # fmt: skip
    """A decode step's GEMMs at their FLOPs: one row per sequence, whose rows fill the SMs'
    output tiles in waves (as in training)."""
    waves = 1.0
    if shape is not None and net.sms:
        widths = (shape.hidden, shape.heads, shape.kv_heads, shape.ffn, shape.gated)
        waves = wave_efficiency(float(c), widths, t, net.sms)
    return 2 * parameters * c / (t * mode.tensor_flops * efficiency * waves)


def _prefill_s(
    ideal: Any, efficiency: float, memory_share: float, t: int, shape: ModelShape | None,
    prompt: float, net: Network,
) -> float:  # fmt: skip
    """The prefill split over ``t`` tensor-parallel ranks, with its all-reduces."""
    prefill = (ideal.tensor_s + ideal.cuda_core_s) / (efficiency * t) + ideal.vector_s / t
    prefill += ideal.memory_s * memory_share / t
    if t > 1 and shape is not None:
        act = prompt * shape.hidden * 2.0
        prefill += 2 * shape.layers * _ring(act * 2 * (t - 1) / t, t, _group_link(net, t), 0.7, 2)
    return prefill


# long: prefill, decode and the KV cache's limit of one group, in the docstring's steps
def layout_inference(
    profile: StepProfile,
    shape: ModelShape | None,
    gpu: Gpu,
    mode: MathMode,
    step_model: StepModel,
    net: Network,
    tensor_parallel: int,
    stack: Stack,
    usable_bytes: float,
    weight_precision: str | None = None,
    kv_precision: str | None = None,
    concurrency: int | None = None,
) -> LayoutInference:
    """Prefill and decode of ``profile`` (an inference profile, batch = sequences) on a
    tensor-parallel group of ``tensor_parallel`` GPUs. Each decoded token reads every weight
    once (at ``weight_precision``) and each sequence's KV cache (at ``kv_precision``,
    on average half-way through its output), and all-reduces twice per layer."""
    t = tensor_parallel
    memory = profile.memory
    # the bytes a weight and a cached value take in the profile (an FP8 profile computes
    # in FP8 but counts its weights and cache in 16 bits)
    base = WEIGHT_BYTES.get(profile.precision, 2.0)
    if shape is not None and shape.parameters > 0:
        base = memory.parameters_bytes / shape.parameters
    kv_base = float(ACTIVATION_BYTES.get(profile.precision, 2))
    wp = weight_precision or profile.precision
    kvp = kv_precision or ("bf16" if profile.precision in EIGHT_BIT else profile.precision)
    weights = memory.parameters_bytes * WEIGHT_BYTES[wp] / base / t
    batch = max(profile.batch_size, 1.0)
    kv_split = min(t, shape.kv_heads) if shape is not None else 1
    kv_full = memory.kv_cache_bytes / batch * KV_BYTES.get(kvp, 2.0) / kv_base / kv_split
    spare = usable_bytes - weights - memory.runtime_overhead_bytes
    spare -= memory.temporary_peak_bytes / t
    prompt = float(profile.prompt_tokens or 0)
    output = float(profile.output_tokens or 0)
    context = (prompt + output / 2) / max(prompt + output, 1.0)
    # a paged cache under continuous batching holds what each sequence has so far (half
    # its output on average); a static batch reserves the whole length up front
    paged = stack.get("paged_kv") and stack.get("continuous_batching")
    reserved = kv_full * (context if paged else 1.0)
    most = max(0, math.floor(spare / reserved)) if reserved > 0 else 0
    c = concurrency or max(1, most)
    serving = stack.serving
    bandwidth = step_model.bandwidth(gpu) * serving.decode_bandwidth_share
    # the weights' GEMMs and attention over the cache are separate kernels: the first
    # bound by the weights' bytes or the FLOPs of the batch, the second by the cache's bytes
    weights_s = weights / bandwidth
    kv_s = c * kv_full * context / bandwidth
    memory_s = weights_s + kv_s
    efficiency = serving.prefill_efficiency
    if profile.precision in EIGHT_BIT:  # 8-bit GEMMs reach a smaller share of their peak
        # (the fused stack's fit: 0.51 of the FP8 peak against 0.61 of the 16-bit one)
        efficiency *= OPTIMIZED.efficiency_8bit / OPTIMIZED.efficiency_16bit
    parameters = shape.parameters if shape is not None else memory.parameters_bytes / base
    compute_s = _decode_compute_s(shape, parameters, c, t, mode, efficiency, net)
    comm = 0.0
    if t > 1 and shape is not None:
        link = _group_link(net, t)
        per_call = c * shape.hidden * 2.0 * 2 * (t - 1) / t
        calls = 2 * shape.layers
        comm = calls * _ring(per_call, t, link, 0.7, 2)
    launch = serving.step_overhead_s
    if not stack.get("cuda_graphs"):
        launch += profile.mix.phase_launches(["decode-first"]) * step_model.launch_s
    per_token = max(weights_s, compute_s) + kv_s + comm + launch
    ideal = resource_times(profile.mix, mode, step_model.bandwidth(gpu), ["prefill"])
    prefill = _prefill_s(ideal, efficiency, stack.compute.memory_share, t, shape, prompt, net)
    # continuous batching interleaves the prefills of the requests that join: in a steady
    # state c / output of them per decode step (a static batch prefills once, up front)
    joining = prefill / batch * c / output if output else 0.0
    between = per_token + (joining if stack.get("continuous_batching") else 0.0)
    return LayoutInference(
        tensor_parallel=t,
        weight_precision=wp,
        kv_precision=kvp,
        concurrency=c,
        max_concurrency=most,
        weights_bytes_per_gpu=weights,
        kv_bytes_per_sequence_per_gpu=kv_full,
        kv_bytes_held_per_gpu=c * reserved,
        time_to_first_token_s=prefill,
        time_per_output_token_s=per_token,
        inter_token_latency_s=between,
        decode_memory_s=memory_s,
        decode_compute_s=compute_s,
        decode_communication_s=comm,
        decode_launch_s=launch,
        output_tokens_per_s=c / (per_token + joining),  # each request's prefill counted
        bound="memory_bandwidth" if weights_s + kv_s >= compute_s else "compute",
    )
