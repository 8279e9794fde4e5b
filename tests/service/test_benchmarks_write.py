"""POST /v1/benchmarks: submitted rows, checked like the knowledge files, stored all or
nothing and durably, labelled, excluded on request, and fed to the model on a retrain."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from knowledge.submitted import submitted_count
from profiles.model_catalog import Catalog
from service import create_app, jobs
from service.engine.estimating.on_request import save_report
from service.infra.keys import KeyFile
from service.submissions import SubmissionStore, retrain
from tests.conftest import KEYS_FILE, WRITE_KEY, with_key
from tests.profiles.trace_factory import known_steps
from tests.service.helpers import fields_in, get_json, problem

ROW = {
    "gpu": "NVIDIA L4",
    "gpu_count": 1,
    "workload": "resnet50-imagenet",
    "precision": "fp16",
    "batch_size_per_gpu": 128,
    "throughput": 950.0,
    "source": "our lab: PyTorch 2.5 in NGC 24.10, torchvision ResNet-50, synthetic data",
    "as_of": "2026-11-30",
}
WRITE_KEY_ID = WRITE_KEY.split("_")[1]
ESTIMATE = {
    "model": {"name": "resnet-50"},
    "workload": {"task": "training", "batch_size": 128, "image_size": 224, "precision": "fp16"},
    "gpu": "l4",
}


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    return create_app({"TESTING": True, "SUBMISSIONS_FILE": str(tmp_path / "rows.jsonl")})


def _store(app: Flask) -> SubmissionStore:
    store: SubmissionStore = app.extensions["rightsize"].submissions
    return store


def _submit(client: FlaskClient, body: Any, status: int = 201) -> dict[str, Any]:
    response = client.post("/v1/benchmarks", json=body)
    assert response.status_code == status, response.get_data(as_text=True)
    data: dict[str, Any] = response.get_json()
    return data


class TestSubmit:
    def test_a_batch_is_stored_labelled_and_retrievable(
        self, app: Flask, client: FlaskClient
    ) -> None:
        curated = get_json(client, "/v1/benchmarks?layer=curated&page_size=1")["total"]
        response = client.post(
            "/v1/benchmarks", json={"rows": [ROW, {**ROW, "batch_size_per_gpu": 64}]}
        )
        assert response.status_code == 201, response.get_data(as_text=True)
        body = response.get_json()
        assert response.headers["Location"] == f"/v1/benchmarks/batches/{body['batch_id']}"
        assert [r["row"]["batch_size_per_gpu"] for r in body["rows"]] == [128, 64]
        assert {r["submitted_by"] for r in body["rows"]} == {WRITE_KEY_ID}
        assert "next retrain" in body["used"]
        again = get_json(client, response.headers["Location"])
        assert again["rows"] == body["rows"]
        listed = get_json(client, "/v1/benchmarks?layer=submitted")
        assert listed["total"] == 2
        assert {r["layer"] for r in listed["items"]} == {"submitted"}
        assert {r["gpu_id"] for r in listed["items"]} == {"l4"}
        assert get_json(client, "/v1/benchmarks?layer=curated&page_size=1")["total"] == curated
        everything = get_json(client, "/v1/benchmarks?page_size=1")["total"]
        assert everything == curated + 2
        # on disk, fsynced, one line a row, readable by a fresh process
        assert len(SubmissionStore(_store(app).path).all()) == 2

    def test_one_row_alone_is_a_batch_of_one(self, client: FlaskClient) -> None:
        assert len(_submit(client, ROW)["rows"]) == 1

    def test_a_bad_row_rejects_the_batch_and_stores_nothing(
        self, app: Flask, client: FlaskClient
    ) -> None:
        _submit(client, ROW)
        before = _store(app).path.read_bytes()
        bad = [ROW, {**ROW, "gpu": "H1000"}, {**ROW, "throughput": -3, "workload": "resnet"}]
        body = problem(client.post("/v1/benchmarks", json={"rows": bad}), 422)
        assert {"rows.1.gpu", "rows.2.throughput"} <= fields_in(body)
        assert "nothing was stored" in body["detail"]
        assert _store(app).path.read_bytes() == before

    def test_unknown_workload_names_the_usable_ones(self, client: FlaskClient) -> None:
        body = problem(client.post("/v1/benchmarks", json={**ROW, "workload": "resnet-50"}), 422)
        assert fields_in(body) == {"rows.0.workload"}
        assert "resnet50-imagenet" in body["errors"][0]["message"]

    def test_writes_need_a_write_key(self, app: Flask, anonymous: FlaskClient) -> None:
        problem(anonymous.post("/v1/benchmarks", json=ROW), 401)
        reader, _ = KeyFile(KEYS_FILE).create("reader", "read")
        problem(with_key(app.test_client(), reader).post("/v1/benchmarks", json=ROW), 403)
        forged = with_key(app.test_client(), "rs_00000000_forged")
        problem(forged.post("/v1/benchmarks", json=ROW), 401)
        assert _store(app).all() == []

    def test_a_trace_becomes_a_row_for_its_reference_gpu(self, client: FlaskClient) -> None:
        trace = client.post(
            "/v1/traces?batch_size=32&precision=bf16",
            data=known_steps(4).gzipped(),
            content_type="application/gzip",
        ).get_json()
        body = _submit(client, {"trace_id": trace["trace_id"], "workload": "resnet50-imagenet"})
        row = body["rows"][0]["row"]
        assert row["gpu"] == "h100-sxm-80gb"  # the trace's deviceProperties
        assert row["throughput"] == pytest.approx(32 / 1000e-6)  # 32 samples a 1000 µs step
        assert row["precision"] == "fp16"  # mixed precision, as the tables label it
        assert trace["trace_id"] in row["source"]

    def test_a_torn_last_line_is_ignored_and_not_joined(
        self, app: Flask, client: FlaskClient
    ) -> None:
        _submit(client, ROW)
        with open(_store(app).path, "ab") as out:
            out.write(b'{"id": "cut-sh')  # a write that died mid-line, never acknowledged
        _submit(client, {**ROW, "batch_size_per_gpu": 32})
        fresh = SubmissionStore(_store(app).path).all()
        assert [s.row["batch_size_per_gpu"] for s in fresh] == [128, 32]


@pytest.mark.slow  # a refit on the queue's worker
class TestRetrain:
    def test_rows_reach_the_model_on_retrain_and_can_be_excluded(
        self, app: Flask, client: FlaskClient
    ) -> None:
        st = app.extensions["rightsize"]
        before = client.post("/v1/estimates", json=ESTIMATE).get_json()
        rows = [{**ROW, "batch_size_per_gpu": b, "throughput": v} for b, v in
                ((64, 900.0), (128, 950.0), (256, 980.0))]  # fmt: skip
        _submit(client, {"rows": rows})
        # stored, but not used before a retrain
        unchanged = client.post("/v1/estimates", json=ESTIMATE).get_json()
        assert unchanged["throughput"] == before["throughput"]
        marker = retrain(
            st.knowledge, Catalog.load(), _store(app), Path(st.settings["RIGHTSIZE_MODEL_DIR"])
        )
        assert marker["submitted_rows"] == 3
        st.layers.load_now()
        after = client.post("/v1/estimates", json=ESTIMATE).get_json()
        assert after["knowledge_version"] == marker["knowledge_version"]
        assert after["knowledge_version"].startswith(st.knowledge.version + "+s")
        # measured 950 images/s where the curated model said ~260: it moves towards them
        assert after["throughput"]["samples_per_s"] > 1.1 * before["throughput"]["samples_per_s"]
        curated = client.post(
            "/v1/estimates", json={**ESTIMATE, "submitted_benchmarks": False}
        ).get_json()
        assert curated["throughput"] == before["throughput"]
        assert curated["knowledge_version"] == st.knowledge.version
        assert submitted_count(st.layers.service().knowledge) == 3
        batch = get_json(client, f"/v1/benchmarks/batches/{_store(app).all()[0].batch_id}")
        assert batch["used"].startswith("since the retrain")

    def test_retrain_job_runs_on_the_queue(
        self, tmp_path: Path, redis_url: str, redis_prefix: str
    ) -> None:
        admin, _ = KeyFile(KEYS_FILE).create("admin", "admin")
        app = create_app(
            {
                "TESTING": True,
                "REDIS_URL": redis_url,
                "KEY_PREFIX": redis_prefix,
                "SUBMISSIONS_FILE": str(tmp_path / "rows.jsonl"),
                "MODEL_DIR": str(tmp_path / "model"),
            }
        )
        client = with_key(app.test_client())
        _submit(client, ROW)
        problem(client.post("/v1/benchmarks/retrain", json={}), 403)  # write is not admin
        queued = with_key(app.test_client(), admin).post("/v1/benchmarks/retrain", json={})
        assert queued.status_code == 202, queued.get_data(as_text=True)
        job_id = queued.get_json()["job_id"]
        assert get_json(client, f"/v1/jobs/{job_id}")["status"] == "queued"
        jobs.worker(redis.Redis.from_url(redis_url), redis_prefix, simple=True).work(burst=True)
        done = get_json(client, f"/v1/jobs/{job_id}")
        assert done["status"] == "finished", done
        assert done["progress"] == "done"
        assert done["result"]["submitted_rows"] == 1
        st = app.extensions["rightsize"]
        st.layers.load_now()
        assert st.layers.marker()["knowledge_version"] == done["result"]["knowledge_version"]
        # the validation report served is the one of the model in use, and says so
        save_report(
            tmp_path / "model",
            {"knowledge_version": done["result"]["knowledge_version"], "submitted_rows": 1},
        )
        report = get_json(client, "/v1/validation")
        assert report["submitted_rows"] == report["submitted_rows_in_use"] == 1
        curated_only = create_app({"TESTING": True, "MODEL_DIR": str(tmp_path / "model")})
        assert get_json(curated_only.test_client(), "/v1/validation")["submitted_rows_in_use"] == 0

    def test_retrain_without_a_queue_is_503_saying_what_to_run(self, app: Flask) -> None:
        admin, _ = KeyFile(KEYS_FILE).create("admin", "admin")
        response = with_key(app.test_client(), admin).post("/v1/benchmarks/retrain", json={})
        assert "rightsize retrain" in problem(response, 503)["detail"]
        assert response.headers["Retry-After"] == "3600"  # ours, not the rate limiter's


def test_validation_is_queued_for_a_worker_by_an_admin(tmp_path: Path) -> None:
    """The job is queued with what it validates (a private Redis: no test worker takes it;
    running it is `rightsize validate`'s minutes, covered by the engine's tests)."""
    from tests.service.redis_server import RedisServer

    own = RedisServer()
    own.start()
    try:
        admin, _ = KeyFile(KEYS_FILE).create("admin", "admin")
        app = create_app({"TESTING": True, "REDIS_URL": own.url, "MODEL_DIR": str(tmp_path)})
        problem(with_key(app.test_client()).post("/v1/validation"), 403)
        queued = with_key(app.test_client(), admin).post("/v1/validation")
        assert queued.status_code == 202, queued.get_data(as_text=True)
        job = get_json(app.test_client(), queued.headers["Location"])
        assert job["status"] == "queued"
        waiting = jobs.queue(redis.Redis.from_url(own.url), "rightsize:").jobs
        assert [j.func_name for j in waiting] == ["service.jobs.validate_job"]
        assert waiting[0].args[0]["model_dir"] == str(tmp_path)
    finally:
        own.close()
    no_redis = create_app({"TESTING": True})
    response = with_key(no_redis.test_client(), admin).post("/v1/validation")
    assert "rightsize validate" in problem(response, 503)["detail"]
