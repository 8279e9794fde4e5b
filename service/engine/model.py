"""The performance model: benchmark observations, their cases, the fitted efficiencies.

Built from ``knowledge/`` (and the profiler, for the benchmark workloads' operator mixes)
on first use, keyed by the knowledge version: a changed knowledge base is a new model, an
unchanged one is reused. :func:`performance_model` memoises one per (version, cache dir).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from knowledge import Knowledge
from profiles.catalog import Catalog
from profiles.profile import PROFILER_VERSION
from service.engine.efficiency import Case, Fitted, conformal_quantiles, fit, observation_case
from service.engine.observations import (
    MixStore,
    Observation,
    Skipped,
    observations,
    read_json,
    write_json,
)

MODEL_VERSION = "4"


@dataclass
class PerformanceModel:
    knowledge_version: str
    observations: list[Observation]
    skipped: list[Skipped]
    cases: list[Case]  # of the single-GPU observations, in order
    single: list[Observation]
    targets: list[float]  # measured log(step / roofline) of each single-GPU case
    fitted: Fitted
    store: MixStore
    built_s: float
    ceilings: dict[str, dict[str, Any]] = field(default_factory=dict)  # see input_ceilings

    def summary(self) -> dict[str, Any]:
        return {
            "knowledge_version": self.knowledge_version,
            "model_version": MODEL_VERSION,
            "observations": len(self.observations),
            "single_gpu_observations": len(self.single),
            "skipped_rows": len(self.skipped),
            "interval_log_quantiles": self.fitted.quantiles,
            "built_s": round(self.built_s, 2),
        }


def single_gpu_cases(
    knowledge: Knowledge, store: MixStore, found: list[Observation]
) -> tuple[list[Observation], list[Case]]:
    single = [o for o in found if o.count == 1]
    cases = [
        observation_case(
            o, store.mix(knowledge.workloads[o.workload], o.precision, o.batch), knowledge
        )
        for o in single
    ]
    return single, cases


def build(knowledge: Knowledge, catalog: Catalog, cache_dir: Path) -> PerformanceModel:
    started = time.perf_counter()
    store = MixStore(cache_dir / "mixes", catalog)
    found, skipped = observations(knowledge, store)
    single, cases = single_gpu_cases(knowledge, store, found)
    targets = [math.log(o.step_s / c.roof.total_s) for o, c in zip(single, cases, strict=True)]
    fitted = fit(cases, targets)
    key = f"{knowledge.version}-{PROFILER_VERSION}-{MODEL_VERSION}"
    path = cache_dir / f"intervals-{key}.json"
    cached = read_json(path)
    if (
        cached is not None
        and cached.get("key") == key
        and isinstance(cached.get("quantiles"), dict)
    ):
        fitted.quantiles = {k: float(v) for k, v in cached["quantiles"].items()}
    else:
        fitted.quantiles = conformal_quantiles(cases, np.asarray(targets))
        write_json(path, {"key": key, "quantiles": fitted.quantiles})
    model = PerformanceModel(
        knowledge.version,
        found,
        skipped,
        cases,
        single,
        targets,
        fitted,
        store,
        time.perf_counter() - started,
    )
    model.ceilings = input_ceilings(model)
    return model


_LOCK = threading.Lock()
_MODELS: dict[tuple[str, str], PerformanceModel] = {}


def built_model(knowledge: Knowledge, cache_dir: Path) -> PerformanceModel | None:
    """The model for this knowledge version if this process has built it (never blocks)."""
    return _MODELS.get((knowledge.version, str(cache_dir)))


def performance_model(knowledge: Knowledge, catalog: Catalog, cache_dir: Path) -> PerformanceModel:
    """The model for this knowledge version, built once per process (thread-safe)."""
    key = (knowledge.version, str(cache_dir))
    with _LOCK:
        model = _MODELS.get(key)
        if model is None:
            model = build(knowledge, catalog, cache_dir)
            _MODELS.clear()  # only the current knowledge's model is worth keeping
            _MODELS[key] = model
        return model


def input_ceilings(model: PerformanceModel) -> dict[str, dict[str, Any]]:
    """Per workload: what the stored hosts' input pipelines are known to deliver.

    A host input ceiling binds alike at every precision, so it shows where a GPU measures
    the same samples/s in fp16 and fp32 although its roofline for fp16 is much faster
    (30%+), at about the same throughput on every GPU that shows it (within 25%): the
    ceiling is then the highest of those. Where no GPU shows it, the pipeline fed the
    fastest GPU measured, so the ceiling is at least that: ``delivered`` is the highest
    per-GPU samples/s on record, ``ceiling`` is None.
    """
    per: dict[tuple[str, str, str], dict[str, tuple[float, float]]] = {}
    for obs, case in zip(model.single, model.cases, strict=True):
        key = (obs.suite, obs.workload, obs.gpu_id)
        speed = obs.batch / case.roof.total_s
        best = per.setdefault(key, {})
        if obs.precision not in best or obs.samples_per_s > best[obs.precision][1]:
            best[obs.precision] = (speed, obs.samples_per_s)
    found: dict[str, dict[str, Any]] = {}
    for (suite, workload, gpu), best in sorted(per.items()):
        entry = found.setdefault(
            workload,
            {"delivered_samples_per_s_per_gpu": 0.0, "ceiling": None, "evidence": [], "at": []},
        )
        top = max(m for _, m in best.values())
        entry["delivered_samples_per_s_per_gpu"] = max(
            entry["delivered_samples_per_s_per_gpu"], top
        )
        if "fp16" in best and "fp32" in best:
            (s16, m16), (s32, m32) = best["fp16"], best["fp32"]
            if s16 >= 1.3 * s32 and abs(m16 / m32 - 1) <= 0.05:
                entry["at"].append(max(m16, m32))
                entry["evidence"].append(
                    f"{suite} {gpu}: fp16 {m16:.4g} and fp32 {m32:.4g} samples/s although "
                    f"its fp16 roofline is {s16 / s32:.2f}x faster"
                )
    for entry in found.values():
        at = entry.pop("at")
        # a host ceiling is the same on every GPU; where the precision-blind throughputs
        # differ by more than 25% between GPUs, something on the GPU binds (not the input)
        if len(at) >= 2 and min(at) >= 0.75 * max(at):
            entry["ceiling"] = max(at)
    return found
