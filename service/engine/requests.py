"""A recommendation request as the engine takes it: parsed once, by the API's schema (or
built in code), into typed values; the engine reads no raw request body."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from profiles.workload import Workload


@dataclass(frozen=True)
class Constraints:
    """What rules a candidate out."""

    budget_capital_usd: float | None = None
    budget_monthly_usd: float | None = None
    deadline_hours: float | None = None
    max_gpus: int | None = None
    providers: tuple[str, ...] = ()
    regions: tuple[str, ...] = ()
    deployment: str = "any"  # any, cloud, on-premise
    max_server_power_kw: float | None = None
    max_kg_co2e: float | None = None


@dataclass(frozen=True)
class UsageAsked:
    """How much the GPUs are used, as asked (see
    :func:`service.engine.deciding.cost.usage_from`)."""

    gpu_hours_per_month: float | None = None
    runs_per_month: float | None = None
    horizon_months: int = 36
    pattern: str = "steady"
    peak_to_average: float | None = None
    baseline_share: float | None = None
    interruptible: bool = False


class NamesItsWork:
    """A request that names its work by ``model`` with ``workload``, or by
    ``profile_id``."""

    model: dict[str, Any] | None
    workload: Workload | None
    profile_id: str | None

    def source(self) -> dict[str, Any]:
        """What names the work, as :meth:`EstimateService.body_profile` reads it."""
        if self.profile_id:
            return {"profile_id": self.profile_id}
        return {"model": self.model, "workload": self.workload}


@dataclass(frozen=True)
class RecommendationRequest(NamesItsWork):
    """``POST /v1/recommendations``'s body, typed. One of ``model`` with ``workload``,
    ``profile_id`` or ``trace_id`` names the work."""

    model: dict[str, Any] | None = None
    workload: Workload | None = None
    profile_id: str | None = None
    trace_id: str | None = None
    count: int | None = None  # a trace's GPU count
    objective: str = "best_value"
    constraints: Constraints = field(default_factory=Constraints)
    usage: UsageAsked = field(default_factory=UsageAsked)
    onprem: dict[str, float] = field(default_factory=dict)
    stack: str | None = None  # a stack id or alias (None: the default for the work)
    stack_options: dict[str, Any] = field(default_factory=dict)  # properties overridden
    global_batch_size: int | None = None
    weight_precision: str | None = None
    kv_precision: str | None = None
    concurrency: int | None = None
    value_of_time_usd_per_hour: float = 0.0
    tie_breaker: str = "footprint"
    submitted_benchmarks: bool = True  # which estimate service answers (the API's concern)


@dataclass(frozen=True)
class Links:
    """The interconnects a request names (ids; None: the GPU's own, the site's)."""

    intra_node: str | None = None
    inter_node: str | None = None


@dataclass(frozen=True)
class StepRequest(NamesItsWork):
    """What ``POST /v1/estimates`` and ``POST /v1/plans`` share, typed: the GPU, what
    names the work (``model`` with ``workload``, or ``profile_id``), the count and the
    options the layout model reads. ``layout`` and ``nvlink`` are an estimate's (None in a
    plan)."""

    gpu: str
    model: dict[str, Any] | None = None
    workload: Workload | None = None
    profile_id: str | None = None
    count: int | None = None
    layout: dict[str, Any] | None = None
    stack: str | None = None
    stack_options: dict[str, Any] | None = None
    interconnect: Links | None = None
    gpus_per_node: int | None = None
    nvlink: bool | None = None
    weight_precision: str | None = None
    kv_precision: str | None = None
    concurrency: int | None = None
    submitted_benchmarks: bool = True  # which estimate service answers (the API's concern)


@dataclass(frozen=True)
class EstimateRequest(StepRequest):
    """``POST /v1/estimates``'s body, typed; ``trace_id`` (with the GPU it was traced on)
    names the work instead of a model or a profile."""

    count: int | None = 1  # GPUs, data parallel (a layout's own count where one is given)
    trace_id: str | None = None
    reference_gpu: str | None = None
    input_samples_per_s: float | None = None


@dataclass(frozen=True)
class PlanRequest(StepRequest):
    """``POST /v1/plans``'s body, typed: layouts ranked at ``count`` (None: the fewest
    GPUs that fit), the fastest at each power of two up to ``max_count``."""

    max_count: int = 64
    global_batch_size: int | None = None
    limit: int = 20


@dataclass(frozen=True)
class ProfileRequest:
    """``POST /v1/profiles``'s body, typed: a model description and its workload."""

    model: dict[str, Any]
    workload: Workload


@dataclass(frozen=True)
class TcoRequest:
    """``POST /v1/tco``'s body, typed: owning against renting ``count`` GPUs of ``gpu``
    at ``usage``, with the request's own on-premise figures and the clouds it allows."""

    gpu: str
    usage: UsageAsked
    count: int = 1
    onprem: dict[str, float] | None = None
    providers: tuple[str, ...] | None = None
    regions: tuple[str, ...] | None = None


@dataclass(frozen=True)
class ProjectionRequest:
    """``POST /v1/traces/{id}/projections``'s body, typed: the target GPUs, the GPUs a
    node has there, and the GPU the trace ran on when its own record is not to be used."""

    gpus: tuple[str, ...]
    count: int = 1
    reference_gpu: str | None = None


def request_digest(body: Mapping[str, Any] | None, depends_on: str) -> str:
    """The one digest of a request: its JSON as sent (keys sorted) and what its answer
    depends on besides (knowledge, rules, model versions). A recommendation's id, and
    the key its answer, an estimate's or a plan's is cached under."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{depends_on}\n{canonical}".encode()).hexdigest()[:24]
