"""Recommendations: every GPU, count, layout and deployment that can run a workload, costed,
explained by the rules (:mod:`service.engine.rules`) and ranked by the buyer's objective.

A candidate is one GPU type at a count with the planner's fastest layout there
(:func:`service.engine.planning.search.planned_at`), run either on-premise (bought, costed by
:mod:`service.engine.deciding.cost`) or as a cloud offer. Its "work" is one job when the workload
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
from service.engine import deadline
from service.engine.deciding import cost, deployment, stack_advice
from service.engine.deciding import job_time as job
from service.engine.deciding.deployment import Site
from service.engine.deciding.job_time import Energy, JobTime, Sizes
from service.engine.errors import InvalidRequest, NotFound
from service.engine.estimating import software as stacks
from service.engine.estimating.estimate import USABLE_MEMORY_SHARE
from service.engine.estimating.layout import Layout, LayoutMemory, ModelShape, memory_parts
from service.engine.estimating.on_request import EstimateService
from service.engine.estimating.roofline import MathMode, math_mode
from service.engine.estimating.software import Stack
from service.engine.estimating.step_profile import StepProfile
from service.engine.owners import NOBODY, Reader
from service.engine.planning.network import Network, network
from service.engine.planning.plans import served_alone
from service.engine.planning.search import Planned, fastest_fitting, sized_at
from service.engine.planning.serving import layout_inference, tensor_degrees
from service.engine.planning.step_time import Parts
from service.engine.planning.work import stacked, work
from service.engine.requests import Constraints, RecommendationRequest, UsageAsked
from service.engine.rules import Fired, RuleBook, rulebook

OBJECTIVES = ("best_value", "fastest", "cheapest")
DEPLOYMENTS = ("any", "cloud", "on-premise")
UNIT_SAMPLES = 1e6  # the unit of work when the workload gives no dataset
DEFAULT_MAX_GPUS = 64
SHOWN = 10  # recommendations returned
EXCLUDE = frozenset({"exclude"})
KEEP = frozenset({"penalise", "warn", "advise"})
PLANNER = "rightsize layout planner (service/engine/planning/)"


@dataclass
class Candidate:
    """One GPU at a count and layout, on one deployment, with its figures and reasons."""

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


# --- candidates -----------------------------------------------------------------------


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


def _gpu_sites(service: EstimateService, s: Setting, gpu: Gpu) -> list[Site]:
    """Where ``gpu`` can run under the request's constraints: its offers and designs."""
    c = s.constraints
    priced = bool(gpu.price_usd or "gpu_price_usd" in s.request.onprem)
    return deployment.sites(service.knowledge, gpu, c.deployment, c.providers, priced)


def _counts(max_gpus: int, group: Sequence[Site]) -> list[int]:
    """The GPU counts a topology is planned at: each power of two, and each power-of-two
    multiple of its instance's GPUs, that one of its sites is taken at."""
    per = group[0].gpus_per_instance
    found = {2**k for k in range(11)} | {per * 2**k for k in range(11)}
    return sorted(n for n in found if n <= max_gpus and any(x.admits(n) for x in group))


def _no_site(gpu: Gpu, s: Setting) -> dict[str, Any]:
    allowed = s.constraints.deployment
    why = (
        "no catalog price to buy it"
        if allowed == "on-premise"
        else ("no cloud offer" + ("" if allowed == "cloud" else " and no catalog price"))
    )
    return {"gpu": gpu.id, "reasons": [_reason(
        "no-price", f"{gpu.name}: {why} matches the request", "knowledge/data")]}  # fmt: skip


def _described_runs(
    service: EstimateService, s: Setting,
    profile: StepProfile, shape: ModelShape | None, gpus: Sequence[Gpu], max_gpus: int,
    excluded: list[dict[str, Any]],
) -> list[Run]:  # fmt: skip
    """For each GPU and each topology its offers and server designs have (GPUs per instance,
    the link inside, the network between), the planner's fastest layout on that topology at
    each count its sites are taken at, up to ``max_gpus``, for ``profile`` (of ``shape``)."""
    model = service._built_model()
    stack = s.stack
    assert stack is not None  # every described workload has one (recommend)
    profile = stacked(profile, shape, stack)
    job = profile.dataset_steps * profile.samples_per_step if profile.dataset_steps else None
    batch = s.request.global_batch_size
    tables: dict[tuple[int, int, bool], list[tuple[Layout, LayoutMemory]]] = {}  # every GPU

    def sized(n: int, per_node: int, p2p: bool) -> list[tuple[Layout, LayoutMemory]]:
        """Every layout of ``n`` GPUs in instances of ``per_node``; without peer-to-peer
        between them, none that splits a layer or a sequence (tensor and context
        parallelism exchange activations inside every layer: NCCL needs P2P for them)."""
        per_node = min(per_node, n)  # a layout compares its degrees with the node's GPUs
        if (n, per_node, p2p) not in tables:
            if (n, n, True) not in tables:  # every layout, tensor parallelism up to n
                tables[n, n, True] = sized_at(n, profile, shape, n, batch)
            # the node's GPUs bound only the tensor-parallel degree (layout.check)
            tables[n, per_node, p2p] = [
                x for x in tables[n, n, True]
                if x[0].tensor_parallel <= per_node
                and (p2p or (x[0].tensor_parallel == 1 and x[0].context_parallel == 1))
            ]  # fmt: skip
        return tables[n, per_node, p2p]

    runs = []
    for gpu, mode in _with_modes(gpus, profile.precision, excluded):
        deadline.check()
        found_sites = _gpu_sites(service, s, gpu)
        if not found_sites:
            excluded.append(_no_site(gpu, s))
            continue
        done = work(profile, gpu, mode, stack, model.step_model)
        usable = gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE * TRAINING_MEMORY_MARGIN
        groups: dict[tuple[Any, ...], list[Site]] = {}
        for site in found_sites:
            groups.setdefault(site.topology, []).append(site)
        planned, split_only = 0, False
        plans: dict[tuple[Any, ...], Planned | None] = {}
        parts: dict[int, Parts] = {}  # each layout's computation on this GPU, any network
        for group in groups.values():
            net = group[0].network
            rate = 0.0  # the best rate at a smaller count on this topology
            for n in _counts(max_gpus, group):
                table = sized(n, net.gpus_per_node, net.intra.p2p)
                if not table or table[0][1].total_bytes > usable:
                    whole = sized(n, net.gpus_per_node, True)
                    split_only |= bool(whole) and whole[0][1].total_bytes <= usable
                    continue
                key = _plan_key(n, net)
                if key not in plans:
                    plans[key] = fastest_fitting(
                        profile, shape, done, net, mode, usable, table, parts
                    )
                found = plans[key]
                if found is None:
                    continue
                if n > net.gpus_per_node and found.step.samples_per_s <= rate:
                    break  # more instances no longer run it faster: nor will still more
                previous, rate = rate, max(rate, found.step.samples_per_s)
                planned += 1
                runs.append(Run(gpu, n, found, found.step.step_s, found.step.samples_per_s,
                                job, None, tuple(x for x in group if x.admits(n))))  # fmt: skip
                if n >= net.gpus_per_node and not _grows(net, previous, rate):
                    break  # the network already binds: a larger count costs more per job
        if not planned:
            excluded.append(_unplanned(gpu, split_only, max_gpus))
    return runs


