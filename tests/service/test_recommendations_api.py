"""POST /v1/recommendations, GET /v1/recommendations/{id}, POST /v1/tco, GET /v1/rules:
ranked, costed and explained answers, on the real knowledge base."""

from __future__ import annotations

import io
from typing import Any

import pytest
from flask.testing import FlaskClient

from knowledge import Knowledge
from tests.profiles.trace_factory import known_steps
from tests.service.helpers import fields_in, problem

LLAMA_70B_FULL: dict[str, Any] = {
    "model": {"name": "llama-3-70b"},
    "workload": {"task": "fine-tuning", "method": "full", "batch_size": 1, "seq_len": 4096,
                 "precision": "bf16", "optimizer": "adamw", "dataset_tokens": 100_000_000,
                 "epochs": 1},
    "constraints": {"max_gpus": 64, "deployment": "on-premise"},
}  # fmt: skip
GPT2: dict[str, Any] = {
    "model": {"name": "gpt2"},
    "workload": {"task": "training", "batch_size": 8, "seq_len": 1024, "precision": "bf16",
                 "dataset_tokens": 1_000_000_000, "epochs": 1},
}  # fmt: skip
PRE_ADA = {"kepler", "maxwell", "pascal", "volta", "turing", "ampere"}


def post(client: FlaskClient, url: str, body: dict[str, Any], status: int = 200) -> Any:
    response = client.post(url, json=body)
    assert response.status_code == status, response.get_data(as_text=True)
    return response.get_json()


@pytest.mark.slow  # a large plan search
def test_llama_70b_full_fine_tuning_gets_a_sharded_layout_on_nvlink(client: FlaskClient) -> None:
    body = post(client, "/v1/recommendations", LLAMA_70B_FULL)
    top = body["recommendations"][0]
    layout = top["layout"]
    assert top["count"] >= 2
    assert top["deployment"]["kind"] == "on-premise"
    assert top["deployment"]["server_design"] in {"hgx_8gpu", "pcie_8gpu"}
    # Transformers' Trainer (the default) splits over data only: FSDP shards the states
    assert layout["zero_stage"] >= 2
    assert layout["tensor_parallel"] == layout["pipeline_parallel"] == 1
    # one unit: what the layout needs and what the GPU has, both GiB
    assert top["estimate"]["memory_per_gpu_gib"] <= top["vram_gib"]
    # a GPU-to-GPU fabric (NVLink, NVSwitch, Infinity Fabric) named inside, with its source
    inside = next(x for x in top["links"] if x["scope"] == "inside")
    assert inside["id"].startswith(("nvlink", "nvswitch", "infinity-fabric"))
    assert inside["source"]
    assert inside["gb_per_s"] > 0
    if top["deployment"]["instances"] > 1:  # servers joined by the design's fabric
        between = next(x for x in top["links"] if x["scope"] == "between")
        assert between["rdma"]
        assert between["gb_per_s"] > 0
    job = top["job"]
    assert job["hours"] == pytest.approx(
        job["start_up_hours"]
        + job["staging_hours"]
        + job["steps_hours"]
        + job["checkpoint_hours"]
        + job["restart_hours"]
    )
    assert job["checkpoints"] >= 1
    assert top["energy"]["kwh"] > 0
    assert top["energy"]["kg_co2e"] > 0
    assert body["why_first"]
    assert top["cost"]["capital_usd"] > 0
    assert top["cost"]["per_unit_usd"] > 0
    for rec in body["recommendations"]:
        assert all(r["rule"] and r["message"] and r["source"] for r in rec["reasons"])
    # sharded over data alone, 64 GeForce cards of 24 GB do not hold it
    excluded = {e["gpu"]: [r["rule"] for r in e["reasons"]] for e in body["excluded"]}
    assert excluded["rtx-3090"] == excluded["rtx-4090"] == ["memory-fit"]
    # on Megatron, which splits tensors: GeForce cards in an 8-GPU server break their
    # licence; a card without peer-to-peer that holds the model only split by tensor
    # parallelism cannot run it: both excluded
    split = post(client, "/v1/recommendations", {**LLAMA_70B_FULL, "stack": "megatron-te"})
    excluded = {e["gpu"]: [r["rule"] for r in e["reasons"]] for e in split["excluded"]}
    assert excluded["rtx-3090"] == ["geforce-no-datacenter"]
    assert excluded["rtx-4090"] == ["tensor-parallel-needs-p2p"]
    assert len(body["summary"]) <= 1200
    assert body["summary"].startswith("**")
    # the answer can be cited: the same id, inputs and date
    again = client.get(f"/v1/recommendations/{body['id']}").get_json()
    assert again["recommendations"] == body["recommendations"]
    assert again["request"] == LLAMA_70B_FULL
    assert again["created_at"]
    assert post(client, "/v1/recommendations", LLAMA_70B_FULL)["id"] == body["id"]


