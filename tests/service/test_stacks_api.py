"""GET /v1/stacks, and a stack named in estimates, plans and recommendations."""

from __future__ import annotations

from typing import Any

import pytest
from flask.testing import FlaskClient

from tests.service.helpers import problem

TRAIN_8B = {
    "model": {"name": "llama-3.1-8b"},
    "workload": {
        "task": "training",
        "batch_size": 1,
        "seq_len": 4096,
        "precision": "bf16",
        "activation_checkpointing": "selective",
    },
    "gpu": "h100-sxm-80gb",
    "count": 8,
}
SERVE_8B = {
    "model": {"name": "llama-3.1-8b"},
    "workload": {
        "task": "inference",
        "batch_size": 1,
        "prompt_tokens": 1000,
        "output_tokens": 1000,
        "precision": "bf16",
    },
    "gpu": "h100-sxm-80gb",
}
TRAINING_STACKS = ("pytorch", "hf-transformers", "torchtitan", "torchtune", "deepspeed",
                   "megatron-te", "llm-foundry")  # fmt: skip
SERVING_STACKS = ("pytorch", "hf-generate", "vllm", "tensorrt-llm", "sglang")


def post(client: FlaskClient, body: dict[str, Any], status: int = 200) -> dict[str, Any]:
    response = client.post("/v1/estimates", json=body)
    assert response.status_code == status, response.get_data(as_text=True)
    data: dict[str, Any] = response.get_json()
    return data


def test_the_stacks_are_listed_with_their_properties(client: FlaskClient) -> None:
    found = client.get("/v1/stacks").get_json()
    ids = [s["id"] for s in found["stacks"]]
    assert set(TRAINING_STACKS) | set(SERVING_STACKS) <= set(ids)
    assert found["properties"]["loss"] == ["full-fp32", "chunked", "fused"]
    for stack in found["stacks"]:
        assert stack["sources"]
        assert stack["as_of"]
        assert stack["properties"]["kernels"]
    serving = client.get("/v1/stacks?task=inference").get_json()["stacks"]
    assert {s["id"] for s in serving} == set(SERVING_STACKS)
    assert client.get("/v1/stacks/NeMo").get_json()["id"] == "megatron-te"
    assert "torchtitan" in problem(client.get("/v1/stacks/torchtitn"), 404)["detail"]


@pytest.mark.parametrize("stack", TRAINING_STACKS)
def test_a_training_request_naming_each_stack_answers(client: FlaskClient, stack: str) -> None:
    found = post(client, {**TRAIN_8B, "stack": stack})
    assert found["stack"]["id"] == stack
    assert found["throughput"]["tokens_per_s"] > 0
    assert (
        found["memory_reported"]["allocated_peak_bytes"]
        < found["memory_reported"]["nvidia_smi_bytes"]
    )


@pytest.mark.parametrize("stack", SERVING_STACKS)
def test_an_inference_request_naming_each_stack_answers(client: FlaskClient, stack: str) -> None:
    found = post(client, {**SERVE_8B, "stack": stack})
    assert found["stack"]["id"] == stack
    served = found["inference"]
    assert served["time_to_first_token_s"] > 0
    assert served["time_per_output_token_s"] > 0
    assert served["output_tokens_per_s"] > 0


@pytest.mark.slow  # several plan searches
def test_the_stack_changes_the_answer_as_it_should(client: FlaskClient) -> None:
    """Fused kernels run the same step faster than eager PyTorch; a paged KV cache under
    continuous batching holds more sequences than a static batch; torchtune's habits (pure
    bf16, chunked loss) hold less memory than Transformers' mixed precision."""
    eager = post(client, {**TRAIN_8B, "stack": "hf-transformers"})
    fused = post(client, {**TRAIN_8B, "stack": "megatron-te"})
    assert fused["throughput"]["tokens_per_s"] > eager["throughput"]["tokens_per_s"]
    one = {**TRAIN_8B, "count": 1,
           "workload": {**TRAIN_8B["workload"], "activation_checkpointing": "full"}}  # fmt: skip
    tune = post(client, {**one, "stack": "torchtune"})
    hf = post(client, {**one, "stack": "hf-transformers"})
    assert tune["memory_per_gpu_bytes"] < hf["memory_per_gpu_bytes"] - 30 * 2**30
    paged = post(client, {**SERVE_8B, "stack": "vllm"})["inference"]
    static = post(client, {**SERVE_8B, "stack": "hf-generate"})["inference"]
    assert paged["max_concurrency"] > static["max_concurrency"]
    assert paged["output_tokens_per_s"] > static["output_tokens_per_s"]


def test_an_override_is_applied_and_reported(client: FlaskClient) -> None:
    body = {**TRAIN_8B, "count": 1, "stack": "torchtune"}
    plain = post(client, body)
    offloaded = post(client, {**body, "stack_options": {"activation_offload": True}})
    assert offloaded["stack"]["overridden"] == ["activation_offload"]
    assert offloaded["memory_per_gpu_bytes"] < plain["memory_per_gpu_bytes"]


