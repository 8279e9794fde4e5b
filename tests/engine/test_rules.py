"""The rules in knowledge/rules: each fires on a context that meets it and stays silent on
one that does not; a bad rules file refuses to load, naming the file, the rule and a fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import rule_engine

from service.engine.rules import SYMBOLS, Guard, RuleBook, RuleLoadError

BOOK = RuleBook.load()  # the shipped rules, as an app loads them

# a context that fires no rule of any scope; each case below changes a few symbols
QUIET: dict[str, Any] = {
    "task": "training", "precision": "bf16", "objective": "best_value",
    "model_params_b": 7.0, "traced": False, "input_idle_share": 0.0, "pattern": "steady",
    "interruptible": False, "gpu_hours_per_month": 500.0, "horizon_months": 36.0,
    "budget_capital_usd": None, "budget_monthly_usd": None, "deadline_hours": None,
    "max_gpus": None, "max_server_power_kw": None, "deployment_allowed": "any",
    "gpu_id": "h100-sxm-80gb", "gpu_name": "NVIDIA H100 SXM5 80GB",
    "gpu_architecture": "hopper", "gpu_segment": "datacenter", "gpu_cooling": "passive",
    "gpu_release_year": 2022.0, "gpu_memory_gib": 80.0, "gpu_ecc": True, "gpu_tdp_w": 700.0,
    "gpu_tensor_cores": True, "gpu_has_bf16": True, "gpu_has_fp8": True,
    "gpu_pcie_generation": 5.0, "gpu_p2p": True, "gpu_nvlink_gb_per_s": 900.0,
    "gpu_datacenter_use_allowed": True, "count": 8.0, "gpus_per_server": 8.0, "nodes": 1.0,
    "interconnect": "nvswitch-h100", "memory_needed_gib": 60.0, "memory_headroom_share": 0.2,
    "bound": "compute", "tensor_parallel": 1.0, "zero_stage": 3.0, "deployment": "cloud",
    "pricing": "on_demand", "provider": "aws", "instances": 1.0, "gpus_per_instance": 8.0,
    "job_hours": 10.0, "job_cost_usd": 100.0, "job_kwh": 50.0, "job_kg_co2e": 20.0,
    "max_kg_co2e": None, "marketplace": False, "cluster_network": True,
    "between_name": "efa (3200 Gb/s)", "between_gb_per_s": 400.0, "between_rdma": True,
    "monthly_usd": 1000.0, "capital_usd": 0.0, "server_power_kw": 6.0, "utilisation": 0.7,
    "break_even_gpu_hours": None, "speedup_over_cheapest": 1.0, "cost_over_cheapest": 1.0,
    "newest_gpu": "h100-sxm-80gb", "time_over_newest": 1.0, "cost_over_newest": 1.0,
    "smallest_count": 1.0, "fits_one_gpu_accumulating": False,
    "mixed_precision_speedup": None, "checkpointing_memory_saving": 0.1,
    "hybrid_cheaper": False, "hybrid_owned": None, "hybrid_saving_share": None,
    "wall_ms": 100.0, "fp32_gemm_saving_share": 0.0, "short_kernel_share": 0.1,
    "busy_share": 0.95, "launch_saving_share": 0.0, "h2d_share": 0.0,
    "communication_share": 0.0, "overlap_saving_share": 0.0, "faster_link": "NVLink",
}  # fmt: skip

# rule id -> the symbols that make it fire (with QUIET's others)
FIRING: dict[str, dict[str, Any]] = {
    "bf16-needs-ampere": {"gpu_has_bf16": False},
    "fp8-needs-ada-or-hopper": {"precision": "fp8", "gpu_has_fp8": False},
    "tensor-cores-for-16-bit": {"gpu_tensor_cores": False},
    "ecc-for-long-runs": {"gpu_ecc": False, "job_hours": 200.0},
    "geforce-no-datacenter": {"deployment": "on-premise", "gpu_datacenter_use_allowed": False},
    "geforce-workstation-only": {
        "deployment": "on-premise",
        "gpus_per_server": 2.0,
        "gpu_datacenter_use_allowed": False,
    },
    "server-power-limit": {"deployment": "on-premise", "max_server_power_kw": 5.0},
    "rack-density": {"deployment": "on-premise", "server_power_kw": 10.2},
    "open-air-in-dense-server": {"deployment": "on-premise", "gpu_cooling": "open-air"},
    "no-peer-to-peer": {"gpu_p2p": False},
    "tensor-parallel-over-pcie": {"tensor_parallel": 2.0, "gpu_nvlink_gb_per_s": 0.0},
    "old-pcie-multi-gpu": {"gpu_pcie_generation": 3.0, "gpu_nvlink_gb_per_s": 0.0},
    "multi-node-fabric": {"deployment": "on-premise", "nodes": 2.0},
    "marketplace-hosts-share-no-fabric": {"marketplace": True, "instances": 2.0},
    "max-emissions": {"max_kg_co2e": 10.0},
    "owned-for-a-few-hours": {
        "objective": "fastest",
        "deployment": "on-premise",
        "utilisation": 0.01,
    },
    "multi-instance-cloud": {"instances": 4.0},
    "previous-generation-close": {
        "gpu_id": "a100-sxm4-80gb",
        "time_over_newest": 1.1,
        "cost_over_newest": 0.6,
    },
    "vram-beyond-fit": {"memory_headroom_share": 0.7},
    "faster-gpu-input-bound": {
        "traced": True,
        "input_idle_share": 0.4,
        "cost_over_cheapest": 2.0,
        "speedup_over_cheapest": 1.05,
    },
    "spot-for-interruptible": {"pricing": "spot"},
    "bursty-use-rents": {"pattern": "bursty"},
    "steady-use-owns": {"deployment": "on-premise", "break_even_gpu_hours": 400.0},
    "idle-owned-gpus": {
        "deployment": "on-premise",
        "utilisation": 0.1,
        "gpu_hours_per_month": 100.0,
    },
    "hybrid-baseline-burst": {
        "hybrid_cheaper": True,
        "hybrid_owned": 3.0,
        "hybrid_saving_share": 0.2,
    },
    "budget-capital": {"budget_capital_usd": 1000.0, "capital_usd": 250000.0},
    "budget-monthly": {"budget_monthly_usd": 500.0},
    "deadline": {"deadline_hours": 5.0},
    "max-gpus": {"max_gpus": 4.0},
    "deployment-not-allowed": {"deployment_allowed": "on-premise"},
    "mixed-precision-first": {"precision": "fp32", "mixed_precision_speedup": 2.5},
    "gradient-accumulation": {"smallest_count": 2.0, "fits_one_gpu_accumulating": True},
    "accumulate-to-fit": {
        "smallest_count": None,  # no candidate holds it
        "largest_gpu": "NVIDIA H200 SXM",
        "fits_one_gpu_accumulating": True,
        "micro_batch": 512.0,
        "stack": "hf-transformers",
    },
    "activation-checkpointing": {"checkpointing_memory_saving": 0.45},
    "switch-stack": {
        "stack": "hf-transformers",
        "faster_stack": "megatron-te",
        "faster_stack_speedup": 1.4,
        "faster_stack_fit": "its own 52 rows",
    },
    "input-pipeline-first": {"traced": True, "input_idle_share": 0.3},
    "mixed-precision": {"fp32_gemm_saving_share": 0.2},
    "input-pipeline": {"input_idle_share": 0.3},
    "launch-bound": {"short_kernel_share": 0.8, "busy_share": 0.4, "launch_saving_share": 0.3},
    "pinned-memory": {"h2d_share": 0.1},
    "overlap-communication": {"communication_share": 0.3, "overlap_saving_share": 0.15},
}


def test_every_rule_has_a_firing_case() -> None:
    assert {r.id for r in BOOK.rules} == set(FIRING)


def test_the_quiet_context_fires_nothing() -> None:
    for scope in ("gpu", "candidate", "request", "trace"):
        assert BOOK.fire(scope, QUIET) == [], scope


@pytest.mark.parametrize("rule_id", sorted(FIRING))
def test_rule_fires_on_its_case_and_not_without_it(rule_id: str) -> None:
    book = BOOK
    rule = next(r for r in book.rules if r.id == rule_id)
    fired = book.fire(rule.scope, {**QUIET, **FIRING[rule_id]})
    assert [f.rule.id for f in fired] == [rule_id]
    message = fired[0].message
    assert "{" not in message
    assert message.strip()
    assert rule.source
    assert rule.as_of.year >= 2009
    assert rule_id not in [f.rule.id for f in book.fire(rule.scope, QUIET)]


@pytest.mark.parametrize("rule_id", sorted(FIRING))
def test_a_guard_skips_only_what_the_condition_would_refuse(rule_id: str) -> None:
    """A rule is not evaluated where a symbol it guards on is null (or false, where the
    condition tests the symbol itself, or another string, where it must equal one): in its
    firing context with that symbol so, the compiled condition does not hold either (or
    cannot be evaluated, which does not hold)."""
    rule = next(r for r in BOOK.rules if r.id == rule_id)
    firing = {**QUIET, **FIRING[rule_id]}
    assert rule.matches(firing)
    for guard in rule.guards:
        failing: list[Any] = [None, False] if guard.itself else [None]
        if guard.equals is not None:
            failing.append(guard.equals + "-not")
        for value in failing:
            context = {**firing, guard.name: value}
            assert not rule.matches(context)
            try:
                held = rule.compiled.matches(context)
            except rule_engine.EvaluationError:
                held = False
            assert not held, (guard, value)


def test_most_rules_have_guards() -> None:
    """Conditions start with the constraint or measurement they need (``budget != null
    and ...``): those are read off the parsed condition, not spelled again."""
    rules = BOOK.rules
    assert sum(bool(r.guards) for r in rules) >= len(rules) * 2 // 3
    budget = next(r for r in rules if r.id == "budget-monthly")
    assert budget.guards == (Guard("budget_monthly_usd"), Guard("monthly_usd"))
    owns = next(r for r in rules if r.id == "steady-use-owns")
    assert Guard("deployment", equals="on-premise") in owns.guards


def test_message_fields_are_formatted_and_null_shows_as_na() -> None:
    book = BOOK
    meets = {"deployment": "on-premise", "server_power_kw": 10.25, "break_even_gpu_hours": 400.0}
    fired = book.fire("candidate", {**QUIET, **meets})
    (rack,) = [f for f in fired if f.rule.id == "rack-density"]
    assert "10.2 kW" in rack.message
    (owns,) = [f for f in fired if f.rule.id == "steady-use-owns"]
    assert "500 GPU-hours" in owns.message


def _write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "bad.yaml").write_text(text, encoding="utf-8")
    return tmp_path


RULE = """
- id: {rid}
  title: t
  scope: candidate
  when: "{when}"
  effect: warn
  message: "{message}"
  source: somewhere
  as_of: 2024-01-01
  myth: 4
