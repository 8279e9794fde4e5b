"""MLPerf Training's other workloads (BERT, ResNet-50, RetinaNet, Stable Diffusion, ...)
against the optimized stack's step, each GPU held out."""

from __future__ import annotations

import pytest

from knowledge import Knowledge
from profiles.model_catalog import Catalog
from service.engine.validating import training_validation as tv
from service.engine.validating.llm_validation import catalog_source

pytestmark = pytest.mark.slow  # refits: MLPerf Training, each GPU held out


@pytest.fixture(scope="module")
def rows(knowledge: Knowledge, catalog: Catalog) -> list[tv.TrainingCase]:
    return tv.cases(knowledge, catalog_source(catalog))


def test_each_row_is_one_gpu_s_share_of_its_global_batch(rows: list[tv.TrainingCase]) -> None:
    assert {c.row.workload for c in rows} == set(tv.TRAINING)
    assert not any("tinygrad" in str(c.row.details.get("framework")).lower() for c in rows)
    for c in rows[:50]:
        share = c.row.details["global_batch_size"] / c.row.gpu_count
        assert c.step.batch_size == pytest.approx(share)


def test_mlperf_training_other_workloads_held_out_gpu_within_15_percent(
    rows: list[tv.TrainingCase],
) -> None:
    """Issue 11's target (15%) over all rows; BERT misses most (its Hopper rows run
    faster than a 16-bit step of the profile says)."""
    report = tv.held_out_gpu(rows)
    assert report["rows_predicted"] >= 550
    assert report["median_ape"] <= 0.15
    by = {r["name"]: r for r in report["by_workload"]}
    for name in ("resnet50-imagenet-time-to-train", "retinanet-openimages"):
        assert by[name]["median_ape"] <= 0.12
