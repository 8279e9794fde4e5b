"""Redis goes away and comes back: reads and computations keep answering, queued work is
refused with 503 and Retry-After, nothing is lost, and no restart is needed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from flask.testing import FlaskClient

from service import create_app, jobs
from tests.conftest import with_key
from tests.profiles.trace_factory import known_steps
from tests.service.helpers import get_json, problem
from tests.service.redis_server import RedisServer

pytestmark = pytest.mark.slow  # a Redis outage

PROFILE = {
    "model": {"name": "gpt2"},
    "workload": {"task": "training", "batch_size": 2, "seq_len": 128},
}
ESTIMATE = {
    "model": {"name": "resnet-50"},
    "workload": {"task": "training", "batch_size": 64, "image_size": 224, "precision": "fp16"},
    "gpu": "a100-sxm4-80gb",
}


@pytest.fixture
def server() -> Iterator[RedisServer]:
    own = RedisServer()
    own.start()
    yield own
    own.close()


@pytest.fixture
def client(server: RedisServer) -> Iterator[FlaskClient]:
    app = create_app(
        {
            "TESTING": True,
            "REDIS_URL": server.url,
            "REDIS_TIMEOUT_S": 0.3,
            "KEY_PREFIX": "outage:",
            "TRACE_ASYNC_BYTES": 20_000,  # JSON: known_steps(2) is under, (400) over
        }
    )
    yield with_key(app.test_client())
    app.extensions["rightsize"].redis.connection_pool.disconnect()  # no socket left to GC


def _trace(client: FlaskClient, data: bytes):  # type: ignore[no-untyped-def]
    return client.post("/v1/traces", data=data, content_type="application/gzip")


def _ready(client: FlaskClient) -> str:
    status: str = get_json(client, "/readyz")["status"]
    return status


def test_serves_through_an_outage_and_resumes(server: RedisServer, client: FlaskClient) -> None:
    store = redis.Redis.from_url(server.url)
    before = client.post("/v1/profiles", json=PROFILE)
    assert before.status_code == 200, before.status_code
    before_id = before.get_json()["profile_id"]
    big = known_steps(400).gzipped()
    assert len(big) > 20_000
    queued = _trace(client, big)
    assert queued.status_code == 202
    job_id = queued.get_json()["job_id"]
    assert store.dbsize() > 0

    server.stop()
    assert _ready(client) == "degraded"
    # every read and computation still answers
    assert get_json(client, "/v1/gpus?page_size=5")["items"]
    # what only Redis holds is not "not found" but "not now"
    unknown = client.get(f"/v1/profiles/{before_id}")
    assert "unreachable" in problem(unknown, 503)["detail"]
    assert unknown.headers["Retry-After"]
    during = client.post(
        "/v1/profiles", json={**PROFILE, "workload": {**PROFILE["workload"], "batch_size": 3}}
    )
    assert during.status_code == 200, during.status_code
    during_id = during.get_json()["profile_id"]
    assert get_json(client, f"/v1/profiles/{during_id}")["profile_id"] == during_id
    estimate = client.post("/v1/estimates", json=ESTIMATE)
    assert estimate.status_code == 200, estimate.get_data(as_text=True)
    small = _trace(client, known_steps(2).gzipped())
    assert small.status_code == 201, small.get_data(as_text=True)
    assert get_json(client, f"/v1/traces/{small.get_json()['trace_id']}")
    # work that needs the queue is refused, saying when to come back; nothing half-done
    refused = _trace(client, big)
    assert problem(refused, 503)["detail"].startswith("the job store (Redis) is unreachable")
    assert int(refused.headers["Retry-After"]) > 0
    assert problem(client.get(f"/v1/jobs/{job_id}"), 503)

    server.start()  # the append-only file brings back what was there
    assert _ready(client) == "ready"  # no restart of the app
    assert get_json(client, f"/v1/jobs/{job_id}")["status"] == "queued"
    assert get_json(client, f"/v1/profiles/{before_id}")["profile_id"] == before_id
    jobs.worker(store, "outage:", simple=True).work(burst=True)
    finished = get_json(client, f"/v1/jobs/{job_id}")
    assert finished["status"] == "finished", finished
    assert get_json(client, finished["trace_url"])["analysis"]["steps_found"] > 0
    # what was made during the outage still resolves here; new work is shared again
    assert get_json(client, f"/v1/profiles/{during_id}")["profile_id"] == during_id
    after = client.post(
        "/v1/profiles", json={**PROFILE, "workload": {**PROFILE["workload"], "batch_size": 5}}
    )
    assert after.status_code == 200
    keys_after = {k.decode() for k in store.scan_iter(match="outage:*")}
    store.close()
    assert any(after.get_json()["profile_id"] in k for k in keys_after)
    assert not any(during_id in k for k in keys_after)


def test_rate_limits_fall_back_to_memory(server: RedisServer) -> None:
    app = create_app(
        {"TESTING": True, "REDIS_URL": server.url, "REDIS_TIMEOUT_S": 0.3, "RATE_LIMIT": "3/minute"}
    )
    client = app.test_client()
    server.stop()
    statuses = [client.get("/v1/gpus?page_size=1").status_code for _ in range(5)]
    assert statuses[:3] == [200, 200, 200]
    assert statuses[3:] == [429, 429]


def test_an_outage_warns_once_a_window_not_once_a_request() -> None:
    """Issue 26: a Redis outage logged about 100 warnings a second. The service's log
    handler lets one warning of a kind through every window and counts the rest."""
    import logging
    import time

    from service.infra.cache import RedisCache, redis_client
    from service.security import RepeatedWarnings
    from tests.service.redis_server import free_port

    seen: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record)

    handler = Keep()
    handler.addFilter(RepeatedWarnings(window_s=0.5))
    logger = logging.getLogger("service.infra.cache")
    logger.addHandler(handler)
    try:
        dead = redis_client(f"redis://127.0.0.1:{free_port()}/0", 0.05)
        cache = RedisCache(dead, "outage:")
        for _ in range(200):
            assert cache.get("profile:x") is None
        assert len(seen) == 1
        time.sleep(0.6)
        cache.get("profile:x")
        assert len(seen) == 2
        assert "[199 more like this in 0.5 s]" in seen[1].getMessage()
    finally:
        logger.removeHandler(handler)
