"""One pass over a trace's events, keeping only what the analysis needs, in compact arrays.

GPU activities (kernels, memcpys, memsets) and runtime launch calls are kept as columns of
``array('d')`` / ``array('q')`` (a few tens of bytes per event), so a trace of millions of
events stays small in memory; CPU spans are kept only for step markers, data-loader work
and synchronisation calls.
"""

from __future__ import annotations

import json
import re
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import numpy as np

from profiles.trace.kinds import KINDS, classify_copy, classify_kernel, rules
from profiles.trace.metadata import shown
from profiles.trace.stream import TraceFormatError

KIND_INDEX = {k: i for i, k in enumerate(KINDS)}
PRECISIONS = ("tf32", "16-bit", "fp8", "int8", "fp32")
GPU_CATEGORIES = {"kernel", "gpu_memcpy", "gpu_memset", "Kernel", "Memcpy", "Memset"}
RUNTIME_CATEGORIES = {"cuda_runtime", "cuda_driver", "Runtime", "hip_runtime"}
SYNC = re.compile(r"(Device|Stream|Event)Synchronize|^cudaMemcpy$|cudaMemcpy(2D)?$|hipDeviceSync")
LOADER = re.compile(
    r"DataLoader|dataloader|_MultiProcessingDataLoaderIter|__next__|data_loader", re.IGNORECASE
)
STEP = re.compile(r"^ProfilerStep#(\d+)$")
_NO_ARGS: dict[str, Any] = {}
INT64 = 2**63
SHOWN_CHARS = 60
# Bounds on the numbers the analysis adds, subtracts and divides: within them nothing it
# derives overflows to inf (or NaN). Times are microseconds: 2**62 µs is 146,000 years, and
# Kineto's timestamps since the epoch (even in nanoseconds) are far below it; the largest
# single op counts some 1e15 FLOPs.
TIME_LIMIT = 2.0**62
FLOPS_LIMIT = 2.0**64


@dataclass
class Collected:
    """The raw material of the analysis, in compact columns."""

    gpu_start: array[float] = field(default_factory=lambda: array("d"))
    gpu_end: array[float] = field(default_factory=lambda: array("d"))
    gpu_kind: array[int] = field(default_factory=lambda: array("b"))
    gpu_precision: array[int] = field(default_factory=lambda: array("b"))
    gpu_correlation: array[int] = field(default_factory=lambda: array("q"))
    gpu_device: array[int] = field(default_factory=lambda: array("q"))
    gpu_bytes: array[float] = field(default_factory=lambda: array("d"))
    gpu_external: array[int] = field(default_factory=lambda: array("q"))
    launch_start: array[float] = field(default_factory=lambda: array("d"))
    launch_correlation: array[int] = field(default_factory=lambda: array("q"))
    steps: list[tuple[str, float, float]] = field(default_factory=list)
    markers: list[tuple[str, float, float]] = field(default_factory=list)
    loader: list[tuple[float, float]] = field(default_factory=list)
    sync: list[tuple[float, float]] = field(default_factory=list)
    flops_by_external: dict[int, float] = field(default_factory=dict)
    memory_peak: dict[int, float] = field(default_factory=dict)
    kernel_names: dict[str, int] = field(default_factory=dict)
    cpu_ops: int = 0
    events: int = 0


