"""Efficiencies learned from the stored benchmarks: measured step time over the roofline.

The target is ``log(measured step / roofline step)`` of one GPU, from features of the
operator mix (roofline shares, launches, intensity, batch) and of the GPU (peak rates at
the math mode, bandwidth, SMs, L2, architecture). Two models:

- ``known``: for a workload the benchmarks measured (on other GPUs), a weighted average of
  two gradient-boosted tree ensembles that also see the workload's identity and of a
  neighbours estimate (the efficiencies of the most similar GPUs on the same workload),
  blended with a ridge regression of that workload's efficiency on the GPU's specs (which
  extrapolates where neighbours can only average);
- ``general``: for any other model, the tree ensembles on mix and GPU features only.

Intervals are conformal: quantiles of out-of-sample residuals (folds grouped by GPU for
``known``, by workload for ``general``). Nothing is unpickled: the model is fitted in
process from the knowledge files; only JSON (mixes, residual quantiles) is cached.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sklearn.ensemble import GradientBoostingRegressor, HistGradientBoostingRegressor
from sklearn.linear_model import Ridge
from sklearn.model_selection import GroupKFold
from threadpoolctl import threadpool_limits

from knowledge import Knowledge
from knowledge.records import Gpu
from service.engine.observations import GENERATION, Observation
from service.engine.roofline import MathMode, OpMix, Roofline, math_mode, roofline

ARCHITECTURES = {
    "pascal": 0,
    "volta": 1,
    "turing": 2,
    "ampere": 3,
    "cdna2": 3,
    "ada": 4,
    "hopper": 5,
    "cdna3": 5,
    "blackwell": 6,
}
COVERAGE = 0.8  # the interval's nominal coverage
NEIGHBOUR_TAU = 0.3  # width of the neighbours kernel, in standardised GPU-feature distance
# known workloads: weights of the two tree ensembles and of the neighbours estimate, chosen
# by leave-one-GPU-out error among (0.4, 0.3, 0.3), (0.3, 0.2, 0.5) and (0.2, 0.2, 0.6)
WEIGHTS = (0.3, 0.2, 0.5)
# share of the per-workload ridge in the known estimate: with 0.3 the leave-one-GPU-out
# median error fell from 7.9% to 7.7% and leave-one-architecture-out from 14.6% to 12.8%;
# a workload measured on fewer than RIDGE_MIN_ROWS rows has no ridge (neighbours stand in)
RIDGE_WEIGHT = 0.3
RIDGE_MIN_ROWS = 5


def architecture_rank(gpu: Gpu) -> float:
    return float(ARCHITECTURES.get(gpu.architecture.lower(), 3))


def gpu_vector(gpu: Gpu, mode: MathMode) -> list[float]:
    return [
        architecture_rank(gpu),
        math.log(mode.tensor_flops),
        math.log(mode.vector_flops),
        math.log(mode.bytes_per_s),
        math.log(gpu.sm_count),
        math.log(max(gpu.l2_cache_mb, 0.25)),
        math.log(gpu.tdp_w),
    ]


@dataclass(frozen=True)
class Case:
    """One step on one GPU: what the efficiency models see."""

    workload: str | None  # a benchmarked workload id, or None for any other model
    precision: str  # the math-mode precision
    generation: int  # benchmark software generation (2: the newest containers)
    batch: float
    gpu: Gpu
    mode: MathMode
    roof: Roofline
    intensity: float

    def features(self, general: bool = False) -> list[float]:
        """``general``: only features that carry over to models far from the benchmarks'
        (no absolute step size or batch, which a 70B model is far outside of)."""
        tensor, vector, memory = self.roof.shares()
        total = max(self.roof.total_s, 1e-12)
        size = [] if general else [math.log(total), math.log(self.batch)]
        return [
            tensor,
            vector,
            memory,
            *size,
            math.log(max(self.roof.launch_s, 1e-9) / total),
            math.log(max(self.intensity, 1e-6)),
            float(self.precision in ("fp16", "bf16", "fp8", "int8", "int4")),
            float(self.generation),
            float(self.gpu.tensor_cores > 0),
            math.log(self.mode.tensor_flops / self.mode.bytes_per_s),
            *gpu_vector(self.gpu, self.mode),
        ]


def make_case(
    mix: OpMix,
    gpu: Gpu,
    precision: str,
    batch: float,
    workload: str | None,
    generation: int = 2,
) -> Case:
    mode = math_mode(gpu, precision)
    roof = roofline(mix, mode)
    flops = sum(f for f, _ in mix.work.values())
    moved = sum(b for _, b in mix.work.values())
    return Case(workload, precision, generation, batch, gpu, mode, roof, flops / max(moved, 1.0))


def observation_case(obs: Observation, mix: OpMix, knowledge: Knowledge) -> Case:
    return make_case(
        mix,
        knowledge.gpus[obs.gpu_id],
        obs.precision,
        obs.batch,
        obs.workload,
        GENERATION[obs.suite],
    )


class _NeighbourIndex:
    """The fitted rows grouped by (workload, precision), as arrays."""

    def __init__(self, cases: Sequence[Case], targets: np.ndarray) -> None:
        groups: dict[tuple[str | None, str], list[int]] = defaultdict(list)
        for i, case in enumerate(cases):
            groups[(case.workload, case.precision)].append(i)
        self.rows = dict(groups)  # indices into the fitted rows, per (workload, precision)
        self.groups = {
            key: (
                np.array([gpu_vector(cases[i].gpu, cases[i].mode) for i in rows]),
                np.log([cases[i].batch for i in rows]),
                np.array([cases[i].generation for i in rows]),
                [cases[i].gpu.id for i in rows],
                targets[rows],
            )
            for key, rows in groups.items()
        }

    def estimate(self, case: Case, scale: np.ndarray) -> float | None:
        found = self.groups.get((case.workload, case.precision))
        if found is None:
            return None
        vectors, log_batch, generation, _, targets = found
        mine = np.array(gpu_vector(case.gpu, case.mode))
        distance = np.sqrt((((vectors - mine) / scale) ** 2).sum(axis=1))
        distance += 0.3 * np.abs(log_batch - math.log(case.batch))
        distance += 0.5 * (generation != case.generation)
        weight = np.exp(-distance / NEIGHBOUR_TAU)
        total = float(weight.sum())
        return float((weight * targets).sum() / total) if total > 1e-12 else None


def _ridge_row(case: Case) -> list[float]:
    return [
        *gpu_vector(case.gpu, case.mode),
        math.log(case.batch),
        float(case.generation),
        *case.roof.shares(),
    ]


@dataclass(frozen=True)
class _Ridge:
    """Efficiency of one (workload, precision) as a linear function of the GPU's specs."""

    mean: np.ndarray
    scale: np.ndarray
    model: Ridge

    @classmethod
    def fit(cls, cases: Sequence[Case], targets: np.ndarray) -> _Ridge | None:
        if len(cases) < RIDGE_MIN_ROWS:
            return None
        rows = np.array([_ridge_row(c) for c in cases])
        mean = rows.mean(axis=0)
        scale = np.maximum(rows.std(axis=0), 1e-6)
        return cls(mean, scale, Ridge(alpha=1.0).fit((rows - mean) / scale, targets))

    def estimate(self, case: Case) -> float:
        row = (np.array([_ridge_row(case)]) - self.mean) / self.scale
        return float(self.model.predict(row)[0])


