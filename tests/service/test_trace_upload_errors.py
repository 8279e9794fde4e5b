"""POST /v1/traces with bad metadata or without a single event: a 422 problem that names
what is wrong (never a 500), and nothing is stored."""

from __future__ import annotations

import io
from typing import Any

import pytest
from flask.testing import FlaskClient

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
