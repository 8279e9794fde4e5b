"""Recommendations: every GPU, count, layout and deployment that can run a workload, costed,
explained by the rules (:mod:`service.engine.rules`) and ranked by the buyer's objective.

A candidate is one GPU type at a count with the planner's fastest layout there
(:func:`service.engine.parallel.planned_at`), run either on-premise (bought, costed by
:mod:`service.engine.cost`) or as a cloud offer. Its "work" is one job when the workload
gives a dataset (``dataset_samples`` or ``dataset_tokens`` and ``epochs``), else a million
samples. Objectives:

- ``fastest``: the shortest job;
- ``cheapest``: the smallest spend over the usage's horizon (capital and running costs);
- ``best_value`` (default): the lowest cost per unit of work, within the deadline.

Rules with effect ``penalise`` multiply the objective's score by their factor.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from knowledge import Knowledge
from knowledge.records import Gpu
from service.engine import cost, deadline
from service.engine.errors import InvalidRequest, NotFound
from service.engine.estimate import USABLE_MEMORY_SHARE
from service.engine.layout import Layout, LayoutMemory, ModelShape
from service.engine.parallel import (
    Network,
    Planned,
    fastest_fitting,
    layout_inference,
    network,
    sized_at,
    stacked,
    work,
)
from service.engine.plans import served_alone
from service.engine.roofline import MathMode, math_mode
from service.engine.rules import Fired, RuleBook, rulebook
from service.engine.service import EstimateService
from service.engine.step_profile import StepProfile

OBJECTIVES = ("best_value", "fastest", "cheapest")
DEPLOYMENTS = ("any", "cloud", "on-premise")
UNIT_SAMPLES = 1e6  # the unit of work when the workload gives no dataset
DEFAULT_MAX_GPUS = 64
SHOWN = 10  # recommendations returned
EXCLUDE = frozenset({"exclude"})
KEEP = frozenset({"penalise", "warn", "advise"})
PLANNER = "rightsize layout planner (service/engine/parallel.py)"


@dataclass
class Candidate:
    """One GPU at a count and layout, on one deployment, with its figures and reasons."""

    gpu: Gpu
    count: int
    planned: Planned | None  # None for a traced step
    step_s: float
    samples_per_s: float
    job_hours: float | None
    hours_per_unit: float  # wall-clock hours per unit of work
    deployment: str
    pricing: str
    provider: str
    capital_usd: float
    monthly_usd: float
    horizon_usd: float
    usd_per_gpu_hour: float
    offer: cost.CloudCost | None = None
    onprem: cost.OnPremCost | None = None
    usage: cost.Usage | None = None
    served: Served | None = None
    fired: list[Fired] = field(default_factory=list)
    context: dict[str, Any] = field(default_factory=dict)
    pareto: bool = False

    @property
    def unit_cost_usd(self) -> float:
        return self.hours_per_unit * self.count * self.usd_per_gpu_hour

    @property
    def penalty(self) -> float:
        factors = [f.rule.factor or 1.0 for f in self.fired if f.rule.effect == "penalise"]
        return math.prod(factors)

    def score(self, objective: str) -> tuple[float, float]:
        if objective == "fastest":
            return self.hours_per_unit * self.penalty, self.unit_cost_usd
        if objective == "cheapest":
            return self.horizon_usd * self.penalty, self.hours_per_unit
        return self.unit_cost_usd * self.penalty, self.hours_per_unit


@dataclass(frozen=True)
class Setting:
    """What every candidate of one request shares."""

    body: Mapping[str, Any]
    objective: str
    constraints: Mapping[str, Any]
    usage: Mapping[str, Any]
    precision: str
    traced: bool
    input_idle_share: float
    model_params_b: float | None
    task: str


def _setting(body: Mapping[str, Any], precision: str, task: str, params_b: float | None,
             traced: bool = False, input_idle: float = 0.0) -> Setting:  # fmt: skip
    objective = body.get("objective") or "best_value"
    if objective not in OBJECTIVES:
        raise InvalidRequest("objective", f"one of {', '.join(OBJECTIVES)}", objective)
    constraints = body.get("constraints") or {}
    return Setting(body, objective, constraints, body.get("usage") or {}, precision, traced,
                   input_idle, params_b, task)  # fmt: skip


def _request_symbols(s: Setting) -> dict[str, Any]:
    c, u = s.constraints, s.usage
    return {
        "task": s.task,
        "precision": s.precision,
        "objective": s.objective,
        "model_params_b": s.model_params_b,
        "traced": s.traced,
        "input_idle_share": s.input_idle_share,
        "pattern": u.get("pattern") or "steady",
        "interruptible": bool(u.get("interruptible")),
        "gpu_hours_per_month": u.get("gpu_hours_per_month"),
        "horizon_months": float(u.get("horizon_months") or 36),
        "budget_capital_usd": c.get("budget_capital_usd"),
        "budget_monthly_usd": c.get("budget_monthly_usd"),
        "deadline_hours": c.get("deadline_hours"),
        "max_gpus": c.get("max_gpus"),
        "max_server_power_kw": c.get("max_server_power_kw"),
        "deployment_allowed": c.get("deployment") or "any",
    }


def _gpu_symbols(gpu: Gpu) -> dict[str, Any]:
    return {
        "gpu_id": gpu.id,
        "gpu_name": gpu.name,
        "gpu_architecture": gpu.architecture,
        "gpu_segment": gpu.segment,
        "gpu_cooling": gpu.cooling,
        "gpu_release_year": float(gpu.release_year),
        "gpu_memory_gb": float(gpu.memory_gb),
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


# --- candidates -----------------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """How an inference run serves: its layout, memory per GPU and serving figures."""

    layout: dict[str, Any]
    memory_bytes: float
    usable_bytes: float
    bound: str
    figures: dict[str, Any]

    @property
    def headroom(self) -> float:
        return 1.0 - self.memory_bytes / self.usable_bytes


@dataclass(frozen=True)
class Run:
    """A GPU at a count: its layout and speed, before any deployment (``step_s``: a training
    step, or one request's latency when serving)."""

    gpu: Gpu
    count: int
    planned: Planned | None
    step_s: float
    samples_per_s: float
    job_samples: float | None
    served: Served | None = None


def _with_modes(
    gpus: Sequence[Gpu], precision: str, excluded: list[dict[str, Any]]
) -> list[tuple[Gpu, MathMode]]:
    """The GPUs that can run ``precision``, with their math mode; the others excluded."""
    out = []
    for gpu in gpus:
        try:
            out.append((gpu, math_mode(gpu, precision)))
        except InvalidRequest as exc:
            excluded.append(
                {"gpu": gpu.id, "reasons": [_reason("precision", exc.message, PLANNER)]}
            )
    return out


def _described_runs(
    service: EstimateService, body: Mapping[str, Any],
    profile: StepProfile, shape: ModelShape | None, gpus: Sequence[Gpu], max_gpus: int,
    excluded: list[dict[str, Any]],
) -> list[Run]:  # fmt: skip
    """Each GPU's smallest fitting count (and each power of two above it up to ``max_gpus``)
    with the planner's fastest layout there, for ``profile`` (of the model ``shape``)."""
    model = service._built_model()
    stack = body.get("stack") or "pytorch"
    profile = stacked(profile, shape, stack)
    job = profile.dataset_steps * profile.samples_per_step if profile.dataset_steps else None
    per_node = int(body.get("gpus_per_node") or 8)
    batch = body.get("global_batch_size")
    tables: dict[int, list[tuple[Layout, LayoutMemory]]] = {}  # one per count, for every GPU

    def sized(n: int) -> list[tuple[Layout, LayoutMemory]]:
        if n not in tables:
            tables[n] = sized_at(n, profile, shape, per_node, batch)
        return tables[n]

    runs = []
    for gpu, mode in _with_modes(gpus, profile.precision, excluded):
        deadline.check()
        done = work(profile, gpu, mode, stack, model.step_model)
        net = network(service.knowledge, gpu, per_node)
        usable = gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE

        def fastest(n: int) -> Planned | None:
            return fastest_fitting(profile, shape, done, net, mode, usable, sized(n))  # noqa: B023

        def fits(n: int) -> bool:
            table = sized(n)
            return bool(table) and table[0][1].total_bytes <= usable  # noqa: B023

        smallest = 1
        while not fits(smallest) and smallest * 2 <= max_gpus:
            smallest *= 2
        best = fastest(smallest) if fits(smallest) else None
        if best is None:
            excluded.append({"gpu": gpu.id, "reasons": [_reason(
                "memory-fit", f"does not fit {gpu.memory_gb:g} GB GPUs under any layout up "
                f"to {max_gpus} GPUs", PLANNER)]})  # fmt: skip
            continue
        counts = [smallest * 2**k for k in range(11) if smallest * 2**k <= max_gpus]
        for n in counts:  # each power of two from the smallest up to max_gpus
            found = best if n == smallest else fastest(n)
            if found is not None:
                step = found.step
                runs.append(Run(gpu, n, found, step.step_s, step.samples_per_s, job))
    return runs


RUNS_KEPT = 64  # planned runs kept per process, for requests that differ in constraints
_runs: OrderedDict[tuple[Any, ...], tuple[list[Run], list[dict[str, Any]]]] = OrderedDict()
_runs_lock = threading.Lock()


def _kept_runs(
    service: EstimateService, body: Mapping[str, Any],
    profile: StepProfile, shape: ModelShape | None, gpus: Sequence[Gpu], max_gpus: int,
    excluded: list[dict[str, Any]],
) -> list[Run]:  # fmt: skip
    """:func:`_described_runs`, kept for the same profile, GPUs and layout options: a
    request that changes only its budget, objective or usage reuses the layout search
    (two thirds of a recommendation's time)."""
    if not profile.profile_id:
        return _described_runs(service, body, profile, shape, gpus, max_gpus, excluded)
    key = (
        service.knowledge.version, profile.profile_id, tuple(g.id for g in gpus), max_gpus,
        body.get("stack") or "pytorch", int(body.get("gpus_per_node") or 8),
        body.get("global_batch_size"),
    )  # fmt: skip
    with _runs_lock:
        found = _runs.get(key)
        if found is not None:
            _runs.move_to_end(key)
    if found is None:
        mine: list[dict[str, Any]] = []
        found = (_described_runs(service, body, profile, shape, gpus, max_gpus, mine), mine)
        with _runs_lock:
            _runs[key] = found
            while len(_runs) > RUNS_KEPT:
                _runs.popitem(last=False)
    excluded.extend(copy.deepcopy(found[1]))
    return list(found[0])


def _serving_runs(
    service: EstimateService, body: Mapping[str, Any], profile: StepProfile,
    shape: ModelShape | None, gpus: Sequence[Gpu], max_gpus: int,
    excluded: list[dict[str, Any]],
) -> list[Run]:  # fmt: skip
    """Inference: each GPU's smallest group that serves the model (the fewest tensor-parallel
    GPUs whose memory holds the weights and a sequence's KV cache for a generative model,
    one GPU otherwise), as one, two and four replicas within ``max_gpus``. A sample is a
    request; a group's rate is at the most sequences its memory decodes together."""
    per_node = int(body.get("gpus_per_node") or 8)
    job = profile.dataset_steps * profile.samples_per_step if profile.dataset_steps else None
    runs = []
    for gpu, mode in _with_modes(gpus, profile.precision, excluded):
        deadline.check()
        usable = gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE
        if profile.output_tokens:
            net = network(service.knowledge, gpu, per_node)
            found = _decoding(service, body, profile, shape, gpu, mode, net, usable, max_gpus)
        else:
            found = _one_gpu_serving(service, profile, gpu)
        if found is None:
            excluded.append({"gpu": gpu.id, "reasons": [_reason(
                "memory-fit", f"does not fit {gpu.memory_gb:g} GB GPUs for serving up to "
                f"{min(max_gpus, per_node)} GPUs a replica", PLANNER)]})  # fmt: skip
            continue
        group, rate, latency, served = found
        for replicas in (1, 2, 4):
            n = group * replicas
            if n > max_gpus:
                break
            layout = {**served.layout, "data_parallel": replicas}
            figures = {**served.figures, "requests_per_s": rate * replicas}
            runs.append(Run(gpu, n, None, latency, rate * replicas, job,
                            replace(served, layout=layout, figures=figures)))  # fmt: skip
    return runs


def _decoding(
    service: EstimateService, body: Mapping[str, Any], profile: StepProfile,
    shape: ModelShape | None, gpu: Gpu, mode: MathMode, net: Network, usable: float,
    max_gpus: int,
) -> tuple[int, float, float, Served] | None:  # fmt: skip
    """A generative model's smallest tensor-parallel group that holds the weights and the
    asked concurrency (at least one sequence); its requests per second, one request's
    latency, and how it serves. Each sequence's prefill (the profile's over its batch) runs
    alone; its output tokens are decoded with the others'."""
    step_model = service._built_model().step_model
    stack = body.get("stack") or "pytorch"
    wanted = body.get("concurrency") or 1
    degrees = [1] if shape is None else [
        t for t in (1, 2, 4, 8) if t <= min(net.gpus_per_node, max_gpus) and shape.heads % t == 0
    ]  # fmt: skip
    for t in degrees:
        x = layout_inference(profile, shape, gpu, mode, step_model, net, t, stack, usable,
                             body.get("weight_precision"), body.get("kv_precision"),
                             body.get("concurrency"))  # fmt: skip
        if x.max_concurrency < wanted:
            continue
        c, output = x.concurrency, float(profile.output_tokens or 0)
        prefill = x.time_to_first_token_s / max(profile.batch_size, 1.0)
        rate = 1.0 / (prefill + output * x.time_per_output_token_s / c)
        latency = x.time_to_first_token_s + output * x.time_per_output_token_s
        memory = profile.memory
        held = (x.weights_bytes_per_gpu + c * x.kv_bytes_per_sequence_per_gpu
                + memory.runtime_overhead_bytes + memory.temporary_peak_bytes / t)  # fmt: skip
        figures = {
            "time_to_first_token_s": x.time_to_first_token_s,
            "time_per_output_token_s": x.time_per_output_token_s,
            "concurrency": c,
            "max_concurrency": x.max_concurrency,
        }
        layout = {"tensor_parallel": t, "weight_precision": x.weight_precision,
                  "kv_precision": x.kv_precision}  # fmt: skip
        return t, rate, latency, Served(layout, held, usable, x.bound, figures)
    return None


def _one_gpu_serving(
    service: EstimateService, profile: StepProfile, gpu: Gpu
) -> tuple[int, float, float, Served] | None:
    """A model without a decode phase served by one GPU a replica at the workload's batch
    (:func:`service.engine.plans.served_alone`); None where the batch does not fit."""
    alone = served_alone(service, profile, gpu)
    if not alone["fits"] or not alone["requests_per_s"]:
        return None
    layout = {"tensor_parallel": 1, "batch_size": alone["batch_size"]}
    figures = {"batch_latency_s": alone["batch_latency_s"]}
    held = Served(layout, alone["memory_per_gpu_bytes"], alone["usable_memory_bytes"],
                  alone["bound"], figures)  # fmt: skip
    return 1, alone["requests_per_s"], alone["batch_latency_s"], held


def _traced_runs(
    service: EstimateService, body: Mapping[str, Any], record: dict[str, Any],
    gpus: Sequence[Gpu], excluded: list[dict[str, Any]],
) -> list[Run]:  # fmt: skip
    """The traced step of ``record`` projected onto each GPU at the trace's count; a GPU
    with less memory than the reference is left out (the trace does not say what fits)."""
    count = int(body.get("count") or 1)
    found = service.traces.projections(record, [g.id for g in gpus], count, None)
    ref = service.knowledge.gpu(found["reference_gpu_id"])
    batch = record["options"].get("batch_size") or 1
    runs = []
    for gpu, projection in zip(gpus, found["projections"], strict=True):
        if gpu.memory_gb < ref.memory_gb:
            excluded.append({"gpu": gpu.id, "reasons": [_reason(
                "memory-fit", f"{gpu.memory_gb:g} GB is less than the reference "
                f"{ref.name}'s {ref.memory_gb:g} GB the trace ran on", "the trace")]})  # fmt: skip
            continue
        step = projection["step_time_us"] / 1e6
        runs.append(Run(gpu, count, None, step, batch * count / step, None))
    return runs


def _deployments(
    service: EstimateService, s: Setting, run: Run, excluded: list[dict[str, Any]]
) -> list[Candidate]:
    """The run on-premise (when the GPU has a price) and as each cloud offer (the cheapest
    region per provider and pricing)."""
    deadline.check()
    hours_per_unit = (run.job_samples or UNIT_SAMPLES) / run.samples_per_s / 3600
    job_hours = hours_per_unit if run.job_samples else None
    usage = cost.usage_from(s.usage, hours_per_unit * run.count)
    allowed = s.constraints.get("deployment") or "any"
    out = []
    overrides = s.body.get("onprem") or {}
    if allowed != "cloud" and (run.gpu.price_usd or "gpu_price_usd" in overrides):
        params = cost.onprem_parameters(service.knowledge, overrides, run.gpu, run.count)
        own = cost.on_premise(run.gpu, run.count, usage, params)
        out.append(Candidate(run.gpu, run.count, run.planned, run.step_s, run.samples_per_s,
                             job_hours, hours_per_unit, "on-premise", "owned", "on-premise",
                             own.capital_usd, own.monthly_usd, own.horizon_usd,
                             own.cost_per_gpu_hour_usd, onprem=own, usage=usage,
                             served=run.served))  # fmt: skip
    if allowed != "on-premise":
        c = s.constraints
        offers = cost.cheapest_offers(
            service.knowledge, run.gpu.id, run.count, usage, c.get("providers"), c.get("regions")
        )
        for offer in offers:
            out.append(Candidate(run.gpu, run.count, run.planned, run.step_s,
                                 run.samples_per_s, job_hours, hours_per_unit, "cloud",
                                 offer.pricing, offer.provider, 0.0, offer.monthly_usd,
                                 offer.horizon_usd, offer.usd_per_gpu_hour, offer=offer,
                                 usage=usage, served=run.served))  # fmt: skip
    if not out:
        why = (
            "no catalog price to buy it"
            if allowed == "on-premise"
            else ("no cloud offer" + ("" if allowed == "cloud" else " and no catalog price"))
        )
        reason = _reason("no-price", f"{run.gpu.name}: {why} matches the request", "knowledge/data")
        excluded.append({"gpu": run.gpu.id, "count": run.count, "reasons": [reason]})
    return out


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
    per_server = min(c.count, cost.GPUS_PER_SERVER)
    overhead = c.onprem.parameters["server_power_overhead_w_per_gpu_slot"].value if c.onprem else 0
    held, headroom, bound, tensor = _sizing(c)
    return {
        **base,
        **_gpu_symbols(c.gpu),
        **run,
        "count": float(c.count),
        "gpus_per_server": float(per_server),
        "nodes": float(math.ceil(c.count / per_server)),
        "interconnect": c.gpu.gpu_link or f"PCIe {c.gpu.pcie_generation}",
        "memory_needed_gb": held / 1e9 if held is not None else None,
        "memory_headroom_share": headroom,
        "bound": bound,
        "tensor_parallel": float(tensor),
        "zero_stage": float(c.planned.layout.zero_stage) if c.planned else 0.0,
        "deployment": c.deployment,
        "pricing": c.pricing,
        "provider": c.provider,
        "instances": float(c.offer.instances if c.offer else math.ceil(c.count / per_server)),
        "gpus_per_instance": float(c.offer.gpus_per_instance if c.offer else per_server),
        "job_hours": c.job_hours,
        "job_cost_usd": c.unit_cost_usd,
        "monthly_usd": c.monthly_usd,
        "capital_usd": c.capital_usd,
        "server_power_kw": per_server * (c.gpu.tdp_w + overhead) / 1000,
        "gpu_hours_per_month": c.usage.gpu_hours_per_month if c.usage else None,
    }


def _compare(kept: Sequence[Candidate]) -> None:
    """Each candidate against the cheapest one and the newest generation's fastest."""
    if not kept:
        return
    cheapest = min(kept, key=lambda c: c.unit_cost_usd)
    year = max(c.gpu.release_year for c in kept)
    newest = min((c for c in kept if c.gpu.release_year == year), key=lambda c: c.hours_per_unit)
    for c in kept:
        c.context["speedup_over_cheapest"] = cheapest.hours_per_unit / c.hours_per_unit
        c.context["cost_over_cheapest"] = c.unit_cost_usd / cheapest.unit_cost_usd
        c.context["newest_gpu"] = newest.gpu.id
        c.context["time_over_newest"] = c.hours_per_unit / newest.hours_per_unit
        c.context["cost_over_newest"] = c.unit_cost_usd / newest.unit_cost_usd


def _pareto(kept: Sequence[Candidate]) -> None:
    """Mark the candidates no other beats on both time and cost per unit of work."""
    for c in kept:
        c.pareto = not any(
            o.hours_per_unit <= c.hours_per_unit
            and o.unit_cost_usd <= c.unit_cost_usd
            and (o.hours_per_unit < c.hours_per_unit or o.unit_cost_usd < c.unit_cost_usd)
            for o in kept
        )


def _catalog(
    service: EstimateService, s: Setting, book: RuleBook, excluded: list[dict[str, Any]]
) -> tuple[list[Gpu], dict[str, list[Fired]]]:
    """The GPUs worth planning: those with a price or a cloud offer that no gpu-scope rule
    excludes; and the gpu-scope warnings of each, for its candidates."""
    offered = {o.gpu_id for o in service.knowledge.offers if o.gpu_count >= 1}
    base = _request_symbols(s)
    out, warnings = [], {}
    for gpu in service.knowledge.gpus.values():
        if not gpu.price_usd and gpu.id not in offered:
            continue
        fired = book.fire("gpu", {**base, **_gpu_symbols(gpu)})
        out_reasons = [f.to_dict() for f in fired if f.rule.effect == "exclude"]
        if out_reasons:
            excluded.append({"gpu": gpu.id, "reasons": out_reasons})
        else:
            out.append(gpu)
            warnings[gpu.id] = fired
    return out, warnings


def recommend(service: EstimateService, body: Mapping[str, Any]) -> dict[str, Any]:
    """The ranked, costed and explained candidates for a request (``POST
    /v1/recommendations``), without its id (see :func:`request_id`)."""
    book = rulebook()
    excluded: list[dict[str, Any]] = []
    if body.get("trace_id"):
        record = service.traces.get(body["trace_id"])
        if record is None:
            raise NotFound("trace", body["trace_id"])
        part = record["analysis"].get("breakdown") or {}
        wall = part.get("wall_us") or 0
        idle = (part.get("idle_us") or {}).get("input", 0.0)
        precision = record["options"].get("precision") or "fp32"
        s = _setting(body, precision, "train", None, True, idle / wall if wall else 0.0)
        gpus, warnings = _catalog(service, s, book, excluded)
        runs = _traced_runs(service, body, record, gpus, excluded)
        profile, shape = None, None
    else:
        raw = service.body_profile(body)
        profile = StepProfile.from_profile(raw)
        params = (raw.get("model") or {}).get("parameters")
        s = _setting(body, profile.precision, profile.task, params / 1e9 if params else None)
        gpus, warnings = _catalog(service, s, book, excluded)
        limit = int(s.constraints.get("max_gpus") or DEFAULT_MAX_GPUS)
        shape = ModelShape.from_profile(raw)
        planner = _kept_runs if profile.trains else _serving_runs
        runs = planner(service, body, profile, shape, gpus, min(limit, 1024), excluded)
    base = _request_symbols(s)
    candidates: list[Candidate] = []
    for run in runs:
        found = _deployments(service, s, run, excluded)
        shared = _run_symbols(found)
        for c in found:
            c.context = _symbols(c, base, shared)
        candidates.extend(found)
    kept = []
    memo = book.results()  # rule results by the values they read
    for c in candidates:  # first the exclusions, which compare nothing
        out = book.fire("candidate", c.context, EXCLUDE, memo)
        if out:
            excluded.append({"gpu": c.gpu.id, "count": c.count, "deployment": c.deployment,
                             "provider": c.provider,
                             "reasons": [f.to_dict() for f in out]})  # fmt: skip
        else:
            kept.append(c)
    _compare(kept)
    for c in kept:
        c.fired = warnings[c.gpu.id] + book.fire("candidate", c.context, KEEP, memo)
    _pareto(kept)
    kept.sort(key=lambda c: c.score(s.objective))
    shown, seen = [], set()
    for c in kept:  # the best of each GPU, count and deployment
        if (c.gpu.id, c.count, c.deployment) not in seen:
            seen.add((c.gpu.id, c.count, c.deployment))
            shown.append(c)
    shown = shown[:SHOWN]
    advice = _advice(service, s, book, profile, shape, shown, kept, body)
    recs = [_shown(i + 1, c, s, service.knowledge) for i, c in enumerate(shown)]
    merged = _merged(excluded, {c.gpu.id for c in kept})
    return {
        "objective": s.objective,
        "recommendations": recs,
        "candidates_total": len(kept),
        "excluded": merged,
        "advice": advice,
        "summary": summary(s, recs, advice, len(merged)),
        "assumptions": _assumptions(s, profile),
        "knowledge_version": service.knowledge.version,
        "rules_version": book.digest,
    }


def _advice(
    service: EstimateService, s: Setting, book: RuleBook, profile: StepProfile | None,
    shape: ModelShape | None, shown: Sequence[Candidate], kept: Sequence[Candidate],
    body: Mapping[str, Any],
) -> list[dict[str, Any]]:  # fmt: skip
    """The request-scope rules: software fixes worth doing before a purchase, and the hybrid
    deployment when owning the baseline and renting the bursts is cheapest."""
    top = shown[0] if shown else None
    symbols: dict[str, Any] = {**_request_symbols(s), "smallest_count": None,
                               "fits_one_gpu_accumulating": False}  # fmt: skip
    if top is not None:
        smallest = min(c.count for c in kept if c.gpu.id == top.gpu.id)
        symbols["smallest_count"] = float(smallest)
        if profile is not None and smallest > 1:
            symbols["fits_one_gpu_accumulating"] = _fits_one_accumulating(
                service, body, profile, shape, top.gpu
            )
    if profile is not None and top is not None and s.precision in ("fp32", "tf32"):
        model = service._built_model()
        slow = work(profile, top.gpu, math_mode(top.gpu, s.precision), "pytorch", model.step_model)
        if top.gpu.bf16_tflops:
            fast = work(profile, top.gpu, math_mode(top.gpu, "bf16"), "pytorch", model.step_model)
            symbols["mixed_precision_speedup"] = (slow.forward_s + slow.backward_s) / (
                fast.forward_s + fast.backward_s
            )
    if top is not None and top.planned is not None:
        memory = top.planned.memory
        if top.planned.layout.activation_checkpointing == "none" and memory.total_bytes:
            # full checkpointing keeps one layer input per layer: most activations go
            symbols["checkpointing_memory_saving"] = (
                0.8 * memory.activations_bytes / (memory.total_bytes)
            )
    symbols.update(_hybrid(s, kept))
    return [f.to_dict() for f in book.fire("request", symbols)]


def _fits_one_accumulating(
    service: EstimateService, body: Mapping[str, Any], profile: StepProfile,
    shape: ModelShape | None, gpu: Gpu,
) -> bool:  # fmt: skip
    """Whether one ``gpu`` holds the workload at micro-batch 1 (its batch then accumulated
    over micro-batches): the same model and workload profiled at batch 1, under the layout
    of one GPU that needs least memory. Only for a described training workload with a batch
    above 1 (a stored profile does not say how to profile it again)."""
    workload = body.get("workload")
    if not profile.trains or profile.batch_size <= 1 or "model" not in body or not workload:
        return False
    single = dataclasses.replace(workload, batch_size=1)  # a loaded profiles.Workload
    one = StepProfile.from_profile(
        service.body_profile({"model": body["model"], "workload": single})
    )
    one = stacked(one, shape, body.get("stack") or "pytorch")
    usable = gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE
    sized = sized_at(1, one, shape, int(body.get("gpus_per_node") or 8))
    return bool(sized) and sized[0][1].total_bytes <= usable


def _hybrid(s: Setting, kept: Sequence[Candidate]) -> dict[str, Any]:
    """Whether owning the baseline of the best on-premise choice and renting its bursts on
    the same GPU's cheapest offer costs less than either alone."""
    owned = [c for c in kept if c.onprem is not None]
    if not owned or (s.usage.get("pattern") or "steady") != "bursty":
        return {"hybrid_cheaper": False}
    best = min(owned, key=lambda c: c.monthly_usd)
    clouds = [c for c in kept if c.offer is not None and c.gpu.id == best.gpu.id
              and c.count == best.count]  # fmt: skip
    if not clouds or best.usage is None or best.onprem is None:
        return {"hybrid_cheaper": False}
    rented = min(clouds, key=lambda c: c.monthly_usd)
    assert rented.offer is not None
    mix = cost.hybrid(best.gpu, best.count, best.usage, best.onprem.parameters, rented.offer)
    if mix is None:
        return {"hybrid_cheaper": False}
    other = min(best.monthly_usd, rented.monthly_usd)
    return {
        "hybrid_cheaper": mix.monthly_usd < other,
        "hybrid_owned": float(mix.owned_count),
        "hybrid_saving_share": 1 - mix.monthly_usd / other if other else None,
    }


def _shown(rank: int, c: Candidate, s: Setting, knowledge: Knowledge) -> dict[str, Any]:
    layout = c.planned.layout.to_dict() if c.planned else c.served.layout if c.served else None
    link = knowledge.interconnects.get(c.context.get("interconnect") or "")
    interconnect = {"id": c.context.get("interconnect"), "name": None, "kind": "pcie"}
    if link is not None:
        interconnect.update(name=link.name, kind=link.kind)
    estimate: dict[str, Any] = {
        "step_time_s": c.step_s,
        "samples_per_s": c.samples_per_s,
        "job_hours": c.job_hours,
        "hours_per_unit": c.hours_per_unit,
        "unit": "job"
        if c.job_hours is not None
        else f"{UNIT_SAMPLES:,.0f} {'requests' if c.served else 'samples'}",
        "bound": c.context.get("bound"),
    }
    if c.planned is not None:
        estimate["memory_per_gpu_gb"] = c.planned.memory.total_bytes / 1e9
        estimate["memory_headroom"] = round(c.planned.headroom, 4)
        estimate["mfu"] = c.planned.step.mfu
    if c.served is not None:
        estimate["memory_per_gpu_gb"] = c.served.memory_bytes / 1e9
        estimate["memory_headroom"] = round(c.served.headroom, 4)
        estimate["serving"] = c.served.figures
    costs: dict[str, Any] = {
        "per_unit_usd": c.unit_cost_usd,
        "usd_per_gpu_hour": c.usd_per_gpu_hour,
        "monthly_usd": c.monthly_usd,
        "horizon_usd": c.horizon_usd,
        "capital_usd": c.capital_usd,
        "break_even_gpu_hours_per_month": c.context.get("break_even_gpu_hours"),
    }
    if c.usage is not None:
        costs["usage"] = {"gpu_hours_per_month": c.usage.gpu_hours_per_month,
                          "horizon_months": c.usage.horizon_months}  # fmt: skip
    return {
        "rank": rank,
        "gpu": c.gpu.id,
        "gpu_name": c.gpu.name,
        "count": c.count,
        "vram_gb": c.gpu.memory_gb,
        "layout": layout,
        "interconnect": interconnect,
        "nodes": int(c.context["nodes"]),
        "deployment": c.deployment,
        "offer": c.offer.to_dict() if c.offer else None,
        "estimate": estimate,
        "cost": costs,
        "score": c.score(s.objective)[0],
        "reasons": [f.to_dict() for f in c.fired],
        "pareto": c.pareto,
    }


def _merged(excluded: Sequence[Mapping[str, Any]], kept: set[str]) -> list[dict[str, Any]]:
    """One entry per GPU that no candidate of is kept, with its distinct reasons (a
    candidate per count and offer may repeat them)."""
    out: dict[str, dict[str, Any]] = {}
    for e in excluded:
        if e["gpu"] in kept:
            continue
        entry = out.setdefault(e["gpu"], {"gpu": e["gpu"], "reasons": []})
        for r in e["reasons"]:
            if r not in entry["reasons"]:
                entry["reasons"].append(r)
    return list(out.values())


def _assumptions(s: Setting, profile: StepProfile | None) -> list[str]:
    out = [
        "each GPU at its smallest fitting count and each power of two above it up to "
        "max_gpus (default 64), with the planner's fastest layout there; 8 GPUs per server",
        "on-premise costs from knowledge/data/onprem.yaml (override any in onprem); cloud "
        "prices from knowledge/data/offer_prices.csv, the cheapest region per provider",
    ]
    if profile is not None and not profile.dataset_steps:
        what = "samples" if profile.trains else "requests"
        out.append(f"no dataset in the workload: cost and time are per million {what}")
    if profile is not None and not profile.trains:
        out.append(
            "serving: each GPU's smallest group that holds the model (tensor parallel for a "
            "generative model, else one GPU) as one, two and four replicas; a generative "
            "model decodes as many sequences together as its memory holds (or concurrency), "
            "each sequence's prefill alone; latency is one request's (estimate.step_time_s)"
        )
    if s.traced:
        out.append("a traced step is projected onto each GPU at the trace's count; GPUs with "
                   "less memory than the reference are left out")  # fmt: skip
    return out


def summary(s: Setting, recs: Sequence[Mapping[str, Any]], advice: Sequence[Mapping[str, Any]],
            excluded: int) -> str:  # fmt: skip
    """A markdown answer of at most 1,200 characters, fit for a chat reply."""
    if not recs:
        return (f"**No candidate meets the constraints** ({excluded} GPU types excluded; "
                "see `excluded` for each one's reasons).")[:1200]  # fmt: skip
    lines = [f"**Objective: {s.objective.replace('_', ' ')}**"]
    for r in recs[:3]:
        est, c = r["estimate"], r["cost"]
        where = (
            r["deployment"]
            if r["deployment"] == "on-premise"
            else (f"cloud ({r['offer']['provider']}, {r['offer']['pricing'].replace('_', '-')})")
        )
        lines.append(f"{r['rank']}. {r['count']} x {r['gpu_name']}, {where}: "
                     f"{est['hours_per_unit']:.3g} h and {_usd(c['per_unit_usd'])} per "
                     f"{est['unit']}")  # fmt: skip
    if advice:
        lines.append("First: " + advice[0]["message"])
    text = "\n".join(lines)
    return text if len(text) <= 1200 else text[:1197] + "..."


def _usd(value: float) -> str:
    return f"{value:,.0f} USD" if value >= 100 else f"{value:.3g} USD"


def request_id(body: Mapping[str, Any], knowledge_version: str) -> str:
    """A stable id: the same request on the same knowledge gets the same id."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{knowledge_version}\n{canonical}".encode()).hexdigest()[:24]
