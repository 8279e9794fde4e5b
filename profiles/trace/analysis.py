"""What a traced run did: steps, GPU time by kind, idle time by cause, memory, FLOPs.

Steps come from ``ProfilerStep#N`` spans (or a marker the client names). Kernels belong to
the step whose CPU span launched them (by CUPTI correlation id), so work that the GPU runs
after the CPU has moved on is still counted in its step. On the GPU the steps tile the
timeline: each runs from the end of the previous step's last kernel to the end of its own.
Without markers the whole trace is one window, and the answer says so.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from profiles.trace.collect import PRECISIONS, Collected
from profiles.trace.kinds import COMPUTE, KINDS
from profiles.trace.timeline import IDLE_CAUSES, attribute_idle, partition

SHORT_KERNEL_US = 10.0


@dataclass
class Breakdown:
    """Mean time per step (µs) by GPU activity kind and by idle cause."""

    wall_us: float
    busy_us: dict[str, float]
    idle_us: dict[str, float]

    @property
    def idle_total_us(self) -> float:
        return sum(self.idle_us.values())

    def shares(self) -> dict[str, float]:
        parts = {**self.busy_us, **{f"idle_{k}": v for k, v in self.idle_us.items()}}
        return {k: v / self.wall_us for k, v in parts.items()} if self.wall_us else {}


@dataclass
class TraceAnalysis:
    device_name: str | None
    device: dict[str, Any]
    distributed: dict[str, Any]
    gpu_events: int
    kernels: int
    steps_found: int
    steps_used: list[str]
    step_times_us: list[float]
    breakdown: Breakdown | None
    whole_trace: Breakdown | None
    short_kernel_share: float | None
    kernels_per_step: float | None
    tensor_core_precision: dict[str, float]
    flops_per_step: float | None
    achieved_tflops: dict[str, float]
    memory_peak_bytes: float | None
    events: int
    notes: list[str] = field(default_factory=list)

    @property
    def step_time_us(self) -> float | None:
        return statistics.median(self.step_times_us) if self.step_times_us else None


def _columns(c: Collected) -> dict[str, np.ndarray]:
    return {
        "start": np.frombuffer(c.gpu_start, dtype=np.float64),
        "end": np.frombuffer(c.gpu_end, dtype=np.float64),
        "kind": np.frombuffer(c.gpu_kind, dtype=np.int8).astype(np.int64),
        "precision": np.frombuffer(c.gpu_precision, dtype=np.int8).astype(np.int64),
        "correlation": np.frombuffer(c.gpu_correlation, dtype=np.int64),
        "device": np.frombuffer(c.gpu_device, dtype=np.int64),
        "external": np.frombuffer(c.gpu_external, dtype=np.int64),
    }


def _device(metadata: dict[str, Any], devices: np.ndarray) -> dict[str, Any]:
    """The properties of the GPU the kernels ran on (a host lists all its GPUs)."""
    listed = [d for d in metadata.get("deviceProperties") or [] if isinstance(d, dict)]
    if not listed:
        return {}
    used = devices[devices >= 0]
    if len(used):
        if used.max() < 1024:  # device ordinals: count them directly
            ident = int(np.bincount(used).argmax())
        else:  # an id of any size (bincount would allocate an array that long)
            ids, counts = np.unique(used, return_counts=True)
            ident = int(ids[counts.argmax()])
        for entry in listed:
            if entry.get("id") == ident:
                return entry
    return listed[0]


def analyze(c: Collected, metadata: dict[str, Any], marker: str | None = None) -> TraceAnalysis:
    cols = _columns(c)
    notes: list[str] = []
    kernels = int(np.count_nonzero(_is_kernel(cols)))
    device = _device(metadata, cols["device"])
    if device:
        mine = cols["device"] == int(device.get("id", -1))
        if mine.any() and not mine.all():
            cols = {k: v[mine] for k, v in cols.items()}
            notes.append(f"GPU activity of device {device.get('id')} only (the trace's rank)")
    if len(cols["start"]) == 0:
        notes.append(
            "no GPU kernels found: a CPU-only trace (or one recorded without CUDA "
            "activities); the GPU time breakdown and projections need a GPU trace"
        )
    spans = sorted(c.markers if marker else c.steps, key=lambda s: s[1])
    windows, used = _windows(spans, cols, c, notes)
    timeline = _Timeline(cols, c)
    breakdowns = [timeline.breakdown(w) for w in windows]
    whole = None
    if len(cols["start"]):
        whole = timeline.breakdown((float(cols["start"].min()), float(cols["end"].max())))
    flops = _flops(c, cols)
    steps = max(len(windows), 1)
    return TraceAnalysis(
        device_name=device.get("name"),
        device={
            k: device.get(k)
            for k in ("id", "name", "totalGlobalMem", "computeMajor", "computeMinor", "numSms")
            if k in device
        },
        distributed=dict(metadata.get("distributedInfo") or {}),
        gpu_events=len(cols["start"]),
        kernels=kernels,
        steps_found=len(spans),
        steps_used=used,
        step_times_us=[w[1] - w[0] for w in windows],
        breakdown=_mean(breakdowns) if breakdowns else whole,
        whole_trace=whole,
        short_kernel_share=_short_share(cols),
        kernels_per_step=kernels / steps if kernels else None,
        tensor_core_precision=_precision_shares(cols),
        flops_per_step=flops[0] / steps if flops[0] else None,
        achieved_tflops=flops[1],
        memory_peak_bytes=max(c.memory_peak.values()) if c.memory_peak else None,
        events=c.events,
        notes=notes,
    )


def _windows(
    spans: list[tuple[str, float, float]],
    cols: dict[str, np.ndarray],
    c: Collected,
    notes: list[str],
) -> tuple[list[tuple[float, float]], list[str]]:
    """GPU time windows of the steps used (the first of three or more is warm-up)."""
    if not spans:
        if len(cols["start"]):
            notes.append(
                "no step markers (ProfilerStep#N): the whole trace is analysed as one window"
            )
        return [], []
    if not len(cols["start"]):
        return [], []
    launch_t = np.frombuffer(c.launch_start, dtype=np.float64)
    launch_c = np.frombuffer(c.launch_correlation, dtype=np.int64)
    order = np.argsort(launch_c)
    launch_t, launch_c = launch_t[order], launch_c[order]
    where = np.searchsorted(launch_c, cols["correlation"])
    where = np.clip(where, 0, max(len(launch_c) - 1, 0))
    matched = len(launch_c) > 0
    launched = np.where(
        matched & (launch_c[where] == cols["correlation"]) if matched else False,
        launch_t[where] if matched else 0.0,
        cols["start"],
    )
    starts = np.array([s[1] for s in spans])
    owner = np.searchsorted(starts, launched, side="right") - 1
    windows: list[tuple[float, float]] = []
    previous_end = spans[0][1]
    for index, (_name, cpu_start, _cpu_end) in enumerate(spans):
        mine = owner == index
        end = float(cols["end"][mine].max()) if mine.any() else previous_end
        begin = max(previous_end, cpu_start) if index == 0 else previous_end
        windows.append((begin, max(end, begin)))
        previous_end = max(end, begin)
    names = [s[0] for s in spans]
    if len(windows) >= 3:
        notes.append(f"{names[0]} excluded as warm-up")
        return windows[1:], names[1:]
    return windows, names


class _Timeline:
    """The GPU activity, data-loader and synchronisation spans and launch times, sorted
    once, so that each step's breakdown reads only what overlaps it: a trace of 25,000
    steps spent 88 s comparing every step with every span (now a second)."""

    def __init__(self, cols: dict[str, np.ndarray], c: Collected) -> None:
        order = np.argsort(cols["start"], kind="stable")
        self.starts, self.ends = cols["start"][order], cols["end"][order]
        self.kinds = cols["kind"][order]
        self.reach = np.maximum.accumulate(self.ends) if len(self.ends) else self.ends
        self.launches = np.sort(np.frombuffer(c.launch_start, dtype=np.float64))
        self.loader, self.sync = _Spans(c.loader), _Spans(c.sync)

    def breakdown(self, window: tuple[float, float]) -> Breakdown:
        lo, hi = window
        first, last = _overlapping(self.starts, self.reach, lo, hi)
        busy, gaps = partition(
            self.starts[first:last], self.ends[first:last], self.kinds[first:last], window
        )
        launches = self.launches[
            np.searchsorted(self.launches, lo - 50) : np.searchsorted(self.launches, hi)
        ]
        idle = attribute_idle(gaps, self.loader.within(lo, hi), self.sync.within(lo, hi), launches)
        return Breakdown(
            hi - lo,
            {k: float(busy[i]) for i, k in enumerate(KINDS)},
            {k: float(idle[k]) for k in IDLE_CAUSES},
        )


class _Spans:
    """Host spans (data loading, synchronisation) by start, with the furthest end reached
    so far at each: what overlaps a window is a slice."""

    def __init__(self, spans: list[tuple[float, float]]) -> None:
        self.spans = sorted(spans)
        self.starts = np.array([s for s, _ in self.spans], dtype=np.float64)
        ends = np.array([e for _, e in self.spans], dtype=np.float64)
        self.reach = np.maximum.accumulate(ends) if len(ends) else ends

    def within(self, lo: float, hi: float) -> list[tuple[float, float]]:
        first, last = _overlapping(self.starts, self.reach, lo, hi)
        return self.spans[first:last]


def _overlapping(starts: np.ndarray, reach: np.ndarray, lo: float, hi: float) -> tuple[int, int]:
    """The index range of spans (sorted by start, ``reach`` the furthest end so far) that
    may overlap (lo, hi): every span before it ends by ``lo``, every one after starts at
    ``hi`` or later."""
    return int(np.searchsorted(reach, lo, side="right")), int(np.searchsorted(starts, hi))


def _mean(parts: list[Breakdown]) -> Breakdown:
    n = len(parts)
    return Breakdown(
        sum(p.wall_us for p in parts) / n,
        {k: sum(p.busy_us[k] for p in parts) / n for k in KINDS},
        {k: sum(p.idle_us[k] for p in parts) / n for k in IDLE_CAUSES},
    )


COPIES = [KINDS.index(k) for k in ("memcpy_h2d", "memcpy_d2h", "memcpy_d2d", "memset")]


def _is_kernel(cols: dict[str, np.ndarray]) -> np.ndarray:
    """Kernels, as opposed to memcpy and memset activities."""
    return ~np.isin(cols["kind"], COPIES)


def _short_share(cols: dict[str, np.ndarray]) -> float | None:
    kernel = _is_kernel(cols)
    if not kernel.any():
        return None
    durations = (cols["end"] - cols["start"])[kernel]
    return float(np.mean(durations < SHORT_KERNEL_US))


def _precision_shares(cols: dict[str, np.ndarray]) -> dict[str, float]:
    """Share of tensor-core GEMM time by precision (from kernel names)."""
    tensor = cols["kind"] == KINDS.index("tensor_gemm")
    durations = (cols["end"] - cols["start"])[tensor]
    total = float(durations.sum())
    if not total:
        return {}
    precision = cols["precision"][tensor]
    return {
        p: float(durations[precision == i].sum()) / total
        for i, p in enumerate(PRECISIONS)
        if durations[precision == i].sum() > 0
    }


def _flops(c: Collected, cols: dict[str, np.ndarray]) -> tuple[float, dict[str, float]]:
    """FLOPs recorded with ``with_flops`` (by launching op), and TFLOPS achieved per kind."""
    if not c.flops_by_external:
        return 0.0, {}
    external = cols["external"]
    durations = cols["end"] - cols["start"]
    total = 0.0
    achieved: dict[str, float] = {}
    seen: set[int] = set()
    for i, kind in enumerate(KINDS):
        if kind not in COMPUTE:
            continue
        mask = cols["kind"] == i
        ops = {int(e) for e in external[mask] if e in c.flops_by_external}
        flops = sum(c.flops_by_external[e] for e in ops - seen)
        seen |= ops
        time_us = float(durations[mask & np.isin(external, list(ops))].sum()) if ops else 0.0
        if flops and time_us:
            achieved[kind] = flops / (time_us * 1e-6) / 1e12
        total += flops
    return total, achieved
