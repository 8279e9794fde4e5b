"""A key's data is its own (a hostile probe's findings): submitted rows and batches, traces,
what is computed from a trace, and a trace's background job are read by the key that sent
them and the administrators; anyone else is told there is none (404). Rows are listed for
everyone only when sent with ``share``, and never with who sent them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from service import create_app, jobs
from service.infra.keys import KeyFile
from service.submissions import SubmissionStore
from tests.conftest import KEYS_FILE, WRITE_KEY, with_key
from tests.profiles.trace_factory import known_steps
from tests.service.helpers import get_json, problem
from tests.service.test_benchmarks_write import ROW

KEYS = KeyFile(KEYS_FILE)
OTHER_KEY, _ = KEYS.create("ownership-tests-other", "write")
ADMIN_KEY, _ = KEYS.create("ownership-tests-admin", "admin")
READ_KEY, _ = KEYS.create("ownership-tests-reader", "read")
OWNER_ID = WRITE_KEY.split("_")[1]
TRACE = known_steps(4).gzipped()


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    return create_app({"TESTING": True, "SUBMISSIONS_FILE": str(tmp_path / "rows.jsonl")})


@pytest.fixture
def other(app: Flask) -> FlaskClient:
    """Another key with the write role."""
    return with_key(app.test_client(), OTHER_KEY)


@pytest.fixture
def admin(app: Flask) -> FlaskClient:
    return with_key(app.test_client(), ADMIN_KEY)


def _submit(client: FlaskClient, body: Any) -> dict[str, Any]:
    response = client.post("/v1/benchmarks", json=body)
    assert response.status_code == 201, response.get_data(as_text=True)
    data: dict[str, Any] = response.get_json()
    return data


def _listed(client: FlaskClient) -> set[str]:
    """The submission ids of the submitted rows ``client`` is listed."""
    items = get_json(client, "/v1/benchmarks?layer=submitted&page_size=500")["items"]
    return {r["details"]["submission"] for r in items}


def _upload(client: FlaskClient, query: str = "") -> Any:
    return client.post(f"/v1/traces{query}", data=TRACE, content_type="application/gzip")


def _trace(client: FlaskClient, query: str = "") -> dict[str, Any]:
    response = _upload(client, query)
    assert response.status_code == 201, response.get_data(as_text=True)
    data: dict[str, Any] = response.get_json()
    return data


class TestSubmittedRows:
    def test_another_keys_rows_are_neither_listed_nor_read(
        self,
        app: Flask,
        client: FlaskClient,
        other: FlaskClient,
        admin: FlaskClient,
        anonymous: FlaskClient,
    ) -> None:
        sent = _submit(client, {"rows": [ROW, {**ROW, "batch_size_per_gpu": 64}]})
        ids = {r["id"] for r in sent["rows"]}
        assert {r["shared"] for r in sent["rows"]} == {False}  # private unless asked
        url = f"/v1/benchmarks/batches/{sent['batch_id']}"
        for stranger in (other, anonymous):
            assert _listed(stranger) == set()
            assert problem(stranger.get(url), 404)["detail"]  # 404: not that it exists
        everything = get_json(other, "/v1/benchmarks?page_size=1")["total"]
        assert everything == get_json(other, "/v1/benchmarks?layer=curated&page_size=1")["total"]
        assert _listed(client) == ids
        assert get_json(client, url)["rows"] == sent["rows"]
        assert _listed(admin) == ids
        assert {r["submitted_by"] for r in get_json(admin, url)["rows"]} == {OWNER_ID}
        # every row, seen or not, is what a retrain fits
        store: SubmissionStore = app.extensions["rightsize"].submissions
        assert {i for i, _ in store.benchmarks(app.extensions["rightsize"].knowledge)} == ids

    def test_shared_rows_are_listed_for_everyone_without_who_sent_them(
        self, client: FlaskClient, other: FlaskClient, anonymous: FlaskClient
    ) -> None:
        shared = _submit(client, {"rows": [ROW], "share": True})
        alone = _submit(client, {**ROW, "batch_size_per_gpu": 32, "share": True})
        private = _submit(client, {**ROW, "batch_size_per_gpu": 16})
        assert alone["rows"][0]["shared"] is True
        assert "share" not in alone["rows"][0]["row"]  # the batch's choice, not a column
        seen = {shared["rows"][0]["id"], alone["rows"][0]["id"]}
        for stranger in (other, anonymous):
            assert _listed(stranger) == seen
            batch = get_json(stranger, f"/v1/benchmarks/batches/{shared['batch_id']}")
            assert [r["id"] for r in batch["rows"]] == [shared["rows"][0]["id"]]
            assert "submitted_by" not in batch["rows"][0]
            assert batch["rows"][0]["shared"] is True
        assert _listed(client) == seen | {private["rows"][0]["id"]}
        owned = get_json(client, f"/v1/benchmarks/batches/{shared['batch_id']}")
        assert owned["rows"][0]["submitted_by"] == OWNER_ID

    def test_with_read_keys_required_a_read_key_reads_only_its_own_and_shared(
        self, tmp_path: Path
    ) -> None:
        app = create_app({"TESTING": True, "REQUIRE_READ_KEY": True,
                          "SUBMISSIONS_FILE": str(tmp_path / "rows.jsonl")})  # fmt: skip
        sent = _submit(with_key(app.test_client()), ROW)
        reader = with_key(app.test_client(), READ_KEY)
        assert _listed(reader) == set()
        problem(reader.get(f"/v1/benchmarks/batches/{sent['batch_id']}"), 404)
        problem(app.test_client().get("/v1/benchmarks?layer=submitted"), 401)

    def test_a_row_from_another_keys_trace_is_404(
        self, client: FlaskClient, other: FlaskClient, admin: FlaskClient
    ) -> None:
        trace_id = _trace(client, "?batch_size=32")["trace_id"]
        row = {"trace_id": trace_id, "workload": "resnet50-imagenet"}
        assert problem(other.post("/v1/benchmarks", json=row), 404)["detail"]
        assert _submit(client, row)["rows"][0]["row"]["gpu"] == "h100-sxm-80gb"
        assert _submit(admin, row)["rows"][0]["row"]["batch_size_per_gpu"] == 32


class TestTraces:
    def test_another_key_can_neither_read_nor_project_a_trace(
        self, client: FlaskClient, other: FlaskClient, admin: FlaskClient, anonymous: FlaskClient
    ) -> None:
        trace_id = _trace(client)["trace_id"]
        projection = {"gpus": ["a100-sxm4-80gb"]}
        for stranger in (other, anonymous):
            problem(stranger.get(f"/v1/traces/{trace_id}"), 404)
            problem(stranger.post(f"/v1/traces/{trace_id}/projections", json=projection), 404)
        for reader in (client, admin):
            body = get_json(reader, f"/v1/traces/{trace_id}")
            assert body["options"]["owner"] == OWNER_ID
            projected = reader.post(f"/v1/traces/{trace_id}/projections", json=projection)
            assert projected.status_code == 200, projected.get_data(as_text=True)

    def test_the_same_bytes_from_two_keys_are_two_traces(
        self, client: FlaskClient, other: FlaskClient
    ) -> None:
        mine = _trace(client, "?batch_size=32")
        theirs = _trace(other, "?batch_size=64&reference_gpu=a100-sxm4-80gb")
        assert mine["trace_id"] != theirs["trace_id"]
        again = get_json(client, f"/v1/traces/{mine['trace_id']}")
        assert again["options"]["batch_size"] == 32  # not replaced by the other key's upload
        assert again["reference_gpu_id"] == "h100-sxm-80gb"
        assert _trace(other, "?batch_size=32")["trace_id"] != mine["trace_id"]
        problem(other.get(f"/v1/traces/{mine['trace_id']}"), 404)
        problem(client.get(f"/v1/traces/{theirs['trace_id']}"), 404)

    def test_other_options_from_the_same_key_are_another_trace(self, client: FlaskClient) -> None:
        a100 = _trace(client, "?reference_gpu=a100-sxm4-80gb")
        h100 = _trace(client, "?reference_gpu=h100-sxm-80gb")
        assert a100["trace_id"] != h100["trace_id"]
        assert get_json(client, f"/v1/traces/{a100['trace_id']}")["reference_gpu_id"] == (
            "a100-sxm4-80gb"
        )
        assert get_json(client, f"/v1/traces/{h100['trace_id']}")["reference_gpu_id"] == (
            "h100-sxm-80gb"
        )
        assert _trace(client, "?reference_gpu=a100-sxm4-80gb")["trace_id"] == a100["trace_id"]

    def test_estimates_and_recommendations_from_another_keys_trace_are_404(
        self, client: FlaskClient, other: FlaskClient, anonymous: FlaskClient
    ) -> None:
        """The answers are cached by the request alone: the owner's answer is never
        served to another key that sends the same request."""
        trace_id = _trace(client, "?batch_size=32")["trace_id"]
        estimate = {"trace_id": trace_id, "gpu": "a100-sxm4-80gb"}
        recommendation = {"trace_id": trace_id}
        assert client.post("/v1/estimates", json=estimate).status_code == 200
        assert client.post("/v1/recommendations", json=recommendation).status_code == 200
        for stranger in (other, anonymous):
            problem(stranger.post("/v1/estimates", json=estimate), 404)
            problem(stranger.post("/v1/recommendations", json=recommendation), 404)


class TestTraceJobs:
    @pytest.mark.slow  # a trace job run to its end
    def test_another_keys_trace_job_is_404(self, redis_url: str, redis_prefix: str) -> None:
        app = create_app(
            {"REDIS_URL": redis_url, "KEY_PREFIX": redis_prefix, "TRACE_ASYNC_BYTES": 100}
        )
        owner, other = with_key(app.test_client()), with_key(app.test_client(), OTHER_KEY)
        accepted = _upload(owner)
        assert accepted.status_code == 202, accepted.get_data(as_text=True)
        job_url = accepted.get_json()["job_url"]
        problem(other.get(job_url), 404)
        problem(app.test_client().get(job_url), 404)
        assert get_json(with_key(app.test_client(), ADMIN_KEY), job_url)["status"] == "queued"
        jobs.worker(redis.Redis.from_url(redis_url), redis_prefix, simple=True).work(burst=True)
        done = get_json(owner, job_url)
        assert done["status"] == "finished", done
        problem(other.get(job_url), 404)
        problem(other.get(done["trace_url"]), 404)
        assert get_json(owner, done["trace_url"])["options"]["owner"] == OWNER_ID
