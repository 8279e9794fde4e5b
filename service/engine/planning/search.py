"""The layouts of a workload on a GPU type: which fit, how fast each is, the fastest."""

from __future__ import annotations

import bisect
import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any

from service.engine import deadline
from service.engine.estimating import scaling
from service.engine.estimating.layout import Layout, ModelShape
from service.engine.estimating.layout_memory import LayoutMemory, layouts_for, memory_per_gpu
from service.engine.estimating.roofline import MathMode
from service.engine.estimating.software import (
    Stack,
)
from service.engine.estimating.step_profile import StepProfile
from service.engine.planning.network import Network
from service.engine.planning.step_time import LayoutStep, Parts, _parts, _rate_bound, layout_step
from service.engine.planning.work import Work, model_flops


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
    stack: Stack,
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
    return Plan(at or 0, chosen, smallest, limited, net, stack)
