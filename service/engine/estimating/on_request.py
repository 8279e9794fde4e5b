"""Estimates on request: from a model and workload, a stored profile or a stored trace.

:class:`EstimateService` owns its performance model: it builds it once (in the background
as a server starts, or on the first estimate), keeps it for its knowledge version, and
answers through :func:`service.engine.estimating.estimate.estimate`. The validation report is made
by ``rightsize validate`` and kept as JSON beside the model's cache, keyed by the
knowledge version.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from knowledge import Knowledge
from knowledge.records import Gpu
from profiles.model_catalog import Catalog
from service.engine.errors import InvalidRequest, ModelUnavailable, NotFound
from service.engine.estimating.ceiling import InputCeiling
from service.engine.estimating.estimate import (
    Estimate,
    EstimateInput,
    Interval,
    benchmark_workload,
    estimate,
)
from service.engine.estimating.model import MODEL_VERSION, PerformanceModel, build
from service.engine.estimating.observations import read_json, write_json
from service.engine.estimating.profiling import ProfileService
from service.engine.estimating.projection import resource
from service.engine.estimating.step_profile import StepProfile
from service.engine.estimating.traces import TraceService
from service.engine.memo import Memo
from service.engine.owners import Reader
from service.engine.requests import EstimateRequest
from service.engine.rules import RuleBook

log = logging.getLogger(__name__)
LATEST_REPORT = "validation-latest.json"
RUNS_KEPT = 64  # layout searches an estimate service keeps, for requests that differ in constraints
TRACE_INTERVAL = 0.15  # a projected trace: +-15% (the same kernels, scaled by resource)


@dataclass
class EstimateService:
    knowledge: Knowledge
    catalog: Catalog
    profiles: ProfileService
    traces: TraceService
    model_dir: Path
    rules: RuleBook = field(default_factory=RuleBook.load)  # every reason's rule
    # the layout searches of recent recommendations (service.engine.deciding.runs): a
    # request that changes only its budget, objective or usage reuses its search
    runs: Memo[Any] = field(default_factory=lambda: Memo(RUNS_KEPT), init=False, repr=False)
    _model: PerformanceModel | None = field(default=None, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _warming: threading.Thread | None = field(default=None, init=False, repr=False)
    _failure: str | None = field(default=None, init=False, repr=False)

    def model(self) -> PerformanceModel:
        """The model for this knowledge version, built on first use (one build, however
        many threads ask; they wait for it)."""
        with self._lock:
            if self._model is None:
                self._model = build(self.knowledge, self.catalog, self.model_dir)
                self._failure = None
            return self._model

    def built(self) -> PerformanceModel | None:
        """The model if it has been built (never blocks)."""
        return self._model

    def warm(self) -> threading.Thread:
        """Build the model in the background (at start-up), so that the first estimate
        does not wait for it; estimates asked for meanwhile wait for the same build."""
        if self._warming is None:
            self._warming = threading.Thread(target=self._build, name="model-build", daemon=True)
            self._warming.start()
        return self._warming

    def _build(self) -> None:
        try:
            model = self.model()
        except Exception as exc:  # reported by status(); the next estimate tries again
            self._failure = f"{type(exc).__name__}: {exc}"
            log.exception("building the performance model failed")
            return
        log.info(
            "performance model %s on knowledge %s ready (%d single-GPU rows, %.1f s)",
            MODEL_VERSION,
            model.knowledge_version,
            len(model.single),
            model.built_s,
        )

    def status(self) -> dict[str, Any]:
        """ready, building, failed or not-built (built on the first estimate)."""
        model = self._model
        out: dict[str, Any] = {
            "model_version": MODEL_VERSION,
            "knowledge_version": self.knowledge.version,
        }
        if model is not None:
            return {**out, "state": "ready", "built_s": round(model.built_s, 2)}
        if self._warming is not None and self._warming.is_alive():
            return {**out, "state": "building"}
        if self._failure is not None:  # set by the warm-up thread, which has ended
            return {**out, "state": "failed", "detail": self._failure}
        return {**out, "state": "not-built"}

    def _built_model(self) -> PerformanceModel:
        try:
            return self.model()
        except Exception as exc:
            self._failure = f"{type(exc).__name__}: {exc}"
            log.exception("building the performance model failed")
            raise ModelUnavailable(f"the performance model could not be built: {exc}") from exc

    def ceiling(
        self, requested: float | None, profile: StepProfile, model: PerformanceModel
    ) -> tuple[InputCeiling | None, str | None]:
        """The input ceiling that applies, and a note on what the stored hosts delivered."""
        if requested is not None:
            return InputCeiling(requested, "request", "input_samples_per_s"), None
        workload = benchmark_workload(profile, self.knowledge)
        if workload is None:
            return None, (
                "no input ceiling known for this model: give input_samples_per_s (samples/s "
                "per GPU your data pipeline delivers) or a trace to bound by it"
            )
        known = model.ceiling(workload)
        if known is not None:
            return known, None
        found = model.ceilings.get(workload)
        delivered = found["delivered_samples_per_s_per_gpu"] if found else None
        return None, (
            f"the stored benchmark hosts fed {workload} at up to {delivered:.4g} samples/s per "
            "GPU without an input ceiling showing; beyond that it is not known"
            if delivered
            else None
        )

    def from_profile(
        self,
        profile: StepProfile,
        gpu: Gpu,
        count: int,
        input_samples_per_s: float | None = None,
        nvlink: bool | None = None,
    ) -> Estimate:
        model = self._built_model()
        ceiling, note = (None, None)
        if profile.trains:
            ceiling, note = self.ceiling(input_samples_per_s, profile, model)
        result = estimate(
            EstimateInput(profile, gpu, count, nvlink, ceiling), model, self.knowledge
        )
        if note:
            return _with_assumption(result, note)
        return result

    def body_profile(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The profile a request body names: a stored one (profile_id), else its model and
        workload profiled (or read from the profile cache)."""
        if body.get("profile_id"):
            found = self.profiles.get(body["profile_id"])
            if found is None:
                raise NotFound("profile", body["profile_id"])
            return found
        if "model" not in body or "workload" not in body:
            raise InvalidRequest("model", "give model and workload, or profile_id, or trace_id")
        profiled, _ = self.profiles.profile(body["model"], body["workload"])
        return profiled

    def request(self, request: EstimateRequest, reader: Reader) -> Estimate:
        """The plain estimate ``request`` asks for; a trace it names is read as
        ``reader``."""
        gpu = self.knowledge.gpu(request.gpu)
        count = request.count or 1
        if request.trace_id:
            return self.from_trace(request.trace_id, gpu, count, reader, request.reference_gpu)
        found = self.body_profile(request.source())
        return self.from_profile(
            StepProfile.from_profile(found),
            gpu,
            count,
            request.input_samples_per_s,
            request.nvlink,
        )

    def from_trace(
        self,
        trace_id: str,
        gpu: Gpu,
        count: int,
        reader: Reader,
        reference_gpu: str | None = None,
    ) -> Estimate:
        """The traced step projected onto ``gpu``; its input stall is a bound of its own.
        A trace ``reader`` may not read is not found."""
        record = self.traces.get(trace_id, reader)
        if record is None:
            raise NotFound("trace", trace_id)
        found = self.traces.projections(record, [gpu.id], count, reference_gpu)
        projected = found["projections"][0]
        analysis = record["analysis"]
        step = projected["step_time_us"] / 1e6
        batch = record["options"].get("batch_size")
        idle = analysis["breakdown"].get("idle_us", {})
        input_s = float(idle.get("input", 0.0)) / 1e6
        part = projected["bound"] or "compute"
        assumptions = [
            "projected from the trace: each part scaled by the resource that bounds it; "
            "idle time (input, launches, synchronisation) is not scaled by any GPU",
            *projected["notes"],
        ]
        extra: dict[str, Any] = {
            "trace_id": trace_id,
            "reference_gpu": found["reference_gpu_id"],
            "bound_part": part,
            "breakdown_us": projected["breakdown_us"],
        }
        if input_s > 0:
            extra["input_stall_s"] = input_s
            assumptions.append(
                f"the traced step waited {input_s * 1e3:.2f} ms on input: no GPU shortens that"
            )
        samples = float(batch) * count if batch else None
        if samples is None:
            assumptions.append("no batch_size with the trace: throughput not known")
        return Estimate(
            gpu_id=gpu.id,
            count=count,
            precision=record["options"].get("precision") or "traced",
            math_mode="as traced",
            step_time_s=step,
            interval=Interval(step * (1 - TRACE_INTERVAL), step * (1 + TRACE_INTERVAL)),
            samples_per_s=samples / step if samples else None,
            tokens_per_s=None,
            bound=resource(part),
            memory=None,
            assumptions=tuple(assumptions),
            extra=extra,
        )

    # --- validation report -------------------------------------------------------------

    def report(self) -> dict[str, Any] | None:
        """The report for this knowledge version, else the last one made (it says its version)."""
        return read_json(report_path(self.model_dir, self.knowledge.version)) or read_json(
            self.model_dir / LATEST_REPORT
        )


def _with_assumption(result: Estimate, note: str) -> Estimate:
    return replace(result, assumptions=(*result.assumptions, note))


def report_path(model_dir: Path, knowledge_version: str) -> Path:
    return model_dir / f"validation-{knowledge_version}.json"


def save_report(model_dir: Path, report: dict[str, Any]) -> Path:
    """Keep ``report`` for its knowledge version, and as the latest one."""
    path = report_path(model_dir, report["knowledge_version"])
    write_json(path, report)
    write_json(model_dir / LATEST_REPORT, report)
    return path
