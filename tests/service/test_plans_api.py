"""``POST /v1/plans`` and layouts in ``POST /v1/estimates``: what a user planning an LLM
run asks, answered through the API."""

from __future__ import annotations

from typing import Any

import pytest
from flask import Flask
from flask.testing import FlaskClient

from knowledge import Knowledge
from service.engine.estimating.layout import Layout, ModelShape
from service.engine.estimating.roofline import math_mode
from service.engine.estimating.step_profile import StepProfile
from service.engine.planning.network import network
from service.engine.planning.step_time import layout_step
from service.engine.planning.work import model_flops, work
from tests.stacks import shipped

GIB = 2**30
LLAMA_70B_TRAINING = {
    "model": {"name": "llama-3-70b"},
    "workload": {
        "task": "training",
        "batch_size": 1,
        "seq_len": 4096,
        "precision": "bf16",
        "optimizer": "adamw",
    },
}


def post(client: FlaskClient, path: str, body: dict[str, Any], status: int = 200) -> Any:
    response = client.post(path, json=body)
    assert response.status_code == status, response.get_json()
    return response.get_json()


@pytest.mark.slow  # a large plan search
def test_llama_70b_full_fine_tuning_is_planned_on_the_fewest_80gb_gpus(
    client: FlaskClient,
) -> None:
    """Plain data parallel needs over 1 TB per GPU; the plan finds the fewest H100s a
    sharded or tensor-parallel layout fits, ranks them, and shows each one's memory."""
    plan = post(client, "/v1/plans", {**LLAMA_70B_TRAINING, "gpu": "H100 SXM5 80GB"})
    assert plan["smallest_count"] == 16
    assert plan["count"] == 16
    by_count = {x["count"]: x for x in plan["fastest_by_count"]}
    assert not by_count[8]["fits"]
    assert by_count[16]["fits"]
    assert by_count[64]["fits"]
    best = plan["layouts"][0]
    layout = best["layout"]
    assert layout["zero_stage"] == 3 or layout["tensor_parallel"] * layout["pipeline_parallel"] > 1
    assert best["fits"]
    assert 0 < best["memory_per_gpu_bytes"] < 80 * GIB
    assert best["memory"]["optimizer_states_bytes"] < 80 * GIB
    assert 0 < best["mfu"] < 1
    assert best["step_time_s"] > 0
    ranked = [x["samples_per_s"] for x in plan["layouts"] if x["fits"]]
    assert ranked == sorted(ranked, reverse=True)
    assert all(x["gpus"] == 16 for x in plan["layouts"])
    # no layout's step beats its FLOPs at the tensor peak (A100: the learned weights alone
    # once put 70B at 8k tokens at an MFU of 1.07)
    a100 = post(client, "/v1/plans", {**LLAMA_70B_TRAINING, "gpu": "a100-sxm4-80gb"})
    assert all(0 < x["mfu"] <= 1 for x in a100["layouts"])
    assert all(0 < x["mfu"] <= 1 for x in a100["fastest_by_count"] if x["fits"])
    # each generation's servers are joined by the network they ship with, a port per GPU
    assert plan["interconnect"]["inter_node"]["id"] == "infiniband-ndr"
    assert a100["interconnect"]["inter_node"]["id"] == "infiniband-hdr"
    assert a100["interconnect"]["inter_node"]["gb_per_s"] == 25


@pytest.mark.slow  # several plan searches
def test_a_tensor_parallel_degree_that_does_not_divide_the_heads_is_a_422_naming_the_rule(
    client: FlaskClient,
) -> None:
    body = {**LLAMA_70B_TRAINING, "gpu": "H100 SXM5 80GB", "layout": {"tensor_parallel": 3}}
    response = client.post("/v1/estimates", json=body)
    assert response.status_code == 422
    assert response.content_type == "application/problem+json"
    problem = response.get_json()
    assert problem["errors"][0]["field"] == "layout.tensor_parallel"
    assert "tensor-parallel-divides-heads" in problem["detail"]
    assert "64 attention heads" in problem["detail"]


@pytest.mark.slow  # several plan searches
def test_a_layout_estimate_says_its_memory_step_and_mfu(client: FlaskClient) -> None:
    layout = {"data_parallel": 8, "tensor_parallel": 8, "sequence_parallel": True, "zero_stage": 1}
    body = {**LLAMA_70B_TRAINING, "gpu": "H100 SXM5 80GB", "layout": layout}
    found = post(client, "/v1/estimates", body)
    assert found["count"] == 64
    assert found["fits"] is True
    parts = found["layout_estimate"]["breakdown"]
    assert parts["tensor_parallel_s"] > 0
    assert parts["compute_s"] > 0
    assert found["layout_estimate"]["mfu"] > 0
    bad = post(client, "/v1/estimates", {**body, "count": 8}, 422)
    assert bad["errors"][0]["field"] == "count"