def _grows(net: Network, before: float, now: float) -> bool:
    """Whether doubling the GPUs on ``net`` sped the job up enough to try doubling again."""
    least = MIN_DOUBLING_GAIN if net.inter.p2p else MIN_DOUBLING_GAIN_TCP
    return not before or now >= least * before


def _plan_key(n: int, net: Network) -> tuple[Any, ...]:
    """What a plan of ``n`` GPUs depends on of ``net``: n GPUs inside one instance never
    cross the network between instances, so every topology with the same link inside
    plans them alike."""
    inside = (net.intra.bandwidth_gb_per_s, net.intra.latency_us, net.intra.p2p)
    between = (net.inter.bandwidth_gb_per_s, net.inter.latency_us)
    return (n, min(n, net.gpus_per_node), inside,
            between if n > net.gpus_per_node else None)  # fmt: skip


def _unplanned(gpu: Gpu, split_only: bool, max_gpus: int) -> dict[str, Any]:
    """Why no layout of ``gpu`` was planned: it fits only split where it cannot be, or not
    at all."""
    if split_only:
        return {"gpu": gpu.id, "reasons": [_reason(
            "tensor-parallel-needs-p2p", f"fits {gpu.memory_gb:g} GB GPUs only with its "
            "layers split over GPUs (tensor or context parallelism), which needs "
            f"peer-to-peer transfers that {gpu.name} does not do", PLANNER)]}  # fmt: skip
    return {"gpu": gpu.id, "reasons": [_reason(
        "memory-fit", f"does not fit {gpu.memory_gb:g} GB GPUs under any layout up to "
        f"{max_gpus} GPUs on any of its offers or server designs, keeping a tenth free "
        "(tensor parallelism stays inside an instance)", PLANNER)]}  # fmt: skip


# A topology is planned at larger counts while doubling the GPUs still speeds the job up
# by a quarter: past that, each doubling costs 60% more a job and saves under a fifth of
# its time, and over a network that already binds it only gets worse
MIN_DOUBLING_GAIN = 1.25
# over a network without RDMA (TCP sockets, the internet) a half: such a spread is never
# the fastest way, and below that it is not the cheapest either
MIN_DOUBLING_GAIN_TCP = 1.5
# What a recommended training layout may hold of the GPU's usable memory: the caching
# allocator reserves more than it hands out (fragmentation), and NCCL's buffers and the
# CUDA context are not in the step's count; a layout planned to the last byte runs out
# of memory in practice (PyTorch's CUDA memory notes: reserved exceeds allocated)
TRAINING_MEMORY_MARGIN = 0.9
RUNS_KEPT = 64  # planned runs kept per process, for requests that differ in constraints
_runs: OrderedDict[tuple[Any, ...], tuple[list[Run], list[dict[str, Any]]]] = OrderedDict()
_runs_lock = threading.Lock()


def _kept_runs(
    service: EstimateService, s: Setting,
    profile: StepProfile, shape: ModelShape | None, gpus: Sequence[Gpu], max_gpus: int,
    excluded: list[dict[str, Any]],
) -> list[Run]:  # fmt: skip
    """:func:`_described_runs`, kept for the same profile, GPUs, sites and layout options:
    a request that changes only its budget, objective or usage reuses the layout search
    (most of a recommendation's time)."""
    if not profile.profile_id:
        return _described_runs(service, s, profile, shape, gpus, max_gpus, excluded)
    r, c = s.request, s.constraints
    key = (
        service.knowledge.version, profile.profile_id, tuple(g.id for g in gpus), max_gpus,
        s.stack, r.global_batch_size, c.deployment, tuple(sorted(c.providers)),
        "gpu_price_usd" in r.onprem,
    )  # fmt: skip
    with _runs_lock:
        found = _runs.get(key)
        if found is not None:
            _runs.move_to_end(key)
    if found is None:
        mine: list[dict[str, Any]] = []
        found = (_described_runs(service, s, profile, shape, gpus, max_gpus, mine), mine)
        with _runs_lock:
            _runs[key] = found
            while len(_runs) > RUNS_KEPT:
                _runs.popitem(last=False)
    excluded.extend(copy.deepcopy(found[1]))
    return list(found[0])


def _serving_runs(
    service: EstimateService, s: Setting, profile: StepProfile,
    shape: ModelShape | None, gpus: Sequence[Gpu], max_gpus: int,
    excluded: list[dict[str, Any]],
) -> list[Run]:  # fmt: skip
    """Inference: each GPU's smallest group that serves the model (the fewest tensor-parallel
    GPUs inside one of its instances whose memory holds the weights and a sequence's KV
    cache for a generative model, one GPU otherwise), as one, two, four and eight replicas
    within ``max_gpus`` where a deadline asks for the requests' throughput (without one,
    more replicas serve the same demand no better: one group). A sample is a request; a
    group's rate is at the most sequences its memory decodes together. Replicas share no
    traffic: they may sit on separate instances."""
    job = profile.dataset_steps * profile.samples_per_step if profile.dataset_steps else None
    runs = []
    for gpu, mode in _with_modes(gpus, profile.precision, excluded):
        deadline.check()
        found_sites = _gpu_sites(service, s, gpu)
        if not found_sites:
            excluded.append(_no_site(gpu, s))
            continue
        per_node = max(x.gpus_per_instance for x in found_sites)
        usable = gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE
        if profile.output_tokens:
            net = network(service.knowledge, gpu, per_node)
            found = _decoding(service, s, profile, shape, gpu, mode, net, usable, max_gpus)
        else:
            found = _one_gpu_serving(service, profile, gpu)
        if found is None:
            excluded.append({"gpu": gpu.id, "reasons": [_reason(
                "memory-fit", f"does not fit {gpu.memory_gb:g} GB GPUs for serving up to "
                f"{min(max_gpus, per_node)} GPUs a replica (its largest instance or "
                "server)", PLANNER)]})  # fmt: skip
            continue
        group, rate, latency, served = found
        for replicas in (1, 2, 4, 8) if s.constraints.deadline_hours else (1,):
            n = group * replicas
            if n > max_gpus:
                break
            here = tuple(x for x in found_sites if x.gpus_per_instance >= group
                         and (x.admits(n) or n < x.gpus_per_instance))  # fmt: skip
            if not here:
                continue
            layout = {**served.layout, "data_parallel": replicas}
            figures = {**served.figures, "requests_per_s": rate * replicas}
            runs.append(Run(gpu, n, None, latency, rate * replicas, job,
                            replace(served, layout=layout, figures=figures), here))  # fmt: skip
    return runs


