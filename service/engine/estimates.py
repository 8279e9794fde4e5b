"""Estimates on request: from a model and workload, a stored profile or a stored trace.

The performance model is built on first use per knowledge version (see
:mod:`service.engine.model`); the validation report is made by ``rightsize validate`` and
kept as JSON beside the model's cache, keyed by the knowledge version.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from knowledge import Knowledge
from knowledge.records import Gpu
from profiles.catalog import Catalog
from service.engine.estimate import InputCeiling, benchmark_workload, estimate
from service.engine.model import MODEL_VERSION, PerformanceModel, built_model, performance_model
from service.engine.observations import read_json, write_json
from service.engine.profiling import ProfileService
from service.engine.projection import resource
from service.engine.traces import TraceService
from service.errors import NotFound

log = logging.getLogger(__name__)


class EstimateInputError(ValueError):
    """A request the estimate cannot answer as asked (422, naming the field)."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        super().__init__(message)


@dataclass
class EstimateService:
    knowledge: Knowledge
    catalog: Catalog
    profiles: ProfileService
    traces: TraceService
    model_dir: Path
    _warming: threading.Thread | None = field(default=None, init=False, repr=False)
    _failure: str | None = field(default=None, init=False, repr=False)

    def model(self) -> PerformanceModel:
        return performance_model(self.knowledge, self.catalog, self.model_dir)

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
        model = built_model(self.knowledge, self.model_dir)
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

    def _ceiling(
        self, requested: float | None, profile: dict[str, Any], model: PerformanceModel
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
        found = model.ceilings.get(workload)
        if found and found["ceiling"]:
            note = "; ".join(found["evidence"][:2])
            return InputCeiling(found["ceiling"], "benchmarks", note), None
        delivered = found["delivered_samples_per_s_per_gpu"] if found else None
        return None, (
            f"the stored benchmark hosts fed {workload} at up to {delivered:.4g} samples/s per "
            "GPU without an input ceiling showing; beyond that it is not known"
            if delivered
            else None
        )

    def from_profile(
        self,
        profile: dict[str, Any],
        gpu: Gpu,
        count: int,
        input_samples_per_s: float | None = None,
        nvlink: bool | None = None,
    ) -> dict[str, Any]:
        model = self.model()
        ceiling, note = (None, None)
        if profile["workload"]["task"] != "inference":
            ceiling, note = self._ceiling(input_samples_per_s, profile, model)
        result = estimate(profile, gpu, count, model, self.knowledge, ceiling, nvlink)
        if note:
            result["assumptions"].append(note)
        result["knowledge_version"] = self.knowledge.version
        return result

    def request(self, body: dict[str, Any]) -> dict[str, Any]:
        gpu = self.knowledge.gpu(body["gpu"])
        count = body.get("count", 1)
        if body.get("trace_id"):
            return self.from_trace(body["trace_id"], gpu, count, body)
        if body.get("profile_id"):
            profile = self.profiles.get(body["profile_id"])
            if profile is None:
                raise NotFound("profile", body["profile_id"], [])
        else:
            if "model" not in body or "workload" not in body:
                raise EstimateInputError(
                    "model", "give model and workload, or profile_id, or trace_id"
                )
            profile, _ = self.profiles.profile(body["model"], body["workload"])
        return self.from_profile(
            profile, gpu, count, body.get("input_samples_per_s"), body.get("nvlink")
        )

    def from_trace(
        self, trace_id: str, gpu: Gpu, count: int, body: dict[str, Any]
    ) -> dict[str, Any]:
        """The traced step projected onto ``gpu``; its input stall is a bound of its own."""
        record = self.traces.get(trace_id)
        if record is None:
            raise NotFound("trace", trace_id, [])
        found = self.traces.projections(record, [gpu.id], count, body.get("reference_gpu"))
        projected = found["projections"][0]
        analysis = record["analysis"]
        step = projected["step_time_us"] / 1e6
        batch = record["options"].get("batch_size")
        idle = analysis["breakdown"].get("idle_us", {})
        input_s = float(idle.get("input", 0.0)) / 1e6
        part = projected["bound"] or "compute"
        bound = resource(part)
        result: dict[str, Any] = {
            "trace_id": trace_id,
            "reference_gpu": found["reference_gpu_id"],
            "gpu": gpu.id,
            "count": count,
            "step_time_s": step,
            "bound": bound,
            "bound_part": part,
            "breakdown_us": projected["breakdown_us"],
            "assumptions": [
                "projected from the trace: each part scaled by the resource that bounds it; "
                "idle time (input, launches, synchronisation) is not scaled by any GPU",
                *projected["notes"],
            ],
            "interval": {"low": step * 0.85, "high": step * 1.15},
            "knowledge_version": self.knowledge.version,
        }
        if input_s > 0:
            result["input_stall_s"] = input_s
            result["assumptions"].append(
                f"the traced step waited {input_s * 1e3:.2f} ms on input: no GPU shortens that"
            )
        if batch:
            samples = float(batch) * count
            result["throughput"] = {"samples_per_s": samples / step, "tokens_per_s": None}
        else:
            result["throughput"] = {"samples_per_s": None, "tokens_per_s": None}
            result["assumptions"].append("no batch_size with the trace: throughput not known")
        return result

    # --- validation report -------------------------------------------------------------

    def report(self) -> dict[str, Any] | None:
        """The report for this knowledge version, else the last one made (it says its version)."""
        return read_json(report_path(self.model_dir, self.knowledge.version)) or read_json(
            self.model_dir / LATEST_REPORT
        )


LATEST_REPORT = "validation-latest.json"


def report_path(model_dir: Path, knowledge_version: str) -> Path:
    return model_dir / f"validation-{knowledge_version}.json"


def save_report(model_dir: Path, report: dict[str, Any]) -> Path:
    """Keep ``report`` for its knowledge version, and as the latest one."""
    path = report_path(model_dir, report["knowledge_version"])
    write_json(path, report)
    write_json(model_dir / LATEST_REPORT, report)
    return path