class Collector:
    """Feed events with :meth:`add`; ``collected`` holds the columns."""

    def __init__(self, marker: str | None = None, max_flop_ops: int = 1_000_000) -> None:
        self.collected = Collected()
        self.marker = marker
        self.max_flop_ops = max_flop_ops
        self._cpu_names: dict[str, int] = {}  # name -> 0 other, 1 step, 2 marker, 3 loader
        self._sync_names: dict[str, bool] = {}
        rules()  # loaded now: its own errors must not pass for a bad event's in add_all

    def add_all(self, events: Iterable[dict[str, Any]]) -> Collected:
        """Take every event (the hot loop of trace reading: locals bound once).

        An event whose fields the loop cannot use (a wrong type, an id beyond int64, ...)
        raises TraceFormatError ``bad-event`` naming the event and the field. Nothing is
        checked up front: the loop's own operations fail on such values, and only then does
        :func:`_refusal` look at that one event again to say what was wrong. Numbers out of
        the range the analysis can work with (a time beyond 2**62 µs, a negative duration)
        are found afterwards, column by column (:func:`_check_ranges`)."""
        c = self.collected
        before = _sizes(c)
        gpu, runtime = GPU_CATEGORIES, RUNTIME_CATEGORIES
        sync_names, sync_search = self._sync_names, SYNC.search
        launch_start, launch_correlation = c.launch_start.append, c.launch_correlation.append
        count = 0
        for event in events:
            count += 1
            try:  # free in CPython 3.11 unless something is raised
                get = event.get
                if get("ph") != "X":
                    if get("name") == "[memory]":
                        self._memory(event)
                    continue
                category = get("cat")
                # ``+ 0.0`` (not float()): a string such as "nan" or "5" is a TypeError
                start, duration = event["ts"] + 0.0, get("dur", 0.0) + 0.0
                if category in runtime:
                    args = get("args")
                    correlation = args.get("correlation") if args.__class__ is dict else _no(args)
                    if correlation.__class__ is int:
                        launch_start(start)
                        launch_correlation(correlation)  # OverflowError beyond int64
                    elif correlation is not None:
                        raise TypeError("correlation")
                    name = get("name", "")
                    is_sync = sync_names.get(name)
                    if is_sync is None:
                        is_sync = sync_names[name] = bool(sync_search(name))
                    if is_sync:
                        c.sync.append((start, start + duration))
                elif category in gpu:
                    self._gpu(event, category, start, duration)
                else:
                    self._cpu(event, get("name", ""), start, duration)
            except (TypeError, ValueError, AttributeError, OverflowError, KeyError) as exc:
                raise _refusal(events, c.events + count - 1, count - 1, event, exc) from None
        c.events += count
        _check_ranges(c, before)
        return c

    def add(self, event: dict[str, Any]) -> None:
        self.add_all((event,))

    def _gpu(self, event: dict[str, Any], category: str, start: float, duration: float) -> None:
        c = self.collected
        name = event.get("name", "")
        args = event.get("args")
        if args.__class__ is not dict:
            args = _no(args) or _NO_ARGS
        if category in ("kernel", "Kernel"):
            kind, precision = classify_kernel(name)  # a TypeError where name is no string
            c.kernel_names[name] = c.kernel_names.get(name, 0) + 1
        else:
            kind, precision = (
                classify_copy("gpu_memset" if "set" in category.lower() else "gpu_memcpy", name),
                None,
            )
        c.gpu_start.append(start)
        c.gpu_end.append(start + duration)
        c.gpu_kind.append(KIND_INDEX[kind])
        c.gpu_precision.append(PRECISIONS.index(precision) if precision else -1)
        c.gpu_correlation.append(_int(args.get("correlation")))
        c.gpu_device.append(_int(args.get("device")))
        c.gpu_bytes.append((args.get("bytes") or 0) + 0.0)
        c.gpu_external.append(_int(args.get("External id")))

    def _cpu(self, event: dict[str, Any], name: str, start: float, duration: float) -> None:
        c = self.collected
        if event.get("cat") == "cpu_op":
            c.cpu_ops += 1
        code = self._cpu_names.get(name)
        if code is None:
            code = self._cpu_names[name] = self._cpu_code(name)
        if code == 1:
            c.steps.append((name, start, start + duration))
        elif code == 2:
            c.markers.append((name, start, start + duration))
        elif code == 3:
            c.loader.append((start, start + duration))
        args = event.get("args")
        if args.__class__ is dict:
            if "flops" in args and len(c.flops_by_external) < self.max_flop_ops:
                external = _int(args.get("External id"))
                if external >= 0:
                    c.flops_by_external[external] = args["flops"] + 0.0
        else:
            _no(args)

    def _cpu_code(self, name: str) -> int:
        if STEP.match(name):
            return 1
        if self.marker is not None and name.startswith(self.marker):
            return 2
        return 3 if LOADER.search(name) else 0

    def _memory(self, event: dict[str, Any]) -> None:
        args = event.get("args")
        if args.__class__ is not dict:
            _no(args)
            return
        device = _int(args.get("Device Id"))
        total = args.get("Total Allocated")
        on_gpu = _int(args.get("Device Type")) > 0  # 0 is the CPU, -1 none named
        if total is not None:
            total = total + 0.0
            if on_gpu and device >= 0:
                peaks = self.collected.memory_peak
                peaks[device] = max(peaks.get(device, 0.0), total)


