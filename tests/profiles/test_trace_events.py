"""Trace events with a field the reader cannot use: refused with ``bad-event``, naming the
event (its index in traceEvents and its name) and the field, never an exception of another
kind (which the service would answer with a 500) and never a silent guess."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any

import pytest

from profiles.trace import collect
from profiles.trace.collect import Collector
from profiles.trace.read import read_trace
from profiles.trace.stream import TraceFormatError, TraceStream
from tests.profiles.trace_factory import known_steps

Event = dict[str, Any]
KERNEL = "kernel"
RUNTIME = "cuda_runtime"
MEMCPY = "gpu_memcpy"
CPU_OP = "cpu_op"  # the first is a data-loader span
OP = "aten::mm"  # the op with FLOPs
STEP = "user_annotation"
MEMORY = "[memory]"


def _events(flows: bool = False) -> list[Event]:
    """Two steps of kernels and launches, an op with FLOPs, a memcpy and a memory event
    (without the flow events unless asked: the reader skips those unparsed)."""
    b = known_steps(2)
    b.cpu("aten::mm", 10_210.0, 5.0, **{"External id": 1, "flops": 1000})
    b.events.append(
        {"ph": "X", "cat": MEMCPY, "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
         "tid": 7, "ts": 10_220.0, "dur": 2, "args": {"device": 0, "bytes": 4096}}
    )  # fmt: skip
    b.events.append(
        {"ph": "i", "name": MEMORY, "pid": 1, "tid": 1, "ts": 10_230.0,
         "args": {"Device Id": 0, "Device Type": 1, "Total Allocated": 2**30}}
    )  # fmt: skip
    return b.events if flows else [e for e in b.events if e["ph"] != "f"]


def _first(events: list[Event], what: str) -> int:
    """Index of the first event of category ``what`` (or named ``[memory]``)."""
    return next(
        i for i, e in enumerate(events) if what in (e.get("cat"), e.get("name")) and e["ph"] != "f"
    )


def _where(index: int, ordinal: int | None = None) -> str:
    """How a message from read_trace starts for the event at ``index`` of traceEvents, the
    ``ordinal``-th (from 0) of the events the stream passes on (all but the flow events).
    The collector gives the true index where the stream can tell it (``trace_index``);
    until it can, the collector's own count, saying what it counts."""
    if hasattr(TraceStream, "trace_index"):
        return f"traceEvents[{index}]"
    counted = index if ordinal is None else ordinal
    return f'traceEvents event {counted} (from 0, not counting the ph "f", "s" events)'


def _refusal(events: list[Event]) -> TraceFormatError:
    document = {"schemaVersion": 1, "traceEvents": events}
    with pytest.raises(TraceFormatError) as caught:
        read_trace(io.BytesIO(json.dumps(document).encode()))
    return caught.value


def put(key: str, value: Any) -> Callable[[Event], None]:
    return lambda event: event.__setitem__(key, value)


def arg(key: str, value: Any) -> Callable[[Event], None]:
    return lambda event: event["args"].__setitem__(key, value)


def drop(key: str) -> Callable[[Event], None]:
    return lambda event: event.pop(key)


