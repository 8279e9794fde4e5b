"""What a step of a layout computes: its GEMMs, their tiles, and the software stack's share
of the work."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, replace

from knowledge.records import Gpu
from service.engine.estimating import software as stacks
from service.engine.estimating.layout import ACTIVATION_BYTES, ModelShape
from service.engine.estimating.layout_memory import fused_memory, head_bytes
from service.engine.estimating.roofline import MathMode, resource_times
from service.engine.estimating.software import (
    EIGHT_BIT,
    Compute,
    Stack,
)
from service.engine.estimating.step_model import DEFAULT_SUITE, StepModel
from service.engine.estimating.step_profile import StepProfile

OptimizedStack = Compute  # the name llm_validation fits it under

WEIGHT_BYTES = {"fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0,
                "int4": 0.5}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Work:
    """One micro-batch of the whole model on one GPU, by phase (seconds)."""

    forward_s: float
    backward_s: float
    optimizer_s: float
    launch_s: float  # per micro-batch: kernel launches the GPU's work does not hide
    host_s: float  # per optimizer step


def stacked(profile: StepProfile, shape: ModelShape | None, stack: Stack) -> StepProfile:
    """``profile`` as ``stack`` runs it: a training step on a stack of fused kernels keeps
    the activations those kernels keep (:func:`~service.engine.estimating.layout.fused_memory`), not
    eager PyTorch's saved tensors (what the profile counts); then the stack's loss, weight
    and optimizer-state precisions and offloading
    (:func:`service.engine.estimating.software.held`)."""
    if not profile.trains:
        return profile
    memory = profile.memory
    tokens = (profile.seq_len or 0) * profile.batch_size
    # what lies beyond the layers (checkpointing the layers leaves it whole)
    head = head_bytes(shape, tokens, profile.precision, stacks.loss_kept(stack))
    splits = tuple(stack.get("parallelism"))
    if stack.step_model:
        head = min(head, memory.activations_bytes)
        return replace(profile, head_activations_bytes=head, parallelism=splits)
    # torch.compile's partitioner recomputes the cheap pointwise ops in backward and saves
    # the GEMMs' inputs: what it keeps is the fused kernels' set too
    if stack.get("fused_activations") or stack.kernels == "compiled":
        memory = fused_memory(memory, shape, tokens, profile.precision)
    vocab = shape.vocab if shape is not None and shape.lm_head else 0
    layers = shape.layers if shape is not None else 0
    memory = stacks.held(memory, stack, True, tokens, vocab, layers, profile.optimizer, head)
    head = min(head, memory.activations_bytes)
    selective = None
    if stack.get("selective_recompute") == "operators" and shape is not None:
        per_value = ACTIVATION_BYTES.get(profile.precision, 2)
        selective = shape.operator_policy_sbh() * tokens * shape.hidden * per_value / 2
    reshard = bool(stack.get("reshard_after_forward"))
    ring = stack.get("context_parallel") == "ring"
    return replace(
        profile, memory=memory, selective_activations_bytes=selective,
        reshard_after_forward=reshard, context_parallel_overlap=ring,
        head_activations_bytes=head, parallelism=splits,
    )  # fmt: skip


def work(
    profile: StepProfile,
    gpu: Gpu,
    mode: MathMode,
    stack: Stack,
    step_model: StepModel,
    workload: str | None = None,
    suite: str = DEFAULT_SUITE,
    optimized: Compute | None = None,
) -> Work:
    """The micro-batch's work on ``gpu`` under ``stack`` (``optimized``: its compute
    constants replaced, as a fit tries them)."""
    if stack.step_model:
        forward = step_model.phase_gpu_s(profile, gpu, mode, workload, ["forward"])
        backward = step_model.phase_gpu_s(profile, gpu, mode, workload, ["backward"])
        parts = step_model.parts(profile, gpu, mode, workload, suite)
        return Work(forward, backward, parts.optimizer_s, parts.launch_s, parts.host_s)
    constants = optimized or stack.compute
    bandwidth = step_model.bandwidth(gpu)
    # the architecture's factor goes with the stack's fitted constants, not with constants
    # a fit is trying
    factor = stack.architecture_factor(gpu) if optimized is None else 1.0
    efficiency = min(0.95, constants.efficiency(profile.precision) * factor)
    # FP8 recipes (Transformer Engine) keep attention in 16 bits
    attention_flops = mode.tensor_flops
    if profile.precision in EIGHT_BIT and gpu.bf16_tflops:
        attention_flops = gpu.bf16_tflops * 1e12
    attention_rate = constants.attention_rate(gpu)

    def timed(phase: str) -> float:
        t = resource_times(profile.mix, mode, bandwidth, [phase])
        attention = profile.mix.work.get((phase, "attention"), (0.0, 0.0))[0]
        matmul = t.tensor_s + t.cuda_core_s - attention / mode.tensor_flops
        compute = (matmul + attention / attention_flops / attention_rate) / efficiency
        compute += t.vector_s
        return compute + t.memory_s * constants.memory_share

    forward, backward = timed("forward"), timed("backward")
    optimizer = resource_times(profile.mix, mode, bandwidth, ["optimizer"]).total_s
    host = constants.host_s if profile.trains else 0.0
    launch = 0.0
    if not stack.get("cuda_graphs"):  # each kernel's launch, as far as the GPU's work
        # does not hide it (compiled and fused kernels: fewer, as their traffic is)
        phases = ["forward", "backward"] if profile.trains else ["forward"]
        launches = profile.mix.phase_launches(phases) * constants.memory_share
        launch = max(0.0, launches * step_model.launch_s - forward - backward)
    return Work(forward, backward, optimizer, launch, host)


TILE = 128  # rows and columns of the output tile one SM computes at a time (CUTLASS/cuBLAS)


def layer_gemms(
    hidden: int, heads: int, kv_heads: int, ffn: int, gated: bool, tensor_parallel: int
) -> dict[str, tuple[float, float]]:
    """A transformer layer's four GEMMs on one tensor-parallel rank, Megatron's split: name ->
    (output columns, inner dimension). QKV and MLP up (with its gate) split their columns,
    the attention output and MLP down their inner dimension."""
    t = tensor_parallel
    kv = kv_heads * (hidden // max(heads, 1))
    up = ffn * (2 if gated else 1)
    return {
        "qkv": ((hidden + 2 * kv) / t, hidden),
        "attention_output": (hidden, hidden / t),
        "mlp_up": (up / t, hidden),
        "mlp_down": (hidden, ffn / t),
    }


@functools.lru_cache(maxsize=4096)
def busy_share(rows: float, columns: float, sms: int) -> float:
    """The share of ``sms`` SMs a GEMM's output tiles keep busy: they run in waves of one
    tile per SM, and the last wave is partly empty (wave quantisation)."""
    tiles = math.ceil(rows / TILE) * math.ceil(columns / TILE)
    return tiles / (math.ceil(tiles / sms) * sms)


Widths = tuple[int, int, int, int, bool]  # hidden, heads, KV heads, MLP width, gated


def wave_efficiency(tokens: float, widths: Widths, tensor_parallel: int, sms: int) -> float:
    """The share of a GPU's SMs a layer's GEMMs keep busy (:func:`busy_share`), weighed by
    their FLOPs; ``tokens``: the GEMMs' rows (a micro-batch's tokens on one rank)."""
    gemms = layer_gemms(*widths, tensor_parallel)
    done = total = 0.0
    for columns, inner in gemms.values():
        flops = tokens * columns * inner
        done += flops * busy_share(tokens, columns, sms)
        total += flops
    return done / total if total else 1.0


def model_flops(profile: StepProfile) -> float:
    """Forward and backward FLOPs of one micro-batch, whole model (no optimizer)."""
    return sum(
        flops
        for (phase, _), (flops, _moved) in profile.mix.work.items()
        if phase in ("forward", "backward")
    )