def _decoding(
    service: EstimateService, s: Setting, profile: StepProfile,
    shape: ModelShape | None, gpu: Gpu, mode: MathMode, net: Network, usable: float,
    max_gpus: int,
) -> tuple[int, float, float, Served] | None:  # fmt: skip
    """A generative model's smallest tensor-parallel group that holds the weights and the
    asked concurrency (at least one sequence); its requests per second, one request's
    latency, and how it serves. Each sequence's prefill (the profile's over its batch) runs
    alone; its output tokens are decoded with the others'."""
    step_model = service._built_model().step_model
    request, stack = s.request, s.stack
    assert stack is not None  # every described workload has one (recommend)
    wanted = request.concurrency or 1
    for t in tensor_degrees(shape, min(net.gpus_per_node, max_gpus)):
        x = layout_inference(profile, shape, gpu, mode, step_model, net, t, stack, usable,
                             request.weight_precision, request.kv_precision,
                             request.concurrency)  # fmt: skip
        if x.max_concurrency < wanted:
            continue
        c, output = x.concurrency, float(profile.output_tokens or 0)
        prefill = x.time_to_first_token_s / max(profile.batch_size, 1.0)
        rate = 1.0 / (prefill + output * x.time_per_output_token_s / c)
        # a request waits for its prefill, then its tokens, between which the others'
        # prefills join under continuous batching
        latency = x.time_to_first_token_s + output * x.inter_token_latency_s
        memory = profile.memory
        held = (x.weights_bytes_per_gpu + x.kv_bytes_held_per_gpu
                + memory.runtime_overhead_bytes + memory.temporary_peak_bytes / t)  # fmt: skip
        figures = {
            "time_to_first_token_s": x.time_to_first_token_s,
            "time_per_output_token_s": x.time_per_output_token_s,
            "inter_token_latency_s": x.inter_token_latency_s,
            "concurrency": c,
            "max_concurrency": x.max_concurrency,
        }
        layout = {"tensor_parallel": t, "weight_precision": x.weight_precision,
                  "kv_precision": x.kv_precision}  # fmt: skip
        parts = {
            "parameters": x.weights_bytes_per_gpu,
            "kv_cache": x.kv_bytes_held_per_gpu,
            "other": memory.runtime_overhead_bytes + memory.temporary_peak_bytes / t,
        }
        return t, rate, latency, Served(layout, held, usable, x.bound, figures, parts)
    return None


def _one_gpu_serving(
    service: EstimateService, profile: StepProfile, gpu: Gpu
) -> tuple[int, float, float, Served] | None:
    """A model without a decode phase served by one GPU a replica at the workload's batch
    (:func:`service.engine.planning.plans.served_alone`); None where the batch does not fit."""
    alone = served_alone(service, profile, gpu)
    if not alone["fits"] or not alone["requests_per_s"]:
        return None
    layout = {"tensor_parallel": 1, "batch_size": alone["batch_size"]}
    figures = {"batch_latency_s": alone["batch_latency_s"]}
    held = Served(layout, alone["memory_per_gpu_bytes"], alone["usable_memory_bytes"],
                  alone["bound"], figures, alone["memory_parts_bytes"])  # fmt: skip
    return 1, alone["requests_per_s"], alone["batch_latency_s"], held


def _traced_runs(
    service: EstimateService, s: Setting, record: dict[str, Any],
    gpus: Sequence[Gpu], excluded: list[dict[str, Any]],
) -> list[Run]:  # fmt: skip
    """The traced step of ``record`` projected onto each GPU at the trace's count; a GPU
    with less memory than the reference is left out (the trace does not say what fits)."""
    count = int(s.request.count or 1)
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
        here = tuple(x for x in _gpu_sites(service, s, gpu)
                     if x.admits(count) or count < x.gpus_per_instance)  # fmt: skip
        if not here:
            excluded.append(_no_site(gpu, s))
            continue
        step = projection["step_time_us"] / 1e6
        runs.append(Run(gpu, count, None, step, batch * count / step, None, None, here))
    return runs


@dataclass(frozen=True)
class Feed:
    """What a job moves besides its steps, and how fast one vCPU prepares its samples."""

    sizes: Sizes
    input_kind: str
    samples_per_s_per_vcpu: float | None  # None: not bounded by the host
    reserved_vcpus_per_gpu: float


def _feed(knowledge: Knowledge, raw: Mapping[str, Any] | None, profile: StepProfile | None) -> Feed:
    """The job's dataset, download and checkpoint sizes and its input kind: images when the
    model takes an image size, token sequences when it takes a sequence length."""
    reserved = knowledge.input_rates.get("reserved")
    spare = float(reserved.vcpus_per_gpu.value) if reserved and reserved.vcpus_per_gpu else 1.0
    if raw is None or profile is None:
        return Feed(Sizes(0.0, 0.0, 0.0), "traced", None, spare)
    workload = raw.get("workload") or {}
    kind = "image" if profile.image_size and not profile.seq_len else (
        "text" if profile.seq_len else "tabular")  # fmt: skip
    rates = knowledge.input_rates.get(kind)
    dataset = 0.0
    if profile.trains and rates is not None:
        samples = float(workload.get("dataset_samples") or 0)
        tokens = float(workload.get("dataset_tokens") or samples * (profile.seq_len or 0))
        if kind == "text" and rates.bytes_per_token is not None:
            dataset = tokens * float(rates.bytes_per_token.value)
        elif rates.bytes_per_sample is not None:
            dataset = samples * float(rates.bytes_per_sample.value)
    memory = profile.memory
    params = float((raw.get("model") or {}).get("parameters") or 0)
    download = params * 2.0 if profile.task != "training" else 0.0  # 16-bit weights
    state = memory.optimizer_states_bytes + memory.master_weights_bytes + profile.gradients_bytes
    per_vcpu = None
    if profile.trains and rates is not None and rates.samples_per_s_per_vcpu is not None:
        per_vcpu = float(rates.samples_per_s_per_vcpu.value)
    return Feed(Sizes(dataset, download, state if profile.trains else 0.0), kind, per_vcpu, spare)