def test_an_input_bound_trace_gets_pipeline_advice_and_no_premium_for_speed(
    client: FlaskClient,
) -> None:
    upload = client.post(
        "/v1/traces",
        data={"file": (io.BytesIO(known_steps(4).gzipped()), "t.json.gz")},
        content_type="multipart/form-data",
    )
    trace_id = upload.get_json()["trace_id"]
    body = post(client, "/v1/recommendations", {"trace_id": trace_id})
    assert body["advice"][0]["rule"] == "input-pipeline-first"
    recs = body["recommendations"]
    fastest = min(recs, key=lambda r: r["estimate"]["step_time_s"])
    assert recs[0]["gpu"] != fastest["gpu"]  # the faster GPU is not what it recommends
    assert recs[0]["estimate"]["step_time_s"] > fastest["estimate"]["step_time_s"]
    # the input wait does not shrink: even the fastest GPU keeps the traced 0.2 ms stall
    assert fastest["estimate"]["step_time_s"] > 0.2e-3
    penalised = [r for r in recs if "faster-gpu-input-bound" in [x["rule"] for x in r["reasons"]]]
    assert penalised  # the premium for speed on an input-bound step is marked and never first
    assert "faster-gpu-input-bound" not in [x["rule"] for x in recs[0]["reasons"]]


def test_fp8_excludes_every_gpu_before_ada_and_hopper(
    client: FlaskClient, knowledge: Knowledge
) -> None:
    workload = {**GPT2["workload"], "precision": "fp8"}
    body = post(client, "/v1/recommendations", {**GPT2, "workload": workload})
    assert body["recommendations"]
    for rec in body["recommendations"]:
        assert knowledge.gpus[rec["gpu"]].architecture not in PRE_ADA
    excluded = {e["gpu"]: [r["rule"] for r in e["reasons"]] for e in body["excluded"]}
    offered = {o.gpu_id for o in knowledge.offers}
    older = [g.id for g in knowledge.gpus.values()
             if g.architecture in PRE_ADA and (g.price_usd or g.id in offered)]  # fmt: skip
    assert len(older) > 20
    for gpu in older:
        assert "fp8-needs-ada-or-hopper" in excluded[gpu], gpu


def test_a_budget_that_excludes_everything_is_an_empty_answer_with_reasons(
    client: FlaskClient,
) -> None:
    body = post(client, "/v1/recommendations",
                {**GPT2, "constraints": {"budget_monthly_usd": 0.0001}})  # fmt: skip
    assert body["recommendations"] == []
    assert body["summary"].startswith("**No candidate")
    rules = {r["rule"] for e in body["excluded"] for r in e["reasons"]}
    assert "budget-monthly" in rules
    assert all(e["reasons"] for e in body["excluded"])
    assert {"h100-sxm-80gb", "rtx-4090"} <= {e["gpu"] for e in body["excluded"]}


def test_objectives_rank_differently(client: FlaskClient) -> None:
    fastest = post(client, "/v1/recommendations", {**GPT2, "objective": "fastest"})
    value = post(client, "/v1/recommendations", GPT2)
    time = [r["estimate"]["hours_per_unit"] for r in fastest["recommendations"]]
    assert time[0] <= min(time) * 1.1  # within the band of the fastest, the smaller footprint
    cost = [r["cost"]["per_unit_usd"] for r in value["recommendations"]]
    assert cost[0] <= max(min(cost) * 1.1, min(cost) + 1.0)
    band = [r for r in value["recommendations"] if r["cost"]["per_unit_usd"] <= cost[0]]
    top = value["recommendations"][0]
    assert all((top["deployment"]["instances"], top["count"])
               <= (r["deployment"]["instances"], r["count"]) for r in band)  # fmt: skip
    assert fastest["recommendations"][0]["gpu"] != value["recommendations"][0]["gpu"]
    assert any(r["pareto"] for r in value["recommendations"])


def test_steady_use_owns_and_bursty_interruptible_use_rents(client: FlaskClient) -> None:
    steady = post(client, "/v1/tco", {"gpu": "h100-sxm-80gb", "count": 1, "usage": {
        "gpu_hours_per_month": 700, "horizon_months": 36}})  # fmt: skip
    assert steady["cheapest"] == "on_premise"
    assert steady["on_premise"]["cost_per_gpu_hour_usd"] < steady["cloud"]["cost_per_gpu_hour_usd"]
    assert steady["break_even_gpu_hours_per_month"] < 700
    bursty = post(client, "/v1/tco", {"gpu": "h100-sxm-80gb", "count": 1, "usage": {
        "gpu_hours_per_month": 20, "pattern": "bursty", "interruptible": True}})  # fmt: skip
    assert bursty["cheapest"] == "cloud"
    assert bursty["cloud"]["pricing"] == "spot"
    assert all(p["source"] and p["as_of"] for p in steady["parameters"])


