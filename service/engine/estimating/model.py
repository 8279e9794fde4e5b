"""The performance model: benchmark observations, their steps, the fitted step model.

Built from ``knowledge/`` (and the benchmarked workloads' step profiles, shipped with the
package: see :mod:`service.engine.estimating.observations`) by :func:`build`. Whoever builds
one owns
it (the estimate service of an app, a command, a test): nothing here is process-wide.
:meth:`PerformanceModel.refit` makes the same model from a subset of the observations,
which is how validation holds GPUs out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from knowledge import Knowledge
from profiles.model_catalog import Catalog
from profiles.profile import PROFILER_VERSION
from service.engine.estimating import step_model
from service.engine.estimating.ceiling import InputCeiling
from service.engine.estimating.observations import (
    BenchmarkProfiles,
    Observation,
    Skipped,
    observation_step,
    observations,
    read_json,
    write_json,
)
from service.engine.estimating.roofline import math_mode
from service.engine.estimating.step_model import FitRow, StepModel

MODEL_VERSION = "9"
COVERAGE = 0.8  # the interval's nominal coverage
GENERAL = "general"  # the interval key of models the benchmarks did not measure


@dataclass
class PerformanceModel:
    knowledge_version: str
    observations: list[Observation]
    skipped: list[Skipped]
    single: list[Observation]  # the single-GPU observations, in order
    rows: list[FitRow]  # their fitted steps, aligned with ``single``
    step_model: StepModel
    profiles: BenchmarkProfiles
    built_s: float
    quantiles: dict[str, float] = field(default_factory=dict)  # interval log-quantiles
    ceilings: dict[str, dict[str, Any]] = field(default_factory=dict)  # see input_ceilings

    def quantile(self, workload: str | None) -> float:
        """|log error| at the nominal coverage, out of sample, for this kind of estimate."""
        key = "known" if workload is not None else GENERAL
        return self.quantiles.get(key, 0.5)

    def ceiling(self, workload: str | None) -> InputCeiling | None:
        """The input ceiling the stored benchmarks show for ``workload``, if any."""
        found = self.ceilings.get(workload) if workload else None
        if not found or not found["ceiling"]:
            return None
        return InputCeiling(found["ceiling"], "benchmarks", "; ".join(found["evidence"][:2]))

    def refit(self, keep: Callable[[Observation], bool]) -> PerformanceModel:
        """The model fitted on the single-GPU observations ``keep`` accepts only (the
        measured input rates, which only word a note, stay the whole model's)."""
        chosen = [i for i, o in enumerate(self.single) if keep(o)]
        rows = [self.rows[i] for i in chosen]
        fitted = step_model.fit(rows)
        return replace(
            self,
            single=[self.single[i] for i in chosen],
            rows=rows,
            step_model=fitted,
        )

    def summary(self) -> dict[str, Any]:
        sm = self.step_model
        return {
            "knowledge_version": self.knowledge_version,
            "model_version": MODEL_VERSION,
            "observations": len(self.observations),
            "single_gpu_observations": len(self.single),
            "skipped_rows": len(self.skipped),
            "interval_log_quantiles": self.quantiles,
            "built_s": round(self.built_s, 2),
            "bytes_per_sm_cycle": sm.bytes_per_sm_cycle,
            "launch_us": round(sm.launch_s * 1e6, 3),
            "general_host_ms": {k: round(v * 1e3, 3) for k, v in sm.general_host_s.items()},
            "general_coefficients": vars_of(sm.general),
            "class_factors": {k: round(v, 4) for k, v in sm.class_factors.items()},
            "workloads": {
                w: {
                    "coefficients": vars_of(f.coefficients),
                    "host_ms": {f"{p} {s}": round(v * 1e3, 3) for (p, s), v in f.host_s.items()},
                    "mobile_ms": round(f.mobile_s * 1e3, 3),
                    "input_us_per_sample": {
                        k: round(v * 1e6, 2) for k, v in f.per_sample_s.items()
                    },
                    "rows": f.rows,
                }
                for w, f in sm.workloads.items()
            },
        }


def vars_of(coefficients: step_model.Coefficients) -> dict[str, float]:
    return {name: round(getattr(coefficients, name), 4) for name in step_model.RESOURCES}


def fit_rows(
    knowledge: Knowledge, store: BenchmarkProfiles, single: Sequence[Observation]
) -> list[FitRow]:
    rows = []
    for obs in single:
        gpu = knowledge.gpus[obs.gpu_id]
        profile = observation_step(knowledge, store, obs)
        rows.append(
            FitRow(
                obs.workload, obs.suite, profile, gpu, math_mode(gpu, profile.precision), obs.step_s
            )
        )
    return rows


def build(knowledge: Knowledge, catalog: Catalog, cache_dir: Path) -> PerformanceModel:
    """Fit the model on the stored benchmarks; the interval quantiles are computed once per
    knowledge version and kept as JSON in ``cache_dir``."""
    started = time.perf_counter()
    store = BenchmarkProfiles(cache_dir / "steps", catalog)
    found, skipped = observations(knowledge, store)
    single = [o for o in found if o.count == 1]
    rows = fit_rows(knowledge, store, single)
    fitted = step_model.fit(rows)
    model = PerformanceModel(knowledge.version, found, skipped, single, rows, fitted, store, 0.0)
    model.ceilings = input_ceilings(found)
    key = f"{knowledge.version}-{PROFILER_VERSION}-{MODEL_VERSION}"
    path = cache_dir / f"intervals-{key}.json"
    cached = read_json(path)
    if (
        cached is not None
        and cached.get("key") == key
        and isinstance(cached.get("quantiles"), dict)
    ):
        model.quantiles = {k: float(v) for k, v in cached["quantiles"].items()}
    else:
        model.quantiles = conformal_quantiles(model)
        write_json(path, {"key": key, "quantiles": model.quantiles})
    model.built_s = time.perf_counter() - started
    return model


def held_out_errors(
    model: PerformanceModel, group: Callable[[Observation], str], general: bool = False
) -> list[float]:
    """log(measured / predicted) of each single-GPU row, predicted by a model fitted
    without its group (``general``: as a model the benchmarks never measured)."""
    labels = [group(o) for o in model.single]
    errors = [0.0] * len(labels)
    for label in sorted(set(labels)):
        fold = model.refit(without(group, label))
        for i, (obs, row) in enumerate(zip(model.single, model.rows, strict=True)):
            if labels[i] != label:
                continue
            known = None if general else obs.workload
            parts = fold.step_model.parts(row.profile, row.gpu, row.mode, known, row.suite)
            errors[i] = math.log(row.step_s / parts.total_s)
    return errors


def without(group: Callable[[Observation], str], label: str) -> Callable[[Observation], bool]:
    return lambda o: group(o) != label


def conformal_quantiles(model: PerformanceModel) -> dict[str, float]:
    """|log error| quantiles out of sample: GPUs held out (benchmarked workloads), whole
    workloads held out and predicted as unknown models (everything else)."""
    known = held_out_errors(model, lambda o: o.gpu_id)
    other = held_out_errors(model, lambda o: o.workload, general=True)
    return {
        "known": float(np.quantile(np.abs(known), COVERAGE)),
        GENERAL: float(np.quantile(np.abs(other), COVERAGE)),
    }


def input_ceilings(found: Sequence[Observation]) -> dict[str, dict[str, Any]]:
    """Per workload: what the stored hosts' input pipelines are known to deliver.

    A measured run shows that its host's pipeline delivered at least its throughput, so
    per workload the highest samples/s on one host (all its GPUs together) and per GPU are
    lower bounds of the ceiling. Where the benchmarks show a step that does not speed up
    with the GPU, the step model's fixed part holds it (per step, whatever the batch); no
    input ceiling is inferred beyond the measured rates: a request or a trace states one.
    """
    out: dict[str, dict[str, Any]] = {}
    for obs in found:
        entry = out.setdefault(
            obs.workload,
            {
                "delivered_samples_per_s_per_gpu": 0.0,
                "delivered_samples_per_s_per_host": 0.0,
                "ceiling": None,
                "evidence": [],
            },
        )
        entry["delivered_samples_per_s_per_gpu"] = max(
            entry["delivered_samples_per_s_per_gpu"], obs.samples_per_s / obs.count
        )
        entry["delivered_samples_per_s_per_host"] = max(
            entry["delivered_samples_per_s_per_host"], obs.samples_per_s
        )
    return out
