"""Time per step of a parallel layout, the links it runs over, and what it needs of them.

One optimizer step of a :class:`~service.engine.estimating.layout.Layout` on ``n`` GPUs:

- each GPU computes ``1 / (t p c)`` of a micro-batch's forward and backward (tensor,
  pipeline and context parallelism split the work), once more the forward where activations
  are fully recomputed, for each of the ``m`` micro-batches of the step;
- tensor parallelism all-reduces the layer's activations twice in the forward and twice in
  the backward of every layer (twice more when recomputing), with sequence parallelism as a
  reduce-scatter and an all-gather of the same volume (Megatron-LM; Korthikanti et al. 2022):
  over the link inside a node, not hidden;
- a 1F1B pipeline idles ``(p - 1) / v`` micro-batch times (the bubble; Narayanan et al.
  2021, section 2.2), and sends each micro-batch's activations to the next stage;
- data parallelism reduces the gradients once per step (ZeRO 0 and 1), reduce-scatters them
  each micro-batch (ZeRO 2), or also gathers the parameters for each micro-batch's forward and
  backward (ZeRO 3 / FSDP full shard), each hidden behind backward as far as the scaling
  model's fitted overlap allows (:mod:`service.engine.estimating.scaling`);
- the optimizer updates the shard each GPU owns (on the host when it is offloaded).

The compute comes from one of two stacks. ``pytorch``: the step model fitted on Lambda's
stock-PyTorch benchmarks (:mod:`service.engine.estimating.step_model`), its kernel launches and host
time included. ``optimized``: a vendor-tuned stack (Megatron / NeMo with fused kernels and
CUDA graphs, TensorRT-LLM): matmul-like work at :data:`OPTIMIZED` ``matmul_efficiency`` of the
dense peak, memory-bound work fused away but for ``memory_share`` of the eager bytes, and no
host time; fitted on MLPerf Training's LLM rows (see :func:`fit_optimized`).

Inference per layout (:func:`layout_inference`): prefill is the profile's prefill split over
the tensor-parallel ranks; each decoded token reads the weights (at their precision) and the
KV cache (at its precision) once, at the bandwidth the GPU's SMs can use, and all-reduces
twice per layer; the KV cache left after the weights bounds the concurrency.
"""

from __future__ import annotations

import bisect
import functools
import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from knowledge import Knowledge
from knowledge.records import Gpu
from service.engine import deadline
from service.engine.errors import InvalidRequest
from service.engine.estimating import scaling
from service.engine.estimating import software as stacks
from service.engine.estimating.layout import (
    ACTIVATION_BYTES,
    Layout,
    LayoutMemory,
    ModelShape,
    fused_memory,
    head_bytes,
    layouts_for,
    memory_per_gpu,
)
from service.engine.estimating.roofline import MathMode, resource_times
from service.engine.estimating.software import (
    EIGHT_BIT,
    OPTIMIZED,
    Compute,
    Stack,
    as_stack,
    native_attention,
)
from service.engine.estimating.step_model import DEFAULT_SUITE, StepModel
from service.engine.estimating.step_profile import StepProfile

OptimizedStack = Compute  # the name llm_validation fits it under
__all__ = ["EIGHT_BIT", "OPTIMIZED", "OptimizedStack", "native_attention"]
WEIGHT_BYTES = {"fp32": 4.0, "tf32": 4.0, "fp16": 2.0, "bf16": 2.0, "fp8": 1.0, "int8": 1.0,
                "int4": 0.5}  # fmt: skip
# the bandwidth at which a layout's communication costs at most this share of its step
NEEDED_EXPOSED_SHARE = 0.10


@dataclass(frozen=True, slots=True)
class Network:
    """The links a layout's groups talk over: inside a node, and between nodes."""

    intra: scaling.Link
    inter: scaling.Link
    gpus_per_node: int
    sms: int = 0  # the GPU's streaming multiprocessors (0: GEMM waves not modelled)


def network(
    knowledge: Knowledge,
    gpu: Gpu,
    gpus_per_node: int = scaling.GPUS_PER_NODE,
    intra: str | None = None,
    inter: str | None = None,
    nvlink: bool | None = None,
) -> Network:
    """The links of a server of ``gpus_per_node`` GPUs (the GPU's own, unless ``intra``
    names an interconnect record) and between servers (``inter``, else the default)."""
    inside = scaling.link_for(knowledge, gpu, gpus_per_node, nvlink)
    if intra is not None:
        inside = _named_link(knowledge, intra, gpu, "inside a node")
    between = _named_link(
        knowledge, inter or scaling.server_network(knowledge, gpu).id, gpu, "between nodes"
    )
    return Network(inside, between, gpus_per_node, gpu.sm_count)