def test_the_same_8_gpu_layout_is_slower_on_pcie_than_on_nvswitch_by_what_the_model_says(
    app: Flask, client: FlaskClient, knowledge: Knowledge
) -> None:
    """Tensor parallel over 8 GPUs all-reduces every layer: on PCIe 5 with peer-to-peer
    instead of NVSwitch the step is slower by the ratio the layout model gives, and the
    plan's reason names the link."""
    body = {
        "model": {"name": "llama-3-8b"},
        "workload": {"task": "training", "batch_size": 1, "seq_len": 4096,
                     "precision": "bf16", "optimizer": "adamw"},
        "gpu": "H100 SXM5 80GB",
        "layout": {"tensor_parallel": 8, "sequence_parallel": True},
        # stock PyTorch as the step model knows it splits over data only: the run here
        # splits tensors too, and says so
        "stack": "pytorch",
        "stack_options": {"parallelism": ["data", "tensor"]},
    }  # fmt: skip
    fast = post(client, "/v1/estimates", body)
    slow = post(client, "/v1/estimates", {**body, "interconnect": {"intra_node": "pcie-5-x16"}})
    ratio = slow["step_time_s"] / fast["step_time_s"]
    assert ratio > 1.2
    assert slow["bound"] == "tensor_parallel_communication"

    # the same ratio from the layout model directly
    from profiles.description import resolve
    from profiles.model_catalog import Catalog
    from profiles.profile import profile
    from profiles.workload import WorkloadSchema
    from service.state import state

    raw = profile(resolve(body["model"], Catalog.load()),
                  WorkloadSchema().load(body["workload"]), 120.0).to_dict()  # fmt: skip
    sp, shape = StepProfile.from_profile(raw), ModelShape.from_profile(raw)
    gpu = knowledge.gpus["h100-sxm-80gb"]
    mode = math_mode(gpu, "bf16")
    with app.app_context():
        step_model = state().estimates.model().step_model
    done = work(sp, gpu, mode, shipped("pytorch"), step_model)
    layout = Layout(tensor_parallel=8, sequence_parallel=True)
    steps = [
        layout_step(layout, sp, shape, done, network(knowledge, gpu, 8, intra), 1.0,
                    model_flops(sp)).step_s
        for intra in (None, "pcie-5-x16")
    ]  # fmt: skip
    assert ratio == pytest.approx(steps[1] / steps[0], rel=1e-6)

    plan = post(client, "/v1/plans", {k: v for k, v in body.items() if k != "layout"} | {
        "count": 8, "max_count": 8})  # fmt: skip
    pcie = [x for x in plan["on_other_links"] if x["intra_node"] == "pcie-5-x16"]
    assert pcie
    assert pcie[0]["slowdown"] > 1
    assert "pcie-5-x16" in pcie[0]["reason"]
    assert "slower" in pcie[0]["reason"]


def test_decode_of_a_70b_model_is_bandwidth_bound_and_the_kv_cache_limits_concurrency(
    client: FlaskClient,
) -> None:
    body = {
        "model": {"name": "llama-3-70b"},
        "workload": {"task": "inference", "batch_size": 1, "prompt_tokens": 1024,
                     "output_tokens": 256, "precision": "bf16"},
        "gpu": "H100 SXM5 80GB",
        "stack": "tensorrt-llm",
        "concurrency": 1,
    }  # fmt: skip
    plan = post(client, "/v1/plans", body)
    by_tp = {x["tensor_parallel"]: x for x in plan["inference"]}
    assert not by_tp[1]["fits"]  # 141 GB of bf16 weights
    assert plan["smallest_count"] == 2
    for t in (2, 4, 8):
        served = by_tp[t]
        assert served["bound"] == "memory_bandwidth"
        decode = served["decode_breakdown"]
        assert decode["memory_s"] > decode["compute_s"]
        assert served["max_concurrency"] >= 1
    # more GPUs leave more room for the cache: the limit grows with the group
    assert by_tp[2]["max_concurrency"] < by_tp[4]["max_concurrency"] < by_tp[8]["max_concurrency"]
    assert any("KV cache" in a for a in plan["assumptions"])
    fp8 = post(client, "/v1/plans", {**body, "weight_precision": "fp8"})
    assert {x["tensor_parallel"]: x for x in fp8["inference"]}[1]["fits"]


