"""Answers kept as the bytes sent: estimates and plans in the cache, catalog reads in the
process; the same request again gets the same bytes, anything else computes afresh."""

from __future__ import annotations

from typing import Any

import pytest
import rule_engine
from flask.testing import FlaskClient

from service.api.answers import MEMO
from tests.service.helpers import problem

ESTIMATE = {
    "model": {"name": "resnet-50"},
    "workload": {"task": "training", "batch_size": 64, "image_size": 224, "precision": "fp16"},
    "gpu": "a100-sxm4-80gb",
}


def _keys(client: FlaskClient, kind: str) -> set[str]:
    """The keys of ``kind`` in the app's embedded store."""
    store = client.application.extensions["rightsize"].cache.inner
    rows = store.connection().execute("SELECT key FROM entries WHERE key LIKE ?", (kind + ":%",))
    return {key for (key,) in rows}


def test_an_estimate_is_computed_once_and_served_as_stored(client: FlaskClient) -> None:
    first = client.post("/v1/estimates", json=ESTIMATE)
    assert first.status_code == 200
    assert len(_keys(client, "estimate")) == 1
    again = client.post("/v1/estimates", json=dict(reversed(ESTIMATE.items())))  # same JSON
    assert again.get_data() == first.get_data()
    assert len(_keys(client, "estimate")) == 1
    other = client.post("/v1/estimates", json={**ESTIMATE, "gpu": "h100-sxm-80gb"})
    assert other.get_json()["throughput"] != first.get_json()["throughput"]
    assert len(_keys(client, "estimate")) == 2
    # the curated-only model is another answer, kept apart
    curated = client.post("/v1/estimates", json={**ESTIMATE, "submitted_benchmarks": False})
    assert curated.status_code == 200
    assert len(_keys(client, "estimate")) == 3


def test_a_refused_request_is_not_kept(client: FlaskClient) -> None:
    bad = {**ESTIMATE, "workload": {**ESTIMATE["workload"], "precision": "bf16"}}
    problem(client.post("/v1/estimates", json={**bad, "gpu": "v100-sxm2-16gb"}), 422)
    assert _keys(client, "estimate") == set()


def test_a_plan_is_kept_too(client: FlaskClient) -> None:
    body = {
        "model": {"name": "gpt2"},
        "workload": {"task": "training", "batch_size": 8, "seq_len": 512},
        "gpu": "a100-sxm4-80gb",
        "max_count": 4,
    }
    first = client.post("/v1/plans", json=body)
    assert first.status_code == 200, first.get_data(as_text=True)
    assert client.post("/v1/plans", json=body).get_data() == first.get_data()
    assert len(_keys(client, "plan")) == 1


def test_catalog_reads_are_memoised_by_path_and_query(client: FlaskClient) -> None:
    first = client.get("/v1/gpus?page_size=7&sort=-memory_gb")
    memo = client.application.extensions[MEMO]
    assert any(k.endswith(" /v1/gpus?page_size=7&sort=-memory_gb") for k in memo._items)
    again = client.get("/v1/gpus?page_size=7&sort=-memory_gb")
    assert again.get_data() == first.get_data()
    assert len(again.get_json()["items"]) == 7
    assert again.headers["X-Knowledge-Version"] == first.headers["X-Knowledge-Version"]
    problem(client.get("/v1/gpus/h1000"), 404)
    assert not any(k.endswith("/v1/gpus/h1000?") for k in memo._items)  # only answers found


def test_recommendations_that_differ_in_constraints_share_the_layout_search(
    client: FlaskClient,
) -> None:
    from service.state import AppState

    app_state: AppState = client.application.extensions["rightsize"]
    runs = app_state.layers.service().runs
    runs.clear()
    body = {
        "model": {"name": "gpt2"},
        "workload": {"task": "training", "batch_size": 8, "seq_len": 512},
        "constraints": {"max_gpus": 4},
    }
    free = client.post("/v1/recommendations", json=body).get_json()
    assert len(runs) == 1
    budget = 1.2 * min(r["cost"]["monthly_usd"] for r in free["recommendations"])
    tight = {**body, "constraints": {"max_gpus": 4, "budget_monthly_usd": budget}}
    capped = client.post("/v1/recommendations", json=tight)
    assert capped.status_code == 200, capped.get_data(as_text=True)
    assert len(runs) == 1  # the same search, ranked under another budget
    assert capped.get_json()["id"] != free["id"]
    monthly = [r["cost"]["monthly_usd"] for r in capped.get_json()["recommendations"]]
    assert monthly
    assert max(monthly) <= budget
    assert max(r["cost"]["monthly_usd"] for r in free["recommendations"]) > budget


def test_a_new_budget_evaluates_only_the_rules_that_read_a_budget(
    client: FlaskClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A rule's result is a function of the values it reads: the rule book keeps them for
    every request, so asking again under a budget evaluates, of the rules about each
    candidate, only the budget's (on every candidate)."""
    body = {
        "model": {"name": "gpt2"},
        "workload": {"task": "training", "batch_size": 8, "seq_len": 512},
        "constraints": {"max_gpus": 4},
    }
    assert client.post("/v1/recommendations", json=body).status_code == 200
    book = client.application.extensions["rightsize"].estimates.rules
    by_rule = {id(r.compiled): r for r in book.rules}
    evaluated: list[str] = []
    matches = rule_engine.Rule.matches

    def spied(self: rule_engine.Rule, thing: Any, **kwargs: Any) -> bool:
        evaluated.append(by_rule[id(self)].id)
        return bool(matches(self, thing, **kwargs))

    monkeypatch.setattr(rule_engine.Rule, "matches", spied)
    budgeted = {**body, "constraints": {"max_gpus": 4, "budget_monthly_usd": 1e7}}
    answer = client.post("/v1/recommendations", json=budgeted)
    assert answer.status_code == 200
    candidate = {r.id for r in book.scoped("candidate")}
    assert {rule for rule in evaluated if rule in candidate} == {"budget-monthly"}