def _named_link(knowledge: Knowledge, link_id: str, gpu: Gpu, where: str) -> scaling.Link:
    rec = knowledge.interconnects.get(link_id)
    if rec is None:
        known = ", ".join(sorted(knowledge.interconnects))
        raise InvalidRequest("interconnect", f"unknown interconnect '{link_id}' (known: {known})")
    bandwidth = rec.bandwidth_gb_per_s_per_direction
    if rec.kind in ("nvlink", "nvswitch") and gpu.nvlink_bandwidth_gb_per_s:
        bandwidth = min(bandwidth, gpu.nvlink_bandwidth_gb_per_s / 2)
    why = f"{rec.name} {where}, {bandwidth:g} GB/s per GPU per direction"
    return scaling.Link(rec.id, rec.name, bandwidth, rec.latency_us, True, why)


@dataclass(frozen=True, slots=True)
class Work:
    """One micro-batch of the whole model on one GPU, by phase (seconds)."""

    forward_s: float
    backward_s: float
    optimizer_s: float
    launch_s: float  # per micro-batch: kernel launches the GPU's work does not hide
    host_s: float  # per optimizer step


def stacked(profile: StepProfile, shape: ModelShape | None, stack: Stack | str) -> StepProfile:
    """``profile`` as ``stack`` runs it: a training step on a stack of fused kernels keeps
    the activations those kernels keep (:func:`~service.engine.estimating.layout.fused_memory`), not
    eager PyTorch's saved tensors (what the profile counts); then the stack's loss, weight
    and optimizer-state precisions and offloading
    (:func:`service.engine.estimating.software.held`)."""
    stack = as_stack(stack)
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
    stack: Stack | str,
    step_model: StepModel,
    workload: str | None = None,
    suite: str = DEFAULT_SUITE,
    optimized: Compute | None = None,
) -> Work:
    """The micro-batch's work on ``gpu`` under ``stack`` (``optimized``: its compute
    constants replaced, as a fit tries them)."""
    stack = as_stack(stack)
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


@dataclass(frozen=True, slots=True)
class LinkUse:
    """One group's traffic per step over its link, and what it costs."""

    group: str  # tensor, pipeline, data
    link: scaling.Link
    bytes_per_step: float  # per GPU, one direction
    time_s: float  # the transfers' time
    exposed_s: float  # the part no computation hides
    window_s: float  # the computation it can hide behind

    def needed_gb_per_s(self, step_s: float) -> float:
        """The bandwidth at which this traffic shows at most NEEDED_EXPOSED_SHARE of the step
        (hidden behind ``window_s`` first)."""
        window = self.window_s + NEEDED_EXPOSED_SHARE * step_s
        return self.bytes_per_step / window / 1e9 if window > 0 else math.inf

    def to_dict(self, step_s: float) -> dict[str, Any]:
        return {
            "group": self.group,
            "link": self.link.id,
            "link_name": self.link.name,
            "link_gb_per_s": self.link.bandwidth_gb_per_s,
            "bytes_per_step": self.bytes_per_step,
            "time_s": self.time_s,
            "exposed_s": self.exposed_s,
            "needed_gb_per_s": self.needed_gb_per_s(step_s),
        }


@dataclass(frozen=True, slots=True)
class LayoutStep:
    """One optimizer step of a layout, in its parts (seconds, per GPU)."""

    layout: Layout
    compute_s: float  # forward and backward of every micro-batch
    recompute_s: float
    tensor_parallel_s: float
    context_parallel_s: float
    pipeline_bubble_s: float
    pipeline_send_s: float
    data_parallel_s: float  # exposed
    optimizer_s: float
    host_s: float
    step_s: float
    samples_per_step: float
    tokens_per_step: float
    model_flops_per_step: float  # all GPUs, no recomputation
    peak_flops: float  # one GPU's dense peak for the precision
    links: tuple[LinkUse, ...]

    @property
    def samples_per_s(self) -> float:
        return self.samples_per_step / self.step_s

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_s

    @property
    def mfu(self) -> float:
        """Model FLOPs (no recomputation) per second over the GPUs' dense peak."""
        return self.model_flops_per_step / (self.step_s * self.layout.gpus * self.peak_flops)

    @property
    def bound(self) -> str:
        parts = {
            "compute": self.compute_s + self.recompute_s + self.optimizer_s,
            "tensor_parallel_communication": self.tensor_parallel_s,
            "context_parallel_communication": self.context_parallel_s,
            "pipeline_bubble": self.pipeline_bubble_s + self.pipeline_send_s,
            "data_parallel_communication": self.data_parallel_s,
            "host": self.host_s,
        }
        return max(parts, key=lambda k: parts[k])

    def to_dict(self) -> dict[str, Any]:
        return {
            "step_time_s": self.step_s,
            "samples_per_s": self.samples_per_s,
            "tokens_per_s": self.tokens_per_s,
            "mfu": self.mfu,
            "bound": self.bound,
            "global_batch_size": self.samples_per_step,
            "breakdown": {
                "compute_s": self.compute_s,
                "recompute_s": self.recompute_s,
                "tensor_parallel_s": self.tensor_parallel_s,
                "context_parallel_s": self.context_parallel_s,
                "pipeline_bubble_s": self.pipeline_bubble_s,
                "pipeline_send_s": self.pipeline_send_s,
                "data_parallel_exposed_s": self.data_parallel_s,
                "optimizer_s": self.optimizer_s,
                "host_s": self.host_s,
            },
            "links": [u.to_dict(self.step_s) for u in self.links],
        }


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