def test_a_model_with_nothing_to_decode_is_served_one_gpu_a_replica(client: FlaskClient) -> None:
    body = {"model": {"name": "resnet-50"}, "gpu": "a100-sxm-80gb",
            "workload": {"task": "inference", "batch_size": 32, "precision": "fp16"}}  # fmt: skip
    plan = post(client, "/v1/plans", body)
    assert plan["smallest_count"] == 1  # it was None: no KV cache read as "nothing fits"
    (alone,) = plan["inference"]
    assert alone["fits"]
    assert alone["memory_per_gpu_bytes"] < alone["usable_memory_bytes"]
    estimate = post(client, "/v1/estimates", {**body, "count": 1})
    assert alone["batch_latency_s"] == pytest.approx(estimate["step_time_s"])
    assert alone["requests_per_s"] == pytest.approx(estimate["throughput"]["samples_per_s"])
    two = post(client, "/v1/estimates", {**body, "layout": {"data_parallel": 2}})
    assert two["fits"]
    assert two["throughput"]["samples_per_s"] == pytest.approx(2 * alone["requests_per_s"])


@pytest.mark.slow  # several plan searches
def test_unknown_stack_interconnect_and_source_are_422(client: FlaskClient) -> None:
    base = {**LLAMA_70B_TRAINING, "gpu": "H100 SXM5 80GB"}
    assert post(client, "/v1/plans", {**base, "stack": "jax"}, 422)["errors"][0]["field"] == "stack"
    found = post(client, "/v1/plans", {**base, "interconnect": {"intra_node": "warp"}}, 422)
    assert found["errors"][0]["field"] == "interconnect"
    assert post(client, "/v1/plans", {"gpu": "H100 SXM5 80GB"}, 422)["errors"][0]["field"] == (
        "model"
    )


def test_layout_options_without_a_layout_are_applied_not_ignored(client: FlaskClient) -> None:
    """A stack the step model does not time (or an interconnect, or inference precisions)
    with no layout: the estimate is the layout model's, data parallel over count, sharded
    as the stack shards (Megatron's distributed optimizer: ZeRO-1); the step model's stack
    gives the plain estimate."""
    base = {**LLAMA_70B_TRAINING, "model": {"name": "llama-3-8b"}, "gpu": "H100 SXM5 80GB",
            "count": 8}  # fmt: skip
    plain = post(client, "/v1/estimates", {**base, "stack": "pytorch"})
    tuned = post(client, "/v1/estimates", {**base, "stack": "optimized"})
    assert "layout" not in plain
    assert tuned["layout"]["data_parallel"] == 8
    assert tuned["layout"]["zero_stage"] == 1
    assert tuned["count"] == 8
    assert tuned["stack"]["id"] == "megatron-te"
    assert any("stack megatron-te" in a for a in tuned["assumptions"])
    serve = {
        "model": {"name": "llama-3-8b"},
        "workload": {"task": "inference", "batch_size": 1, "prompt_tokens": 512,
                     "output_tokens": 128, "precision": "bf16"},
        "gpu": "H100 SXM5 80GB",
        "count": 2,
        "weight_precision": "fp8",
    }  # fmt: skip
    found = post(client, "/v1/estimates", serve)
    assert found["inference"]["weight_precision"] == "fp8"
    one = found["inference"]["output_tokens_per_s"]
    assert found["throughput"]["tokens_per_s"] == pytest.approx(2 * one)


@pytest.mark.slow  # a large plan search
def test_a_global_batch_the_layout_cannot_make_exactly_is_said(client: FlaskClient) -> None:
    body = {**LLAMA_70B_TRAINING, "gpu": "H100 SXM5 80GB", "count": 16, "max_count": 16}
    plan = post(client, "/v1/plans", {**body, "global_batch_size": 100})
    best = plan["layouts"][0]
    layout = best["layout"]
    made = layout["micro_batch_size"] * layout["gradient_accumulation"] * layout["data_parallel"]
    assert best["global_batch_size"] == made >= 100
    if made != 100:
        assert any("global_batch_size 100" in a for a in plan["assumptions"])
    exact = post(client, "/v1/plans", {**body, "global_batch_size": 128})
    assert exact["layouts"][0]["global_batch_size"] == 128
    assert not any("is not micro-batch" in a for a in exact["assumptions"])


def test_layout_options_with_a_trace_are_refused_not_ignored(client: FlaskClient) -> None:
    """A trace is projected as traced: a layout or a layout-only option beside trace_id is a
    422 naming that field."""
    base = {"trace_id": "any", "gpu": "H100 SXM5 80GB"}
    assert (
        post(client, "/v1/estimates", {**base, "layout": {"data_parallel": 2}}, 422)["errors"][0][
            "field"
        ]
        == "layout"
    )
    assert (
        post(client, "/v1/estimates", {**base, "stack": "optimized"}, 422)["errors"][0]["field"]
        == "stack"
    )
    assert (
        post(client, "/v1/estimates", {**base, "weight_precision": "fp8"}, 422)["errors"][0][
            "field"
        ]
        == "weight_precision"
    )