def _trees() -> list[Any]:
    return [
        HistGradientBoostingRegressor(
            max_iter=400, learning_rate=0.05, min_samples_leaf=8, random_state=0
        ),
        GradientBoostingRegressor(
            n_estimators=500, max_depth=3, learning_rate=0.05, subsample=0.8, random_state=0
        ),
    ]


@dataclass
class Fitted:
    """Tree ensembles and the rows they were fitted on (for the neighbours estimate)."""

    identity: dict[str, int]
    known: list[Any]
    general: list[Any]
    cases: list[Case]
    targets: np.ndarray
    scale: np.ndarray
    quantiles: dict[str, float] = field(default_factory=dict)
    _index: _NeighbourIndex | None = None
    _ridges: dict[tuple[str | None, str], _Ridge | None] = field(default_factory=dict)

    def _rows(self, cases: Sequence[Case], with_identity: bool) -> np.ndarray:
        rows = []
        for case in cases:
            row = case.features(general=not with_identity)
            if with_identity:
                row.append(float(self.identity.get(f"{case.workload}|{case.precision}", -1)))
            rows.append(row)
        return np.array(rows, dtype=float)

    def _grouped(self) -> _NeighbourIndex:
        if self._index is None:
            self._index = _NeighbourIndex(self.cases, self.targets)
        return self._index

    def _neighbours(self, case: Case) -> float | None:
        """Kernel-weighted efficiency of the same workload on the most similar GPUs."""
        return self._grouped().estimate(case, self.scale)

    def _ridge(self, case: Case) -> float | None:
        """The workload's own ridge on GPU specs, fitted on first use."""
        key = (case.workload, case.precision)
        if key not in self._ridges:
            rows = self._grouped().rows.get(key, [])
            cases = [self.cases[i] for i in rows]
            self._ridges[key] = _Ridge.fit(cases, self.targets[rows])
        ridge = self._ridges[key]
        return None if ridge is None else ridge.estimate(case)

    def is_known(self, case: Case) -> bool:
        return f"{case.workload}|{case.precision}" in self.identity

    def predict(self, cases: Sequence[Case]) -> np.ndarray:
        """log(step / roofline) for each case.

        On one OpenMP thread: the tree predictors start a parallel region per tree, which
        costs far more than a few rows' work (and much more still on a busy machine)."""
        with threadpool_limits(limits=1, user_api="openmp"):
            return self._predict(cases)

    def _predict(self, cases: Sequence[Case]) -> np.ndarray:
        known = [c for c in cases if self.is_known(c)]
        out = np.zeros(len(cases))
        general_rows = self._rows(cases, with_identity=False)
        general = np.mean([m.predict(general_rows) for m in self.general], axis=0)
        out[:] = general
        if known:
            index = [i for i, c in enumerate(cases) if self.is_known(c)]
            rows = self._rows(known, with_identity=True)
            trees = [m.predict(rows) for m in self.known]
            for j, i in enumerate(index):
                near = self._neighbours(cases[i])
                near = near if near is not None else trees[0][j]
                parts = (trees[0][j], trees[1][j], near)
                blend = sum(w * v for w, v in zip(WEIGHTS, parts, strict=True))
                ridge = self._ridge(cases[i])
                ridge = ridge if ridge is not None else near
                out[i] = (1 - RIDGE_WEIGHT) * blend + RIDGE_WEIGHT * ridge
        return out

    def quantile(self, case: Case) -> float:
        key = "known" if self.is_known(case) else "general"
        return self.quantiles.get(key, 0.5)


