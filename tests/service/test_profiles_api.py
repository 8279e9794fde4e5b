"""POST /v1/profiles, GET /v1/profiles/{id}, GET /v1/models: cache, errors, CLI."""

from __future__ import annotations

import json

from click.testing import CliRunner
from flask.testing import FlaskClient

from service import create_app
from service.cli import main
from tests.profiles.conftest import hf_config
from tests.service.helpers import fields_in, problem

LLAMA_TRAINING = {
    "model": {"name": "llama-3-8b"},
    "workload": {"task": "training", "batch_size": 8, "seq_len": 4096, "precision": "bf16"},
}
SMALL = {
    "model": {"name": "gpt2"},
    "workload": {"task": "training", "batch_size": 2, "seq_len": 128},
}


class TestProfiles:
    def test_profile_then_served_from_cache(self, client: FlaskClient) -> None:
        first = client.post("/v1/profiles", json=SMALL)
        assert first.status_code == 200, first.get_data(as_text=True)
        body = first.get_json()
        assert body["cached"] is False
        assert body["model"]["parameters"] == 124_439_808
        assert body["memory"]["total_bytes"] > body["memory"]["parameters_bytes"]
        assert {"forward", "backward", "optimizer"} <= set(body["phases"])
        second = client.post("/v1/profiles", json=SMALL).get_json()
        assert second["cached"] is True
        assert second["profile_id"] == body["profile_id"]
        again = client.get(f"/v1/profiles/{body['profile_id']}")
        assert again.status_code == 200
        assert again.get_json()["flops"] == body["flops"]

    def test_same_model_spelled_two_ways_shares_the_id(self, client: FlaskClient) -> None:
        by_name = client.post("/v1/profiles", json=SMALL).get_json()
        by_config = client.post(
            "/v1/profiles",
            json={"model": {"hf_config": hf_config("gpt2")}, "workload": SMALL["workload"]},
        ).get_json()
        assert by_config["profile_id"] == by_name["profile_id"]
        assert by_config["cached"] is True

    def test_redis_cache_is_shared_between_apps(self, redis_url: str, redis_prefix: str) -> None:
        config = {"REDIS_URL": redis_url, "KEY_PREFIX": redis_prefix}
        first = create_app(config).test_client().post("/v1/profiles", json=SMALL).get_json()
        other = create_app(config).test_client()
        assert other.post("/v1/profiles", json=SMALL).get_json()["cached"] is True
        assert other.get(f"/v1/profiles/{first['profile_id']}").status_code == 200

    def test_unknown_profile_id_is_404(self, client: FlaskClient) -> None:
        problem(client.get("/v1/profiles/0123456789abcdef01234567"), 404)


class TestProfileErrors:
    def test_unknown_model_is_404_with_close_matches(self, client: FlaskClient) -> None:
        body = problem(
            client.post("/v1/profiles", json={**SMALL, "model": {"name": "lama-3-8b"}}), 404
        )
        assert "llama-3-8b" in body["suggestions"]

    def test_unknown_model_type_is_422(self, client: FlaskClient) -> None:
        body = problem(
            client.post(
                "/v1/profiles", json={**SMALL, "model": {"hf_config": {"model_type": "mamba"}}}
            ),
            422,
        )
        assert fields_in(body) == {"model.hf_config.model_type"}
        assert "llama" in body["detail"]

    def test_bad_shape_names_the_field(self, client: FlaskClient) -> None:
        model = {
            "family": "transformer",
            "layers": 2,
            "hidden": 100,
            "heads": 3,
            "ffn": 8,
            "vocab": 10,
        }
        body = problem(client.post("/v1/profiles", json={**SMALL, "model": model}), 422)
        assert fields_in(body) == {"model.hidden"}

    def test_bad_workload_names_the_field(self, client: FlaskClient) -> None:
        body = problem(
            client.post(
                "/v1/profiles",
                json={**SMALL, "workload": {"task": "training", "batch_size": -2, "seq_len": 10}},
            ),
            422,
        )
        assert fields_in(body) == {"workload.batch_size"}

    def test_sequence_limit_is_quoted(self, client: FlaskClient) -> None:
        body = problem(
            client.post(
                "/v1/profiles",
                json={**SMALL, "workload": {"task": "training", "batch_size": 1, "seq_len": 10**8}},
            ),
            422,
        )
        assert "10000000" in body["detail"]

    def test_too_slow_is_stopped(self) -> None:
        client = create_app({"PROFILE_TIME_LIMIT_S": 0.05}).test_client()
        body = problem(
            client.post(
                "/v1/profiles",
                json={
                    "model": {"name": "llama-3.1-405b"},
                    "workload": {"task": "training", "batch_size": 1, "seq_len": 64},
                },
            ),
            422,
        )
        assert "stopped" in body["detail"]
        assert client.get("/healthz").status_code == 200

    def test_not_json_is_a_problem(self, client: FlaskClient) -> None:
        response = client.post("/v1/profiles", data="{not json", content_type="application/json")
        assert response.status_code in (400, 422)
        assert response.mimetype == "application/problem+json"

    def test_deeply_nested_body_is_a_400_not_a_crash(self, client: FlaskClient) -> None:
        deep = '{"model":' + '{"a":' * 100_000 + "1" + "}" * 100_000 + ', "workload": {}}'
        problem(client.post("/v1/profiles", data=deep, content_type="application/json"), 400)
        assert client.post("/v1/profiles", json=SMALL).status_code == 200

    def test_array_body_is_422(self, client: FlaskClient) -> None:
        body = problem(client.post("/v1/profiles", json=[1, 2]), 422)
        assert fields_in(body) == {"(body)"}


class TestModels:
    def test_lists_the_catalog(self, client: FlaskClient) -> None:
        body = client.get("/v1/models?page_size=500").get_json()
        assert body["total"] >= 25
        assert "llama-3-8b" in {m["name"] for m in body["items"]}

    def test_by_alias_and_unknown(self, client: FlaskClient) -> None:
        assert client.get("/v1/models/resnet50").get_json()["name"] == "resnet-50"
        body = problem(client.get("/v1/models/resnet5"), 404)
        assert body["suggestions"]


class TestCli:
    def test_readable_breakdown(self) -> None:
        result = CliRunner().invoke(
            main, ["profile", "gpt2", "--task", "training", "--batch-size", "2", "--seq-len", "128"]
        )
        assert result.exit_code == 0, result.output
        assert "124 M parameters" in result.output
        assert "memory per replica" in result.output

    def test_json_is_the_api_json(self, client: FlaskClient) -> None:
        result = CliRunner().invoke(
            main,
            [
                "profile",
                "gpt2",
                "--task",
                "training",
                "--batch-size",
                "2",
                "--seq-len",
                "128",
                "--json",
            ],
        )
        assert result.exit_code == 0, result.output
        data = json.loads(result.output)
        api = client.post("/v1/profiles", json=SMALL).get_json()
        assert data["profile_id"] == api["profile_id"]
        assert data["flops"] == api["flops"]

    def test_bad_input_is_a_clear_error(self) -> None:
        result = CliRunner().invoke(
            main, ["profile", "gpt-9", "--batch-size", "1", "--seq-len", "8"]
        )
        assert result.exit_code != 0
        assert "close matches" in result.output