def _no(args: Any) -> Any:
    """Where an event's ``args`` is not an object: None if absent, else a TypeError."""
    if args is not None:
        raise TypeError("args is not an object")
    return None


def _int(value: Any) -> int:
    """An integer field: -1 where absent; a TypeError for any other type (a bool too)."""
    if value.__class__ is int:
        return value
    if value is None:
        return -1
    raise TypeError("not an integer")


# --- the refusal of an event the loop could not use: the error path only, never the hot loop


def _refusal(
    events: Iterable[dict[str, Any]], index: int, ordinal: int, event: Any, exc: Exception
) -> TraceFormatError:
    """TraceFormatError ``bad-event`` for ``event``, the ``ordinal``-th (from 0) of ``events``
    (the ``index``-th of all events this collector took): which field is wrong, and how."""
    where = _where(events, index, ordinal)
    name = event.get("name") if isinstance(event, dict) else None
    if isinstance(name, str):
        where += f" ({shown(name, SHOWN_CHARS)})"
    found = _wrong_field(event) if isinstance(event, dict) else None
    if found is None:  # not pinned down: name the event and what failed
        return TraceFormatError(
            "bad-event", f"{where}: could not be read ({type(exc).__name__}: {exc})"
        )
    path, expected, value = found
    return TraceFormatError("bad-event", f"{where}: {path}: expected {expected}, got {value}")


def _where(events: Iterable[dict[str, Any]], index: int, ordinal: int) -> str:
    """``traceEvents[i]``. A stream that does not pass on every event (TraceStream skips
    the flow events' text unparsed) gives the true index by ``trace_index(ordinal)``, where
    it can; otherwise the message says what the number counts."""
    trace_index = getattr(events, "trace_index", None)
    if callable(trace_index):
        found = trace_index(ordinal)
        if isinstance(found, int):
            return f"traceEvents[{found}]"
    skipped = getattr(events, "skip_phases", None)
    if skipped:
        phases = ", ".join(json.dumps(p.decode(errors="replace")) for p in sorted(skipped))
        return f"traceEvents event {index} (from 0, not counting the ph {phases} events)"
    return f"traceEvents[{index}]"


def _wrong_field(event: dict[str, Any]) -> tuple[str, str, str] | None:
    """(field, what was expected, what was found) for the first field of ``event``, in the
    order the collector reads them, that the collector cannot use; None if all look right."""
    get = event.get
    if get("ph") != "X":  # of the other events only [memory] is read: its args
        return _wrong_args(get("args"), MEMORY_FIELDS) if get("name") == "[memory]" else None
    category = get("cat")
    if category is not None and not isinstance(category, str):
        return "cat", "a string", shown(category, SHOWN_CHARS)
    for key in ("ts", "dur"):
        if key not in event:
            if key == "ts":
                return "ts", "a number (microseconds)", "no ts"
        elif not _is_number(event[key]):
            return key, "a number (microseconds)", shown(event[key], SHOWN_CHARS)
    name = get("name", "")
    if not isinstance(name, str):
        return "name", "a string", shown(name, SHOWN_CHARS)
    args = get("args")
    if category in RUNTIME_CATEGORIES:
        fields = RUNTIME_FIELDS
    elif category in GPU_CATEGORIES:
        fields = GPU_FIELDS
    else:  # a CPU span: its args are read for FLOPs only
        fields = CPU_FIELDS if isinstance(args, dict) and "flops" in args else {}
    return _wrong_args(args, fields)


# the args each kind of event is read for: field -> "integer" (int64) or "number"
RUNTIME_FIELDS = {"correlation": "integer"}
GPU_FIELDS = {"correlation": "integer", "device": "integer", "bytes": "number",
              "External id": "integer"}  # fmt: skip
CPU_FIELDS = {"flops": "number", "External id": "integer"}
MEMORY_FIELDS = {"Device Id": "integer", "Total Allocated": "number", "Device Type": "integer"}


