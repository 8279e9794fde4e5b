"""Hostile input: every malformed request gets its 4xx as problem+json, and nothing is
stored. (Forged and missing keys on writes: test_security.py; gzip bombs and oversized
uploads: test_traces_api.py.)"""

from __future__ import annotations

import pytest
from flask.testing import FlaskClient

from tests.service.helpers import problem

COMPUTE = ("/v1/estimates", "/v1/plans", "/v1/recommendations", "/v1/tco", "/v1/profiles")
VALID = (
    b'{"model":{"name":"gpt2"},"workload":{"task":"training","batch_size":2,"seq_len":128,'
    b'"precision":"bf16"},"gpu":"a100-sxm4-80gb"}'
)
BODIES = {
    "oversized": (b'{"a":"' + b"x" * (2**20 + 10) + b'"}', "application/json", 413),
    "deeply nested": (b"[" * 100_000 + b"]" * 100_000, "application/json", None),
    "not JSON": (b"{not json", "application/json", 400),
    "empty": (b"", "application/json", None),
    "a list": (b"[1, 2]", "application/json", None),
    "wrong content type": (VALID, "text/plain", None),
    "invalid UTF-8": (b'{"model": {"name": "\xff\xfe"}}', "application/json", None),
    "NaN": (VALID.replace(b'"batch_size":2', b'"batch_size":NaN'), "application/json", None),
    "infinite": (VALID.replace(b'"gpu"', b'"count":1e999,"gpu"'), "application/json", None),
    "a 5,000-digit number": (
        VALID.replace(b'"batch_size":2', b'"batch_size":' + b"9" * 5000),
        "application/json",
        400,
    ),
    "a negative count": (VALID.replace(b'"gpu"', b'"count":-3,"gpu"'), "application/json", None),
    "an unknown field": (VALID.replace(b'"gpu"', b'"bogus":1,"gpu"'), "application/json", 422),
}


def _stored(client: FlaskClient) -> int:
    return int(client.application.extensions["rightsize"].cache.health()["items"])


@pytest.mark.parametrize("url", COMPUTE)
@pytest.mark.parametrize("case", list(BODIES))
def test_a_malformed_body_is_a_problem_and_stores_nothing(
    client: FlaskClient, url: str, case: str
) -> None:
    data, content_type, status = BODIES[case]
    before = _stored(client)
    response = client.post(url, data=data, content_type=content_type)
    assert 400 <= response.status_code < 500, (case, response.status_code)
    body = problem(response, status or response.status_code)
    assert body["detail"]
    assert _stored(client) == before


@pytest.mark.parametrize("case", list(BODIES))
def test_a_malformed_benchmark_submission_stores_nothing(client: FlaskClient, case: str) -> None:
    data, content_type, status = BODIES[case]
    store = client.application.extensions["rightsize"].submissions
    before = store.path.read_bytes() if store.path.exists() else b""
    response = client.post("/v1/benchmarks", data=data, content_type=content_type)
    assert 400 <= response.status_code < 500, (case, response.status_code)
    problem(response, status or response.status_code)
    assert (store.path.read_bytes() if store.path.exists() else b"") == before


@pytest.mark.parametrize(
    "query",
    [
        "page=-1",
        "page_size=100000",
        "page=" + "9" * 5000,
        "min_memory_gb=nan",
        "min_memory_gb=inf",
        "bogus=1",
        "sort=__class__",
    ],
)
def test_a_malformed_query_is_a_problem(client: FlaskClient, query: str) -> None:
    response = client.get(f"/v1/gpus?{query}")
    assert 400 <= response.status_code < 500, (query, response.status_code)
    problem(response, response.status_code)


@pytest.mark.parametrize(
    "path", ["/v1/gpus/%ff%fe", "/v1/recommendations/" + "x" * 5000, "/v1/jobs/..%2F..%2Fetc"]
)
def test_odd_paths_are_404s(client: FlaskClient, path: str) -> None:
    problem(client.get(path), 404)
