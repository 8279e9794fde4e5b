"""The named stacks against the runs their maintainers published, each publication left out.

knowledge/data/stack_runs/*.yaml holds the tables torchtitan, torchtune, Megatron-LM and
NeMo, TensorRT-LLM, vLLM, SGLang, PEFT, DeepSpeed and others publish, each row with the
model, the GPUs, the layout, the batch, the sequence and the precision it ran at. Each row
becomes a :class:`Case` of one kind:

- ``training_throughput``: tokens a second per GPU (printed, or from the printed MFU or
  model TFLOP/s at 6 N + 12 l h s FLOPs a token), against the layout model's step on the
  printed layout under the stack named;
- ``peak_memory``: the printed peak, against the layout's memory per GPU as the figure
  counts it (the allocator's peak: no CUDA context or fragmentation; reserved: with the
  fragmentation; nvidia-smi or unstated: everything);
- ``serving_throughput``: output tokens a second of all the GPUs, against the serving
  model's at the printed concurrency (else the most the KV cache holds).

Each stack's few constants are chosen on a grid to minimise the median absolute log error
over its rows: for training, a scale on its GEMM efficiency, attention's rate over the
GEMMs' and the training loop's host time per step; for serving, a scale on its decode
bandwidth share and one on its prefill's and decode GEMMs' efficiency. A training scale is
fitted on the stack's Hopper rows where it has enough; then a factor per GPU architecture on
the GEMM efficiency (Hopper 1) on the rows of the stacks so fitted; then the scales of the
stacks with too few Hopper rows, on all their rows with those factors. (Fitting scales and
factors in turn on every row wandered: a stack's scale fell and Blackwell's factor rose to
make up, and a publication left out moved both.) :func:`report` predicts every row from a fit that
left its publication out: scikit-learn's ``LeaveOneGroupOut`` over the publications,
through ``cross_val_predict`` with the fit wrapped as an estimator (:class:`StackFit`). A
stack whose only publication is left out is predicted with the fit of every stack with
its kind of kernels, else its unfitted priors: the score of what it does, not of its
rows.
"""

from __future__ import annotations

import functools
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.model_selection import LeaveOneGroupOut, cross_val_predict

from knowledge import Knowledge
from service.engine.estimating import software as stacks
from service.engine.estimating.step_model import StepModel
from service.engine.validating.stack_cases import (
    ATTENTION,
    GRID,
    HOSTS,
    KINDS,
    SCALES,
    SERVING_COMPUTE,
    TARGETS,
    UNFITTED,
    Case,
    Source,
    cases,
    family,
)


def _log_errors(case: Case) -> np.ndarray:
    return np.abs(np.log(case.predicted / case.measured))


# The factor on the GEMMs' share of the dense peak a GPU architecture's runs reach over
# Hopper's (whose runs most constants are fitted on): fitted across every stack's training
# rows, the candidates below
REFERENCE_ARCHITECTURE = "hopper"

FACTORS = tuple(round(0.7 + 0.05 * i, 2) for i in range(17))  # 0.70 .. 1.50


def _shifted(case: Case, factor: float) -> np.ndarray:
    """``case``'s predictions over the grid with its GEMM efficiency times ``factor`` (the
    scale nearest to each scale times it; the grid's ends hold beyond)."""
    if factor == 1.0 or case.kind != "training_throughput":
        return case.predicted
    grid = case.predicted.reshape(len(SCALES), len(ATTENTION), len(HOSTS))
    wanted = np.array(SCALES) * factor
    nearest = np.abs(np.array(SCALES)[None, :] - wanted[:, None]).argmin(axis=1)
    return grid[nearest].reshape(-1)


def best_scale(data: Sequence[Case], factors: Mapping[str, float] | None = None) -> int:
    """The grid index whose scale gives ``data`` the least median absolute log error (the
    unfitted constants, scale 1, where there is nothing to fit on), each case's
    architecture's factor applied."""
    fitted = [c for c in data if c.fitted]
    if not fitted:
        return UNFITTED
    factors = factors or {}
    rows = [
        np.abs(np.log(_shifted(c, factors.get(_factor_key(c), 1.0)) / c.measured)) for c in fitted
    ]
    return int(np.argmin(np.median(np.vstack(rows), axis=0)))


def _architecture(case: Case) -> str:
    return str(case.detail.get("architecture"))


def _factor_key(case: Case) -> str:
    """The factor a training case's GEMM efficiency takes: its architecture's, for its kind
    of kernels (fused stacks apart from PyTorch's own)."""
    return stacks.factor_key(str(case.detail.get("kernels")), _architecture(case))


def _factored(case: Case) -> bool:
    """Whether an architecture's factor applies to ``case`` (training throughput)."""
    return case.kind == "training_throughput"


MIN_ROWS = 3  # rows a group needs for a fit of its own

MIN_PUBLICATIONS = 2  # publications an architecture's factor needs


