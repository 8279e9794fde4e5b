"""Read a trace end to end: stream the events, collect, analyse; JSON-ready results."""

from __future__ import annotations

import hashlib
import io
from collections.abc import Callable
from dataclasses import asdict
from typing import IO, Any, BinaryIO

from profiles.trace.analysis import TraceAnalysis, analyze
from profiles.trace.collect import Collector
from profiles.trace.metadata import check_metadata
from profiles.trace.stream import Limits, StreamStats, TraceFormatError, TraceStream

CAPTURE_HINT = (
    "Record a trace with torch.profiler (activities CPU and CUDA, a schedule with a few "
    "active steps, record_shapes=True, with_flops=True, profile_memory=True) and export it "
    "with export_chrome_trace or tensorboard_trace_handler; `rightsize capture -- python "
    "train.py` does this for you."
)
FLOW_PHASES = frozenset({b"s", b"f"})  # flow arrows: not needed for the analysis


Progress = Callable[[str, StreamStats], None]  # (reading | analysing, what was read so far)


def read_trace(
    raw: BinaryIO,
    limits: Limits | None = None,
    marker: str | None = None,
    progress: Progress | None = None,
) -> tuple[TraceAnalysis, StreamStats]:
    """Analyse the trace in ``raw`` (plain or gzipped JSON); raise TraceFormatError (a limit
    passed, not a trace, metadata of the wrong type). ``progress`` hears after each chunk
    read, and once the analysis starts."""
    reading = (lambda stats: progress("reading", stats)) if progress is not None else None
    stream = TraceStream(raw, limits, skip_phases=FLOW_PHASES, progress=reading)
    collected = Collector(marker).add_all(stream)
    if progress is not None:
        progress("analysing", stream.stats)
    if stream.stats.events == 0:  # counts the skipped flow events too
        raise TraceFormatError(
            "not-a-trace", "no trace events: not a single event object in the document"
        )
    if not (collected.gpu_start or collected.cpu_ops or collected.steps or collected.launch_start):
        raise TraceFormatError(
            "not-a-trace", "no profiler events (CPU ops, CUDA runtime calls or GPU kernels)"
        )
    check_metadata(stream.stats.metadata)
    return analyze(collected, stream.stats.metadata, marker), stream.stats


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


class _Hashing(io.RawIOBase):
    """Hashes what is read: the trace's id."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw, self.digest = raw, hashlib.sha256()

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        self.digest.update(data)
        buffer[: len(data)] = data
        return len(data)


def analysed(
    raw: IO[bytes],
    limits: Limits | None = None,
    marker: str | None = None,
    progress: Progress | None = None,
) -> tuple[dict[str, Any], str]:
    """The trace in ``raw`` analysed (:func:`analysis_dict`), and its content's id: a hash
    of its bytes and the step marker (a stored trace's id adds its owner and options).
    ``progress`` as :func:`read_trace`'s."""
    hashing = _Hashing(raw)
    analysis, stats = read_trace(io.BufferedReader(hashing, 1 << 20), limits, marker, progress)
    hashing.digest.update((marker or "").encode())
    return analysis_dict(analysis, stats), hashing.digest.hexdigest()[:24]
