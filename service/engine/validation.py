"""How right the estimates are on GPUs they have not seen: cross-validation on the benchmarks.

Leave one GPU out: every single-GPU observation of a GPU is predicted by a model fitted
without any row of that GPU (the other GPUs still measured the workload). Leave one
architecture out: the same with a whole generation held out (predicting it from its specs
alone). Errors are absolute percentage errors of throughput; the rank agreement is the
Spearman correlation of GPUs per (suite, workload, precision).
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from service.engine.efficiency import Case, fit
from service.engine.model import PerformanceModel
from service.engine.observations import Observation

TARGETS = {
    "single_gpu_median_ape": 0.08,
    "single_gpu_mean_ape": 0.12,
    "spearman_median": 0.95,
    "multi_gpu_median_ape": 0.12,
}


@dataclass(frozen=True)
class Prediction:
    observation: Observation
    predicted: float  # throughput, the observation's unit
    low: float
    high: float

    @property
    def ape(self) -> float:
        return abs(self.predicted - self.observation.throughput) / self.observation.throughput

    def to_dict(self) -> dict[str, Any]:
        o = self.observation
        return {
            "suite": o.suite,
            "workload": o.workload,
            "gpu": o.gpu_id,
            "count": o.count,
            "precision": o.precision,
            "batch_per_gpu": o.batch,
            "measured": o.throughput,
            "predicted": round(self.predicted, 4),
            "interval": [round(self.low, 4), round(self.high, 4)],
            "ape": round(self.ape, 4),
        }


def _held_out(
    model: PerformanceModel, group: Callable[[Observation, Case], str]
) -> list[Prediction]:
    cases, single = model.cases, model.single
    targets = np.asarray(model.targets)
    labels = [group(o, c) for o, c in zip(single, cases, strict=True)]
    out: list[Prediction | None] = [None] * len(single)
    for label in sorted(set(labels)):
        train = [i for i, g in enumerate(labels) if g != label]
        test = [i for i, g in enumerate(labels) if g == label]
        fitted = fit([cases[i] for i in train], targets[train])
        fitted.quantiles = model.fitted.quantiles
        predicted = fitted.predict([cases[i] for i in test])
        for j, i in enumerate(test):
            out[i] = _prediction(
                single[i], cases[i], float(predicted[j]), fitted.quantile(cases[i])
            )
    return [p for p in out if p is not None]


def _prediction(obs: Observation, case: Case, log_eff: float, q: float) -> Prediction:
    step = case.roof.total_s * math.exp(log_eff)
    throughput = obs.batch * obs.count * obs.items_per_sample / step
    return Prediction(obs, throughput, throughput * math.exp(-q), throughput * math.exp(q))


def in_sample(model: PerformanceModel) -> list[Prediction]:
    predicted = model.fitted.predict(model.cases)
    return [
        _prediction(o, c, float(p), model.fitted.quantile(c))
        for o, c, p in zip(model.single, model.cases, predicted, strict=True)
    ]


def summary(predictions: Sequence[Prediction]) -> dict[str, Any]:
    apes = np.array([p.ape for p in predictions])
    by_gpu: dict[str, list[float]] = defaultdict(list)
    by_workload: dict[str, list[float]] = defaultdict(list)
    for p in predictions:
        by_gpu[p.observation.gpu_id].append(p.ape)
        by_workload[f"{p.observation.workload} {p.observation.precision}"].append(p.ape)
    return {
        "rows": len(predictions),
        "median_ape": round(float(np.median(apes)), 4) if len(apes) else None,
        "mean_ape": round(float(np.mean(apes)), 4) if len(apes) else None,
        "by_gpu": _table(by_gpu),
        "by_workload": _table(by_workload),
    }


def _table(groups: dict[str, list[float]]) -> list[dict[str, Any]]:
    rows = [
        {
            "name": k,
            "rows": len(v),
            "median_ape": round(float(np.median(v)), 4),
            "mean_ape": round(float(np.mean(v)), 4),
        }
        for k, v in groups.items()
    ]
    return sorted(rows, key=lambda r: (-r["median_ape"], r["name"]))


def rank_agreement(predictions: Sequence[Prediction]) -> dict[str, Any]:
    """Spearman correlation of GPUs per (suite, workload, precision), where 4+ GPUs ran it."""
    groups: dict[tuple[str, str, str], dict[str, tuple[list[float], list[float]]]] = defaultdict(
        dict
    )
    for p in predictions:
        o = p.observation
        measured, predicted = groups[(o.suite, o.workload, o.precision)].setdefault(
            o.gpu_id, ([], [])
        )
        measured.append(o.throughput / o.batch)
        predicted.append(p.predicted / o.batch)
    rows = []
    for (suite, workload, precision), gpus in sorted(groups.items()):
        if len(gpus) < 4:
            continue
        # per GPU, the median over its batch sizes and hosts: the GPU is what is ranked
        measured = [float(np.median(m)) for m, _ in gpus.values()]
        predicted = [float(np.median(q)) for _, q in gpus.values()]
        rho = float(spearmanr(measured, predicted).statistic)
        rows.append(
            {
                "suite": suite,
                "workload": workload,
                "precision": precision,
                "gpus": len(gpus),
                "spearman": round(rho, 4),
            }
        )
    values = [float(r["spearman"]) for r in rows]  # type: ignore[arg-type]
    return {
        "groups": rows,
        "median": round(float(np.median(values)), 4) if values else None,
        "mean": round(float(np.mean(values)), 4) if values else None,
    }


def coverage(predictions: Sequence[Prediction]) -> float:
    inside = [p.low <= p.observation.throughput <= p.high for p in predictions]
    return round(sum(inside) / max(len(inside), 1), 4)


def validate(model: PerformanceModel) -> dict[str, Any]:
    """The whole report: leave-one-GPU-out, leave-one-architecture-out, intervals, worst."""
    started = time.perf_counter()
    logo = _held_out(model, lambda o, c: o.gpu_id)
    loao = _held_out(model, lambda o, c: c.gpu.architecture.lower())
    held_in = in_sample(model)
    worst = sorted(logo, key=lambda p: -p.ape)[:10]
    single = summary(logo)
    ranks = rank_agreement(logo)
    report: dict[str, Any] = {
        "knowledge_version": model.knowledge_version,
        "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": model.summary(),
        "single_gpu": {**single, "spearman": ranks},
        "leave_one_architecture_out": summary(loao),
        "interval": {
            "nominal": 0.8,
            "coverage_held_in": coverage(held_in),
            "coverage_held_out": coverage(logo),
        },
        "input_ceilings": model.ceilings,
        "worst": [p.to_dict() for p in worst],
        "skipped": [{"row": s.row, "reason": s.reason} for s in model.skipped],
    }
    report["targets"] = {
        name: {"target": target, "met": _met(name, target, report)}
        for name, target in TARGETS.items()
    }
    report["seconds"] = round(time.perf_counter() - started, 2)
    return report


def _met(name: str, target: float, report: dict[str, Any]) -> bool | None:
    single = report["single_gpu"]
    value = {
        "single_gpu_median_ape": single["median_ape"],
        "single_gpu_mean_ape": single["mean_ape"],
        "spearman_median": single["spearman"]["median"],
        "multi_gpu_median_ape": (report.get("multi_gpu") or {}).get("median_ape"),
    }[name]
    if value is None:
        return None
    return bool(value >= target) if name.startswith("spearman") else bool(value <= target)