BAD_EVENTS = [
    # integers beyond int64 (the columns are array('q'))
    pytest.param(KERNEL, arg("device", 2**63),
                 "args.device: expected an integer below 2**63, got 9223372036854775808",
                 id="kernel-device-2**63"),
    pytest.param(KERNEL, arg("correlation", 2**63),
                 "args.correlation: expected an integer below 2**63", id="kernel-correlation"),
    pytest.param(KERNEL, arg("External id", 2**64 - 1),
                 'args["External id"]: expected an integer below 2**63', id="kernel-external-id"),
    pytest.param(RUNTIME, arg("correlation", 2**63),
                 "args.correlation: expected an integer below 2**63", id="runtime-correlation"),
    pytest.param(KERNEL, arg("device", 2**64),  # orjson reads it as a float
                 "args.device: expected an integer, got 1.8446744073709552e+19",
                 id="kernel-device-2**64"),
    # integers of another type: once silently taken as "none named"
    pytest.param(KERNEL, arg("device", "0"), 'args.device: expected an integer, got "0"',
                 id="kernel-device-string"),
    pytest.param(KERNEL, arg("correlation", 1.5), "args.correlation: expected an integer, got 1.5",
                 id="kernel-correlation-float"),
    pytest.param(RUNTIME, arg("correlation", "7"), 'args.correlation: expected an integer, got "7"',
                 id="runtime-correlation-string"),
    pytest.param(RUNTIME, arg("correlation", True),
                 "args.correlation: expected an integer, got true", id="runtime-correlation-bool"),
    pytest.param(MEMORY, arg("Device Id", "0"), 'args["Device Id"]: expected an integer, got "0"',
                 id="memory-device-string"),
    pytest.param(MEMORY, arg("Device Type", [1]),
                 'args["Device Type"]: expected an integer, got an array', id="memory-device-type"),
    # args that is not an object
    pytest.param(KERNEL, put("args", [1, 2]), "args: expected an object, got an array",
                 id="kernel-args-list"),
    pytest.param(RUNTIME, put("args", [1]), "args: expected an object, got an array",
                 id="runtime-args-list"),
    pytest.param(RUNTIME, put("args", []), "args: expected an object, got an array",
                 id="runtime-args-empty-list"),
    pytest.param(MEMCPY, put("args", "abc"), 'args: expected an object, got "abc"',
                 id="memcpy-args-string"),
    pytest.param(CPU_OP, put("args", [1]), "args: expected an object, got an array",
                 id="cpu-op-args-list"),
    pytest.param(OP, put("args", ["flops"]), "args: expected an object, got an array",
                 id="cpu-op-args-list-with-flops"),
    pytest.param(STEP, put("args", 5), "args: expected an object, got 5", id="step-args-number"),
    pytest.param(MEMORY, put("args", [1]), "args: expected an object, got an array",
                 id="memory-args-list"),
    # numbers that are not numbers
    pytest.param(MEMCPY, arg("bytes", "abc"), 'args.bytes: expected a number, got "abc"',
                 id="memcpy-bytes-string"),
    pytest.param(MEMCPY, arg("bytes", {"n": 1}), "args.bytes: expected a number, got an object",
                 id="memcpy-bytes-object"),
    pytest.param(OP, arg("flops", "a"), 'args.flops: expected a number, got "a"',
                 id="cpu-op-flops-string"),
    pytest.param(OP, arg("flops", "nan"), 'args.flops: expected a number, got "nan"',
                 id="cpu-op-flops-nan-string"),
    pytest.param(OP, arg("External id", "1"), 'args["External id"]: expected an integer',
                 id="cpu-op-external-id-string"),
    pytest.param(MEMORY, arg("Total Allocated", "1 GB"),
                 'args["Total Allocated"]: expected a number, got "1 GB"', id="memory-total"),
    # names and categories that are not strings
    pytest.param(RUNTIME, put("name", ["cudaLaunchKernel"]),
                 "name: expected a string, got an array", id="runtime-name-list"),
    pytest.param(RUNTIME, put("name", 5), "name: expected a string, got 5", id="runtime-name-int"),
    pytest.param(KERNEL, put("name", {"k": 1}), "name: expected a string, got an object",
                 id="kernel-name-object"),
    pytest.param(MEMCPY, put("name", 5), "name: expected a string, got 5", id="memcpy-name-int"),
    pytest.param(CPU_OP, put("name", None), "name: expected a string, got null",
                 id="cpu-op-name-null"),
    pytest.param(STEP, put("name", ["ProfilerStep#0"]), "name: expected a string, got an array",
                 id="step-name-list"),
    pytest.param(KERNEL, put("cat", ["kernel"]), "cat: expected a string, got an array",
                 id="kernel-cat-list"),
    pytest.param(CPU_OP, put("cat", {}), "cat: expected a string, got an object",
                 id="cpu-op-cat-object"),
    # times: a string (even a numeric one, or "nan"/"inf", which float() accepted), null,
    # a container or nothing at all (such an event was once skipped silently)
    pytest.param(KERNEL, put("ts", "nan"), 'ts: expected a number (microseconds), got "nan"',
                 id="kernel-ts-nan-string"),
    pytest.param(RUNTIME, put("ts", "inf"), 'ts: expected a number (microseconds), got "inf"',
                 id="runtime-ts-inf-string"),
    pytest.param(STEP, put("ts", "10000"), 'ts: expected a number (microseconds), got "10000"',
                 id="step-ts-numeric-string"),
    pytest.param(CPU_OP, put("ts", [1]), "ts: expected a number (microseconds), got an array",
                 id="cpu-op-ts-list"),
    pytest.param(KERNEL, put("ts", None), "ts: expected a number (microseconds), got null",
                 id="kernel-ts-null"),
    pytest.param(KERNEL, drop("ts"), "ts: expected a number (microseconds), got no ts",
                 id="kernel-ts-missing"),
    pytest.param(KERNEL, put("dur", "x"), 'dur: expected a number (microseconds), got "x"',
                 id="kernel-dur-string"),
    pytest.param(RUNTIME, put("dur", None), "dur: expected a number (microseconds), got null",
                 id="runtime-dur-null"),
    pytest.param(STEP, put("dur", {"us": 5}),
                 "dur: expected a number (microseconds), got an object", id="step-dur-object"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "mutate", "expected"), BAD_EVENTS)