"""


def test_an_unknown_symbol_refuses_to_load_with_file_rule_and_suggestion(tmp_path: Path) -> None:
    path = _write(tmp_path, RULE.format(rid="typo", when="gpu_memroy_gib > 40", message="m"))
    with pytest.raises(RuleLoadError) as err:
        RuleBook.load(path)
    text = str(err.value)
    assert "bad.yaml" in text
    assert "'typo'" in text
    assert "gpu_memroy_gib" in text
    assert "gpu_memory_gib" in text


def test_a_type_error_and_a_bad_message_field_refuse_to_load(tmp_path: Path) -> None:
    path = _write(tmp_path, RULE.format(rid="types", when="gpu_name > 3", message="m"))
    with pytest.raises(RuleLoadError, match=r"'types'.*mismatch"):
        RuleBook.load(path)
    path = _write(tmp_path, RULE.format(rid="field", when="count > 1", message="{gpu_nmae}"))
    with pytest.raises(RuleLoadError, match=r"gpu_nmae.*gpu_name"):
        RuleBook.load(path)


def test_a_request_rule_cannot_read_a_candidate_symbol(tmp_path: Path) -> None:
    text = (
        RULE.format(rid="scoped", when="capital_usd > 1", message="m")
        .replace("scope: candidate", "scope: request")
        .replace("effect: warn", "effect: advise")
    )
    with pytest.raises(RuleLoadError, match=r"capital_usd.*scope request"):
        RuleBook.load(_write(tmp_path, text))


def test_penalise_needs_a_factor_and_ids_are_unique(tmp_path: Path) -> None:
    text = RULE.format(rid="p", when="count > 1", message="m").replace("warn", "penalise")
    with pytest.raises(RuleLoadError, match=r"factor"):
        RuleBook.load(_write(tmp_path, text))
    twice = RULE.format(rid="a", when="count > 1", message="m") * 2
    with pytest.raises(RuleLoadError, match=r"'a'.*also in"):
        RuleBook.load(_write(tmp_path, twice))


def test_every_symbol_is_used_or_documented() -> None:
    for name, (_, scopes, meaning) in SYMBOLS.items():
        assert scopes, name
        assert meaning, name
