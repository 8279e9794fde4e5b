"""Hostile input: every malformed request gets its 4xx as problem+json, and nothing is
stored. (Forged and missing keys on writes: test_security.py; gzip bombs and oversized
uploads: test_traces_api.py.)"""

from __future__ import annotations

import io

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
    "wrong content type": (VALID, "text/plain", 415),
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


@pytest.mark.parametrize(("url", "limit"), [("/v1/estimates", 2**20), ("/v1/benchmarks", 2**20)])
def test_a_chunked_body_past_the_limit_is_413(client: FlaskClient, url: str, limit: int) -> None:
    """A body without a length (chunked; the server marks the input as terminated) is
    read only up to the endpoint's limit."""
    big = b'{"a":"' + b"x" * (limit + 100) + b'"}'
    response = client.post(
        url,
        input_stream=io.BytesIO(big),
        content_type="application/json",
        environ_overrides={"wsgi.input_terminated": True},
    )
    problem(response, 413)


def test_a_price_catalog_may_be_larger_than_a_json_body(client: FlaskClient) -> None:
    from service.api.bodies import JSON_BODY_LIMIT
    from service.api.offers import PRICES_BODY_LIMIT

    assert PRICES_BODY_LIMIT > JSON_BODY_LIMIT
    text = b"x" * (JSON_BODY_LIMIT + 10)  # past 1 MiB, under 16: refused for its rows
    response = client.put("/v1/offers/prices", data=text, content_type="text/csv")
    assert response.status_code in (403, 422)  # a write key is not admin; not a 413
    from service.infra.keys import KeyFile
    from tests.conftest import KEYS_FILE, with_key

    admin, _ = KeyFile(KEYS_FILE).create("hostile-admin", "admin")
    too_big = b"x" * (PRICES_BODY_LIMIT + 10)
    response = with_key(client, admin).put(
        "/v1/offers/prices", data=too_big, content_type="text/csv"
    )
    assert problem(response, 413)["limit_bytes"] == PRICES_BODY_LIMIT


BIG = 20 * 2**20  # stands for the 200 MiB of the report


def _nested_gpus(size: int) -> bytes:
    """The report's body: a JSON array of small nested arrays, ``size`` bytes."""
    unit = b"[[[[[[[[1]]]]]]]]"
    return b'{"gpus":[' + b",".join([unit] * (size // (len(unit) + 1))) + b'],"count":1}'


@pytest.mark.parametrize("chunked", [False, True], ids=["with a length", "chunked"])
def test_a_large_body_to_a_read_under_traces_is_refused_before_it_is_read(
    anonymous: FlaskClient, chunked: bool
) -> None:
    """Issue 26, finding 1: the trace uploads' limit (512 MiB) covered every path under
    /v1/traces, so a projection (a read, open to all) parsed 200 MiB of nested arrays
    before looking the trace up: 9.3 GB in one worker. Only the upload takes a large body;
    a projection's is held to the JSON limit, and the 413 names it."""
    from service.api.bodies import JSON_BODY_LIMIT

    body = _nested_gpus(BIG)
    stream = io.BytesIO(body)
    extra = {"environ_overrides": {"wsgi.input_terminated": True}} if chunked else {}
    response = anonymous.post(
        "/v1/traces/x/projections",
        input_stream=stream,
        content_type="application/json",
        content_length=None if chunked else len(body),
        **extra,
    )
    found = problem(response, 413)
    assert found["limit_bytes"] == JSON_BODY_LIMIT
    assert str(JSON_BODY_LIMIT) in found["detail"]
    assert stream.tell() <= JSON_BODY_LIMIT + 2**16  # what was read: at most the limit


def test_the_upload_alone_takes_a_large_body(client: FlaskClient) -> None:
    """The same size to the upload endpoint is read (and refused for what it is, not for
    its size)."""
    response = client.post(
        "/v1/traces", data=_nested_gpus(2 * 2**20), content_type="application/json"
    )
    assert response.status_code == 422
    assert problem(response, 422)["kind"] == "not-a-trace"


@pytest.mark.parametrize("url", ["/v1/estimates", "/v1/benchmarks", "/v1/traces/x/projections"])
@pytest.mark.parametrize("kind", ["text/plain", "application/x-www-form-urlencoded", ""])
def test_a_json_endpoint_refuses_other_media_types_with_415(
    client: FlaskClient, url: str, kind: str
) -> None:
    response = client.post(url, data=VALID, headers={"Content-Type": kind} if kind else {})
    found = problem(response, 415)
    assert "application/json" in found["detail"]


def test_json_with_a_suffix_is_json(client: FlaskClient) -> None:
    response = client.post("/v1/estimates", data=VALID, content_type="application/problem+json")
    assert response.status_code == 200, response.get_data(as_text=True)


@pytest.mark.slow  # a computation run to its time limit
def test_a_computation_past_its_time_limit_is_a_422_not_a_held_worker() -> None:
    from service import create_app

    app = create_app({"TESTING": True, "COMPUTE_TIME_LIMIT_S": 1e-6})
    client = app.test_client()
    body = {
        "model": {"name": "gpt2"},
        "workload": {"task": "training", "batch_size": 8, "seq_len": 512},
    }
    for url, extra in (("/v1/recommendations", {}), ("/v1/plans", {"gpu": "a100-sxm4-80gb"})):
        found = problem(client.post(url, json={**body, **extra}), 422)
        assert "passed its limit of 1e-06 s" in found["detail"]
        assert found["type"].endswith("too-expensive")
    assert client.get("/v1/gpus?page_size=1").status_code == 200  # reads are not computed
    # with the default limit the same requests answer
    normal = create_app({"TESTING": True}).test_client()
    assert normal.post("/v1/plans", json={**body, "gpu": "a100-sxm4-80gb"}).status_code == 200