def _ring(volume_bytes: float, ranks: int, link: scaling.Link, share: float, hops: int) -> float:
    """``hops`` ring collectives of ``volume_bytes`` per GPU each over ``ranks`` GPUs (an
    all-reduce is 2 (n - 1) / n of its buffer, a reduce-scatter or all-gather half that)."""
    if ranks <= 1 or volume_bytes <= 0:
        return 0.0
    bandwidth = link.bandwidth_gb_per_s * 1e9 * share
    return volume_bytes / bandwidth + hops * (ranks - 1) * link.latency_us * 1e-6


def _group_link(net: Network, span: int, stride: int = 1) -> scaling.Link:
    """The link a group of GPUs ``span`` ranks wide, its members ``stride`` ranks apart,
    crosses. Between nodes NCCL runs one ring per network port, so a group with ``k``
    members in each node moves its traffic through ``k`` ports at once (never faster than
    the link inside the node)."""
    if span <= net.gpus_per_node:
        return net.intra
    members = max(1, net.gpus_per_node // max(stride, 1))
    bandwidth = min(net.intra.bandwidth_gb_per_s, net.inter.bandwidth_gb_per_s * members)
    if members == 1:
        return net.inter
    inter = net.inter
    why = f"{inter.why}, {members} ports per node in parallel"
    return scaling.Link(inter.id, inter.name, bandwidth, inter.latency_us, inter.p2p, why)


@dataclass(frozen=True, slots=True)
class _Micro:
    """One micro-batch on one GPU of a layout: what the communication models read."""

    layout: Layout
    profile: StepProfile
    shape: ModelShape | None  # None: a model other than a transformer (data parallel only)
    net: Network
    forward_s: float
    backward_s: float
    recompute_s: float
    share: float  # achieved share of a link's bandwidth
    per_value: int  # bytes per activation value exchanged


def _tensor_parallel(x: _Micro) -> LinkUse | None:
    """4 collectives per layer (6 when recomputing), each over the layer's activations of
    the micro-batch (per context-parallel rank); not hidden."""
    if x.shape is None:
        return None
    lay = x.layout
    t, m = lay.tensor_parallel, lay.gradient_accumulation
    if t == 1:
        return None
    act = x.profile.tokens_per_step / lay.context_parallel * x.shape.hidden * x.per_value
    calls = (6 if x.recompute_s else 4) * x.shape.layers / lay.pipeline_parallel
    volume = calls * 2 * (t - 1) / t * act * m
    link = _group_link(x.net, t)
    time_s = _ring(volume, t, link, x.share, 2 * int(calls * m))
    return LinkUse("tensor", link, volume, time_s, time_s, 0.0)


def _context_parallel(x: _Micro) -> LinkUse | None:
    """Each rank's keys and values go round the ring, once in the forward and twice in the
    backward (their gradients come back). A stack that passes them point to point hides
    them behind the micro-batches' computation (slowed by :data:`OVERLAP_SLOWDOWN`
    meanwhile); one that all-gathers them first waits on them."""
    if x.shape is None:
        return None
    lay = x.layout
    t, c, m = lay.tensor_parallel, lay.context_parallel, lay.gradient_accumulation
    if c == 1:
        return None
    kv = x.shape.kv_heads * (x.shape.hidden // max(x.shape.heads, 1))
    chunk = x.profile.tokens_per_step / c * 2 * kv / t * x.per_value
    layers = x.shape.layers / lay.pipeline_parallel * m
    volume = 3 * (c - 1) * chunk * layers
    link = _group_link(x.net, t * c, t)
    time_s = _ring(volume, c, link, x.share, 3 * (c - 1) * int(layers))
    if not x.profile.context_parallel_overlap:
        return LinkUse("context", link, volume, time_s, time_s, 0.0)
    window = m * (x.forward_s + x.backward_s + x.recompute_s)
    hidden = min(time_s, window)
    return LinkUse("context", link, volume, time_s,
                   time_s - hidden + OVERLAP_SLOWDOWN * hidden, window)  # fmt: skip


def _pipeline_send(x: _Micro) -> LinkUse | None:
    """Each micro-batch's activations to the next stage and their gradients back."""
    if x.shape is None:
        return None
    lay = x.layout
    if lay.pipeline_parallel == 1:
        return None
    t, c = lay.tensor_parallel, lay.context_parallel
    act = x.profile.tokens_per_step / c / t * x.shape.hidden * x.per_value  # sequence parallel
    stage, node = t * c * lay.data_parallel, x.net.gpus_per_node
    if stage < node < lay.gpus:  # stages smaller than a node, several nodes: the stage
        # boundary at each node's edge crosses the network, its GPUs sharing the node's ports
        link = _group_link(x.net, node + 1, max(1, node // stage))
    else:
        link = _group_link(x.net, stage + 1, node)
    volume = 2 * act * lay.gradient_accumulation * lay.virtual_stages
    time_s = volume / (link.bandwidth_gb_per_s * 1e9 * x.share)
    return LinkUse("pipeline", link, volume, time_s, time_s, 0.0)


# torchtitan's operator policy for selective checkpointing recomputes every other matmul
# (and the pointwise operators, which are cheap): about half the forward's time
OPERATOR_RECOMPUTE = 0.5


# Computation that overlaps communication runs slower: the collectives' kernels hold SMs
# and memory bandwidth ("Characterizing Compute-Communication Overlap in GPU-Accelerated
# Distributed Deep Learning", arXiv:2507.03114, 2025-07-03: 18.9% slower on average, up to
# 40%, GPT and Llama models on A100, H100, MI250 and MI210)
OVERLAP_SLOWDOWN = 0.19


def _data_parallel(x: _Micro, params: scaling.Params) -> LinkUse | None:
    """Gradients reduced over the data- and context-parallel ranks as the ZeRO stage does
    it, hidden behind the computation it overlaps, which it slows by
    :data:`OVERLAP_SLOWDOWN` meanwhile."""
    found = _data_parallel_terms(x, params)
    if found is None:
        return None
    link, volume, time_s, exposed, window = found
    return LinkUse("data", link, volume, time_s, exposed, window)


def _data_parallel_terms(
    x: _Micro, params: scaling.Params
) -> tuple[scaling.Link, float, float, float, float] | None:
    """:func:`_data_parallel`'s link, volume, time, exposed time and window."""
    lay = x.layout
    t, p, m = lay.tensor_parallel, lay.pipeline_parallel, lay.gradient_accumulation
    ranks = lay.shard_group
    if ranks == 1:
        return None
    link = _group_link(x.net, t * ranks, t)
    grads = x.profile.gradients_bytes / (t * p)
    weights = x.profile.memory.parameters_bytes / (t * p)
    half = (ranks - 1) / ranks
    work_s = x.forward_s + x.backward_s
    if lay.zero_stage == 3:  # gather for forward and backward, scatter the grads
        gathers = 2 if x.profile.reshard_after_forward else 1  # kept: gathered once
        volume = m * half * (gathers * weights + grads)
        window = m * (work_s + x.recompute_s) * params.overlap
    elif lay.zero_stage == 2:  # scatter each micro-batch, gather the update once
        volume = half * (m * grads + weights)
        window = (m - 1) * work_s + x.backward_s * params.overlap
    else:  # all-reduce once, behind the last micro-batch's backward
        volume = 2 * half * grads
        window = x.backward_s * params.overlap
    if lay.zero_stage == 3:  # FSDP wraps each layer: two gathers and a scatter per layer
        units = x.shape.layers if x.shape is not None else math.ceil(
            x.profile.memory.parameters_bytes / scaling.DDP_BUCKET_BYTES)  # fmt: skip
        hops = 3 * math.ceil(max(units, 1) / p)
    else:  # DDP's buckets
        hops = 2 * max(1, math.ceil(grads / scaling.DDP_BUCKET_BYTES))
    time_s = _ring(volume, ranks, link, x.share, hops * (m if lay.zero_stage >= 2 else 1))
    hidden = min(time_s, window)
    return link, volume, time_s, time_s - hidden + OVERLAP_SLOWDOWN * hidden, window


@functools.lru_cache(maxsize=4096)
def _slowdown(tokens: float, widths: Widths, tensor_parallel: int, context: int, sms: int) -> float:
    """How much slower a layer's GEMMs run split over ``tensor_parallel`` and ``context``
    ranks than whole, for their waves alone (1 where the split fills the SMs as well)."""
    whole = wave_efficiency(tokens, widths, 1, sms)
    return whole / wave_efficiency(tokens / context, widths, tensor_parallel, sms)


def _computed(
    layout: Layout, profile: StepProfile, shape: ModelShape | None, done: Work, net: Network
) -> tuple[float, float, float]:
    """One micro-batch's forward, backward and recomputation on one GPU of ``layout``: the
    work split over its tensor, pipeline and context ranks, at the GEMM waves' efficiency
    of the split."""
    t, p, c = layout.tensor_parallel, layout.pipeline_parallel, layout.context_parallel
    slower = 1.0
    if shape is not None and net.sms:
        widths = (shape.hidden, shape.heads, shape.kv_heads, shape.ffn, shape.gated)
        slower = _slowdown(profile.tokens_per_step, widths, t, c, net.sms)
    forward = done.forward_s / (t * p * c) * slower
    backward = done.backward_s / (t * p * c) * slower
    recompute = forward if layout.activation_checkpointing == "full" else 0.0
    if layout.activation_checkpointing == "selective" and profile.selective_activations_bytes:
        recompute = OPERATOR_RECOMPUTE * forward
    return forward, backward, recompute


def _outside(
    layout: Layout, profile: StepProfile, done: Work, params: scaling.Params
) -> tuple[float, float]:
    """The step's optimizer update on one GPU of ``layout`` and the host's time."""
    t, p = layout.tensor_parallel, layout.pipeline_parallel
    ranks = layout.shard_group
    optimizer = done.optimizer_s / (t * p)
    if layout.zero_stage >= 1:
        optimizer /= ranks
    if layout.offload != "none":  # the update runs on the host, the shard crosses PCIe
        optimizer = _offloaded(profile, t * p * (ranks if layout.zero_stage else 1))
    host = done.host_s + done.launch_s * layout.gradient_accumulation / p
    if layout.gpus > 1 and done.host_s:
        host += params.sync_us * 1e-6
    return optimizer, host


def _bubble(layout: Layout, micro_s: float) -> float:
    """The pipeline's idle time per step: (p - 1) micro-batches, divided by the interleaving
    (1F1B; Narayanan et al. 2021)."""
    return (layout.pipeline_parallel - 1) / layout.virtual_stages * micro_s


# forward, backward, recompute, optimizer and host time of a layout's step, and the most
# samples a second its computation allows (no traffic)
Parts = tuple[float, float, float, float, float, float]


def _parts(
    layout: Layout, profile: StepProfile, shape: ModelShape | None, done: Work, net: Network,
    params: scaling.Params, memo: dict[int, Parts] | None,
) -> Parts:  # fmt: skip
    """A layout's computation, its optimizer and host time and the rate they bound it to:
    the same on every network (the GPU's SMs aside), so kept in ``memo`` by the layout's
    identity where one is given (a caller that plans one GPU on several networks keeps its
    layout tables alive meanwhile)."""
    if memo is not None:
        found = memo.get(id(layout))
        if found is not None:
            return found
    forward, backward, recompute = _computed(layout, profile, shape, done, net)
    optimizer, host = _outside(layout, profile, done, params)
    busy = forward + backward + recompute
    m = layout.gradient_accumulation
    step = busy * m + _bubble(layout, busy) + optimizer + host
    samples = profile.samples_per_step * m * layout.data_parallel
    out = (forward, backward, recompute, optimizer, host,
           samples / step if step > 0 else math.inf)  # fmt: skip
    if memo is not None:
        memo[id(layout)] = out
    return out


def _rate_bound(
    layout: Layout, profile: StepProfile, shape: ModelShape | None, done: Work, net: Network,
    params: scaling.Params = scaling.DEFAULT, memo: dict[int, Parts] | None = None,
    traffic: bool = True,
) -> float:  # fmt: skip
    """Samples per second ``layout`` cannot exceed: :func:`layout_step` without its
    tensor-, context- and pipeline-parallel traffic (which only add time); the exposed
    data-parallel traffic, which it adds as it is, included (over a slow network between
    instances it is most of the step, and the bound then tells layouts apart); without
    ``traffic``, a looser bound that costs next to nothing once ``memo`` holds the parts."""
    forward, backward, recompute, optimizer, host, loose = _parts(
        layout, profile, shape, done, net, params, memo
    )
    if not traffic or layout.shard_group == 1:
        return loose
    busy = forward + backward + recompute
    m = layout.gradient_accumulation
    step = busy * m + _bubble(layout, busy) + optimizer + host
    x = _Micro(layout, profile, shape, net, forward, backward, recompute,
               params.bandwidth_share, ACTIVATION_BYTES.get(profile.precision, 2))  # fmt: skip
    dp = _data_parallel_terms(x, params)
    step += dp[3] if dp is not None else 0.0
    samples = profile.samples_per_step * m * layout.data_parallel
    return samples / step if step > 0 else math.inf


def layout_step(
    layout: Layout,
    profile: StepProfile,
    shape: ModelShape | None,
    done: Work,
    net: Network,
    peak_flops: float,
    model_flops: float,
    params: scaling.Params = scaling.DEFAULT,
    memo: dict[int, Parts] | None = None,
) -> LayoutStep:
    """The step of ``layout`` for a micro-batch of ``profile`` (``done``: its work on one
    GPU; ``model_flops``: its forward and backward FLOPs, whole model)."""
    m = layout.gradient_accumulation
    forward, backward, recompute, optimizer, host, _ = _parts(
        layout, profile, shape, done, net, params, memo
    )
    x = _Micro(layout, profile, shape, net, forward, backward, recompute,
               params.bandwidth_share, ACTIVATION_BYTES.get(profile.precision, 2))  # fmt: skip
    found = (_tensor_parallel(x), _context_parallel(x), _pipeline_send(x)) if shape else ()
    uses = [u for u in (*found, _data_parallel(x, params)) if u is not None]
    exposed = {u.group: u.exposed_s for u in uses}
    micro = (
        forward + backward + recompute + (exposed.get("tensor", 0) + exposed.get("context", 0)) / m
    )
    bubble = _bubble(layout, micro)
    send, dp = exposed.get("pipeline", 0.0), exposed.get("data", 0.0)
    step = micro * m + bubble + send + dp + optimizer + host
    d = layout.data_parallel
    return LayoutStep(
        layout=layout,
        compute_s=(forward + backward) * m,
        recompute_s=recompute * m,
        tensor_parallel_s=exposed.get("tensor", 0.0),
        context_parallel_s=exposed.get("context", 0.0),
        pipeline_bubble_s=bubble,
        pipeline_send_s=send,
        data_parallel_s=dp,
        optimizer_s=optimizer,
        host_s=host,
        step_s=step,
        samples_per_step=profile.samples_per_step * m * d,
        tokens_per_step=profile.tokens_per_step * m * d,
        model_flops_per_step=model_flops * m * d,
        peak_flops=peak_flops,
        links=tuple(uses),
    )


# ZeRO-Offload's update on the host: the fp32 states stream through host memory at about
# this rate, and the 16-bit gradients and parameters cross PCIe once each way
HOST_UPDATE_BYTES_PER_S = 50e9
HOST_LINK_BYTES_PER_S = 25e9


def _offloaded(profile: StepProfile, split: int) -> float:
    memory = profile.memory
    states = (memory.optimizer_states_bytes + memory.master_weights_bytes) / split
    moved = (memory.gradients_bytes + memory.parameters_bytes) / split
    return 2 * states / HOST_UPDATE_BYTES_PER_S + moved / HOST_LINK_BYTES_PER_S


@dataclass(frozen=True, slots=True)
class Planned:
    """A layout with its memory and step on one GPU type."""

    layout: Layout
    memory: LayoutMemory
    usable_bytes: float
    step: LayoutStep

    @property
    def fits(self) -> bool:
        return self.memory.total_bytes <= self.usable_bytes

    @property
    def headroom(self) -> float:
        return 1.0 - self.memory.total_bytes / self.usable_bytes

    def to_dict(self) -> dict[str, Any]:
        return {
            "layout": self.layout.to_dict(),
            "gpus": self.layout.gpus,
            "fits": self.fits,
            "memory_per_gpu_bytes": self.memory.total_bytes,
            "memory_headroom": round(self.headroom, 4),
            "memory": self.memory.to_dict(),
            **self.step.to_dict(),
        }


def layout_memory(profile: StepProfile, layout: Layout, shape: ModelShape | None) -> LayoutMemory:
    """``profile``'s memory on one GPU of ``layout``, with what its stack made of it (the
    operator policy's selective checkpointing, FSDP keeping the gathered weights)."""
    return memory_per_gpu(
        profile.memory, layout, shape, profile.trains, profile.selective_activations_bytes,
        profile.reshard_after_forward, profile.head_activations_bytes,
    )  # fmt: skip


def plan_layout(
    layout: Layout,
    profile: StepProfile,
    shape: ModelShape | None,
    done: Work,
    net: Network,
    mode: MathMode,
    usable_bytes: float,
    held: LayoutMemory | None = None,
    flops: float | None = None,
    memo: dict[int, Parts] | None = None,
) -> Planned:
    """A layout's memory (``held`` where already counted) and step (``flops``:
    :func:`model_flops` of ``profile``, where already counted; ``memo``: see
    :func:`_parts`)."""
    if held is None:
        held = layout_memory(profile, layout, shape)
    if flops is None:
        flops = model_flops(profile)
    step = layout_step(layout, profile, shape, done, net, mode.tensor_flops, flops, memo=memo)
    return Planned(layout, held, usable_bytes, step)


def model_flops(profile: StepProfile) -> float:
    """Forward and backward FLOPs of one micro-batch, whole model (no optimizer)."""
    return sum(
        flops
        for (phase, _), (flops, _moved) in profile.mix.work.items()
        if phase in ("forward", "backward")
    )


def global_accumulation(layout: Layout, global_batch: int, micro: float) -> int:
    """Micro-batches per step for ``global_batch`` samples (at least one)."""
    return max(1, math.ceil(global_batch / (micro * layout.data_parallel)))


def ranked(found: Sequence[Planned]) -> list[Planned]:
    """Fitting layouts first, then by throughput (samples per second), highest first; at
    equal throughput the one holding less memory."""
    return sorted(found, key=lambda x: (not x.fits, -x.step.samples_per_s, x.memory.total_bytes))


def by_count_fastest(found: Mapping[int, Sequence[Planned]]) -> dict[int, Planned | None]:
    """The fastest fitting layout at each count (None where none fits)."""
    return {n: next((x for x in ranked(v) if x.fits), None) for n, v in sorted(found.items())}


@dataclass(frozen=True, slots=True)
class Plan:
    """Every valid layout at ``count`` GPUs ranked, the fewest GPUs on which one fits, and
    the fastest fitting layout at each count up to ``max_count``."""

    count: int
    ranked: tuple[Planned, ...]
    smallest_count: int | None
    fastest_by_count: Mapping[int, Planned | None]
    net: Network
    stack: Stack


# a layout's dimension beyond data parallelism, and the stack parallelism naming it
SPLITS = (("tensor_parallel", "tensor"), ("pipeline_parallel", "pipeline"),
          ("context_parallel", "context"))  # fmt: skip


def unsupported(layout: Layout, parallelism: Sequence[str] | None) -> str | None:
    """The first of ``layout``'s dimensions a stack that splits a step only over
    ``parallelism`` does not run (None: it runs them all, or any where not given)."""
    if parallelism is None:
        return None
    return next(
        (field for field, name in SPLITS
         if getattr(layout, field) > 1 and name not in parallelism),
        None,
    )  # fmt: skip


def sized_at(
    count: int,
    profile: StepProfile,
    shape: ModelShape | None,
    gpus_per_node: int,
    global_batch: int | None = None,
) -> list[tuple[Layout, LayoutMemory]]:
    """Every valid layout of ``count`` GPUs at the profile's micro-batch (accumulating to
    ``global_batch``, by default a micro-batch per GPU) with its memory per GPU, least
    memory first. It does not depend on the GPU: one table serves every GPU type."""
    micro = profile.batch_size
    target = global_batch or max(1, round(count * micro))
    out = []
    timed: set[tuple[Any, ...]] = set()
    for base in layouts_for(count, shape, gpus_per_node, profile.seq_len, profile.trains):
        if micro * base.data_parallel > target or unsupported(base, profile.parallelism):
            continue
        accumulation = global_accumulation(base, target, micro) if profile.trains else 1
        layout = replace(
            base, micro_batch_size=max(1, round(micro)), gradient_accumulation=accumulation
        )
        held = layout_memory(profile, layout, shape)
        # the step reads the checkpointing only for recomputation ("full"): a layout that
        # differs from an earlier one only in keeping the attention scores or not, with the
        # same memory (flash attention keeps none), has the same step too: left out
        twin = (_as_timed(layout), round(held.total_bytes))
        if twin in timed:
            continue
        timed.add(twin)
        out.append((layout, held))
    out.sort(key=lambda pair: pair[1].total_bytes)
    return out


def planned_at(
    count: int,
    profile: StepProfile,
    shape: ModelShape | None,
    done: Work,
    net: Network,
    mode: MathMode,
    usable_bytes: float,
    global_batch: int | None = None,
) -> list[Planned]:
    """Every valid layout of ``count`` GPUs with its memory and step; where two differ in
    nothing measured (same memory and step), the one with fewer options switched on."""
    sized = sized_at(count, profile, shape, net.gpus_per_node, global_batch)
    flops = model_flops(profile)
    out: list[Planned] = []
    seen: set[tuple[float, float]] = set()
    for layout, held in sized:
        found = plan_layout(layout, profile, shape, done, net, mode, usable_bytes, held, flops)
        key = (round(found.memory.total_bytes), round(found.step.step_s, 9))
        if key in seen:
            continue
        seen.add(key)
        out.append(found)
    return ranked(out)


def fastest_fitting(
    profile: StepProfile,
    shape: ModelShape | None,
    done: Work,
    net: Network,
    mode: MathMode,
    usable_bytes: float,
    sized: Sequence[tuple[Layout, LayoutMemory]],
    memo: dict[int, Parts] | None = None,
) -> Planned | None:
    """The first of :func:`planned_at` where it fits ``usable_bytes`` (the fastest fitting
    layout; at equal throughput the one holding less memory), found without timing every
    layout: the fitting ones are timed from the highest bound on their throughput down
    (:func:`_rate_bound`), until the fastest found beats every bound left."""
    flops = model_flops(profile)
    # best bound first: each layout bounded loosely (its computation alone, kept in
    # ``memo``), then tightly (its data-parallel traffic added), then timed, each only
    # while its bound is still above the fastest timed so far
    # least memory first: those before the first that does not fit are the ones that do
    fitting = bisect.bisect_right(sized, usable_bytes, key=lambda row: row[1].total_bytes)
    params = scaling.DEFAULT
    heap: list[tuple[float, int, int, Layout, LayoutMemory]] = [
        (-_parts(layout, profile, shape, done, net, params, memo)[5], index, 0, layout, held)
        for index, (layout, held) in enumerate(sized[:fitting])
    ]
    heapq.heapify(heap)
    best: tuple[float, float, int] | None = None
    found: Planned | None = None
    while heap:
        negative_bound, index, level, layout, held = heapq.heappop(heap)
        if best is not None and -negative_bound < -best[0] * (1 - 1e-9):
            break
        if level == 0 and layout.shard_group > 1:
            tight = _rate_bound(layout, profile, shape, done, net, memo=memo)
            heapq.heappush(heap, (-tight, index, 1, layout, held))
            continue
        planned = plan_layout(
            layout, profile, shape, done, net, mode, usable_bytes, held, flops, memo
        )
        key = (-planned.step.samples_per_s, planned.memory.total_bytes, index)
        if best is None or key < best:
            best, found = key, planned
    return found


_TIMED = tuple(f.name for f in fields(Layout) if f.name != "activation_checkpointing")


def _as_timed(layout: Layout) -> tuple[Any, ...]:
    """What of ``layout`` its step depends on: all but whether "none" or "selective"."""
    return (layout.activation_checkpointing == "full", *(getattr(layout, f) for f in _TIMED))


def plan(
    profile: StepProfile,
    shape: ModelShape | None,
    done: Work,
    net: Network,
    mode: MathMode,
    usable_bytes: float,
    stack: Stack | str,
    count: int | None = None,
    max_count: int = 64,
    global_batch: int | None = None,
) -> Plan:
    """The plan for ``profile`` on GPUs of ``usable_bytes`` each (see :class:`Plan`)."""
    by_count: dict[int, list[Planned]] = {}
    n = 1
    while n <= max(max_count, count or 1):
        deadline.check()
        by_count[n] = planned_at(n, profile, shape, done, net, mode, usable_bytes, global_batch)
        n *= 2
    if count is not None and count not in by_count:
        by_count[count] = planned_at(
            count, profile, shape, done, net, mode, usable_bytes, global_batch
        )
    fastest = by_count_fastest(by_count)
    smallest = next((k for k, v in fastest.items() if v is not None), None)
    at = count if count is not None else smallest
    chosen = tuple(by_count.get(at, [])) if at is not None else ()
    limited = {k: v for k, v in fastest.items() if k <= max_count or k == count}
    return Plan(at or 0, chosen, smallest, limited, net, as_stack(stack))


# --- inference per layout ------------------------------------------------------------------

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


def layout_inference(
    profile: StepProfile,
    shape: ModelShape | None,
    gpu: Gpu,
    mode: MathMode,
    step_model: StepModel,
    net: Network,
    tensor_parallel: int,
    stack: Stack | str,
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
    stack = as_stack(stack)
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
