"""POST /v1/traces, GET /v1/traces/{id}, projections, background jobs on a real Redis."""

from __future__ import annotations

import io
import zlib

import pytest
import redis
from flask.testing import FlaskClient

from service import create_app, jobs
from service.infra.keys import KeyFile
from tests.conftest import KEYS_FILE, with_key
from tests.profiles.trace_factory import known_steps
from tests.service.helpers import fields_in, problem


def _upload(client: FlaskClient, data: bytes, query: str = "", multipart: bool = True):  # type: ignore[no-untyped-def]
    if multipart:
        return client.post(
            f"/v1/traces{query}",
            data={"file": (io.BytesIO(data), "t.json.gz")},
            content_type="multipart/form-data",
        )
    return client.post(f"/v1/traces{query}", data=data, content_type="application/gzip")


class TestUpload:
    def test_multipart_and_raw_give_the_same_trace(self, client: FlaskClient) -> None:
        data = known_steps(4).gzipped()
        first = _upload(client, data)
        assert first.status_code == 201, first.get_data(as_text=True)
        body = first.get_json()
        assert first.headers["Location"] == f"/v1/traces/{body['trace_id']}"
        assert body["reference_gpu_id"] == "h100-sxm-80gb"
        assert body["analysis"]["steps_found"] == 4
        raw = _upload(client, data, multipart=False).get_json()
        assert raw["trace_id"] == body["trace_id"]
        stored = client.get(f"/v1/traces/{body['trace_id']}").get_json()
        assert stored["analysis"] == body["analysis"]

    def test_advice_names_the_input_stall(self, client: FlaskClient) -> None:
        body = _upload(client, known_steps(4).gzipped()).get_json()
        rules = {a["rule"]: a for a in body["advice"]}
        assert "input-pipeline" in rules
        assert rules["input-pipeline"]["predicted_saving_share"] >= 0.10

    def test_projection_scales_compute_but_not_the_input_stall(self, client: FlaskClient) -> None:
        trace_id = _upload(client, known_steps(4).gzipped()).get_json()["trace_id"]
        response = client.post(
            f"/v1/traces/{trace_id}/projections",
            json={"gpus": ["a100-sxm4-80gb", "b200-sxm-180gb"]},
        )
        assert response.status_code == 200, response.get_data(as_text=True)
        body = response.get_json()
        slower, faster = body["projections"]
        assert slower["step_time_us"] > body["reference_step_time_us"] > faster["step_time_us"]
        for p in body["projections"]:
            assert p["breakdown_us"]["idle_input"] == 200.0  # Amdahl: no GPU shortens it
        assert body["knowledge_version"]

    def test_unknown_device_is_analysed_but_projections_need_a_reference(
        self, client: FlaskClient
    ) -> None:
        builder = known_steps(3)
        builder.device["name"] = "Acme Tensor Engine 9000"
        body = _upload(client, builder.gzipped()).get_json()
        assert body["reference_gpu_id"] is None
        assert any("reference_gpu" in n for n in body["notes"])
        url = f"/v1/traces/{body['trace_id']}/projections"
        refused = problem(client.post(url, json={"gpus": ["h100-sxm-80gb"]}), 422)
        assert fields_in(refused) == {"reference_gpu"}
        named = client.post(url, json={"gpus": ["h100-sxm-80gb"], "reference_gpu": "a100"})
        assert named.status_code == 200
        assert named.get_json()["reference_gpu_id"] == "a100-sxm4-40gb"

    def test_unknown_target_gpu_is_422(self, client: FlaskClient) -> None:
        trace_id = _upload(client, known_steps(3).gzipped()).get_json()["trace_id"]
        body = problem(
            client.post(f"/v1/traces/{trace_id}/projections", json={"gpus": ["h1000"]}), 422
        )
        assert fields_in(body) == {"gpus"}

    def test_unknown_trace_is_404(self, client: FlaskClient) -> None:
        problem(client.get("/v1/traces/nope"), 404)
        problem(client.post("/v1/traces/nope/projections", json={"gpus": ["t4"]}), 404)


class TestBadUploads:
    def test_not_json_says_how_to_capture(self, client: FlaskClient) -> None:
        body = problem(_upload(client, b"\x00\x01 definitely not json"), 422)
        assert "torch.profiler" in body["detail"]

    def test_truncated_gzip(self, client: FlaskClient) -> None:
        body = problem(_upload(client, known_steps(3).gzipped()[:-40]), 422)
        assert body["kind"] == "truncated"

    def test_json_that_is_not_a_trace(self, client: FlaskClient) -> None:
        body = problem(_upload(client, b'{"model": "resnet"}', multipart=False), 422)
        assert body["kind"] == "not-a-trace"

    def test_missing_file_field(self, client: FlaskClient) -> None:
        response = client.post(
            "/v1/traces",
            data={"other": (io.BytesIO(b"x"), "x")},
            content_type="multipart/form-data",
        )
        assert fields_in(problem(response, 422)) == {"file"}

    def test_oversized_upload_is_413_before_reading(self) -> None:
        client = with_key(create_app({"TRACE_MAX_BYTES": 1000}).test_client())
        problem(_upload(client, known_steps(40).gzipped(), multipart=False), 413)

    @pytest.mark.slow  # a bomb inflated
    def test_gzip_bomb_is_413_and_the_worker_lives_on(self, client: FlaskClient) -> None:
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        bomb = packer.compress(b'{"traceEvents": [')
        for _ in range(1024):
            bomb += packer.compress(b" " * 2**20)
        bomb += packer.compress(b"]}") + packer.flush()
        problem(_upload(client, bomb, multipart=False), 413)
        assert _upload(client, known_steps(3).gzipped()).status_code == 201

    def test_deeply_nested_json_is_422(self, client: FlaskClient) -> None:
        deep = b'{"traceEvents": [' + b"[" * 500_000 + b"]" * 500_000 + b"]}"
        body = problem(_upload(client, deep, multipart=False), 422)
        assert body["kind"] == "too-deep"


