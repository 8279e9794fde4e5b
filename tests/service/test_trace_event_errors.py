"""POST /v1/traces with a malformed event: a 422 problem of kind ``bad-event`` naming the
event and the field (these were 500s: OverflowError, AttributeError, ValueError, TypeError
inside the reader, or an infinite time further on), and nothing is stored."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.profiles.trace_factory import known_steps
from tests.service.helpers import problem

Event = dict[str, Any]


def _stored(client: FlaskClient) -> int:
    return int(client.application.extensions["rightsize"].cache.health()["items"])


def _upload(mutate: Callable[[list[Event]], None]) -> bytes:
    builder = known_steps(2)
    builder.cpu("aten::mm", 10_210.0, 5.0, **{"External id": 1, "flops": 1000})
    builder.events.append(
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0,
         "tid": 7, "ts": 10_220.0, "dur": 2, "args": {"device": 0, "bytes": 4096}}
    )  # fmt: skip
    document = builder.document()
    mutate(document["traceEvents"])
    return json.dumps(document).encode()


def _first(events: list[Event], cat: str) -> Event:
    return next(e for e in events if e.get("cat") == cat or e.get("name") == cat)


CASES = [
    pytest.param(
        lambda evs: _first(evs, "kernel")["args"].__setitem__("device", 2**63),
        "args.device: expected an integer below 2**63, got 9223372036854775808",
        id="kernel-device-beyond-int64",
    ),
    pytest.param(
        lambda evs: _first(evs, "cuda_runtime").__setitem__("args", [1]),
        "args: expected an object, got an array",
        id="runtime-args-list",
    ),
    pytest.param(
        lambda evs: _first(evs, "gpu_memcpy")["args"].__setitem__("bytes", "abc"),
        'args.bytes: expected a number, got "abc"',
        id="memcpy-bytes-string",
    ),
    pytest.param(
        lambda evs: _first(evs, "aten::mm")["args"].__setitem__("flops", "a"),
        'args.flops: expected a number, got "a"',
        id="op-flops-string",
    ),
    pytest.param(
        lambda evs: _first(evs, "cuda_runtime").__setitem__("name", ["cudaLaunchKernel"]),
        "name: expected a string, got an array",
        id="runtime-name-list",
    ),
    pytest.param(
        lambda evs: _first(evs, "kernel").__setitem__("cat", ["kernel"]),
        "cat: expected a string, got an array",
        id="cat-list",
    ),
    pytest.param(
        lambda evs: _first(evs, "kernel").__setitem__("ts", "nan"),
        'ts: expected a number (microseconds), got "nan"',
        id="ts-nan-string",
    ),
    pytest.param(
        lambda evs: _first(evs, "kernel").update(ts=1e308, dur=1e308),
        "ts: expected a time within ±2**62 µs, got 1e+308",
        id="kernel-ts-huge",
    ),
]


@pytest.mark.parametrize(("mutate", "expected"), CASES)
def test_a_bad_event_is_a_422_naming_the_event_and_the_field(
    client: FlaskClient, mutate: Callable[[list[Event]], None], expected: str
) -> None:
    before = _stored(client)
    response = client.post("/v1/traces", data=_upload(mutate), content_type="application/json")
    body = problem(response, 422)
    assert body["kind"] == "bad-event"
    assert body["detail"].startswith("traceEvents")
    assert f": {expected}" in body["detail"]
    assert _stored(client) == before


def test_a_device_id_of_any_size_is_analysed(client: FlaskClient) -> None:
    """The analysis once counted device ids with bincount: an array as long as the id."""
    data = _upload(lambda evs: _first(evs, "kernel")["args"].__setitem__("device", 2**62))
    response = client.post("/v1/traces", data=data, content_type="application/json")
    assert response.status_code == 201, response.get_data(as_text=True)