def _fed_rate(s: Setting, site: Site, count: int, rate: float) -> float | None:
    """The samples a second the deployment's hosts can prepare, where below ``rate``."""
    per_vcpu = s.feed.samples_per_s_per_vcpu
    if per_vcpu is None:
        return None
    instances = site.instances(count)
    on_each = min(count, site.gpus_per_instance)
    vcpus = max(site.vcpus - s.feed.reserved_vcpus_per_gpu * on_each, 1.0)
    ceiling = instances * vcpus * per_vcpu
    return ceiling if ceiling < rate else None


def _busy(run: Run, rate: float) -> float:
    """The share of a step the GPUs' kernels run (what their power draw follows)."""
    if run.planned is not None:
        step = run.planned.step
        busy = (step.compute_s + step.recompute_s + step.optimizer_s) / step.step_s
    else:
        busy = 0.8 if run.served is None else 0.7
    return busy * rate / run.samples_per_s


def _prices(
    site: Site, s: Setting, usage_kind: tuple[bool, bool]
) -> list[tuple[str, str, float, Any]]:
    """The offer's cheapest region at each pricing the usage admits: on demand; spot for
    interruptible work; reserved for steady use."""
    interruptible, steady = usage_kind
    regions = s.constraints.regions
    best: dict[str, tuple[float, str, Any]] = {}
    assert site.offer is not None
    for price in site.offer.prices:
        if regions and price.region not in regions:
            continue
        for pricing, rate in cost.admitted_rates(price, interruptible, steady):
            if pricing not in best or rate < best[pricing][0]:
                best[pricing] = (rate, price.region, price)
    return [(pricing, region, rate, price) for pricing, (rate, region, price) in best.items()]


def _deployments(
    service: EstimateService, s: Setting, run: Run, excluded: list[dict[str, Any]]
) -> list[Candidate]:
    """The run on each of its sites: each offer at the cheapest region of each pricing the
    usage admits, and the server design it is bought in; each with its whole job's time,
    cost as billed, energy and emissions."""
    deadline.check()
    k = service.knowledge
    overrides = s.request.onprem
    host_w = float(k.onprem["server_power_overhead_w_per_gpu_slot"].value)
    interruptible = s.usage.interruptible
    steady = s.usage.pattern == "steady"
    units = run.job_samples or UNIT_SAMPLES
    out = []
    run_bound = _run_bound(run)
    for site in run.sites:
        instances = site.instances(run.count)
        rate, bound = run.samples_per_s, run_bound
        fed = _fed_rate(s, site, run.count, rate) if run.planned is not None else None
        if fed is not None:
            rate, bound = fed, "input"
        steps_h = units / rate / 3600
        provider = k.providers[site.provider]
        between = next((x for x in site.links if x.scope == "between"), None)
        gbps = between.gb_per_s * 8 if between is not None and site.kind == "cloud" else None

        def timed(pricing: str, steps: float = steps_h, gbps: float | None = gbps) -> JobTime:
            if run.job_samples is None:  # per unit of work: the steps alone
                return JobTime(0.0, 0.0, steps, 0.0, 0.0, 0.0, 0, 0.0)
            return job.job_time(provider, instances, steps, s.feed.sizes, pricing, gbps,  # noqa: B023
                                run.planned is not None)  # fmt: skip

        busy = _busy(run, rate)
        if site.kind == "cloud":
            assert site.offer is not None
            for pricing, region, hourly, price in _prices(site, s, (interruptible, steady)):
                jt = timed(pricing)
                billed = job.billed_hours(provider, jt.hours) if run.job_samples else jt.hours
                job_cost = instances * hourly * billed
                per_gpu_hour = hourly * instances / run.count
                usage = cost.usage_from(s.usage, jt.hours * run.count)
                runs = usage.gpu_hours_per_month / (jt.hours * run.count)
                monthly = (instances * hourly * cost.HOURS_PER_MONTH if pricing == "reserved"
                           else runs * job_cost)  # fmt: skip
                offer = cost.CloudCost(
                    site.offer.id, site.provider, site.offer.instance_type, region,
                    price.catalog_date.isoformat(), price.source, pricing,
                    site.offer.gpu_count, instances, per_gpu_hour, monthly,
                    monthly * usage.horizon_months,
                )  # fmt: skip
                grid = k.grid_intensity(site.provider, region)
                power = job.energy(run.gpu.tdp_w, run.count, jt, busy, host_w,
                                   (float(provider.pue.value), provider.pue.source),
                                   (grid.g_co2e_per_kwh, grid.source))  # fmt: skip
                out.append(Candidate(
                    run.gpu, run.count, run.planned, run.step_s, rate,
                    jt.hours if run.job_samples else None, jt.hours, "cloud", pricing,
                    site.provider, 0.0, monthly, monthly * usage.horizon_months, per_gpu_hour,
                    job_cost, site, instances, jt, power, region, bound, offer=offer,
                    usage=usage, served=run.served,
                ))  # fmt: skip
            continue
        params = _onprem_parameters(k, overrides, run.gpu, run.count)
        jt = timed("owned")
        usage = cost.usage_from(s.usage, jt.hours * run.count)
        own = cost.on_premise(run.gpu, run.count, usage, params)
        grid = k.grid_intensity("on-premise", "*")
        pue = params["pue"]
        power = job.energy(run.gpu.tdp_w, run.count, jt, busy, host_w,
                           (pue.value, pue.source), (grid.g_co2e_per_kwh, grid.source))  # fmt: skip
        out.append(Candidate(
            run.gpu, run.count, run.planned, run.step_s, rate,
            jt.hours if run.job_samples else None, jt.hours, "on-premise", "owned",
            "on-premise", own.capital_usd, own.monthly_usd, own.horizon_usd,
            own.cost_per_gpu_hour_usd, jt.hours * run.count * own.cost_per_gpu_hour_usd,
            site, instances, jt, power, None, bound, onprem=own, usage=usage,
            served=run.served,
        ))  # fmt: skip
    if not out:
        excluded.append({**_no_site(run.gpu, s), "count": run.count})
    return out


