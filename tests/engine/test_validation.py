"""The validation report: intervals, rank agreement, and `rightsize validate` end to end."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from knowledge import Knowledge
from service import create_app
from service.cli import main
from service.engine.model import PerformanceModel
from service.engine.validation import Prediction, coverage, in_sample, rank_agreement, summary


def test_interval_holds_the_measured_value_for_most_held_in_rows(model: PerformanceModel) -> None:
    held_in = in_sample(model)
    assert len(held_in) == len(model.single)
    assert coverage(held_in) >= 0.8
    for p in held_in:
        assert p.low < p.predicted < p.high


def test_rank_agreement_follows_measured_order(model: PerformanceModel) -> None:
    rows = [o for o in model.single if o.workload == "resnet50-imagenet" and o.precision == "fp16"]
    gpus: dict[str, set[str]] = {}
    for o in rows:
        gpus.setdefault(o.suite, set()).add(o.gpu_id)
    ranked = [suite for suite, ids in gpus.items() if len(ids) >= 4]  # fewer: no rank
    assert ranked
    exact = [Prediction(o, o.throughput, o.throughput, o.throughput) for o in rows]
    reversed_ = [Prediction(o, 1.0 / o.throughput, 0.0, 1.0) for o in rows]
    same = rank_agreement(exact)
    assert [g["suite"] for g in same["groups"]] == sorted(ranked)
    assert same["median"] == 1.0
    assert rank_agreement(reversed_)["median"] == -1.0


def test_validate_command_reports_held_out_errors_and_the_api_serves_them(
    model: PerformanceModel, knowledge: Knowledge, cache_copy: Path
) -> None:
    cache = cache_copy
    result = CliRunner().invoke(main, ["validate", "--model-dir", str(cache)])
    assert result.exit_code == 0, result.output
    for heading in ("leave-one-GPU-out", "leave-one-architecture-out", "per GPU:"):
        assert heading in result.output
    assert "per model and precision:" in result.output
    assert result.output.count("  target ") == 4

    report = json.loads((cache / f"validation-{knowledge.version}.json").read_text())
    single = report["single_gpu"]
    assert single["rows"] == len(model.single)
    assert {r["name"] for r in single["by_gpu"]} == {o.gpu_id for o in model.single}
    assert sum(r["rows"] for r in single["by_workload"]) == single["rows"]
    # held out is harder than held in: a GPU leaking into its own fold would erase the gap
    held_in = summary(in_sample(model))["median_ape"]
    assert held_in < single["median_ape"] < 0.12
    assert 0.9 < single["spearman"]["median"] <= 1.0
    assert report["multi_gpu"]["rows"] > 0
    assert report["multi_gpu"]["median_ape"] < 0.2
    assert len(report["worst"]) == 10
    worst = [r["ape"] for r in report["worst"]]
    assert worst == sorted(worst, reverse=True)
    assert worst[-1] >= np.quantile([r["median_ape"] for r in single["by_gpu"]], 0.9)
    assert 0.5 < report["interval"]["coverage_held_out"] <= 1.0

    app = create_app({"TESTING": True, "MODEL_DIR": str(cache)})
    served = app.test_client().get("/v1/validation")
    assert served.status_code == 200
    body = served.get_json()
    assert body["knowledge_version"] == knowledge.version
    assert body["made_at"] == report["made_at"]
    assert body["single_gpu"]["median_ape"] == single["median_ape"]
