"""Partition a stretch of GPU time by what the GPU was doing, and the idle time by why.

When kernels on several streams overlap, each instant counts once, for the kind that
ranks highest (compute before communication before copies): so communication and copies
count only where they are *exposed*, and the parts add up to the wall time exactly.
Idle instants are split by what the host was doing then: loading input, synchronising,
launching kernels, or something else.
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np

from profiles.trace.kinds import COMPUTE, KINDS

# When kinds overlap the lowest rank wins: every compute kind, then communication, then copies.
_ORDER = (
    [k for k in KINDS if k in COMPUTE]
    + ["communication"]
    + [k for k in KINDS if k not in COMPUTE and k != "communication"]
)
RANK_OF_KIND = np.array([_ORDER.index(k) for k in KINDS])
IDLE_CAUSES = ("input", "synchronisation", "launch", "host")


def partition(
    starts: np.ndarray, ends: np.ndarray, kinds: np.ndarray, window: tuple[float, float]
) -> tuple[np.ndarray, list[tuple[float, float]]]:
    """Busy time per kind (index = kind index) in ``window``, and the idle gaps."""
    lo, hi = window
    busy = np.zeros(len(KINDS))
    keep = (ends > lo) & (starts < hi)
    starts, ends, kinds = np.clip(starts[keep], lo, hi), np.clip(ends[keep], lo, hi), kinds[keep]
    order = np.argsort(starts, kind="stable")
    starts, ends, kinds = starts[order], ends[order], kinds[order]
    gaps: list[tuple[float, float]] = []
    active: list[tuple[int, float, int]] = []  # heap of (rank, end, kind)
    now = lo
    i, n = 0, len(starts)
    while now < hi:
        while i < n and starts[i] <= now:
            kind = int(kinds[i])
            heapq.heappush(active, (int(RANK_OF_KIND[kind]), float(ends[i]), kind))
            i += 1
        while active and active[0][1] <= now:
            heapq.heappop(active)
        next_start = float(starts[i]) if i < n else hi
        if not active:
            if next_start > now:
                gaps.append((now, min(next_start, hi)))
            now = min(next_start, hi)
            continue
        _, top_end, top_kind = active[0]
        # the top kind holds until it ends or a new activity starts
        until = min(top_end, next_start, hi)
        # expired entries below the top are dropped lazily
        busy[top_kind] += until - now
        now = until
        if now >= top_end:
            heapq.heappop(active)
    return busy, gaps


def _overlap(
    gaps: Sequence[tuple[float, float]], spans: Sequence[tuple[float, float]]
) -> tuple[list[tuple[float, float]], float]:
    """The parts of ``gaps`` not covered by ``spans``, and the covered length."""
    if not spans:
        return list(gaps), 0.0
    spans = sorted(spans)
    covered = 0.0
    rest: list[tuple[float, float]] = []
    j = 0
    for lo, hi in gaps:
        cursor = lo
        while j < len(spans) and spans[j][1] <= lo:
            j += 1
        k = j
        while k < len(spans) and spans[k][0] < hi:
            s, e = max(spans[k][0], cursor), min(spans[k][1], hi)
            if e > s:
                if s > cursor:
                    rest.append((cursor, s))
                covered += e - s
                cursor = e
            k += 1
        if cursor < hi:
            rest.append((cursor, hi))
    return rest, covered


def attribute_idle(
    gaps: list[tuple[float, float]],
    loader: Sequence[tuple[float, float]],
    sync: Sequence[tuple[float, float]],
    launches: np.ndarray,
    launch_gap_us: float = 20.0,
) -> dict[str, float]:
    """Idle time by cause: input loading, synchronisation, kernel launching, other host work.

    Launch-bound time is idle time within ``launch_gap_us`` after a kernel launch call (the
    GPU was waiting for the host to issue the next kernel)."""
    rest, input_time = _overlap(gaps, loader)
    rest, sync_time = _overlap(rest, sync)
    launch_spans = [(float(t), float(t) + launch_gap_us) for t in launches]
    rest, launch_time = _overlap(rest, _merge(launch_spans))
    return {
        "input": input_time,
        "synchronisation": sync_time,
        "launch": launch_time,
        "host": sum(hi - lo for lo, hi in rest),
    }


def _merge(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    merged: list[tuple[float, float]] = []
    for lo, hi in sorted(spans):
        if merged and lo <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], hi))
        else:
            merged.append((lo, hi))
    return merged
