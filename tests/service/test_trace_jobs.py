"""Large traces are analysed in the background, in a process of their own with a time and
a memory limit (issue 26, finding 6: a 5-million-event trace took 66 s and 2.0 GB inside
a request, and the embedded mode never handed an upload to anything else).

Without Redis the job runs in the service's own process (a thread waiting for the child);
with Redis an rq worker takes it (test_traces_api.py). Either way ``GET /v1/jobs/{id}``
follows it."""

from __future__ import annotations

import gzip
import io
import time
from pathlib import Path
from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from profiles.trace.bounded import analyse_bounded
from profiles.trace.stream import Limits, TraceFormatError
from service import create_app
from tests.conftest import with_key
from tests.profiles.trace_factory import known_steps
from tests.service.helpers import get_json, problem


def _app(**settings: Any) -> Flask:
    return create_app({"TESTING": True, "TRACE_ASYNC_BYTES": 1000, **settings})


def _upload(client: FlaskClient, data: bytes) -> Any:
    return client.post("/v1/traces", data=data, content_type="application/gzip")


def _finished(client: FlaskClient, job_url: str) -> dict[str, Any]:
    deadline = time.monotonic() + 120
    while True:
        state: dict[str, Any] = get_json(client, job_url)
        if state["status"] in ("finished", "failed"):
            return state
        assert time.monotonic() < deadline, state
        time.sleep(0.1)


def test_without_redis_a_large_trace_is_a_job_that_a_child_analyses() -> None:
    client = with_key(_app().test_client())
    trace = known_steps(6).gzipped()
    accepted = _upload(client, trace)
    assert accepted.status_code == 202, accepted.get_data(as_text=True)
    assert accepted.headers["Location"] == accepted.get_json()["job_url"]
    done = _finished(client, accepted.get_json()["job_url"])
    assert done["status"] == "finished", done
    assert done["progress"].startswith("analysing: ")
    analysed = get_json(client, done["trace_url"])
    assert analysed["analysis"]["steps_found"] == 6
    # the same trace answered at once by a service that takes it inline: the same analysis
    inline = with_key(create_app({"TESTING": True}).test_client())
    at_once = _upload(inline, trace)
    assert at_once.status_code == 201
    assert at_once.get_json()["trace_id"] == analysed["trace_id"]
    assert at_once.get_json()["analysis"]["breakdown"] == analysed["analysis"]["breakdown"]


def test_a_small_gzip_of_a_large_trace_is_not_analysed_in_the_request() -> None:
    """It is the JSON's size that counts: 130 KB of gzip here hold 3.6 MB of trace."""
    client = with_key(_app(TRACE_ASYNC_BYTES=256 * 1024).test_client())
    big = known_steps(2000)
    data = big.gzipped()
    assert len(data) < 256 * 1024 < len(big.kineto_bytes())
    accepted = _upload(client, data)
    assert accepted.status_code == 202
    assert _finished(client, accepted.get_json()["job_url"])["status"] == "finished"


@pytest.mark.parametrize(
    ("settings", "kind", "named"),
    [
        pytest.param({"TRACE_TIME_LIMIT_S": 0.01}, "too-slow", "RIGHTSIZE_TRACE_TIME_LIMIT_S",
                     id="past its time"),
        pytest.param({"TRACE_MEMORY_LIMIT_BYTES": 10**6}, "too-large",
                     "RIGHTSIZE_TRACE_MEMORY_LIMIT_BYTES", id="past its memory"),
    ],
)  # fmt: skip
def test_an_analysis_past_its_limits_is_stopped_and_the_job_says_why(
    settings: dict[str, Any], kind: str, named: str
) -> None:
    client = with_key(_app(**settings).test_client())
    accepted = _upload(client, known_steps(6).gzipped())
    failed = _finished(client, accepted.get_json()["job_url"])
    assert failed["status"] == "failed"
    assert failed["error"]["kind"] == kind
    assert named in failed["error"]["message"]
    assert client.get("/healthz").status_code == 200  # the service goes on


def test_a_bad_trace_in_the_background_fails_its_job_with_the_reason() -> None:
    client = with_key(_app().test_client())
    accepted = _upload(client, gzip.compress(b'{"traceEvents": [' + b" " * 5000))
    failed = _finished(client, accepted.get_json()["job_url"])
    assert failed["error"]["kind"] == "truncated"


def test_a_chunked_upload_past_the_limit_is_413() -> None:
    client = with_key(_app(TRACE_MAX_BYTES=50_000).test_client())
    body = known_steps(2000).kineto_bytes()
    assert len(body) > 50_000
    response = client.post(
        "/v1/traces",
        input_stream=io.BytesIO(body),
        content_type="application/json",
        environ_overrides={"wsgi.input_terminated": True},
    )
    problem(response, 413)
    exact = known_steps(3).kineto_bytes()  # a body within the limit, chunked: taken
    taken = client.post(
        "/v1/traces",
        input_stream=io.BytesIO(exact),
        content_type="application/json",
        environ_overrides={"wsgi.input_terminated": True},
    )
    assert taken.status_code in (201, 202), taken.get_data(as_text=True)


def test_the_child_reports_its_progress_and_keeps_its_analysis(tmp_path: Path) -> None:
    path = tmp_path / "trace.json.gz"
    trace = known_steps(4)
    path.write_bytes(trace.gzipped())
    heard: list[str] = []
    analysis, trace_id = analyse_bounded(path, Limits(), None, 60, 2**31, heard.append)
    assert analysis["steps_found"] == 4
    assert len(trace_id) == 24
    assert heard[0].startswith("reading: ")
    assert "events" in heard[0]
    assert heard[-1] == f"analysing: {len(trace.events)} events read"
    with pytest.raises(TraceFormatError) as refused:
        analyse_bounded(path, Limits(events=3), None, 60, 2**31)
    assert refused.value.kind == "too-large"