def _onprem_parameters(
    knowledge: Knowledge, overrides: Mapping[str, float], gpu: Gpu, count: int
) -> dict[str, cost.Parameter]:
    """:func:`cost.onprem_parameters`, kept with the knowledge for the same GPU and count
    where the request overrides nothing."""
    if overrides:  # a request's own figures: not kept (they would pile up)
        return cost.onprem_parameters(knowledge, overrides, gpu, count)
    key = ("onprem_parameters", gpu.id, count)
    found = knowledge.derived.get(key)
    if found is None:
        found = knowledge.derived[key] = cost.onprem_parameters(knowledge, overrides, gpu, count)
    return dict(found)


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


def _compare(kept: Sequence[Candidate]) -> None:
    """Each candidate against the cheapest one and the newest generation's fastest."""
    if not kept:
        return
    cheapest = min(kept, key=lambda c: c.unit_cost_usd)
    year = max(c.gpu.release_year for c in kept)
    newest = min((c for c in kept if c.gpu.release_year == year), key=lambda c: c.hours_per_unit)
    for c in kept:
        c.context["speedup_over_cheapest"] = cheapest.hours_per_unit / c.hours_per_unit
        c.context["cost_over_cheapest"] = _times(c.unit_cost_usd, cheapest.unit_cost_usd)
        c.context["newest_gpu"] = newest.gpu.id
        c.context["time_over_newest"] = c.hours_per_unit / newest.hours_per_unit
        c.context["cost_over_newest"] = _times(c.unit_cost_usd, newest.unit_cost_usd)


def _times(cost_usd: float, other_usd: float) -> float:
    """How many times ``other_usd`` a cost is; a free choice (owned GPUs priced at 0 and no
    running costs) is as costly as another free one and infinitely cheaper than any other."""
    if other_usd > 0:
        return cost_usd / other_usd
    return 1.0 if cost_usd <= 0 else math.inf


def _pareto(kept: Sequence[Candidate]) -> None:
    """Mark the candidates no other beats on both time and cost per unit of work (one pass
    over them in order of time, then cost: a candidate is on the front when it is cheaper
    than every faster one)."""
    cheapest = math.inf
    ordered_by_time = sorted(kept, key=lambda c: (c.hours_per_unit, c.unit_cost_usd))
    i = 0
    while i < len(ordered_by_time):  # candidates of equal time are judged together
        j = i
        while j < len(ordered_by_time) and (
            ordered_by_time[j].hours_per_unit == ordered_by_time[i].hours_per_unit
        ):
            j += 1
        tied = ordered_by_time[i:j]
        least = tied[0].unit_cost_usd  # sorted by cost within the tie
        for c in tied:
            c.pareto = c.unit_cost_usd < cheapest and c.unit_cost_usd == least
        cheapest = min(cheapest, least)
        i = j


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


# Candidates whose score is within BAND of the best, or within BAND_USD of it, are told
# apart by their footprint: a tenth is about the estimate's own error on GPUs it was not
# fitted on (rightsize validate: 6-13% median) and less than cloud and marketplace prices
# move between two catalogs; a dollar a job is below what anyone weighs against running
# on fewer machines
BAND = 0.10
BAND_USD = 1.0
TIE_BREAKERS = ("footprint", "carbon", "time")


def ordered(kept: Sequence[Candidate], s: Setting) -> list[Candidate]:
    """``kept`` best first: by the objective's score; among those within the band of the
    best (less any another clearly beats), the request's tie-breaker decides. By default
    the smaller footprint: fewer instances, then one GPU before several (a single-GPU job
    needs no distributed setup; four GPUs or eight in one machine are the same work); among
    equal footprints the fastest (times within :data:`BAND` of each other count as equal,
    the better score first). Serving counts every GPU: replicas are servers of their own,
    and more of them serve the same demand no better."""

    def score(c: Candidate) -> tuple[float, float]:
        return c.score(s.objective, s.time_value)

    scored = sorted(kept, key=score)
    if not scored:
        return []
    best = score(scored[0])[0]
    limit = best * (1 + BAND)
    if s.objective == "best_value":  # cheapest means the least money, fastest the least time
        limit = max(limit, best + BAND_USD)
    cut = next((i for i, c in enumerate(scored) if score(c)[0] > limit), len(scored))
    band, rest = scored[:cut], scored[cut:]
    # one clearly beaten by another in the band never wins on its footprint
    front = _front(band, score)
    rest = sorted((c for c in band if c not in front), key=score) + rest
    band = front
    tie = s.request.tie_breaker
    if tie == "carbon":
        band.sort(key=lambda c: (c.energy.kg_co2e, c.instances, c.count, score(c)))
    elif tie == "time":
        band.sort(key=lambda c: (c.hours_per_unit, c.instances, c.count, score(c)))
    else:
        band = _by_footprint(band, score, serving=s.task == "inference")
    return band + rest


# A candidate is clearly beaten by another on no more instances that costs no more and
# whose GPUs each do at least this many times its GPUs' work: it is then not the smaller
# footprint, only the slower GPU (two cards where four of a faster kind finish in a
# quarter of the time for the same money)
CLEARLY_FASTER_PER_GPU = 1.5
# ... or that finishes the job in a third of the time, a day or more sooner, at a cost in
# the band (within BAND of the best, where costs count as equal): a single GPU's simpler
# setup is not worth days of waiting (8 H100s in one machine pre-training Llama 3 8B in two
# days for 3% more than one MI300X in thirteen); an hour or two sooner is (a three-hour
# fine-tune stays on one GPU)
CLEARLY_SOONER = 3.0
DAY_SAVED_H = 24.0