def test_a_hybrid_owns_the_baseline_and_rents_the_bursts(client: FlaskClient) -> None:
    body = post(client, "/v1/tco", {
        "gpu": "h100-sxm-80gb", "count": 8, "providers": ["lambda"],
        "usage": {"gpu_hours_per_month": 2000, "pattern": "bursty", "peak_to_average": 3,
                  "baseline_share": 0.6}})  # fmt: skip
    assert body["cheapest"] == "hybrid"
    hybrid = body["hybrid"]
    assert 1 <= hybrid["owned_count"] < 8
    assert hybrid["monthly_usd"] < body["on_premise"]["monthly_usd"]
    assert hybrid["monthly_usd"] < body["cloud"]["monthly_usd"]


@pytest.mark.slow  # a large plan search
def test_a_batch_that_only_fits_several_gpus_gets_gradient_accumulation_advice(
    client: FlaskClient,
) -> None:
    big = {**GPT2, "workload": {**GPT2["workload"], "batch_size": 512}}  # ~0.3 TB at once
    # a micro-batch splits over GPUs only by tensor or context parallelism: torchtitan's
    # (Transformers' Trainer splits data only, and no GPU holds the micro-batch there)
    plain = post(client, "/v1/recommendations", big)
    assert not plain["recommendations"]
    said = {a["rule"]: a["message"] for a in plain["advice"]}
    assert "accumulate-to-fit" in said, said
    assert "micro-batch 512 on hf-transformers" in said["accumulate-to-fit"]
    assert "holds micro-batch 1" in said["accumulate-to-fit"]
    body = post(client, "/v1/recommendations", {**big, "stack": "torchtitan"})
    top = body["recommendations"][0]
    assert top["layout"]["micro_batch_size"] == 512
    rules = [a["rule"] for a in body["advice"]]
    assert "gradient-accumulation" in rules, rules
    message = next(a["message"] for a in body["advice"] if a["rule"] == "gradient-accumulation")
    smallest = min(r["count"] for r in body["recommendations"] if r["gpu"] == top["gpu"])
    assert f"{smallest} GPUs" in message
    assert smallest > 1
    # at micro-batch 8 one GPU holds it: nothing to advise
    small = post(client, "/v1/recommendations", GPT2)
    assert "gradient-accumulation" not in [a["rule"] for a in small["advice"]]


SERVE_70B: dict[str, Any] = {
    "model": {"name": "llama-3-70b"},
    "workload": {"task": "inference", "batch_size": 8, "prompt_tokens": 1024,
                 "output_tokens": 256, "precision": "bf16"},
}  # fmt: skip


def test_serving_an_llm_splits_it_over_tensor_parallel_groups(client: FlaskClient) -> None:
    body = post(client, "/v1/recommendations", SERVE_70B)
    assert body["recommendations"]
    for rec in body["recommendations"]:
        layout, est = rec["layout"], rec["estimate"]
        per_gpu_weights = 70.6e9 * 2 / layout["tensor_parallel"] / 1e9
        assert per_gpu_weights < rec["vram_gib"] * 1.074  # the weights (GB) fit the group
        assert rec["count"] == layout["tensor_parallel"] * layout["data_parallel"]
        assert est["memory_per_gpu_gib"] <= rec["vram_gib"]
        # a tensor-parallel group stays inside one instance
        assert layout["tensor_parallel"] <= rec["deployment"]["gpus_per_instance"]
        serving = est["serving"]
        assert 1 <= serving["concurrency"] <= serving["max_concurrency"]
        assert serving["time_per_output_token_s"] > 0
        assert serving["time_to_first_token_s"] > 0
        # one request: its prefill and its 256 tokens, each after a decode step and the
        # prefills of the requests that joined meanwhile (continuous batching)
        assert serving["inter_token_latency_s"] > serving["time_per_output_token_s"]
        assert est["step_time_s"] == pytest.approx(
            serving["time_to_first_token_s"] + 256 * serving["inter_token_latency_s"]
        )
        assert est["unit"] == "1,000,000 requests"
    # replicas multiply the rate at the same cost per request
    top = body["recommendations"][0]
    same = [r for r in body["recommendations"] if r["gpu"] == top["gpu"]
            and r["deployment"] == top["deployment"]]  # fmt: skip
    rates = {r["count"]: r["estimate"]["samples_per_s"] for r in same}
    if len(rates) > 1:
        small, big = min(rates), max(rates)
        assert rates[big] == pytest.approx(rates[small] * big / small)
    # int4 weights fit fewer GPUs than bf16 on the same card
    smaller = post(client, "/v1/recommendations", {**SERVE_70B, "weight_precision": "int4"})
    by_gpu = {r["gpu"]: r["layout"]["tensor_parallel"] for r in body["recommendations"]}
    for rec in smaller["recommendations"]:
        if rec["gpu"] in by_gpu:
            assert rec["layout"]["tensor_parallel"] <= by_gpu[rec["gpu"]]
    # a concurrency no GPU group holds: an empty answer, every GPU with its reason
    none = post(client, "/v1/recommendations", {**SERVE_70B, "concurrency": 1_000_000})
    assert none["recommendations"] == []
    assert all(e["reasons"] for e in none["excluded"])
    assert "memory-fit" in {r["rule"] for e in none["excluded"] for r in e["reasons"]}