def _wrong_args(args: Any, fields: dict[str, str]) -> tuple[str, str, str] | None:
    if args is None:
        return None
    if not isinstance(args, dict):
        return "args", "an object", shown(args, SHOWN_CHARS)
    for key, kind in fields.items():
        value = args.get(key)
        if value is None:
            continue
        path = f"args.{key}" if key.isidentifier() else f"args[{json.dumps(key)}]"
        if kind == "number" and not _is_number(value):
            return path, "a number", shown(value, SHOWN_CHARS)
        if kind == "integer":
            if not isinstance(value, int) or isinstance(value, bool):
                return path, "an integer", shown(value, SHOWN_CHARS)
            if not -INT64 <= value < INT64:
                bound = "below 2**63" if value > 0 else "of at least -2**63"
                return path, f"an integer {bound}", shown(value, SHOWN_CHARS)
    return None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _sizes(c: Collected) -> tuple[int, ...]:
    return (len(c.gpu_start), len(c.launch_start), len(c.steps), len(c.markers),
            len(c.loader), len(c.sync), len(c.flops_by_external))  # fmt: skip


def _check_ranges(c: Collected, before: tuple[int, ...]) -> None:
    """Refuse (``bad-event``) a time beyond ±TIME_LIMIT, a negative duration or FLOPs outside
    [0, FLOPS_LIMIT] among what the last add_all collected: vectorised, once per call, so the
    loop pays nothing per event. The events' indices are not kept: the message names the
    event by what was collected of it (correlation id, step name, External id, ts)."""
    gpu, launch, steps, markers, loader, sync, flops = before
    start = np.frombuffer(c.gpu_start, dtype=np.float64)[gpu:]
    end = np.frombuffer(c.gpu_end, dtype=np.float64)[gpu:]
    bad = np.flatnonzero((np.abs(start) > TIME_LIMIT) | (np.abs(end) > TIME_LIMIT) | (end < start))
    if len(bad):
        p = gpu + int(bad[0])
        kind, correlation = KINDS[c.gpu_kind[p]], c.gpu_correlation[p]
        who = f"args.correlation {correlation}, " if correlation >= 0 else ""
        _refuse_span(f"the GPU activity ({kind}, {who}ts {c.gpu_start[p]:g})",
                     c.gpu_start[p], c.gpu_end[p])  # fmt: skip
    launches = np.frombuffer(c.launch_start, dtype=np.float64)[launch:]
    bad = np.flatnonzero(np.abs(launches) > TIME_LIMIT)
    if len(bad):
        p = launch + int(bad[0])
        t = c.launch_start[p]
        _refuse_span(f"the runtime call with args.correlation {c.launch_correlation[p]}", t, t)
    for name, lo, hi in c.steps[steps:] + c.markers[markers:]:
        if not -TIME_LIMIT <= lo <= hi <= TIME_LIMIT:
            _refuse_span(f"the event {shown(name, SHOWN_CHARS)} at ts {lo:g}", lo, hi)
    for what, spans in (("data-loader", c.loader[loader:]), ("synchronisation", c.sync[sync:])):
        for lo, hi in spans:
            if not -TIME_LIMIT <= lo <= hi <= TIME_LIMIT:
                _refuse_span(f"the {what} event at ts {lo:g}", lo, hi)
    added = list(islice(c.flops_by_external.values(), flops, None))
    if added and not 0.0 <= min(added) <= max(added) <= FLOPS_LIMIT:
        items = islice(c.flops_by_external.items(), flops, None)
        external, value = next((e, f) for e, f in items if not 0.0 <= f <= FLOPS_LIMIT)
        raise TraceFormatError(
            "bad-event",
            f'traceEvents: the op with args["External id"] {external}: args.flops: expected a '
            f"number from 0 to 2**64, got {value:g}",
        )


def _refuse_span(who: str, start: float, end: float) -> None:
    """Raise ``bad-event`` for the span [start, end] of ``who`` (one bound is wrong)."""
    if not -TIME_LIMIT <= start <= TIME_LIMIT:
        field, expected, got = "ts", "a time within ±2**62 µs", start
    elif end < start:
        field, expected, got = "dur", "a non-negative number (microseconds)", end - start
    else:
        field, expected, got = "ts + dur", "a time within ±2**62 µs", end
    raise TraceFormatError("bad-event", f"traceEvents: {who}: {field}: expected {expected}, "
                           f"got {got:g}")  # fmt: skip
