"""How right the estimates are where nobody measured: held-out benchmarks, four ways.

Every prediction here is :func:`service.engine.estimating.estimate.estimate_many`, the function the
API serves, called in batches with a model fitted without the rows it predicts. The splits
are scikit-learn's (:mod:`service.engine.validating.selection`), the performance model's refit
wrapped
as an estimator (:class:`StepModelFit`):

- leave one GPU out: the GPU's siblings stay in training (the easy case);
  ``LeaveOneGroupOut`` over the GPUs;
- forward in time: fit only on GPUs released before year Y, predict every GPU released in
  Y or later (what a buyer of the newest GPU asks; Y = 2020 and 2022); ``PredefinedSplit``
  with the newer GPUs' rows as its one test fold;
- leave one architecture out: a whole generation predicted from its specs;
  ``LeaveOneGroupOut`` over the architectures;
- multi-GPU rows end to end, their GPU held out;
- speed-up over the previous generation's flagship, predicted against measured.

Errors are absolute percentage errors of throughput; ranks are Spearman correlations of
GPUs per (suite, workload, precision). The memory check asks, for every stored single-GPU
configuration (each one ran), whether the estimate says it fits.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
from scipy.stats import spearmanr

from knowledge import Knowledge
from knowledge.submitted import submitted_count
from profiles.model_catalog import Catalog
from service.engine.estimating import scaling
from service.engine.estimating.estimate import Estimate, EstimateInput, estimate_many
from service.engine.estimating.model import PerformanceModel
from service.engine.estimating.observations import Observation, observation_step
from service.engine.validating.selection import (
    CaseEstimator,
    after_cut,
    error_summary,
    group_folds,
    indices,
    objects,
)

FORWARD_YEARS = (2020, 2022)
# each architecture's previous generation, by release (Ada and Hopper both follow Ampere)
PREVIOUS_GENERATION = {
    "volta": "pascal",
    "turing": "volta",
    "ampere": "turing",
    "ada": "ampere",
    "hopper": "ampere",
    "blackwell": "hopper",
}
TARGETS = {  # (value in the report, target, "max" or "min")
    "leave_one_gpu_out_median_ape": 0.06,
    "spearman_median": 0.97,
    "forward_2020_median_ape": 0.10,
    "forward_2020_mean_ape": 0.15,
    "forward_2022_median_ape": 0.10,
    "forward_2022_mean_ape": 0.15,
    "leave_one_architecture_out_median_ape": 0.10,
    "multi_gpu_median_ape": 0.10,
    "memory_fit_share": 0.99,
    # issue 11: LLM truth
    "mlperf_training_llm_held_out_gpu_median_ape": 0.15,
    "mlperf_training_other_held_out_gpu_median_ape": 0.15,
    "mlperf_inference_offline_held_out_gpu_median_ape": 0.15,
    "llm_operators_held_out_gpu_median_ape": 0.15,
    "golden_megatron_median_gap_points": 5.0,
    "golden_llama3_median_gap_points": 5.0,
    "golden_llm_foundry_median_gap_points": 5.0,
    # issue 29: the named stacks on their maintainers' published runs, each publication
    # left out of its stack's fit
    "stacks_training_throughput_median_ape": 0.10,
    "stacks_peak_memory_median_ape": 0.08,
    "stacks_peak_memory_fit_share": 1.0,
    "stacks_serving_throughput_median_ape": 0.15,
    "stacks_serving_latency_median_ape": 0.15,
}
MINIMUM = {"spearman_median", "memory_fit_share", "stacks_peak_memory_fit_share"}


@dataclass(frozen=True)
class Prediction:
    observation: Observation
    predicted: float  # throughput, the observation's unit
    low: float
    high: float
    bound: str

    @property
    def ape(self) -> float:
        return abs(self.predicted - self.observation.throughput) / self.observation.throughput

    @property
    def error(self) -> float:
        """Signed: predicted over measured, minus one (positive: predicted too fast)."""
        return self.predicted / self.observation.throughput - 1

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
            "error": round(self.error, 4),
            "bound": self.bound,
        }


def requests_for(
    model: PerformanceModel, knowledge: Knowledge, found: Iterable[Observation]
) -> list[EstimateInput]:
    """The estimate requests that reproduce ``found`` (as the API would be asked them)."""
    out = []
    for obs in found:
        out.append(
            EstimateInput(
                profile=observation_step(knowledge, model.profiles, obs),
                gpu=knowledge.gpus[obs.gpu_id],
                count=obs.count,
                nvlink=obs.nvlink,
                ceiling=model.ceiling(obs.workload),
                workload=obs.workload,
                suite=obs.suite,
            )
        )
    return out


def predict(
    model: PerformanceModel, knowledge: Knowledge, found: Sequence[Observation]
) -> list[Prediction]:
    """Each observation's throughput as ``model`` estimates it (one batch call)."""
    estimates = estimate_many(requests_for(model, knowledge, found), model, knowledge)
    return [_prediction(o, e) for o, e in zip(found, estimates, strict=True)]