@pytest.mark.slow  # a large plan search
def test_the_optimized_stack_holds_fewer_activations_and_counts_the_pipeline_ends(
    client: FlaskClient,
) -> None:
    """Llama 3 70B (80 layers) on 4 pipeline stages of 2 virtual stages: the optimized stack
    keeps Korthikanti's activations for its widths, fewer than eager PyTorch's; counting
    the embedding and the loss as layers (82) breaks the split into 8 and says so."""
    layout = {"data_parallel": 2, "tensor_parallel": 8, "pipeline_parallel": 4,
              "sequence_parallel": True, "virtual_stages": 2,
              "gradient_accumulation": 8}  # fmt: skip
    body = {**LLAMA_70B_TRAINING, "gpu": "H100 SXM5 80GB", "layout": layout}
    eager = post(client, "/v1/estimates", {**body, "stack": "torchtitan"})  # eager kernels
    fused = post(client, "/v1/estimates", {**body, "stack": "optimized"})
    held = {
        name: found["layout_estimate"]["memory"]["activations_bytes"]
        for name, found in (("eager", eager), ("fused", fused))
    }
    assert held["fused"] < 0.85 * held["eager"]
    assert any("activations" in a for a in fused["assumptions"])
    ends = {**body, "layout": {**layout, "ends_as_layers": True}}
    problem = post(client, "/v1/estimates", ends, 422)
    assert problem["errors"][0]["field"] == "layout.pipeline_parallel"
    assert "80 layers and its embedding and loss" in problem["detail"]


@pytest.mark.slow  # several plan searches
def test_a_layout_the_stack_does_not_run_is_refused_and_a_split_layout_defaults_to_megatron(
    client: FlaskClient,
) -> None:
    """Transformers' Trainer splits a step over data parallelism only: a tensor-parallel
    layout named with it is a 422 naming the layout's field and the rule; given no stack,
    a layout that splits the model is timed on the stack most such runs use (Megatron with
    Transformer Engine), and the answer says so; a request whose run does split tensors
    with Transformers says so in stack_options."""
    layout = {"data_parallel": 2, "tensor_parallel": 4, "sequence_parallel": True}
    body = {**LLAMA_70B_TRAINING, "gpu": "H100 SXM5 80GB", "layout": layout}
    refused = post(client, "/v1/estimates", {**body, "stack": "hf-transformers"}, status=422)
    assert refused["errors"][0]["field"] == "layout.tensor_parallel"
    assert "stack-parallelism" in refused["detail"]
    assert "data parallelism only" in refused["detail"]
    found = post(client, "/v1/estimates", body)
    assert found["assumptions"][0].startswith("stack megatron-te")
    assert "parallelism data/tensor/pipeline/context" in found["assumptions"][0]
    told = post(
        client,
        "/v1/estimates",
        {**body, "stack": "hf-transformers", "stack_options": {"parallelism": ["data", "tensor"]}},
    )
    assert "overridden: parallelism" in told["assumptions"][0]
    bad = post(client, "/v1/estimates", {**body, "stack_options": {"parallelism": ["expert"]}},
               status=422)  # fmt: skip
    assert bad["errors"][0]["field"] == "stack_options.parallelism"
    assert "data, tensor, pipeline, context" in bad["detail"]


def test_a_plan_lists_only_the_layouts_its_stack_runs(client: FlaskClient) -> None:
    """Planned on Transformers, Llama 3 8B over 8 GPUs is data parallel (DDP, ZeRO or
    FSDP); on torchtitan the same plan also offers tensor and context parallel layouts."""
    body = {"model": {"name": "llama-3-8b"}, "gpu": "H100 SXM5 80GB", "count": 8,
            "max_count": 8,
            "workload": {"task": "training", "batch_size": 1, "seq_len": 8192}}  # fmt: skip
    splits = ("tensor_parallel", "pipeline_parallel", "context_parallel")
    plain = post(client, "/v1/plans", {**body, "stack": "hf-transformers"})
    assert plain["layouts"]
    assert all(x["layout"][f] == 1 for x in plain["layouts"] for f in splits)
    titan = post(client, "/v1/plans", {**body, "stack": "torchtitan"})
    assert any(x["layout"]["tensor_parallel"] > 1 for x in titan["layouts"])