def test_serving_a_vision_model_uses_one_gpu_a_replica(client: FlaskClient) -> None:
    body = post(client, "/v1/recommendations", {
        "model": {"name": "resnet-50"},
        "workload": {"task": "inference", "batch_size": 32, "precision": "fp16"},
    })  # fmt: skip
    assert body["recommendations"]
    for rec in body["recommendations"]:
        assert rec["count"] == rec["layout"]["data_parallel"]
        assert rec["estimate"]["step_time_s"] > 0
        assert rec["estimate"]["samples_per_s"] > 0
    # every offered GPU was served or excluded with a reason (the Kepler cards without fp16
    # math once made this a 500)
    assert body["candidates_total"] >= len(body["recommendations"])
    assert all(e["reasons"] for e in body["excluded"])


def test_rules_are_listed_with_their_sources(client: FlaskClient) -> None:
    body = client.get("/v1/rules").get_json()
    ids = {r["id"] for r in body["rules"]}
    assert {"fp8-needs-ada-or-hopper", "previous-generation-close", "vram-beyond-fit",
            "steady-use-owns", "rack-density", "mixed-precision-first"} <= ids  # fmt: skip
    assert all(r["source"] and r["as_of"] and r["when"] for r in body["rules"])
    assert {s["name"] for s in body["symbols"]} >= {"gpu_has_fp8", "capital_usd"}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**GPT2, "objective": "best"}, "objective"),
        ({**GPT2, "onprem": {"pue_ratio": 1.2}}, "onprem.pue_ratio"),
        ({**GPT2, "usage": {"pattern": "sometimes"}}, "usage.pattern"),
        ({**GPT2, "constraints": {"max_gpus": -1}}, "constraints.max_gpus"),
        ({"workload": GPT2["workload"]}, "model"),
    ],
)
def test_bad_requests_are_problems_naming_the_field(
    client: FlaskClient, body: dict[str, Any], field: str
) -> None:
    found = problem(client.post("/v1/recommendations", json=body), 422)
    assert any(f.startswith(field) for f in fields_in(found)), found


def test_an_unknown_recommendation_is_404_and_an_unknown_gpu_422(client: FlaskClient) -> None:
    problem(client.get("/v1/recommendations/nothere"), 404)
    body = {"gpu": "h900", "usage": {"gpu_hours_per_month": 5}}
    assert fields_in(problem(client.post("/v1/tco", json=body), 422)) == {"gpu"}
    over = {"gpu": "h100-sxm-80gb", "count": 1, "usage": {"gpu_hours_per_month": 5000}}
    assert "usage" in problem(client.post("/v1/tco", json=over), 422)["detail"]


def test_the_best_score_is_shown_and_named(client: FlaskClient) -> None:
    """The band measures from the best score of all candidates: when the footprint order
    leaves that candidate below the first ten, it is shown last, and why_first names it
    (a BERT fine-tune: the cheapest job is a small card, the band's first a faster one)."""
    body = client.post(
        "/v1/recommendations",
        json={
            "model": {"name": "bert-base"},
            "workload": {"task": "fine-tuning", "batch_size": 32, "seq_len": 384,
                         "precision": "bf16", "dataset_samples": 88000, "epochs": 2},
        },
    ).get_json()  # fmt: skip
    scores = [r["score"] for r in body["recommendations"]]
    lowest = body["recommendations"][scores.index(min(scores))]
    assert lowest["rank"] > 1  # the band's footprint order put another first
    assert f"the best, {lowest['count']} x {lowest['gpu_name']}" in body["why_first"]
    assert f"at {min(scores):,.4g} USD" in body["why_first"]