def _prediction(obs: Observation, est: Estimate) -> Prediction:
    def throughput(step_s: float) -> float:
        return obs.batch * obs.count * obs.items_per_sample / step_s

    # a slower step is a lower throughput: the interval's ends swap
    return Prediction(
        obs,
        throughput(est.step_time_s),
        throughput(est.interval.high),
        throughput(est.interval.low),
        est.bound,
    )


class StepModelFit(CaseEstimator):
    """scikit-learn's view of the performance model: ``X`` holds indices into
    ``model.single``, ``y`` their measured throughputs; ``fit`` refits the step model on
    the rows given (:meth:`PerformanceModel.refit`), ``predict`` gives each row's
    throughput as :func:`predict` estimates it, ``predict_rows`` its :class:`Prediction`."""

    def __init__(self, model: PerformanceModel, knowledge: Knowledge) -> None:
        self.model = model
        self.knowledge = knowledge

    def fit(self, X: np.ndarray, y: np.ndarray | None = None) -> StepModelFit:
        chosen = {id(self.model.single[i]) for i in indices(X)}
        self.model_ = self.model.refit(lambda o: id(o) in chosen)
        return self

    def predict_rows(self, X: np.ndarray) -> np.ndarray:
        found = [self.model.single[i] for i in indices(X)]
        return objects(predict(self.model_, self.knowledge, found))

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.array([p.predicted for p in self.predict_rows(X)], dtype=float)


def held_out(
    model: PerformanceModel,
    knowledge: Knowledge,
    group: Callable[[Observation], str],
) -> tuple[list[Prediction], dict[str, PerformanceModel]]:
    """Each single-GPU row predicted by a model fitted without its group; those models, by
    group. ``LeaveOneGroupOut``'s splits
    (:func:`service.engine.validating.selection.group_folds`), not
    ``cross_val_predict``: the report needs each prediction's interval and bound, and
    :func:`multi_gpu` and :func:`speedups` the folds' models, which it does not give."""
    folds = group_folds(
        StepModelFit(model, knowledge),
        [o.throughput for o in model.single],
        [group(o) for o in model.single],
    )
    found = np.empty(len(model.single), dtype=object)
    for fold in folds:
        found[fold.test] = fold.rows()
    return list(found), {str(fold.group): fold.fitted.model_ for fold in folds}


def forward(model: PerformanceModel, knowledge: Knowledge, year: int) -> list[Prediction]:
    """Fit on GPUs released before ``year``; predict every GPU released in it or later
    (``PredefinedSplit``: :func:`service.engine.validating.selection.after_cut`), in the rows'
    order."""
    newer = [knowledge.gpus[o.gpu_id].release_year >= year for o in model.single]
    fold = after_cut(StepModelFit(model, knowledge), [o.throughput for o in model.single], newer)
    return list(fold.rows()) if fold is not None else []