def fit(cases: Sequence[Case], targets: Sequence[float] | np.ndarray) -> Fitted:
    """Fit both models on ``cases`` (whose measured log efficiencies are ``targets``)."""
    keys = sorted({f"{c.workload}|{c.precision}" for c in cases if c.workload})
    y = np.asarray(targets, dtype=float)
    vectors = np.array([gpu_vector(c.gpu, c.mode) for c in cases])
    scale = np.maximum(vectors.std(axis=0), 1e-6)
    fitted = Fitted({k: i for i, k in enumerate(keys)}, _trees(), _trees(), list(cases), y, scale)
    with_identity = fitted._rows(cases, with_identity=True)
    without = fitted._rows(cases, with_identity=False)
    for model in fitted.known:
        model.fit(with_identity, y)
    for model in fitted.general:
        model.fit(without, y)
    return fitted


def conformal_quantiles(
    cases: Sequence[Case], targets: Sequence[float] | np.ndarray, folds: int = 5
) -> dict[str, float]:
    """|log residual| quantiles out of sample: folds by GPU (known), by workload (general)."""
    y = np.asarray(targets, dtype=float)
    out: dict[str, float] = {}
    for key, groups in (
        ("known", [c.gpu.id for c in cases]),
        ("general", [c.workload or "" for c in cases]),
    ):
        splits = min(folds, len(set(groups)))
        residuals = np.zeros(len(y))
        for train, test in GroupKFold(n_splits=splits).split(np.zeros(len(y)), y, groups):
            model = fit([cases[i] for i in train], y[train])
            held = [cases[i] for i in test]
            if key == "general":
                rows = model._rows(held, with_identity=False)
                pred = np.mean([m.predict(rows) for m in model.general], axis=0)
            else:
                pred = model.predict(held)
            residuals[test] = y[test] - pred
        out[key] = float(np.quantile(np.abs(residuals), COVERAGE))
    return out
