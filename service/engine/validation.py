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
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from knowledge import Knowledge
from service.engine import scaling
from service.engine.efficiency import Case, Fitted, fit, observation_case
from service.engine.model import PerformanceModel
from service.engine.observations import Observation
from service.engine.roofline import roofline

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
            "nvlink": o.nvlink,
            "precision": o.precision,
            "batch_per_gpu": o.batch,
            "measured": o.throughput,
            "predicted": round(self.predicted, 4),
            "interval": [round(self.low, 4), round(self.high, 4)],
            "ape": round(self.ape, 4),
        }


def _held_out(
    model: PerformanceModel, group: Callable[[Observation, Case], str]
) -> tuple[list[Prediction], dict[str, Fitted]]:
    """Each single-GPU row predicted by a model fitted without its group; and those models."""
    cases, single = model.cases, model.single
    targets = np.asarray(model.targets)
    labels = [group(o, c) for o, c in zip(single, cases, strict=True)]
    out: list[Prediction | None] = [None] * len(single)
    models: dict[str, Fitted] = {}
    for label in sorted(set(labels)):
        train = [i for i, g in enumerate(labels) if g != label]
        test = [i for i, g in enumerate(labels) if g == label]
        fitted = fit([cases[i] for i in train], targets[train])
        fitted.quantiles = model.fitted.quantiles
        models[label] = fitted
        predicted = fitted.predict([cases[i] for i in test])
        for j, i in enumerate(test):
            out[i] = _prediction(
                single[i], cases[i], float(predicted[j]), fitted.quantile(cases[i])
            )
    return [p for p in out if p is not None], models


def multi_gpu(
    model: PerformanceModel, knowledge: Knowledge, held_out: dict[str, Fitted]
) -> list[Prediction]:
    """Every multi-GPU row predicted end to end with its GPU held out: the single-GPU step
    from the model fitted without that GPU, then data parallel over the link that joins
    the GPUs (:func:`service.engine.scaling.data_parallel`). No measured row of the GPU,
    1-GPU or n-GPU, enters its prediction (the scaling model's four constants were fitted
    once on all multi-GPU rows)."""
    out = []
    for obs in model.observations:
        if obs.count == 1:
            continue
        fitted = held_out.get(obs.gpu_id, model.fitted)  # no 1-GPU row: never in training
        workload = knowledge.workloads[obs.workload]
        mix = model.store.mix(workload, obs.precision, obs.batch)
        case = observation_case(obs, mix, knowledge)
        log_eff = float(fitted.predict([case])[0])
        single = case.roof.total_s * math.exp(log_eff)
        backward = roofline(mix, case.mode, phases=["backward"]).total_s * math.exp(log_eff)
        gradients = float(model.store.entry(workload, obs.precision, 1)["gradient_bytes"])
        link = scaling.link_for(knowledge, case.gpu, obs.count, obs.nvlink)
        step = scaling.data_parallel(single, backward, gradients, obs.count, link).step_s
        throughput = obs.batch * obs.count * obs.items_per_sample / step
        q = fitted.quantile(case)
        out.append(Prediction(obs, throughput, throughput * math.exp(-q), throughput * math.exp(q)))
    return out


def multi_gpu_summary(predictions: Sequence[Prediction]) -> dict[str, Any]:
    """APE over all multi-GPU rows, by GPU count and by NVLink where the data says."""
    by: dict[str, list[Prediction]] = defaultdict(list)
    for p in predictions:
        by[f"count={p.observation.count}"].append(p)
        if p.observation.nvlink is not None:
            by[f"nvlink={str(p.observation.nvlink).lower()}"].append(p)
    apes = [p.ape for p in predictions]
    return {
        "rows": len(predictions),
        "median_ape": round(float(np.median(apes)), 4) if apes else None,
        "mean_ape": round(float(np.mean(apes)), 4) if apes else None,
        "groups": _table({k: [p.ape for p in v] for k, v in by.items()}),
        "by_gpu": summary(predictions)["by_gpu"],
    }


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
    """Spearman correlation of GPUs per (suite, workload, precision), where 4+ GPUs ran it.

    A GPU is ranked by the throughput it measured on the workload (each at the batch the
    benchmark ran it with, the median over batch sizes and hosts where there are several),
    which is the order a buyer reads off the table."""
    groups: dict[tuple[str, str, str], dict[str, tuple[list[float], list[float]]]] = defaultdict(
        dict
    )
    for p in predictions:
        o = p.observation
        measured, predicted = groups[(o.suite, o.workload, o.precision)].setdefault(
            o.gpu_id, ([], [])
        )
        measured.append(o.throughput)
        predicted.append(p.predicted)
    rows = []
    for (suite, workload, precision), gpus in sorted(groups.items()):
        if len(gpus) < 4:
            continue
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


def validate(model: PerformanceModel, knowledge: Knowledge) -> dict[str, Any]:
    """The whole report: leave-one-GPU-out (1 GPU and n GPUs), leave-one-architecture-out,
    the scaling model alone, intervals, the worst predictions."""
    started = time.perf_counter()
    logo, held_out = _held_out(model, lambda o, c: o.gpu_id)
    loao, _ = _held_out(model, lambda o, c: c.gpu.architecture.lower())
    multi = multi_gpu(model, knowledge, held_out)
    scaling_alone = scaling.validate_scaling(knowledge, store=model.store)
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
        "multi_gpu": {
            **multi_gpu_summary(multi),
            "worst": [p.to_dict() for p in sorted(multi, key=lambda p: -p.ape)[:10]],
            "scaling_from_measured_single_gpu": scaling_alone["summary"],
            "scaling_params": asdict(scaling_alone["params"]),
        },
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