def multi_gpu(
    model: PerformanceModel, knowledge: Knowledge, folds: dict[str, PerformanceModel]
) -> list[Prediction]:
    """Every multi-GPU row predicted end to end with its GPU held out: the step from the
    model fitted without that GPU, then data parallel over the link that joins them. No
    measured row of the GPU, 1-GPU or n-GPU, enters its prediction (the scaling model's
    four constants were fitted once on all multi-GPU rows)."""
    rows = [o for o in model.observations if o.count > 1]
    by_gpu: dict[str, list[Observation]] = defaultdict(list)
    for o in rows:
        by_gpu[o.gpu_id].append(o)
    out = []
    for gpu, found in sorted(by_gpu.items()):
        out.extend(predict(folds.get(gpu, model), knowledge, found))
    return out


def previous_flagships(knowledge: Knowledge, found: Sequence[Observation]) -> dict[str, str]:
    """Per architecture, the flagship of the generation before it: of the GPUs measured,
    the one with the highest dense 16-bit tensor (else fp32) peak."""
    present: dict[str, list[str]] = defaultdict(list)
    for gid in sorted({o.gpu_id for o in found}):
        present[knowledge.gpus[gid].architecture.lower()].append(gid)

    def peak(gid: str) -> tuple[float, float, float]:
        g = knowledge.gpus[gid]
        return (max(g.fp16_tflops or 0.0, g.fp32_tflops), g.memory_bandwidth_gb_per_s, g.memory_gb)

    flagship = {arch: max(ids, key=peak) for arch, ids in present.items()}
    return {
        arch: flagship[before]
        for arch, before in PREVIOUS_GENERATION.items()
        if arch in flagship and before in flagship
    }


def speedups(
    model: PerformanceModel,
    knowledge: Knowledge,
    folds: dict[str, PerformanceModel],
) -> dict[str, Any]:
    """Measured and predicted speed-up of each GPU over the previous generation's flagship,
    per (suite, workload, precision) where both ran: both predictions from the model
    fitted without the GPU (the flagship's rows stay in training, as a buyer has them)."""
    flagships = previous_flagships(knowledge, model.single)
    measured: dict[tuple[str, str, str, str], list[Observation]] = defaultdict(list)
    for o in model.single:
        measured[(o.suite, o.workload, o.precision, o.gpu_id)].append(o)
    rows: list[dict[str, Any]] = []
    for (suite, workload, precision, gid), found in sorted(measured.items()):
        ref = flagships.get(knowledge.gpus[gid].architecture.lower())
        base = measured.get((suite, workload, precision, ref or ""))
        if ref is None or not base:
            continue
        fold = folds.get(gid, model)
        mine, theirs = _median_throughput(fold, knowledge, found, base)
        real = _median([o.samples_per_s for o in found]) / _median([o.samples_per_s for o in base])
        predicted = mine / theirs
        rows.append(
            {
                "suite": suite,
                "workload": workload,
                "precision": precision,
                "gpu": gid,
                "previous_flagship": ref,
                "measured_speedup": round(real, 4),
                "predicted_speedup": round(predicted, 4),
                "ape": round(abs(predicted / real - 1), 4),
            }
        )
    errors = error_summary(
        [float(r["ape"]) for r in rows],
        {"by_workload": [f"{r['workload']} {r['precision']}" for r in rows]},
        digits=DIGITS,
        worst_first=True,
    )
    return {
        "rows": errors["rows"],
        "median_ape": errors["median_ape"],
        "mean_ape": errors["mean_ape"],
        "flagships": flagships,
        "by_workload": errors["by_workload"],
        "table": rows,
    }


def _median_throughput(
    fold: PerformanceModel,
    knowledge: Knowledge,
    found: Sequence[Observation],
    base: Sequence[Observation],
) -> tuple[float, float]:
    mine = predict(fold, knowledge, found)
    theirs = predict(fold, knowledge, base)
    per_sample = [p.predicted / p.observation.items_per_sample for p in mine]
    base_per_sample = [p.predicted / p.observation.items_per_sample for p in theirs]
    return _median(per_sample), _median(base_per_sample)


def _median(values: Sequence[float]) -> float:
    return float(np.median(values))


DIGITS = 4  # the report's medians and means of errors are rounded to this many digits


def _round(value: Any) -> float:
    return round(float(value), DIGITS)


