"""POST /v1/estimates and GET /v1/validation against the performance model built from knowledge."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.service.helpers import problem

RESNET = {
    "model": {"name": "resnet-50"},
    "workload": {
        "task": "training",
        "batch_size": 256,
        "image_size": 224,
        "precision": "fp16",
        "optimizer": "sgd+momentum",
    },
}


def estimate(client: FlaskClient, **body: Any) -> dict[str, Any]:
    response = client.post("/v1/estimates", json={**RESNET, **body})
    assert response.status_code == 200, response.get_data(as_text=True)
    data: dict[str, Any] = response.get_json()
    return data


def test_faster_gpu_is_faster_and_interval_brackets_the_estimate(client: FlaskClient) -> None:
    h100 = estimate(client, gpu="h100-sxm-80gb")
    v100 = estimate(client, gpu="v100-sxm2-16gb")
    assert h100["throughput"]["samples_per_s"] > 1.5 * v100["throughput"]["samples_per_s"]
    for result in (h100, v100):
        assert result["interval"]["low"] < result["step_time_s"] < result["interval"]["high"]
        assert result["bound"] in {"compute", "memory_bandwidth", "kernel_launches", "host"}
        breakdown = result["breakdown"]
        assert breakdown["single_gpu_step_s"] == pytest.approx(
            breakdown["gpu_s"] + breakdown["launch_s"] + breakdown["host_s"] + breakdown["input_s"]
        )
        assert any("math mode" in a for a in result["assumptions"])


def test_throughput_is_for_all_gpus(client: FlaskClient) -> None:
    one = estimate(client, gpu="a100-sxm4-80gb")
    eight = estimate(client, gpu="a100-sxm4-80gb", count=8)
    ratio = eight["throughput"]["samples_per_s"] / one["throughput"]["samples_per_s"]
    assert 5.0 < ratio <= 8.0


def test_input_ceiling_from_the_request_is_named_as_the_bound(client: FlaskClient) -> None:
    result = estimate(client, gpu="h100-sxm-80gb", input_samples_per_s=500)
    assert result["bound"] == "input"
    assert result["throughput"]["samples_per_s"] == pytest.approx(500)


def test_memory_that_does_not_fit_is_said(client: FlaskClient) -> None:
    body = {
        "model": {"name": "llama-2-7b"},
        "workload": {"task": "training", "batch_size": 1, "seq_len": 2048, "precision": "bf16"},
    }
    result = estimate(client, gpu="a10", **body)
    assert result["fits"] is False
    assert result["memory_per_gpu_bytes"] > result["usable_memory_bytes"]
    assert result["memory_headroom"] < 0
    assert result["memory"]["total_bytes"] == result["memory_per_gpu_bytes"]
    assert any(a.startswith("does not fit") for a in result["assumptions"])


def test_missing_precision_is_a_422_naming_what_the_gpu_supports(client: FlaskClient) -> None:
    body = {**RESNET, "workload": {**RESNET["workload"], "precision": "bf16"}}
    response = client.post("/v1/estimates", json={**body, "gpu": "v100-sxm2-16gb"})
    detail = problem(response, 422)["detail"]
    assert "bf16" in detail
    assert "fp16" in detail


def test_unknown_gpu_and_missing_model_are_422(client: FlaskClient) -> None:
    response = client.post("/v1/estimates", json={**RESNET, "gpu": "h1000"})
    assert "unknown GPU" in problem(response, 422)["detail"]
    response = client.post("/v1/estimates", json={"gpu": "h100-sxm-80gb"})
    assert problem(response, 422)["status"] == 422


def test_validation_report_404_until_made(client: FlaskClient, tmp_path: Any) -> None:
    from service import create_app

    app = create_app({"TESTING": True, "MODEL_DIR": str(tmp_path)})
    response = app.test_client().get("/v1/validation")
    assert "rightsize validate" in problem(response, 404)["detail"]


def test_benchmarked_model_at_its_default_size_is_the_benchmarked_workload(
    client: FlaskClient,
) -> None:
    # the README's example: no image_size (the model's own 224 px) and the default optimizer
    body = {"model": {"name": "resnet-50"}, "workload": {"task": "training", "batch_size": 256}}
    result = estimate(client, gpu="a100-sxm4-80gb", **body)
    assert result["known_workload"] == "resnet50-imagenet"
    (step,) = [a for a in result["assumptions"] if a.startswith("step = GPU")]
    assert "fitted to the benchmarked workload resnet50-imagenet" in step
    other = estimate(
        client,
        gpu="a100-sxm4-80gb",
        **{**body, "workload": {**body["workload"], "image_size": 160}},
    )
    assert other["known_workload"] is None
    assert any("did not measure" in a for a in other["assumptions"])
    assert other["interval"]["high"] / other["step_time_s"] > (
        result["interval"]["high"] / result["step_time_s"]
    )


SERVE = {"task": "inference", "batch_size": 1, "prompt_tokens": 512, "output_tokens": 256}


class TestServingInEveryEstimate:
    """Issue 29 (4): a generative model's estimate gives time to first token, time per
    output token and throughput at the concurrency without a layout being asked for."""

    def test_one_gpu_at_the_kv_cache_bound_as_the_layout_estimate_gives_it(
        self, client: FlaskClient
    ) -> None:
        plain = estimate(client, model={"name": "llama-3-8b"}, workload=SERVE, gpu="h100-sxm-80gb")[
            "inference"
        ]
        laid = estimate(
            client,
            model={"name": "llama-3-8b"},
            workload=SERVE,
            gpu="h100-sxm-80gb",
            layout={"tensor_parallel": 1},
        )["inference"]
        assert plain["fits"]
        assert plain["concurrency"] == plain["max_concurrency"] > 1  # the default: the most
        for key in ("time_to_first_token_s", "time_per_output_token_s", "output_tokens_per_s"):
            assert plain[key] == pytest.approx(laid[key])
        assert plain["all_output_tokens_per_s"] == pytest.approx(plain["output_tokens_per_s"])

    def test_count_gpus_are_the_fewest_that_hold_it_replicated(self, client: FlaskClient) -> None:
        found = estimate(
            client, model={"name": "llama-3-70b"}, workload=SERVE, gpu="h100-sxm-80gb", count=8
        )["inference"]
        assert found["fits"]
        assert found["tensor_parallel"] == 2  # 70B in 16 bits: 141 GB of weights
        assert found["data_parallel"] == 4
        assert found["all_output_tokens_per_s"] == pytest.approx(found["output_tokens_per_s"] * 4)

    def test_a_model_too_big_for_the_gpus_is_said_not_to_fit(self, client: FlaskClient) -> None:
        found = estimate(client, model={"name": "llama-3-70b"}, workload=SERVE, gpu="l4")
        assert found["inference"]["fits"] is False
        assert found["inference"]["max_concurrency"] == 0

    def test_training_and_models_that_decode_nothing_have_none(self, client: FlaskClient) -> None:
        vision = estimate(
            client,
            model={"name": "resnet-50"},
            workload={"task": "inference", "batch_size": 8},
            gpu="l4",
        )
        assert "inference" not in vision
        trained = estimate(
            client,
            model={"name": "gpt2"},
            workload={"task": "training", "batch_size": 8, "seq_len": 512},
            gpu="l4",
        )
        assert "inference" not in trained
