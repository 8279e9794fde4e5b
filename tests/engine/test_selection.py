"""The held-out checks' one mechanism: scikit-learn estimators over indices into cases,
LeaveOneGroupOut for the group splits, PredefinedSplit for a cut in time, one error
summary."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.exceptions import NotFittedError
from sklearn.utils.validation import check_is_fitted

from knowledge import Knowledge
from profiles.model_catalog import Catalog
from service.engine.estimating.model import PerformanceModel
from service.engine.validating import inference_validation as iv
from service.engine.validating import llm_validation as lv
from service.engine.validating import operators as ops
from service.engine.validating import training_validation as tv
from service.engine.validating import validation
from service.engine.validating.selection import (
    CaseEstimator,
    after_cut,
    error_summary,
    group_folds,
    indices,
    leave_one_group_out,
)


class MeanFit(CaseEstimator):
    """Predicts every case as the mean of the measured values it was fitted on."""

    def __init__(self, cases: Sequence[str] = ()) -> None:
        self.cases = cases

    def fit(self, X: np.ndarray, y: np.ndarray) -> MeanFit:
        self.seen_ = indices(X)
        self.mean_ = float(np.mean(y)) if len(y) else math.nan
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.full(len(X), self.mean_)


@pytest.fixture(scope="module")
def offline(knowledge: Knowledge, catalog: Catalog) -> list[iv.OfflineCase]:
    found = iv.cases(knowledge, lv.catalog_source(catalog))
    return [c for c in found if c.row.workload == "resnet50-imagenet-inference"]


def _estimators(model: PerformanceModel, knowledge: Knowledge) -> list[CaseEstimator]:
    return [
        MeanFit(["a", "b"]),
        validation.StepModelFit(model, knowledge),
        iv.OfflineFit([], min_gpus=3),
        tv.TrainingFit([]),
        lv.OptimizedFit([], lv.Predictor(model.step_model, knowledge)),
        ops.OperatorFit([], knowledge),
    ]


def test_the_estimators_honour_the_scikit_learn_api(
    model: PerformanceModel, knowledge: Knowledge
) -> None:
    """get_params names the constructor's parameters; a clone is a new, unfitted estimator
    with the same parameters, shared rather than copied (the cases are only read)."""
    for estimator in _estimators(model, knowledge):
        params = estimator.get_params(deep=False)
        assert params
        copy = clone(estimator)
        assert type(copy) is type(estimator)
        assert copy is not estimator
        assert copy.get_params(deep=False).keys() == params.keys()
        assert all(copy.get_params(deep=False)[k] is v for k, v in params.items())
        with pytest.raises(NotFittedError):
            check_is_fitted(copy)
    fit = iv.OfflineFit([]).set_params(min_gpus=4)
    assert fit.get_params()["min_gpus"] == 4


def test_leave_one_group_out_fits_each_group_on_the_others_only() -> None:
    groups = ["a", "a", "b", "c", "c", "c"]
    measured = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    found = leave_one_group_out(MeanFit(groups), measured, groups)
    assert list(found) == [np.mean(measured[2:]), np.mean(measured[2:]), np.mean([1, 2, 4, 5, 6]),
                           2.0, 2.0, 2.0]  # fmt: skip
    folds = group_folds(MeanFit(groups), measured, groups)
    assert [f.group for f in folds] == ["a", "b", "c"]
    for fold in folds:
        assert not set(fold.fitted.seen_) & set(fold.test)
        assert set(fold.fitted.seen_) | set(fold.test) == set(range(len(groups)))
        assert list(fold.fitted.predict(fold.test.reshape(-1, 1))) == list(found[fold.test])
    # a held-out row's own value does not move its prediction; it moves the others'
    perturbed = [*measured[:3], 40.0, *measured[4:]]
    again = leave_one_group_out(MeanFit(groups), perturbed, groups)
    assert list(again[3:]) == list(found[3:])
    assert list(again[:3]) != list(found[:3])


def test_a_single_group_is_predicted_by_a_fit_on_no_case() -> None:
    found = leave_one_group_out(MeanFit(["a", "a"]), [1.0, 2.0], ["a", "a"])
    assert np.isnan(found).all()
    assert len(leave_one_group_out(MeanFit([]), [], [])) == 0


def test_an_offline_gpu_s_prediction_does_not_depend_on_its_own_rows(
    offline: list[iv.OfflineCase],
) -> None:
    """ResNet-50 Offline, each GPU held out: tripling one GPU's measured value changes the
    other GPUs' predictions (it is in their fits) and none of its own."""
    gpus = [c.gpu.id for c in offline]
    base = leave_one_group_out(iv.OfflineFit(offline), [c.measured_per_gpu for c in offline], gpus)
    held = gpus[0]
    perturbed = [
        replace(c, measured_per_gpu=3 * c.measured_per_gpu) if i == 0 else c
        for i, c in enumerate(offline)
    ]
    again = leave_one_group_out(
        iv.OfflineFit(perturbed), [c.measured_per_gpu for c in perturbed], gpus
    )
    mine = [i for i, g in enumerate(gpus) if g == held]
    others = [i for i, g in enumerate(gpus) if g != held]
    assert not np.isnan(base).any()
    assert list(again[mine]) == list(base[mine])
    assert list(again[others]) != list(base[others])