def summary(predictions: Sequence[Prediction], worst: int = 0) -> dict[str, Any]:
    """APE of ``predictions``: count, median and mean, per GPU and per workload and
    precision (the worst median first); with ``worst``, that many rows, the worst first
    (:func:`service.engine.validating.selection.error_summary`)."""
    found = [p.observation for p in predictions]
    return error_summary(
        [p.ape for p in predictions],
        {
            "by_gpu": [o.gpu_id for o in found],
            "by_workload": [f"{o.workload} {o.precision}" for o in found],
        },
        worst=worst,
        describe=lambda i: predictions[i].to_dict(),
        digits=DIGITS,
        worst_first=True,
    )


def multi_gpu_summary(predictions: Sequence[Prediction]) -> dict[str, Any]:
    """APE over all multi-GPU rows, by GPU count and by NVLink where the data says."""
    groups: list[tuple[str, ...]] = []
    for p in predictions:
        o = p.observation
        nvlink = () if o.nvlink is None else (f"nvlink={str(o.nvlink).lower()}",)
        groups.append((f"count={o.count}", *nvlink))
    by = error_summary([p.ape for p in predictions], {"groups": groups}, digits=DIGITS,
                       worst_first=True)  # fmt: skip
    return {**summary(predictions, worst=10), "groups": by["groups"]}


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
        "median": _round(np.median(values)) if values else None,
        "mean": _round(np.mean(values)) if values else None,
    }


def coverage(predictions: Sequence[Prediction]) -> float:
    inside = [p.low <= p.observation.throughput <= p.high for p in predictions]
    return round(sum(inside) / max(len(inside), 1), 4)


def memory_fit(model: PerformanceModel, knowledge: Knowledge) -> dict[str, Any]:
    """For every distinct stored single-GPU configuration (each one ran on its GPU): does
    the estimate say it fits? Per workload, with the tightest misses."""
    seen: dict[tuple[str, str, float, str], Observation] = {}
    for o in model.single:
        seen.setdefault((o.workload, o.precision, o.batch, o.gpu_id), o)
    found = list(seen.values())
    estimates = estimate_many(requests_for(model, knowledge, found), model, knowledge)
    per: dict[str, list[bool]] = defaultdict(list)
    misses: list[dict[str, Any]] = []
    for o, e in zip(found, estimates, strict=True):
        assert e.memory is not None
        per[o.workload].append(e.memory.fits)
        if not e.memory.fits:
            misses.append(
                {
                    "workload": o.workload,
                    "precision": o.precision,
                    "batch_per_gpu": o.batch,
                    "gpu": o.gpu_id,
                    "estimated_bytes": round(e.memory.required_bytes),
                    "usable_bytes": round(e.memory.usable_bytes),
                    "ratio": round(e.memory.required_bytes / e.memory.usable_bytes, 4),
                }
            )
    fits = sum(sum(v) for v in per.values())
    return {
        "configurations": len(found),
        "fit": fits,
        "share": round(fits / max(len(found), 1), 4),
        "by_workload": [
            {"workload": w, "configurations": len(v), "share": round(sum(v) / len(v), 4)}
            for w, v in sorted(per.items())
        ],
        "misses": sorted(misses, key=lambda m: -m["ratio"])[:20],
    }


