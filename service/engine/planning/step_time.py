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
host time; fitted on MLPerf Training's LLM rows
(:func:`service.engine.validating.llm_validation.fit_optimized`).

The other parts of the planner: :mod:`~service.engine.planning.work` (what a step computes),
:mod:`~service.engine.planning.collectives` (what each parallelism sends),
:mod:`~service.engine.planning.search` (the layouts that fit, the fastest) and
:mod:`~service.engine.planning.serving` (inference layouts).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from service.engine.estimating import scaling
from service.engine.estimating.layout import ACTIVATION_BYTES, Layout, ModelShape
from service.engine.estimating.step_profile import StepProfile
from service.engine.planning.collectives import (
    OPERATOR_RECOMPUTE,
    LinkUse,
    _context_parallel,
    _data_parallel,
    _data_parallel_terms,
    _Micro,
    _pipeline_send,
    _slowdown,
    _tensor_parallel,
)
from service.engine.planning.network import Network
from service.engine.planning.work import Work


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
