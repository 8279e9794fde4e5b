"""A candidate: one GPU type and count, its layout, where it runs, and what it costs and takes;
the symbols the rules read of it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from knowledge.records import Gpu
from service.engine.deciding import cost
from service.engine.deciding.deployment import Site
from service.engine.deciding.job_time import Energy, JobTime, Sizes
from service.engine.errors import InvalidRequest
from service.engine.estimating.software import Stack
from service.engine.planning.search import Planned
from service.engine.requests import Constraints, RecommendationRequest, UsageAsked
from service.engine.rules import Fired

OBJECTIVES = ("best_value", "fastest", "cheapest")

DEPLOYMENTS = ("any", "cloud", "on-premise")

UNIT_SAMPLES = 1e6  # the unit of work when the workload gives no dataset


@dataclass(kw_only=True)
class Candidate:
    """One GPU at a count and layout, on one deployment, with its figures and reasons;
    built by name (21 figures in a row were once easy to swap)."""

    gpu: Gpu
    count: int
    planned: Planned | None  # None for a traced step
    step_s: float
    samples_per_s: float
    job_hours: float | None  # the whole job's wall-clock hours, when the workload has one
    hours_per_unit: float  # wall-clock hours per unit of work
    deployment: str
    pricing: str
    provider: str
    capital_usd: float
    monthly_usd: float
    horizon_usd: float
    usd_per_gpu_hour: float
    cost_per_unit_usd: float  # what one unit of work (the job) costs, as billed
    site: Site
    instances: int
    job: JobTime
    energy: Energy
    region: str | None = None
    bound: str = "compute"
    offer: cost.CloudCost | None = None
    onprem: cost.OnPremCost | None = None
    usage: cost.Usage | None = None
    served: Served | None = None
    fired: list[Fired] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    pareto: bool = False

    @property
    def unit_cost_usd(self) -> float:
        return self.cost_per_unit_usd

    @property
    def penalty(self) -> float:
        factors = [f.rule.factor or 1.0 for f in self.fired if f.rule.effect == "penalise"]
        return math.prod(factors)

    def score(self, objective: str, time_value: float = 0.0) -> tuple[float, float]:
        """The objective's figure (lower is better), penalties applied, and a tie-break;
        ``time_value``: what an hour of waiting for the result costs the team (USD)."""
        if objective == "fastest":
            return self.hours_per_unit * self.penalty, self.unit_cost_usd
        waiting = time_value * self.hours_per_unit
        if objective == "cheapest":
            return (self.horizon_usd + waiting) * self.penalty, self.hours_per_unit
        return (self.unit_cost_usd + waiting) * self.penalty, self.hours_per_unit


@dataclass(frozen=True)
class Setting:
    """What every candidate of one request shares."""

    request: RecommendationRequest
    precision: str
    traced: bool
    input_idle_share: float
    model_params_b: float | None
    task: str
    feed: Feed = field(default_factory=lambda: Feed(Sizes(0.0, 0.0, 0.0), "traced", None, 1.0))
    stack: Stack | None = None  # the software stack a described workload runs on

    @property
    def objective(self) -> str:
        return self.request.objective

    @property
    def constraints(self) -> Constraints:
        return self.request.constraints

    @property
    def usage(self) -> UsageAsked:
        return self.request.usage

    @property
    def time_value(self) -> float:
        return self.request.value_of_time_usd_per_hour


def _setting(request: RecommendationRequest, precision: str, task: str,
             params_b: float | None, traced: bool = False,
             input_idle: float = 0.0) -> Setting:  # fmt: skip
    checks = (("objective", request.objective, OBJECTIVES),
              ("tie_breaker", request.tie_breaker, TIE_BREAKERS),
              ("constraints.deployment", request.constraints.deployment, DEPLOYMENTS))  # fmt: skip
    for name, value, known in checks:
        if value not in known:
            raise InvalidRequest(name, f"one of {', '.join(known)}", value)
    return Setting(request, precision, traced, input_idle, params_b, task)


def _request_symbols(s: Setting) -> dict[str, Any]:
    c, u = s.constraints, s.usage
    return {
        "task": s.task,
        "precision": s.precision,
        "objective": s.objective,
        "model_params_b": s.model_params_b,
        "traced": s.traced,
        "input_idle_share": s.input_idle_share,
        "pattern": u.pattern,
        "interruptible": u.interruptible,
        "gpu_hours_per_month": u.gpu_hours_per_month,
        "horizon_months": float(u.horizon_months),
        "budget_capital_usd": c.budget_capital_usd,
        "budget_monthly_usd": c.budget_monthly_usd,
        "deadline_hours": c.deadline_hours,
        "max_kg_co2e": c.max_kg_co2e,
        "max_gpus": float(c.max_gpus) if c.max_gpus is not None else None,
        "max_server_power_kw": c.max_server_power_kw,
        "deployment_allowed": c.deployment,
    }


def _gpu_symbols(gpu: Gpu) -> dict[str, Any]:
    return {
        "gpu_id": gpu.id,
        "gpu_name": gpu.name,
        "gpu_architecture": gpu.architecture,
        "gpu_segment": gpu.segment,
        "gpu_cooling": gpu.cooling,
        "gpu_release_year": float(gpu.release_year),
        "gpu_memory_gib": float(gpu.memory_gb),
        "gpu_ecc": gpu.ecc,
        "gpu_tdp_w": float(gpu.tdp_w),
        "gpu_tensor_cores": gpu.tensor_cores > 0,
        "gpu_has_bf16": gpu.bf16_tflops is not None,
        "gpu_has_fp8": gpu.fp8_tflops is not None,
        "gpu_pcie_generation": float(gpu.pcie_generation),
        "gpu_p2p": gpu.p2p_supported,
        "gpu_nvlink_gb_per_s": float(gpu.nvlink_bandwidth_gb_per_s),
        "gpu_datacenter_use_allowed": gpu.datacenter_use_allowed,
    }


def _reason(rule: str, message: str, source: str) -> dict[str, Any]:
    return {"rule": rule, "effect": "exclude", "message": message, "source": source}


@dataclass(frozen=True)
class Served:
    """How an inference run serves: its layout, memory per GPU and serving figures."""

    layout: dict[str, Any]
    memory_bytes: float
    usable_bytes: float
    bound: str
    figures: dict[str, Any]
    parts: dict[str, float] = field(default_factory=dict)  # memory_bytes by part

    @property
    def headroom(self) -> float:
        return 1.0 - self.memory_bytes / self.usable_bytes


@dataclass(frozen=True)
class Run:
    """A GPU at a count on the sites that share one topology: its layout and speed there
    (``step_s``: a training step, or one request's latency when serving)."""

    gpu: Gpu
    count: int
    planned: Planned | None
    step_s: float
    samples_per_s: float
    job_samples: float | None
    served: Served | None = None
    sites: tuple[Site, ...] = ()


def _no_site(gpu: Gpu, s: Setting) -> dict[str, Any]:
    allowed = s.constraints.deployment
    why = (
        "no catalog price to buy it"
        if allowed == "on-premise"
        else ("no cloud offer" + ("" if allowed == "cloud" else " and no catalog price"))
    )
    return {"gpu": gpu.id, "reasons": [_reason(
        "no-price", f"{gpu.name}: {why} matches the request", "knowledge/data")]}  # fmt: skip


@dataclass(frozen=True)
class Feed:
    """What a job moves besides its steps, and how fast one vCPU prepares its samples."""

    sizes: Sizes
    input_kind: str
    samples_per_s_per_vcpu: float | None  # None: not bounded by the host
    reserved_vcpus_per_gpu: float


def _run_bound(run: Run) -> str:
    if run.planned is not None:
        return run.planned.step.bound
    if run.served is not None:
        return run.served.bound
    return "as traced"


def _run_symbols(found: Sequence[Candidate]) -> dict[str, Any]:
    """What a run's deployments share: the utilisation owning it would have, and the monthly
    GPU-hours at which owning beats its cheapest cloud offer."""
    own = next((c.onprem for c in found if c.onprem is not None), None)
    cloud = [c.usd_per_gpu_hour for c in found if c.offer is not None]
    out: dict[str, Any] = {"utilisation": None, "break_even_gpu_hours": None}
    if own is not None:
        out["utilisation"] = own.utilisation
        if cloud:
            out["break_even_gpu_hours"] = cost.break_even_gpu_hours_per_month(own, min(cloud))
    elif found and found[0].usage is not None:
        out["utilisation"] = found[0].usage.gpu_hours_per_month / (
            found[0].count * cost.HOURS_PER_MONTH
        )
    return out


def _sizing(c: Candidate) -> tuple[float | None, float | None, str, int]:
    """Memory per GPU, headroom, bound and tensor-parallel degree of a planned, served or
    traced candidate."""
    if c.planned is not None:
        p = c.planned
        return p.memory.total_bytes, p.headroom, p.step.bound, p.layout.tensor_parallel
    if c.served is not None:
        x = c.served
        return x.memory_bytes, x.headroom, x.bound, int(x.layout.get("tensor_parallel", 1))
    return None, None, "as traced", 1


def _symbols(c: Candidate, base: Mapping[str, Any], run: Mapping[str, Any]) -> dict[str, Any]:
    per_server = min(c.count, c.site.gpus_per_instance)
    overhead = c.onprem.parameters["server_power_overhead_w_per_gpu_slot"].value if c.onprem else 0
    held, headroom, _, tensor = _sizing(c)
    inside = c.site.links[0]
    between = next((x for x in c.site.links if x.scope == "between"), None)
    return {
        **base,
        **_gpu_symbols(c.gpu),
        **run,
        "count": float(c.count),
        "gpus_per_server": float(per_server),
        "nodes": float(c.instances),
        "interconnect": inside.name,
        "memory_needed_gib": held / 2**30 if held is not None else None,
        "memory_headroom_share": headroom,
        "bound": c.bound,
        "tensor_parallel": float(tensor),
        "zero_stage": float(c.planned.layout.zero_stage) if c.planned else 0.0,
        "deployment": c.deployment,
        "pricing": c.pricing,
        "provider": c.provider,
        "instances": float(c.instances),
        "gpus_per_instance": float(c.site.gpus_per_instance),
        "marketplace": c.site.marketplace,
        "cluster_network": c.site.cluster,
        "between_name": between.name if between is not None else "none",
        "between_gb_per_s": between.gb_per_s if between is not None else None,
        "between_rdma": between.rdma if between is not None else False,
        "job_hours": c.job_hours,
        "job_cost_usd": c.unit_cost_usd,
        "job_kwh": c.energy.kwh,
        "job_kg_co2e": c.energy.kg_co2e,
        "monthly_usd": c.monthly_usd,
        "capital_usd": c.capital_usd,
        "server_power_kw": per_server * (c.gpu.tdp_w + overhead) / 1000,
        "gpu_hours_per_month": c.usage.gpu_hours_per_month if c.usage else None,
    }


TIE_BREAKERS = ("footprint", "carbon", "time")