def _keys(case: Case) -> tuple[tuple[str, ...], ...]:
    """The fits a case is predicted from, the most specific first: its stack, then every
    stack of its kind of kernels (a stack whose only publication is left out borrows what
    its kind of kernels does elsewhere). A level per GPU architecture was tried and left
    out: it fitted the rows it saw and missed the publications left out (training 14.5%
    -> 19.1%)."""
    part = family(case.kind)
    return (
        ("stack", case.stack, part),
        ("kernels", str(case.detail.get("kernels")), part),
    )


class StackFit(BaseEstimator, RegressorMixin):
    """scikit-learn's view of the stacks' fit: ``X`` holds indices into ``cases``, ``y``
    the log of the printed figures; ``fit`` picks each stack and kind's scale on the rows
    it is given, ``predict`` the log of each row's prediction at its stack's scale."""

    def __init__(self, cases: Sequence[Case] = ()) -> None:
        self.cases = cases

    def fit(self, X: np.ndarray, y: np.ndarray) -> StackFit:
        given = [self.cases[int(i)] for i in X[:, 0]]
        groups: dict[tuple[str, ...], list[Case]] = defaultdict(list)
        for case in given:
            for key in _keys(case):
                groups[key].append(case)
        by_architecture: dict[str, list[Case]] = defaultdict(list)
        for case in given:
            if _factored(case) and _architecture(case) != REFERENCE_ARCHITECTURE:
                by_architecture[_factor_key(case)].append(case)
        # each stack's scale on its rows on the reference architecture, where it has enough:
        # what the other architectures' factors are measured against
        self.factors_: dict[str, float] = {}
        self.scales_ = {}
        for key, rows in groups.items():
            own = [
                c for c in rows if not _factored(c) or _architecture(c) == REFERENCE_ARCHITECTURE
            ]
            if len(own) >= MIN_ROWS:
                self.scales_[key] = best_scale(own)
        anchored = set(self.scales_)
        # each other architecture's factor, for fused kernels and for PyTorch's own apart, on
        # the rows whose stack, or failing that its kind of kernels, is so anchored, from
        # two publications at least (one publication's runs are its own conditions)
        for arch, found in by_architecture.items():
            rows = [c for c in found if any(k in anchored for k in _keys(c))]
            sources = len({c.publication for c in rows})
            if len(rows) >= MIN_ROWS and sources >= MIN_PUBLICATIONS:
                self.factors_[arch] = min(FACTORS, key=functools.partial(self._loss, rows))
        # a stack without enough rows on the reference architecture: its scale on all its
        # rows, each with its architecture's factor
        for key, rows in groups.items():
            if key not in anchored and len(rows) >= MIN_ROWS:
                self.scales_[key] = best_scale(rows, self.factors_)
        return self

    def _at(self, case: Case) -> int:
        return next((self.scales_[k] for k in _keys(case) if k in self.scales_), UNFITTED)

    def _loss(self, rows: Sequence[Case], factor: float) -> float:
        return float(np.median([
            abs(math.log(_shifted(c, factor)[self._at(c)] / c.measured)) for c in rows
        ]))  # fmt: skip

    def predict(self, X: np.ndarray) -> np.ndarray:
        out = []
        for i in X[:, 0]:
            case = self.cases[int(i)]
            factor = self.factors_.get(_factor_key(case), 1.0)
            out.append(math.log(_shifted(case, factor)[self._at(case)]))
        return np.array(out)


def held_out(data: Sequence[Case]) -> np.ndarray:
    """Each case's prediction from a fit that left its publication out."""
    if not data:
        return np.array([])
    X = np.arange(len(data)).reshape(-1, 1)
    y = np.log([c.measured for c in data])
    groups = [c.publication for c in data]
    if len(set(groups)) < 2:
        return np.array([c.predicted[UNFITTED] for c in data])
    found = cross_val_predict(StackFit(data), X, y, groups=groups, cv=LeaveOneGroupOut())
    return np.exp(found)


def shipped_scales(data: Sequence[Case]) -> dict[tuple[str, ...], tuple[float, float, float]]:
    """Each stack and kind's (scale, attention's rate, host time) fitted on every row (what
    knowledge/data/stacks.yaml ships)."""
    fit = StackFit(data).fit(np.arange(len(data)).reshape(-1, 1), np.zeros(len(data)))
    return {key: GRID[i] for key, i in fit.scales_.items()}


def fitted_factors(data: Sequence[Case]) -> dict[str, float]:
    """The architectures' factors fitted on every row (architecture_efficiency.yaml)."""
    fit = StackFit(data).fit(np.arange(len(data)).reshape(-1, 1), np.zeros(len(data)))
    return dict(fit.factors_)