def test_a_held_out_architecture_s_predictions_do_not_depend_on_its_rows(
    model: PerformanceModel, knowledge: Knowledge
) -> None:
    """validation.held_out over architectures: doubling one row's measured step (what the
    step model is fitted on) leaves its architecture's predictions as they were."""

    def arch(o: Any) -> str:
        return knowledge.gpus[o.gpu_id].architecture

    first = model.single[0]
    base, folds = validation.held_out(model, knowledge, arch)
    assert [p.observation for p in base] == model.single
    assert set(folds) == {arch(o) for o in model.single}
    slower = replace(
        model,
        single=[replace(first, throughput=first.throughput / 2), *model.single[1:]],
        rows=[replace(model.rows[0], step_s=2 * model.rows[0].step_s), *model.rows[1:]],
    )
    again, _ = validation.held_out(slower, knowledge, arch)
    same = [i for i, o in enumerate(model.single) if arch(o) == arch(first)]
    other = [i for i, o in enumerate(model.single) if arch(o) != arch(first)]
    assert [again[i].predicted for i in same] == [base[i].predicted for i in same]
    assert [again[i].predicted for i in other] != [base[i].predicted for i in other]


def test_predefined_split_predicts_only_the_cases_after_the_cut() -> None:
    after = [False, True, False, True, True]
    fold = after_cut(MeanFit(), [1.0, 10.0, 3.0, 10.0, 10.0], after)
    assert fold is not None
    assert list(fold.test) == [1, 3, 4]
    assert fold.fitted.seen_ == [0, 2]
    assert list(fold.rows()) == [2.0, 2.0, 2.0]
    assert after_cut(MeanFit(), [1.0, 2.0], [False, False]) is None


def test_forward_in_time_predicts_the_newer_gpus_rows_in_order(
    model: PerformanceModel, knowledge: Knowledge
) -> None:
    found = validation.forward(model, knowledge, 2022)
    newer = [o for o in model.single if knowledge.gpus[o.gpu_id].release_year >= 2022]
    assert [p.observation for p in found] == newer


def test_error_summary() -> None:
    apes = [0.1, 0.33, 0.2, 0.05]
    found = error_summary(
        apes,
        {"by_gpu": ["x", "y", "x", "y"], "groups": [("n=1",), ("n=1", "nv"), (), ("nv",)]},
        worst=2,
        describe=lambda i: {"i": i},
        digits=2,
        worst_first=True,
    )
    assert found["rows"] == 4
    assert found["median_ape"] == 0.15
    assert found["mean_ape"] == 0.17
    assert [(r["name"], r["rows"], r["median_ape"]) for r in found["by_gpu"]] == [
        ("y", 2, 0.19),
        ("x", 2, 0.15),
    ]
    assert [(r["name"], r["rows"]) for r in found["groups"]] == [("n=1", 2), ("nv", 2)]
    assert found["worst"] == [{"i": 1}, {"i": 2}]
    by_name = error_summary(apes, {"by_gpu": ["y", "x", "y", "x"]}, count="rows_predicted")
    assert [r["name"] for r in by_name["by_gpu"]] == ["x", "y"]
    assert by_name["rows_predicted"] == 4
    assert by_name["mean_ape"] == pytest.approx(0.17)
    assert error_summary([], {"by_gpu": []}) == {
        "rows": 0,
        "median_ape": None,
        "mean_ape": None,
        "by_gpu": [],
    }
