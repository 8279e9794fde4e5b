"""What each kind of parallelism sends, and over which link: tensor, context and pipeline parallel,
data-parallel gradients."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any

from service.engine.estimating import scaling
from service.engine.estimating.layout import Layout, ModelShape
from service.engine.estimating.step_profile import StepProfile
from service.engine.planning.network import Network
from service.engine.planning.work import Widths, wave_efficiency

# the bandwidth at which a layout's communication costs at most this share of its step
NEEDED_EXPOSED_SHARE = 0.10


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