def _front(band: Sequence[Candidate], score: Any) -> list[Candidate]:
    """The candidates of ``band`` that no other in it clearly beats."""

    def per_gpu(c: Candidate) -> float:  # units of work a GPU-hour
        return 1.0 / (c.hours_per_unit * c.count)

    out = []
    for c in band:
        if not any(
            o.instances <= c.instances
            and (
                (score(o)[0] <= score(c)[0]
                 and per_gpu(o) >= CLEARLY_FASTER_PER_GPU * per_gpu(c))
                # within the band the costs count as equal: days sooner win
                or (
                    o.hours_per_unit * CLEARLY_SOONER <= c.hours_per_unit
                    and (c.job_hours or 0.0) - (o.job_hours or 0.0) >= DAY_SAVED_H
                )
            )
            for o in band
        ):  # fmt: skip
            out.append(c)
    return out


def _by_footprint(band: Sequence[Candidate], score: Any, serving: bool = False) -> list[Candidate]:
    def size(c: Candidate) -> tuple[int, int]:
        return (c.instances, c.count if serving else int(c.count > 1))

    groups: dict[tuple[int, int], list[Candidate]] = {}
    for c in sorted(band, key=size):
        groups.setdefault(size(c), []).append(c)
    out = []
    for group in groups.values():
        fastest = min(c.hours_per_unit for c in group)
        fast = [c for c in group if c.hours_per_unit <= fastest * (1 + BAND)]
        slow = [c for c in group if c.hours_per_unit > fastest * (1 + BAND)]
        out += sorted(fast, key=score) + sorted(slow, key=lambda c: (c.hours_per_unit, score(c)))
    return out


def _describe(c: Candidate) -> str:
    plural = "s" if c.instances > 1 else ""
    kind = "" if c.deployment == "cloud" else f" server{plural}"
    where = f"{c.instances} x {c.site.name}{kind}"
    return f"{c.count} x {c.gpu.name} ({where}, {c.provider} {c.pricing.replace('_', '-')})"


def why_first(shown: Sequence[Candidate], s: Setting, lowest: Candidate | None) -> str | None:
    """One line: why the first answer beat the runner-up (``lowest``: the candidate of the
    best score of all, which the band is measured from)."""
    if not shown or lowest is None:
        return None
    best = lowest.score(s.objective, s.time_value)[0]
    top = shown[0]
    if len(shown) == 1:
        return f"{_describe(top)} is the only candidate that meets the constraints"
    two = shown[1]
    mine = top.score(s.objective, s.time_value)[0]
    theirs = two.score(s.objective, s.time_value)[0]
    what, unit = {"fastest": ("job time", "h"), "cheapest": ("spend over the horizon", "USD")}.get(
        s.objective, ("cost per job", "USD")
    )
    same = (top.instances, top.count) == (two.instances, two.count)
    if theirs < mine or mine > best * (1 + 1e-9) or (mine == theirs and not same):
        tie = s.request.tie_breaker
        if tie == "carbon":
            edge = f"{top.energy.kg_co2e:.3g} kg CO2e against {two.energy.kg_co2e:.3g}"
        elif tie != "time" and top.instances < two.instances:
            edge = f"{top.instances} instance(s) against {two.instances}"
        elif tie != "time" and top.count == 1 < two.count:
            edge = f"one GPU against {two.count}"
        else:
            edge = f"time, {top.hours_per_unit:.3g} h against {two.hours_per_unit:.3g}"
        floor = f" (or {BAND_USD:g} USD)" if s.objective == "best_value" else ""
        rival = (f"the runner-up, {_describe(two)} at {theirs:,.4g} {unit}" if lowest is not two
                 else "that candidate")  # fmt: skip
        return (f"{_describe(top)}: {what} {mine:,.4g} {unit}, within {BAND:.0%}{floor} of "
                f"the best, {_describe(lowest)} at {best:,.4g} {unit} in "
                f"{lowest.hours_per_unit:.3g} h; it beats {rival}, on {edge}")  # fmt: skip
    if s.objective == "fastest":
        return (
            f"{_describe(top)} finishes in {top.hours_per_unit:.3g} h against "
            f"{two.hours_per_unit:.3g} h for {_describe(two)}"
        )
    return (
        f"{_describe(top)}: {what} {mine:,.4g} {unit} against {theirs:,.4g} for "
        f"{_describe(two)} ({_times(theirs, mine) - 1:+.0%})"
    )


def recommend(
    service: EstimateService, request: RecommendationRequest, reader: Reader = NOBODY
) -> dict[str, Any]:
    """The ranked, costed and explained candidates for a request (``POST
    /v1/recommendations``), without its id (see :func:`request_id`); a trace it names is
    read as ``reader`` (by default no key's: one names no trace)."""
    book = rulebook()
    excluded: list[dict[str, Any]] = []
    if request.trace_id:
        record = service.traces.get(request.trace_id, reader)
        if record is None:
            raise NotFound("trace", request.trace_id)
        part = record["analysis"].get("breakdown") or {}
        wall = part.get("wall_us") or 0
        idle = (part.get("idle_us") or {}).get("input", 0.0)
        precision = record["options"].get("precision") or "fp32"
        s = _setting(request, precision, "train", None, True, idle / wall if wall else 0.0)
        s = replace(s, feed=_feed(service.knowledge, None, None))
        gpus, warnings = _catalog(service, s, book, excluded)
        runs = _traced_runs(service, s, record, gpus, excluded)
        profile, shape = None, None
    else:
        raw = service.body_profile(request.source())
        profile = StepProfile.from_profile(raw)
        params = (raw.get("model") or {}).get("parameters")
        s = _setting(request, profile.precision, profile.task, params / 1e9 if params else None)
        s = replace(s, feed=_feed(service.knowledge, raw, profile))
        gpus, warnings = _catalog(service, s, book, excluded)
        limit = s.constraints.max_gpus or DEFAULT_MAX_GPUS
        shape = ModelShape.from_profile(raw)
        s = replace(s, stack=_stack(service, request, profile, shape))
        planner = _kept_runs if profile.trains else _serving_runs
        runs = planner(service, s, profile, shape, gpus, min(limit, 1024), excluded)
    base = _request_symbols(s)
    candidates: list[Candidate] = []
    for run in runs:
        found = _deployments(service, s, run, excluded)
        shared = _run_symbols(found)
        for c in found:
            c.context = _symbols(c, base, shared)
        candidates.extend(found)
    kept = _admitted(book, candidates, excluded)
    memo = book.results()
    _compare(kept)
    for c in kept:
        c.fired = warnings[c.gpu.id] + book.fire("candidate", c.context, KEEP, memo)
    _pareto(kept)
    shown, seen = [], set()
    for c in ordered(kept, s):  # the best of each GPU, count and provider
        if (c.gpu.id, c.count, c.provider) not in seen:
            seen.add((c.gpu.id, c.count, c.provider))
            shown.append(c)
    best = min(kept, key=lambda c: c.score(s.objective, s.time_value)[0], default=None)
    shown = shown[:SHOWN]
    if best is not None and best not in shown and len(shown) == SHOWN:
        # the band's order may leave the best score out: shown last, for the reader to weigh
        shown[-1] = best
    advice = _advice(service, s, book, profile, shape, shown, kept, gpus)
    recs = [_shown(i + 1, c, s) for i, c in enumerate(shown)]
    merged = _merged(excluded, {c.gpu.id for c in kept})
    return {
        "objective": s.objective,
        "recommendations": recs,
        "why_first": why_first(shown, s, best),
        "candidates_total": len(kept),
        "excluded": merged,
        "advice": advice,
        "summary": summary(s, recs, advice, len(merged)),
        "assumptions": _assumptions(s, profile),
        "stack": s.stack.to_dict() if s.stack is not None else None,
        "knowledge_version": service.knowledge.version,
        "rules_version": book.digest,
    }