@pytest.mark.slow  # several plan searches
def test_the_default_stack_follows_the_work(client: FlaskClient) -> None:
    assert post(client, TRAIN_8B)["stack"]["id"] == "hf-transformers"
    qlora = {**TRAIN_8B, "count": 1, "workload": {"task": "fine-tuning", "method": "qlora",
             "batch_size": 1, "seq_len": 2048, "precision": "bf16"}}  # fmt: skip
    assert post(client, qlora)["stack"]["id"] == "hf-trl-peft"
    assert post(client, SERVE_8B)["stack"]["id"] == "vllm"
    resnet = {"model": {"name": "resnet-50"}, "gpu": "l4", "workload": {
        "task": "training", "batch_size": 64, "precision": "bf16"}}  # fmt: skip
    assert post(client, resnet)["stack"]["id"] == "pytorch"


@pytest.mark.parametrize(
    ("extra", "field", "expected"),
    [
        ({"stack": "jax"}, "stack", "torchtitan"),
        ({"stack": "vllm"}, "stack", "runs inference"),
        ({"stack_options": {"fast": True}}, "stack_options.fast", "activation_offload"),
        ({"stack_options": {"loss": "magic"}}, "stack_options.loss", "chunked"),
        ({"stack_options": {"cuda_graphs": "yes"}}, "stack_options.cuda_graphs", "true or false"),
    ],
)
def test_an_unknown_stack_or_property_is_a_422_naming_the_field(
    client: FlaskClient, extra: dict[str, Any], field: str, expected: str
) -> None:
    errors = problem(client.post("/v1/estimates", json={**TRAIN_8B, **extra}), 422)["errors"]
    assert errors[0]["field"] == field
    assert expected in errors[0]["message"]


def test_plans_and_recommendations_take_the_stack(client: FlaskClient) -> None:
    plan = client.post("/v1/plans", json={**TRAIN_8B, "stack": "torchtitan", "limit": 3})
    assert plan.status_code == 200, plan.get_data(as_text=True)
    assert plan.get_json()["stack"]["id"] == "torchtitan"
    asked = {"model": {"name": "llama-3.1-8b"}, "workload": TRAIN_8B["workload"], "stack": "keras"}
    bad = client.post("/v1/recommendations", json=asked)
    assert problem(bad, 422)["errors"][0]["field"] == "stack"


def test_fsdp_keeping_the_gathered_weights_holds_them_and_gathers_once(
    client: FlaskClient,
) -> None:
    """FSDP2 with reshard_after_forward false keeps every layer's gathered parameters from
    its forward to its backward: more memory, one all-gather a step instead of two."""
    body = {**TRAIN_8B, "stack": "torchtitan", "layout": {"data_parallel": 8, "zero_stage": 3}}
    freed = post(client, body)
    kept = post(client, {**body, "stack_options": {"reshard_after_forward": False}})
    gib = 2**30
    held = kept["layout_estimate"]["memory"]["gathered_parameters_bytes"]
    assert held > 10 * gib > freed["layout_estimate"]["memory"]["gathered_parameters_bytes"]
    traffic = {u["group"]: u["bytes_per_step"] for u in freed["layout_estimate"]["links"]}
    fewer = {u["group"]: u["bytes_per_step"] for u in kept["layout_estimate"]["links"]}
    assert fewer["data"] < traffic["data"]


def test_a_precision_the_stack_does_not_run_is_a_422(client: FlaskClient) -> None:
    body = {**SERVE_8B, "stack": "hf-generate", "weight_precision": "fp8"}
    errors = problem(client.post("/v1/estimates", json=body), 422)["errors"]
    assert errors[0]["field"] == "weight_precision"
    assert "int4" in errors[0]["message"]
    fp8 = {
        **TRAIN_8B,
        "stack": "deepspeed",
        "workload": {**TRAIN_8B["workload"], "precision": "fp8"},
    }
    errors = problem(client.post("/v1/estimates", json=fp8), 422)["errors"]
    assert errors[0]["field"] == "workload.precision"


def test_the_advice_names_a_faster_stack_with_its_factor_and_fit(client: FlaskClient) -> None:
    """Pre-training Llama 3 8B on 15B tokens on Transformers' eager kernels (eight H100s on
    top): a stack of fused kernels runs the top choice's layout faster, and the advice says
    which, by how much, and from what fit."""
    body = {
        "model": {"name": "llama-3-8b"},
        "workload": {"task": "training", "batch_size": 1, "seq_len": 8192, "precision": "bf16",
                     "dataset_tokens": 15_000_000_000},
        "constraints": {"deployment": "cloud", "max_gpus": 8},
        "stack": "hf-transformers",
    }  # fmt: skip
    answer = client.post("/v1/recommendations", json=body)
    assert answer.status_code == 200, answer.get_data(as_text=True)
    found = answer.get_json()
    assert found["stack"]["id"] == "hf-transformers"
    advice = [a for a in found["advice"] if a["rule"] == "switch-stack"]
    assert advice, found["advice"]
    message = advice[0]["message"]
    assert "instead of hf-transformers" in message
    assert "published rows" in message
    factor = float(message.split(": ", 1)[1].split("x faster")[0])
    assert factor > 1.15