@pytest.mark.slow  # a worker process
class TestBackgroundJobs:
    def test_large_upload_is_queued_then_parsed_by_a_worker(
        self, redis_url: str, redis_prefix: str
    ) -> None:
        app = create_app(
            {"REDIS_URL": redis_url, "KEY_PREFIX": redis_prefix, "TRACE_ASYNC_BYTES": 100}
        )
        client = with_key(app.test_client())
        accepted = _upload(client, known_steps(4).gzipped(), multipart=False)
        assert accepted.status_code == 202, accepted.get_data(as_text=True)
        job_url = accepted.get_json()["job_url"]
        assert client.get(job_url).get_json()["status"] == "queued"
        connection = redis.Redis.from_url(redis_url)
        jobs.worker(connection, redis_prefix, simple=True).work(burst=True)
        done = client.get(job_url).get_json()
        assert done["status"] == "finished", done
        trace = client.get(done["trace_url"])
        assert trace.status_code == 200
        assert trace.get_json()["analysis"]["steps_found"] == 4

    def test_failed_job_reports_why(self, redis_url: str, redis_prefix: str) -> None:
        app = create_app(
            {"REDIS_URL": redis_url, "KEY_PREFIX": redis_prefix, "TRACE_ASYNC_BYTES": 10}
        )
        client = with_key(app.test_client())
        job_url = _upload(client, b"garbage" * 20, multipart=False).get_json()["job_url"]
        connection = redis.Redis.from_url(redis_url)
        jobs.worker(connection, redis_prefix, simple=True).work(burst=True)
        state = client.get(job_url).get_json()
        assert state["status"] == "failed"
        assert state["error"]["kind"] == "not-json"

    def test_a_key_has_a_bounded_share_of_the_queue(
        self, redis_url: str, redis_prefix: str
    ) -> None:
        """One key's uploads once held the one worker for minutes while another key's
        waited: a key may have TRACE_JOBS_PER_KEY queued or running."""
        settings = {"REDIS_URL": redis_url, "KEY_PREFIX": redis_prefix, "TRACE_ASYNC_BYTES": 100}
        app = create_app({**settings, "TRACE_JOBS_PER_KEY": 2})
        client = with_key(app.test_client())
        for steps in (4, 5):
            assert _upload(client, known_steps(steps).gzipped()).status_code == 202
        refused = problem(_upload(client, known_steps(6).gzipped()), 429)
        assert "its share is 2" in refused["detail"]
        other, _ = KeyFile(KEYS_FILE).create("another team", "write")
        theirs = _upload(with_key(app.test_client(), other), known_steps(6).gzipped())
        assert theirs.status_code == 202

    def test_unknown_job_is_404(self, redis_url: str, redis_prefix: str) -> None:
        app = create_app({"REDIS_URL": redis_url, "KEY_PREFIX": redis_prefix})
        problem(app.test_client().get("/v1/jobs/0123"), 404)

    def test_without_redis_uploads_are_parsed_at_once(self, client: FlaskClient) -> None:
        response = _upload(client, known_steps(50).gzipped(), multipart=False)
        assert response.status_code == 201
        problem(client.get("/v1/jobs/anything"), 404)


class TestEfficiency:
    def test_attached_profile_gives_achieved_tflops_against_the_peak(
        self, client: FlaskClient
    ) -> None:
        profile = client.post(
            "/v1/profiles",
            json={
                "model": {"name": "gpt2"},
                "workload": {"task": "training", "batch_size": 2, "seq_len": 128},
            },
        ).get_json()
        query = f"?profile_id={profile['profile_id']}&precision=bf16"
        body = _upload(client, known_steps(4).gzipped(), query).get_json()
        efficiency = body["efficiency"]
        step_s = body["analysis"]["step_time_us"] * 1e-6
        expected = profile["flops"]["total"] / step_s / 1e12
        assert efficiency["profile_achieved_tflops"] == expected
        assert efficiency["profile_fraction_of_peak"] == expected / 989.4

    def test_missing_profile_is_noted(self, client: FlaskClient) -> None:
        body = _upload(client, known_steps(3).gzipped(), "?profile_id=nope").get_json()
        assert any("profile 'nope' not found" in n for n in body["notes"])