def _stack(
    service: EstimateService, request: RecommendationRequest, profile: StepProfile,
    shape: ModelShape | None,
) -> Stack:  # fmt: skip
    """The request's stack (named, else the default for the work), checked against the
    precisions the work asks of it."""
    found = stacks.for_work(service.knowledge, request.stack, request.stack_options, profile, shape)
    stacks.check_formats(found, profile.precision, request.weight_precision)
    return found


def _admitted(
    book: RuleBook, candidates: Sequence[Candidate], excluded: list[dict[str, Any]]
) -> list[Candidate]:
    """The candidates no exclusion rule fires on; the others listed in ``excluded``."""
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
    return kept


def _advice(
    service: EstimateService, s: Setting, book: RuleBook, profile: StepProfile | None,
    shape: ModelShape | None, shown: Sequence[Candidate], kept: Sequence[Candidate],
    gpus: Sequence[Gpu] = (),
) -> list[dict[str, Any]]:  # fmt: skip
    """The request-scope rules: software fixes worth doing before a purchase, and the hybrid
    deployment when owning the baseline and renting the bursts is cheapest."""
    top = shown[0] if shown else None
    symbols: dict[str, Any] = {**_request_symbols(s), "smallest_count": None,
                               "fits_one_gpu_accumulating": False, "largest_gpu": None,
                               "micro_batch": profile.batch_size if profile else None}  # fmt: skip
    if top is not None:
        smallest = min(c.count for c in kept if c.gpu.id == top.gpu.id)
        symbols["smallest_count"] = float(smallest)
        if profile is not None and smallest > 1:
            symbols["fits_one_gpu_accumulating"] = _fits_one_accumulating(
                service, s, profile, shape, top.gpu
            )
    elif profile is not None and gpus:  # nothing holds the micro-batch: does one at 1?
        largest = max(gpus, key=lambda g: g.memory_gb)
        if _fits_one_accumulating(service, s, profile, shape, largest):
            symbols["fits_one_gpu_accumulating"] = True
            symbols["largest_gpu"] = largest.name
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
    symbols.update(_switch(service, s, profile, shape, top))
    symbols.update(_hybrid(s, kept))
    return [f.to_dict() for f in book.fire("request", symbols)]


def _switch(
    service: EstimateService, s: Setting, profile: StepProfile | None,
    shape: ModelShape | None, top: Candidate | None,
) -> dict[str, Any]:  # fmt: skip
    """The stack that would run the top choice's training fastest, where one beats the
    request's by enough to name (see :mod:`service.engine.deciding.stack_advice`)."""
    none: dict[str, Any] = {
        "faster_stack": None,
        "faster_stack_speedup": None,
        "faster_stack_fit": None,
        "stack": s.stack.id if s.stack else None,
    }
    if profile is None or top is None or top.planned is None or s.stack is None:
        return none
    usable = top.gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE * TRAINING_MEMORY_MARGIN
    found = stack_advice.faster_stack(
        service.knowledge, service._built_model().step_model, s.stack, profile, shape,
        top.gpu, top.planned.layout, top.site.network, usable,
    )  # fmt: skip
    if found is None:
        return none
    return {**none, "faster_stack": found.stack.id, "faster_stack_speedup": found.speedup,
            "faster_stack_fit": found.stack.compute.source}  # fmt: skip


def _fits_one_accumulating(
    service: EstimateService, s: Setting, profile: StepProfile,
    shape: ModelShape | None, gpu: Gpu,
) -> bool:  # fmt: skip
    """Whether one ``gpu`` holds the workload at micro-batch 1 (its batch then accumulated
    over micro-batches): the same model and workload profiled at batch 1, under the layout
    of one GPU that needs least memory. Only for a described training workload with a batch
    above 1 (a stored profile does not say how to profile it again)."""
    request = s.request
    workload = request.workload
    if not profile.trains or profile.batch_size <= 1 or request.model is None or not workload:
        return False
    single = dataclasses.replace(workload, batch_size=1)
    one = StepProfile.from_profile(
        service.body_profile({"model": request.model, "workload": single})
    )
    assert s.stack is not None  # a described workload's
    one = stacked(one, shape, s.stack)
    usable = gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE
    sized = sized_at(1, one, shape, 1)
    return bool(sized) and sized[0][1].total_bytes <= usable


def _hybrid(s: Setting, kept: Sequence[Candidate]) -> dict[str, Any]:
    """Whether owning the baseline of the best on-premise choice and renting its bursts on
    the same GPU's cheapest offer costs less than either alone."""
    owned = [c for c in kept if c.onprem is not None]
    if not owned or s.usage.pattern != "bursty":
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


def _gib(parts: Mapping[str, float]) -> dict[str, float]:
    return {k: v / 2**30 for k, v in parts.items()}


def _step_parts(step: Any, step_s: float) -> dict[str, float]:
    """A training step's seconds by part; ``input``: what the host's input ceiling adds
    (``step_s``, the step as fed, over the step the GPUs would take)."""
    return {
        "compute": step.compute_s + step.recompute_s + step.optimizer_s,
        "communication": step.tensor_parallel_s
        + step.context_parallel_s
        + step.data_parallel_s
        + step.pipeline_send_s,
        "pipeline_bubble": step.pipeline_bubble_s,
        "host": step.host_s,
        "input": max(0.0, step_s - step.step_s),
    }