def fitted_constants(knowledge: Knowledge, data: Sequence[Case]) -> dict[str, dict[str, Any]]:
    """Each stack's constants fitted on every row, as stacks.yaml ships them: ``compute``
    from training rows, ``serving`` from serving rows; its own rows' fit where it has
    enough, else the fit of every stack with its kind of kernels, else none (its priors)."""
    fitted = shipped_scales(data)
    rows: dict[tuple[str, ...], list[Case]] = defaultdict(list)
    for c in data:
        if c.fitted:
            for level in _keys(c):
                rows[level].append(c)
    out: dict[str, dict[str, Any]] = {}
    for record in knowledge.stacks.values():
        prior = stacks.resolve(knowledge, record.id, fitted=False)
        for part in ("training_throughput", "serving"):
            own: tuple[str, ...] = ("stack", record.id, part)
            shared: tuple[str, ...] = ("kernels", prior.kernels, part)
            key: tuple[str, ...] | None = own if own in fitted else None
            if key is None and shared in fitted and not record.priors_fitted_on:
                key = shared
            if key is None or prior.step_model:
                continue
            g, a, h = fitted[key]
            found = rows[key]
            tables_of = len({case.table for case in found})
            whose = "its own" if key == own else f"every {prior.kernels} stack's"
            fit = (f"{whose} {len(found)} published rows ({tables_of} "
                   f"tables in knowledge/data/stack_runs), scale {g:g} on the priors; "
                   "rightsize validate, 2026-12-07")  # fmt: skip
            if part == "serving":
                if "inference" not in record.tasks:
                    continue
                base = prior.serving
                share = min(1.0, base.decode_bandwidth_share * g)
                out.setdefault(record.id, {})["serving"] = {
                    "decode_bandwidth_share": round(share, 3),
                    "prefill_efficiency": round(
                        min(0.95, base.prefill_efficiency * SERVING_COMPUTE[a]), 3
                    ),
                    "fit": fit,
                }
            elif set(record.tasks) - {"inference"}:
                compute = prior.compute
                out.setdefault(record.id, {})["compute"] = {
                    "efficiency_16bit": round(min(0.95, compute.efficiency_16bit * g), 3),
                    "efficiency_8bit": round(min(0.95, compute.efficiency_8bit * g), 3),
                    "attention_share": a,
                    "host_s": h,
                    "fit": fit,
                }
    return out


def _cause(case: Case, predicted: float) -> str:
    d = case.detail
    over = predicted > case.measured
    if case.kind == "peak_memory":
        return (f"{'over' if over else 'under'}-counted memory ({d.get('memory_kind')}; "
                f"{d.get('method')}, options {d.get('options') or 'none'})")  # fmt: skip
    if case.kind == "serving_throughput":
        return f"{'too fast' if over else 'too slow'}: {d.get('weights')} weights, TP{d.get('tp')}"
    return (
        f"{'too fast' if over else 'too slow'}: {d.get('precision')}, "
        f"{d.get('gpus')} x {d.get('gpu')}, layout {_layout_text(d.get('layout') or {})}"
    )


def _layout_text(layout: dict[str, Any]) -> str:
    keys = (("data_parallel", "dp"), ("tensor_parallel", "tp"), ("pipeline_parallel", "pp"),
            ("context_parallel", "cp"), ("zero_stage", "zero"))  # fmt: skip
    return " ".join(f"{short}{layout[k]}" for k, short in keys if layout.get(k, 1) not in (1, 0))


def summarise(data: Sequence[Case], predicted: np.ndarray, worst: int = 10) -> dict[str, Any]:
    """Per stack and kind: rows, median and worst error; the worst rows overall."""
    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    rows = []
    for case, value in zip(data, predicted, strict=True):
        ape = abs(value / case.measured - 1)
        by[case.stack, case.kind].append(ape)
        by["all", case.kind].append(ape)
        rows.append((ape, case, value))
    table = [
        {
            "stack": stack,
            "kind": kind,
            "rows": len(v),
            "median_ape": float(np.median(v)),
            "worst_ape": float(max(v)),
        }
        for (stack, kind), v in sorted(by.items())
    ]
    rows.sort(key=lambda r: -r[0])
    fits = [c for c in data if c.kind == "peak_memory"]
    return {
        "table": table,
        "kinds": {
            kind: {
                "rows": len(by["all", kind]),
                "median_ape": float(np.median(by["all", kind])) if by["all", kind] else None,
                "target": TARGETS[kind],
            }
            for kind in KINDS
        },
        "memory_fits": {
            "rows": len(fits),
            "fit": sum(1 for c in fits if c.detail.get("fits")),
        },
        "worst": [
            {
                "row": c.label,
                "stack": c.stack,
                "kind": c.kind,
                "measured": c.measured,
                "predicted": float(v),
                "ape": float(a),
                "cause": _cause(c, float(v)),
            }
            for a, c, v in rows[:worst]
        ],
    }


def report(knowledge: Knowledge, step_model: StepModel, source: Source) -> dict[str, Any]:
    """Leave one publication out over every stack's published runs (see the module)."""
    data, skipped = cases(knowledge, step_model, source)
    predicted = held_out(data)
    out = summarise(data, predicted)
    out["publications"] = len({c.publication for c in data})
    out["fitted_on_all"] = fitted_constants(knowledge, data)
    out["architecture_factors"] = fitted_factors(data)
    out["skipped"] = skipped
    return out
