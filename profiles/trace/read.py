"""Read a trace end to end: stream the events, collect, analyse; JSON-ready results."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, BinaryIO

from profiles.trace.analysis import TraceAnalysis, analyze
from profiles.trace.collect import Collector
from profiles.trace.stream import Limits, StreamStats, TraceFormatError, TraceStream

CAPTURE_HINT = (
    "Record a trace with torch.profiler (activities CPU and CUDA, a schedule with a few "
    "active steps, record_shapes=True, with_flops=True, profile_memory=True) and export it "
    "with export_chrome_trace or tensorboard_trace_handler; `rightsize capture -- python "
    "train.py` does this for you."
)
FLOW_PHASES = frozenset({b"s", b"f"})  # flow arrows: not needed for the analysis


def read_trace(
    raw: BinaryIO, limits: Limits | None = None, marker: str | None = None
) -> tuple[TraceAnalysis, StreamStats]:
    """Analyse the trace in ``raw`` (plain or gzipped JSON); raise TraceFormatError."""
    stream = TraceStream(raw, limits, skip_phases=FLOW_PHASES)
    collected = Collector(marker).add_all(stream)
    metadata = stream.stats.metadata
    if "traceEvents" not in metadata and stream.stats.events == 0 and metadata:
        raise TraceFormatError("not-a-trace", "a JSON document without trace events")
    if collected.events and not (
        collected.gpu_start or collected.cpu_ops or collected.steps or collected.launch_start
    ):
        raise TraceFormatError(
            "not-a-trace", "no profiler events (CPU ops, CUDA runtime calls or GPU kernels)"
        )
    return analyze(collected, metadata, marker), stream.stats


def analysis_dict(analysis: TraceAnalysis, stats: StreamStats) -> dict[str, Any]:
    """The analysis as the API returns it (times in microseconds, shares as fractions)."""
    out = asdict(analysis)
    out["step_time_us"] = analysis.step_time_us
    times = analysis.step_times_us
    if times:
        mean = sum(times) / len(times)
        std = (sum((t - mean) ** 2 for t in times) / len(times)) ** 0.5
        out["step_time_spread"] = {
            "min_us": min(times),
            "max_us": max(times),
            "mean_us": mean,
            "std_us": std,
            "cv": std / mean if mean else None,
        }
    for key in ("breakdown", "whole_trace"):
        part = getattr(analysis, key)
        if part is not None:
            out[key]["idle_total_us"] = part.idle_total_us
            out[key]["shares"] = part.shares()
    out["stream"] = {
        "compressed_bytes": stats.compressed_bytes,
        "decompressed_bytes": stats.decompressed_bytes,
        "events": stats.events,
        "gzipped": stats.gzipped,
    }
    return out
