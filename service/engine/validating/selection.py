"""Held-out predictions through scikit-learn's model selection, and their one error summary.

Every held-out check of ``rightsize validate`` splits a list of cases (benchmark rows,
MLPerf rows, operator timings) one of two ways:

- a group left out (a GPU, an architecture): scikit-learn's ``LeaveOneGroupOut``, through
  ``cross_val_predict`` where the predicted values are all the check needs
  (:func:`leave_one_group_out`); where it needs more of each prediction (its interval, the
  layout it picked) or the fitted folds themselves, which ``cross_val_predict`` does not
  give (it calls only ``predict`` and the classifiers' methods, and keeps no fit), the
  same splits fitted the same way, a clone per split (:func:`group_folds`);
- a cut in time: ``PredefinedSplit`` with the cases after the cut as its one test fold and
  the others in none (:func:`after_cut`). ``cross_val_predict`` takes partitions only
  (every case in exactly one test fold), so the split's one (train, test) pair is fitted
  here; the cases before the cut get no prediction.

Each check's fit is a scikit-learn estimator (:class:`CaseEstimator`): ``X`` one column of
indices into the cases it was made with, ``y`` their measured values; ``fit`` fits on the
cases given, ``predict`` gives their predicted values in the same unit (not logs: the
report's numbers are the predictions themselves), NaN where the fit cannot predict a case.
:func:`error_summary` is the one summary of absolute percentage errors every check reports.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin, clone
from sklearn.model_selection import LeaveOneGroupOut, PredefinedSplit, cross_val_predict


class CaseEstimator(BaseEstimator, RegressorMixin):
    """Base of the held-out fits. A subclass takes its cases (and what predicting them
    needs) as constructor parameters, kept as given, and defines ``fit(X, y)`` and
    ``predict(X)``; where the report shows more of a prediction than its value, also
    ``predict_rows(X)``: each case's prediction as the report needs it (an object array).

    A clone shares its parameters with the original instead of deep-copying them (what
    scikit-learn's ``clone`` does with parameters that are not estimators): the cases are
    read, never written, and some are large (the performance model, the knowledge) or are
    looked up by identity (the LLM predictor's cache of layouts)."""

    def __sklearn_clone__(self) -> Self:
        return type(self)(**self.get_params(deep=False))

    def predict_rows(self, X: np.ndarray) -> np.ndarray:
        return objects(list(self.predict(X)))


def column(index: Sequence[int] | np.ndarray) -> np.ndarray:
    """Case indices as ``X`` (one column)."""
    return np.asarray(index, dtype=int).reshape(-1, 1)


def indices(X: Any) -> list[int]:
    """The case indices ``X`` holds (its first column)."""
    return [int(i) for i in np.asarray(X)[:, 0]]


def objects(values: Sequence[Any]) -> np.ndarray:
    """``values`` as a one-dimensional object array (``predict_rows``'s return)."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def _xy(measured: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(measured, dtype=float)
    return column(range(len(y))), y


@dataclass(frozen=True)
class Fold:
    """One split fitted: the group left out (None for a cut in time), the estimator fitted
    on the other cases and the indices of the cases it predicts, in order."""

    group: Hashable
    fitted: CaseEstimator
    test: np.ndarray

    def rows(self) -> np.ndarray:
        """The test cases' ``predict_rows``."""
        return self.fitted.predict_rows(column(self.test))


def leave_one_group_out(
    estimator: CaseEstimator, measured: Sequence[float], groups: Sequence[Hashable]
) -> np.ndarray:
    """Each case's value predicted by ``estimator`` fitted on the cases of the other groups,
    in the cases' order: ``cross_val_predict`` over ``LeaveOneGroupOut``. ``measured`` and
    ``groups`` are the cases' values and groups. With a single group (``LeaveOneGroupOut``
    needs two), every case is predicted by a fit on no case."""
    X, y = _xy(measured)
    if len(set(groups)) < 2:
        folds = group_folds(estimator, measured, groups)
        return folds[0].fitted.predict(column(folds[0].test)) if folds else np.array([])
    found: np.ndarray = cross_val_predict(
        estimator, X, y, groups=list(groups), cv=LeaveOneGroupOut()
    )
    return found


def group_folds(
    estimator: CaseEstimator, measured: Sequence[float], groups: Sequence[Hashable]
) -> list[Fold]:
    """``LeaveOneGroupOut``'s splits, each fitted as ``cross_val_predict`` fits them (a
    clone of ``estimator`` on the other groups' cases), by group in sorted order. With a
    single group, one fold fitted on no case."""
    X, y = _xy(measured)
    if len(y) == 0:
        return []
    if len(set(groups)) < 2:
        return [Fold(groups[0], clone(estimator).fit(X[:0], y[:0]), np.arange(len(y)))]
    return [
        Fold(groups[int(test[0])], clone(estimator).fit(X[train], y[train]), test)
        for train, test in LeaveOneGroupOut().split(X, y, groups=list(groups))
    ]


def after_cut(
    estimator: CaseEstimator, measured: Sequence[float], after: Sequence[bool]
) -> Fold | None:
    """The cases after a cut (``after``) and ``estimator`` fitted on the others:
    ``PredefinedSplit`` with ``test_fold`` 0 for the cases after the cut and -1 (in no test
    fold) for the others. Its one (train, test) pair is fitted here, not by
    ``cross_val_predict``, which takes partitions only. None where no case is after it."""
    X, y = _xy(measured)
    split = PredefinedSplit(np.where(np.asarray(after, dtype=bool), 0, -1))
    if split.get_n_splits() == 0:
        return None
    ((train, test),) = split.split(X, y)
    return Fold(None, clone(estimator).fit(X[train], y[train]), test)


def error_summary(
    apes: Sequence[float],
    by: Mapping[str, Sequence[str | tuple[str, ...]]] | None = None,
    *,
    worst: int = 0,
    describe: Callable[[int], Mapping[str, Any]] | None = None,
    digits: int | None = None,
    count: str = "rows",
    worst_first: bool = False,
) -> dict[str, Any]:
    """Absolute percentage errors summarised: how many (under ``count``), their median and
    mean (None where there are none); for each table in ``by`` (its key -> each error's
    group, or groups where an error counts in several), each group's name, count, median
    and mean, by name, or the largest median first with ``worst_first``; with ``worst``
    and ``describe`` (the ``i``-th error's row), that many rows, the largest error first.
    ``digits`` rounds the medians and means (a table is ordered on the rounded ones)."""

    def figure(values: Sequence[float], average: Callable[[Sequence[float]], float]) -> float:
        value = float(average(values))
        return value if digits is None else round(value, digits)

    out: dict[str, Any] = {
        count: len(apes),
        "median_ape": figure(apes, statistics.median) if len(apes) else None,
        "mean_ape": figure(apes, statistics.fmean) if len(apes) else None,
    }
    for key, names in (by or {}).items():
        grouped: dict[str, list[float]] = {}
        for ape, name in zip(apes, names, strict=True):
            for one in (name,) if isinstance(name, str) else name:
                grouped.setdefault(one, []).append(ape)
        table = [
            {
                "name": name,
                "rows": len(values),
                "median_ape": figure(values, statistics.median),
                "mean_ape": figure(values, statistics.fmean),
            }
            for name, values in grouped.items()
        ]
        if worst_first:
            out[key] = sorted(table, key=lambda r: (-r["median_ape"], r["name"]))
        else:
            out[key] = sorted(table, key=lambda r: r["name"])
    if worst and describe is not None:
        order = sorted(range(len(apes)), key=lambda i: -apes[i])
        out["worst"] = [dict(describe(i)) for i in order[:worst]]
    return out
