"""POST /v1/traces with bad metadata or without a single event: a 422 problem that names
what is wrong (never a 500), and nothing is stored."""

from __future__ import annotations

import io
import resource
from pathlib import Path
from typing import Any

import pytest
from flask.testing import FlaskClient

from service import create_app
from tests.conftest import with_key
from tests.profiles.test_trace_metadata import BAD_METADATA, NO_EVENTS, with_metadata
from tests.profiles.trace_factory import known_steps
from tests.service.helpers import problem


def _stored(client: FlaskClient) -> int:
    return int(client.application.extensions["rightsize"].cache.health()["items"])


def _post(client: FlaskClient, data: bytes, multipart: bool = False):  # type: ignore[no-untyped-def]
    if multipart:
        return client.post(
            "/v1/traces",
            data={"file": (io.BytesIO(data), "trace.json")},
            content_type="multipart/form-data",
        )
    return client.post("/v1/traces", data=data, content_type="application/json")


@pytest.mark.parametrize(("metadata", "field"), BAD_METADATA)
def test_bad_metadata_is_a_422_naming_the_field(
    client: FlaskClient, metadata: dict[str, Any], field: str
) -> None:
    before = _stored(client)
    body = problem(_post(client, with_metadata(metadata)), 422)
    assert body["kind"] == "bad-metadata"
    assert body["detail"].startswith(f"{field}: expected ")
    assert _stored(client) == before


@pytest.mark.parametrize("data", NO_EVENTS)
def test_a_document_without_events_is_not_a_trace(client: FlaskClient, data: bytes) -> None:
    before = _stored(client)
    body = problem(_post(client, data), 422)
    assert body["kind"] == "not-a-trace"
    assert "no trace events" in body["detail"]
    assert _stored(client) == before


def test_a_multipart_upload_is_refused_alike(client: FlaskClient) -> None:
    data = with_metadata({"distributedInfo": "ab"})
    body = problem(_post(client, data, multipart=True), 422)
    assert body["kind"] == "bad-metadata"
    assert body["detail"].startswith("distributedInfo: expected an object")


def test_a_valid_upload_is_stored(client: FlaskClient) -> None:
    # the count the refusals compare with does see a stored trace
    before = _stored(client)
    assert _post(client, known_steps(2).kineto_bytes()).status_code == 201
    assert _stored(client) == before + 1


@pytest.mark.parametrize(
    "settings",
    [
        pytest.param({}, id="answered at once: the store refuses"),
        pytest.param({"TRACE_ASYNC_BYTES": 1000}, id="a job: the upload cannot be kept"),
    ],
)
def test_a_full_disk_is_a_507_and_stores_nothing(tmp_path: Path, settings: dict[str, Any]) -> None:
    """A trace upload on a full disk was a 500 (``OSError: [Errno 27]``) where submissions
    and prices answered 507. The file-size limit stands in for the disk: Python ignores
    SIGXFSZ, so a write past it fails with EFBIG."""
    app = create_app({"TESTING": True, "STORE_FILE": str(tmp_path / "s.sqlite3"), **settings})
    client = with_key(app.test_client())
    assert client.get("/readyz").status_code == 200  # the store's file exists
    trace = known_steps(400).gzipped()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(trace) // 4, hard))
    try:
        refused = problem(_post(client, trace), 507)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert "nothing" in refused["detail"]
    assert _stored(client) == 0
    assert _post(client, trace).status_code in (201, 202)  # room again: stored