# long: the report's sections in the order it prints them, one call each
def validate(
    model: PerformanceModel, knowledge: Knowledge, catalog: Catalog | None = None
) -> dict[str, Any]:
    """The whole report (see the module docstring); with ``catalog``, the LLM section too
    (:func:`service.engine.validating.llm_validation.report`: it profiles the models it checks)."""
    started = time.perf_counter()
    logo, folds = held_out(model, knowledge, lambda o: o.gpu_id)
    loao, _ = held_out(model, knowledge, lambda o: knowledge.gpus[o.gpu_id].architecture)
    forwards = {year: forward(model, knowledge, year) for year in FORWARD_YEARS}
    multi = multi_gpu(model, knowledge, folds)
    scaling_alone = scaling.validate_scaling(knowledge, model.profiles)
    held_in = predict(model, knowledge, model.single)
    single = summary(logo, worst=10)
    report: dict[str, Any] = {
        "knowledge_version": model.knowledge_version,
        "submitted_rows": submitted_count(knowledge),  # user rows fitted on (0: curated)
        "made_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model": model.summary(),
        "single_gpu": {**single, "spearman": rank_agreement(logo)},
        "forward_in_time": {
            str(year): {
                **summary(found, worst=10),
                "fitted_on": f"GPUs released before {year}",
                "predicted": f"GPUs released in {year} or later",
            }
            for year, found in forwards.items()
        },
        "leave_one_architecture_out": summary(loao),
        "multi_gpu": {
            **multi_gpu_summary(multi),
            "scaling_from_measured_single_gpu": scaling_alone["summary"],
            "scaling_params": asdict(scaling_alone["params"]),
        },
        "speedup_over_previous_flagship": speedups(model, knowledge, folds),
        "memory_fit": memory_fit(model, knowledge),
        "interval": {
            "nominal": 0.8,
            "coverage_held_in": coverage(held_in),
            "coverage_held_out": coverage(logo),
        },
        "held_in": {"median_ape": summary(held_in)["median_ape"]},
        "input_ceilings": model.ceilings,
        "skipped": [{"row": s.row, "reason": s.reason} for s in model.skipped],
    }
    if catalog is not None:
        from service.engine.validating import llm_validation

        report["llm"] = llm_validation.report(model.step_model, knowledge, catalog)
        from service.engine.validating import stack_validation

        report["stacks"] = stack_validation.report(
            knowledge, model.step_model, llm_validation.catalog_source(catalog)
        )
    values = figures(report)
    report["targets"] = {
        name: {
            "target": target,
            "value": values.get(name),
            "met": _met(name, target, values.get(name)),
        }
        for name, target in TARGETS.items()
        if name in values
    }
    report["seconds"] = round(time.perf_counter() - started, 2)
    return report


def figures(report: dict[str, Any]) -> dict[str, float | None]:
    """The headline figures the targets are set on."""
    single = report["single_gpu"]
    out: dict[str, float | None] = {
        "leave_one_gpu_out_median_ape": single["median_ape"],
        "spearman_median": single["spearman"]["median"],
        "leave_one_architecture_out_median_ape": report["leave_one_architecture_out"]["median_ape"],
        "multi_gpu_median_ape": report["multi_gpu"]["median_ape"],
        "memory_fit_share": report["memory_fit"]["share"],
    }
    for year, found in report["forward_in_time"].items():
        out[f"forward_{year}_median_ape"] = found["median_ape"]
        out[f"forward_{year}_mean_ape"] = found["mean_ape"]
    llm = report.get("llm")
    if llm:
        golden = llm["golden"]
        out |= {
            "mlperf_training_llm_held_out_gpu_median_ape": llm["mlperf_training"]["median_ape"],
            "mlperf_training_other_held_out_gpu_median_ape": llm["mlperf_training_other"][
                "median_ape"
            ],
            "mlperf_inference_offline_held_out_gpu_median_ape": llm["mlperf_inference_offline"][
                "median_ape"
            ],
            "llm_operators_held_out_gpu_median_ape": llm["operators"]["held_out"]["median_ape"],
            "golden_megatron_median_gap_points": golden["megatron-2021-table-1"][
                "median_gap_points"
            ],
            "golden_llama3_median_gap_points": golden["llama3-2024-table-4"]["median_gap_points"],
            "golden_llm_foundry_median_gap_points": golden["llm-foundry-mpt-h100"][
                "median_gap_points"
            ],
        }
    stacks = report.get("stacks")
    if stacks:
        for kind, found in stacks["kinds"].items():
            out[f"stacks_{kind}_median_ape"] = found["median_ape"]
        fits = stacks["memory_fits"]
        out["stacks_peak_memory_fit_share"] = fits["fit"] / fits["rows"] if fits["rows"] else None
    return out


def _met(name: str, target: float, value: float | None) -> bool | None:
    if value is None:
        return None
    return bool(value >= target) if name in MINIMUM else bool(value <= target)
