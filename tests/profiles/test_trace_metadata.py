"""The trace reader refuses metadata of the wrong type (``bad-metadata``, naming the field)
and documents without a single trace event (``not-a-trace``); valid metadata, in all its
optional and unread variety, still parses."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import Any

import pytest

from profiles.trace.metadata import check_metadata
from profiles.trace.read import read_trace
from profiles.trace.stream import TraceFormatError
from tests.profiles.trace_factory import DEVICE, known_steps

FIXTURES = Path(__file__).parent / "fixtures" / "traces"

# (metadata beside a valid trace's events, the field the refusal names)
BAD_METADATA = [
    # the reported reproductions (each was an unhandled exception)
    pytest.param({"deviceProperties": [{"id": "x"}]}, "deviceProperties[0].id", id="id-string"),
    pytest.param({"deviceProperties": [{"id": None}]}, "deviceProperties[0].id", id="id-null"),
    pytest.param({"deviceProperties": 5}, "deviceProperties", id="devices-a-number"),
    pytest.param({"distributedInfo": [1, 2]}, "distributedInfo", id="distributed-an-array"),
    pytest.param({"distributedInfo": "ab"}, "distributedInfo", id="distributed-a-string"),
    pytest.param(
        {"deviceProperties": [{"id": 0, "name": 5}]}, "deviceProperties[0].name", id="name-number"
    ),
    # the other types the analysis assumes
    pytest.param({"deviceProperties": [{"id": True}]}, "deviceProperties[0].id", id="id-bool"),
    pytest.param({"deviceProperties": [{"id": -1}]}, "deviceProperties[0].id", id="id-negative"),
    pytest.param({"deviceProperties": [{"id": 0.5}]}, "deviceProperties[0].id", id="id-fraction"),
    pytest.param(
        {"deviceProperties": [DEVICE, {**DEVICE, "id": "1"}]},
        "deviceProperties[1].id",
        id="second-device-id",
    ),
    pytest.param(
        {"deviceProperties": [{"id": 0, "name": None}]}, "deviceProperties[0].name", id="name-null"
    ),
    pytest.param({"deviceProperties": ["H100"]}, "deviceProperties[0]", id="device-a-string"),
    pytest.param({"deviceProperties": {"id": 0}}, "deviceProperties", id="devices-an-object"),
    pytest.param({"deviceProperties": "ab"}, "deviceProperties", id="devices-a-string"),
    pytest.param(
        {"deviceProperties": [{**DEVICE, "numSms": "132"}]},
        "deviceProperties[0].numSms",
        id="sms-string",
    ),
    pytest.param(
        {"deviceProperties": [{**DEVICE, "totalGlobalMem": -5}]},
        "deviceProperties[0].totalGlobalMem",
        id="memory-negative",
    ),
    # dict() once turned a list of pairs into an object with an integer key
    pytest.param({"distributedInfo": [[1, 2]]}, "distributedInfo", id="distributed-pairs"),
    pytest.param(
        {"distributedInfo": {"world_size": "ab"}},
        "distributedInfo.world_size",
        id="world-size-string",
    ),
    pytest.param(
        {"distributedInfo": {"world_size": 0}}, "distributedInfo.world_size", id="world-size-zero"
    ),
    pytest.param({"distributedInfo": {"rank": -1}}, "distributedInfo.rank", id="rank-negative"),
]

NO_EVENTS = [
    pytest.param(b"[null, null]", id="array-of-nulls"),
    pytest.param(b"[]", id="empty-array"),
    pytest.param(b'{"traceEvents": []}', id="empty-events"),
    pytest.param(b'{"traceEvents": [1, "x", null, []], "deviceProperties": []}', id="no-objects"),
    pytest.param(gzip.compress(b"[null, null]"), id="gzipped"),
]


def with_metadata(metadata: dict[str, Any]) -> bytes:
    """A valid trace (GPU kernels on device 0, steps) with ``metadata`` beside its events."""
    doc = known_steps(2).document()
    doc.update(metadata)
    return json.dumps(doc).encode()


def _refusal(data: bytes) -> TraceFormatError:
    with pytest.raises(TraceFormatError) as info:
        read_trace(io.BytesIO(data))
    return info.value


class TestBadMetadata:
    @pytest.mark.parametrize(("metadata", "field"), BAD_METADATA)
    def test_is_refused_naming_the_field(self, metadata: dict[str, Any], field: str) -> None:
        error = _refusal(with_metadata(metadata))
        assert error.kind == "bad-metadata"
        assert str(error).startswith(f"{field}: expected ")
        assert ", got " in str(error)

    def test_the_message_shows_the_value_it_refused(self) -> None:
        error = _refusal(with_metadata({"deviceProperties": [{"id": "x"}]}))
        assert str(error) == 'deviceProperties[0].id: expected a non-negative integer, got "x"'

    def test_a_long_value_is_cut_in_the_message(self) -> None:
        error = _refusal(with_metadata({"deviceProperties": [{"id": 0, "name": ["x"] * 9}]}))
        assert str(error).endswith("got an array")
        with pytest.raises(TraceFormatError) as info:
            check_metadata({"deviceProperties": [{"id": "x" * 100_000}]})
        assert len(str(info.value)) < 120


class TestValidMetadata:
    @pytest.mark.parametrize(
        "metadata",
        [
            pytest.param({"deviceProperties": None, "distributedInfo": None}, id="null-sections"),
            pytest.param({"deviceProperties": []}, id="no-devices"),
            pytest.param({"distributedInfo": {}}, id="empty-distributed"),
            pytest.param({"deviceProperties": [{"name": DEVICE["name"]}]}, id="device-without-id"),
            pytest.param(
                {
                    "schemaVersion": "one",
                    "deviceProperties": [{**DEVICE, "maxThreadsPerBlock": "many", "uuid": None}],
                    "distributedInfo": {"backend": 5, "pg_config": [{"pg_name": "0"}]},
                },
                id="fields-nothing-reads",
            ),
        ],
    )
    def test_optional_and_unread_fields_are_accepted(self, metadata: dict[str, Any]) -> None:
        analysis, _ = read_trace(io.BytesIO(with_metadata(metadata)))
        assert analysis.kernels > 0

    def test_an_integer_valued_float_id_picks_the_same_device(self) -> None:
        # the analysis compares ids with == and int(): 3.0 selects device 3 as 3 does
        b = known_steps(2)
        doc = b.document()
        doc["deviceProperties"] = [{**DEVICE, "id": 0.0, "name": "other"}, {**DEVICE, "id": 3.0}]
        for event in doc["traceEvents"]:
            if "device" in event.get("args", {}):
                event["args"]["device"] = 3
        analysis, _ = read_trace(io.BytesIO(json.dumps(doc).encode()))
        assert analysis.device_name == DEVICE["name"]

    def test_a_real_kineto_trace_passes_unchanged(self) -> None:
        with gzip.open(FIXTURES / "h200-resnet50-fp16-b256.json.gz") as handle:
            metadata = {k: v for k, v in json.load(handle).items() if k != "traceEvents"}
        assert len(metadata["deviceProperties"][0]) > 6  # many fields, most unread
        snapshot = json.dumps(metadata, sort_keys=True)
        check_metadata(metadata)
        assert json.dumps(metadata, sort_keys=True) == snapshot


class TestNoEvents:
    @pytest.mark.parametrize("data", NO_EVENTS)
    def test_a_document_without_an_event_object_is_not_a_trace(self, data: bytes) -> None:
        error = _refusal(data)
        assert error.kind == "not-a-trace"
        assert "no trace events" in str(error)

    def test_flow_arrows_alone_are_not_profiler_events(self) -> None:
        flows = [{"ph": "f", "id": 1, "pid": 0, "tid": 7, "ts": 1, "cat": "ac2g", "name": "ac2g"}]
        error = _refusal(json.dumps({"traceEvents": flows}).encode())
        assert error.kind == "not-a-trace"
        assert "no profiler events" in str(error)

    def test_no_events_is_refused_before_bad_metadata(self) -> None:
        error = _refusal(b'{"traceEvents": [], "deviceProperties": 5}')
        assert error.kind == "not-a-trace"