def _shown(rank: int, c: Candidate, s: Setting) -> dict[str, Any]:
    layout = c.planned.layout.to_dict() if c.planned else c.served.layout if c.served else None
    unit = ("job" if c.job_hours is not None
            else f"{UNIT_SAMPLES:,.0f} {'requests' if c.served else 'samples'}")  # fmt: skip
    estimate: dict[str, Any] = {
        "step_time_s": c.step_s,
        "samples_per_s": c.samples_per_s,
        "hours_per_unit": c.hours_per_unit,
        "unit": unit,
        "bound": c.bound,
        "memory_per_gpu_gib": None,
        "memory_headroom": None,
        "mfu": None,
        "serving": None,
        "memory_gib": None,
        "step_parts_s": None,
    }
    if c.planned is not None:
        estimate["memory_gib"] = _gib(memory_parts(c.planned.memory))
        estimate["step_parts_s"] = _step_parts(c.planned.step, c.step_s)
        estimate["memory_per_gpu_gib"] = c.planned.memory.total_bytes / 2**30
        estimate["memory_headroom"] = round(c.planned.headroom, 4)
        estimate["mfu"] = c.planned.step.mfu * c.samples_per_s / c.planned.step.samples_per_s
    if c.served is not None:
        estimate["memory_gib"] = _gib(c.served.parts)
        estimate["memory_per_gpu_gib"] = c.served.memory_bytes / 2**30
        estimate["memory_headroom"] = round(c.served.headroom, 4)
        estimate["serving"] = c.served.figures
    site = c.site
    deployment = {
        "kind": c.deployment,
        "provider": c.provider,
        "instance_type": site.name if site.kind == "cloud" else None,
        "server_design": site.name if site.kind != "cloud" else None,
        "region": c.region,
        "pricing": c.pricing,
        "instances": c.instances,
        "gpus_per_instance": site.gpus_per_instance,
        "vcpus_per_instance": site.vcpus,
        "memory_gib_per_instance": site.memory_gib,
        "marketplace": site.marketplace,
        "cluster_network": site.cluster,
    }
    costs: dict[str, Any] = {
        "per_unit_usd": c.unit_cost_usd,
        "usd_per_gpu_hour": c.usd_per_gpu_hour,
        "monthly_usd": c.monthly_usd,
        "horizon_usd": c.horizon_usd,
        "capital_usd": c.capital_usd,
        "break_even_gpu_hours_per_month": c.context.get("break_even_gpu_hours"),
        "usage": None,
    }
    if c.usage is not None:
        costs["usage"] = {"gpu_hours_per_month": c.usage.gpu_hours_per_month,
                          "horizon_months": c.usage.horizon_months}  # fmt: skip
    return {
        "rank": rank,
        "gpu": c.gpu.id,
        "gpu_name": c.gpu.name,
        "count": c.count,
        "vram_gib": float(c.gpu.memory_gb),
        "deployment": deployment,
        "links": [x.to_dict() for x in site.links],
        "layout": layout,
        "estimate": estimate,
        "job": {**c.job.to_dict(), "unit": unit},
        "cost": costs,
        "energy": c.energy.to_dict(),
        "offer": c.offer.to_dict() if c.offer else None,
        "score": c.score(s.objective, s.time_value)[0],
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
        "each GPU on each of its cloud offers (whole instances) and server designs, at each "
        "power of two (and multiple of the instance's GPUs) up to max_gpus (default 64), with "
        "the planner's fastest layout on that deployment's own links: its GPUs' link inside "
        "an instance, the instance type's network between instances "
        "(knowledge/data/instance_networks.csv; without RDMA, half the line rate), tensor "
        "parallelism inside an instance only",
        "on-premise costs from knowledge/data/onprem.yaml (override any in onprem), server "
        "designs from server_designs.yaml; cloud prices from knowledge/data/offer_prices.csv, "
        "each offer's cheapest region per pricing",
        "the whole job: start-up, pretrained weights downloaded, dataset staged, steps, "
        "checkpoints (Young's interval) and expected restarts at the provider's interruption "
        "rate (knowledge/data/providers.yaml); billed per instance in the provider's "
        "increments and minimum",
        f"among candidates within {BAND:.0%} of the best score, the smaller footprint wins "
        "(fewer instances, fewer GPUs, the shorter job) unless tie_breaker says otherwise",
        "energy: each GPU at its board power in proportion to the busy share of its step "
        f"(idle {job.IDLE_SHARE:.0%}), its host's share per GPU slot, times the data "
        "centre's PUE; emissions at the region's grid intensity "
        "(knowledge/data/grid_intensity.csv)",
    ]
    if s.stack is not None:
        out.insert(0, s.stack.note())
    if s.feed.samples_per_s_per_vcpu is not None:
        out.append(
            f"input: each instance's vCPUs (less {s.feed.reserved_vcpus_per_gpu:g} per GPU) "
            f"prepare {s.feed.samples_per_s_per_vcpu:g} {s.feed.input_kind} samples a second "
            "each (knowledge/data/input_rates.yaml); a deployment whose hosts cannot feed its "
            "GPUs is input-bound"
        )
    if profile is not None and not profile.dataset_steps:
        what = "samples" if profile.trains else "requests"
        out.append(f"no dataset in the workload: cost and time are per million {what}, "
                   "steps only")  # fmt: skip
    if profile is not None and not profile.trains:
        out.append(
            "serving: each GPU's smallest group that holds the model (tensor parallel inside "
            "an instance for a generative model, else one GPU) as one, two, four and eight "
            "replicas; a generative model decodes as many sequences together as its memory "
            "holds (or concurrency), each sequence's prefill alone; latency is one request's "
            "(estimate.step_time_s)"
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
        est, c, d = r["estimate"], r["cost"], r["deployment"]
        kind = d["instance_type"] or d["server_design"]
        where = f"{d['instances']} x {kind} ({d['provider']}, {d['pricing'].replace('_', '-')})"
        lines.append(f"{r['rank']}. {r['count']} x {r['gpu_name']} on {where}: "
                     f"{est['hours_per_unit']:.3g} h and {_usd(c['per_unit_usd'])} per "
                     f"{est['unit']}, {r['energy']['kg_co2e']:.3g} kg CO2e")  # fmt: skip
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