def test_a_bad_field_is_refused_naming_the_event_and_the_field(
    what: str, mutate: Callable[[Event], None], expected: str
) -> None:
    events = _events()
    index = _first(events, what)
    mutate(events[index])
    error = _refusal(events)
    assert error.kind == "bad-event"
    message = str(error)
    name = events[index].get("name")
    named = f' ("{name[:20]}' if isinstance(name, str) else ":"
    assert message.startswith(_where(index) + named), message
    assert f": {expected}" in message, message


def test_a_long_name_is_cut() -> None:
    events = _events()
    index = _first(events, KERNEL)
    events[index]["name"] = "k" * 500
    events[index]["args"]["device"] = 2**63
    message = str(_refusal(events))
    assert message.startswith(_where(index) + f' ("{"k" * 60}...")'), message
    assert len(message) < 250


def test_with_flow_events_before_it_the_event_is_still_located() -> None:
    """The reader skips flow events (ph "s"/"f") unparsed: the collector counts only the
    events it was given, and says so (see _where)."""
    events = _events(flows=True)
    index = _first(events, MEMORY)
    ordinal = sum(1 for e in events[:index] if e["ph"] != "f")
    assert ordinal < index  # flows come before it
    events[index]["args"] = [1]
    message = str(_refusal(events))
    assert message.startswith(_where(index, ordinal) + ' ("[memory]"): '), message
    assert "args: expected an object, got an array" in message


RANGES = [
    pytest.param(KERNEL, put("ts", 1e308), "ts: expected a time within ±2**62 µs, got 1e+308",
                 "args.correlation 1", id="kernel-ts-huge"),
    pytest.param(KERNEL, put("dur", 1e308),  # ts + dur: once inf, and a 500 further on
                 "ts + dur: expected a time within ±2**62 µs, got 1e+308",
                 "args.correlation 1", id="kernel-end-huge"),
    pytest.param(KERNEL, put("dur", -5), "dur: expected a non-negative number (microseconds), "
                 "got -5", "args.correlation 1", id="kernel-dur-negative"),
    pytest.param(RUNTIME, put("ts", -1e308), "ts: expected a time within ±2**62 µs, got -1e+308",
                 "the runtime call with args.correlation 1", id="launch-ts-huge"),
    pytest.param(STEP, put("dur", -1.0), "dur: expected a non-negative number (microseconds), "
                 "got -1", '"ProfilerStep#0"', id="step-dur-negative"),
    pytest.param(OP, arg("flops", -1), "args.flops: expected a number from 0 to 2**64, got -1",
                 'args["External id"] 1', id="flops-negative"),
    pytest.param(OP, arg("flops", 1e300), "args.flops: expected a number from 0 to 2**64, "
                 "got 1e+300", 'args["External id"] 1', id="flops-huge"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "mutate", "expected", "who"), RANGES)
def test_numbers_out_of_range_are_refused(
    what: str, mutate: Callable[[Event], None], expected: str, who: str
) -> None:
    """Checked once the events are collected (column by column, nothing per event): the
    message names the event by what was kept of it, not by its index."""
    events = _events()
    mutate(events[_first(events, what)])
    error = _refusal(events)
    assert error.kind == "bad-event"
    assert str(error).startswith("traceEvents: ")
    assert who in str(error)
    assert f": {expected}" in str(error)


def test_extreme_but_valid_numbers_are_analysed() -> None:
    """Ids up to 2**63 - 1 and times near the limit: no overflow anywhere."""
    events = _events()
    kernel = events[_first(events, KERNEL)]
    kernel["args"]["device"] = 2**40  # the analysis once counted device ids with bincount
    kernel["args"]["External id"] = 2**63 - 1
    events[_first(events, RUNTIME)]["ts"] = -(2.0**61)
    document = {"traceEvents": events}
    analysis, _ = read_trace(io.BytesIO(json.dumps(document).encode()))
    assert analysis.kernels == 6


def test_the_collector_alone_counts_the_events_it_was_given() -> None:
    collector = Collector()
    collector.add({"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1})
    with pytest.raises(TraceFormatError) as caught:
        collector.add_all(
            [{"ph": "X", "cat": "cpu_op", "name": "b", "ts": 2}, {"ph": "X", "ts": "x"}]
        )
    assert str(caught.value).startswith(
        'traceEvents[2]: ts: expected a number (microseconds), got "x"'
    )


def test_a_failure_not_pinned_down_still_names_the_event(monkeypatch: pytest.MonkeyPatch) -> None:
    def fails(name: str) -> tuple[str, str | None]:
        raise ValueError("no rule for it")

    monkeypatch.setattr(collect, "classify_kernel", fails)
    with pytest.raises(TraceFormatError) as caught:
        Collector().add_all([{"ph": "X", "cat": "kernel", "name": "k1", "ts": 1, "dur": 1}])
    assert caught.value.kind == "bad-event"
    assert str(caught.value) == (
        'traceEvents[0] ("k1"): could not be read (ValueError: no rule for it)'
    )
