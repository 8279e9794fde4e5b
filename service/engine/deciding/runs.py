"""The runs a workload can make: every GPU type at each count with the planner's fastest layout
(training and fine-tuning), its serving groups (inference), or a traced step projected."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from knowledge.records import Gpu
from service.engine import deadline
from service.engine.deciding import deployment
from service.engine.deciding.candidate import Run, Served, Setting, _no_site, _reason
from service.engine.deciding.deployment import Site
from service.engine.errors import InvalidRequest
from service.engine.estimating.estimate import USABLE_MEMORY_SHARE
from service.engine.estimating.layout import Layout, ModelShape
from service.engine.estimating.layout_memory import LayoutMemory
from service.engine.estimating.on_request import EstimateService
from service.engine.estimating.roofline import MathMode, math_mode
from service.engine.estimating.step_profile import StepProfile
from service.engine.planning.network import Network, network
from service.engine.planning.plans import served_alone
from service.engine.planning.search import Planned, fastest_fitting, sized_at
from service.engine.planning.serving import layout_inference, tensor_degrees
from service.engine.planning.step_time import Parts
from service.engine.planning.work import stacked, work

DEFAULT_MAX_GPUS = 64

PLANNER = "rightsize layout planner (service/engine/planning/)"


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


# long: every GPU and topology its offers and server designs have, in one pass
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


def _kept_runs(
    service: EstimateService, s: Setting,
    profile: StepProfile, shape: ModelShape | None, gpus: Sequence[Gpu], max_gpus: int,
    excluded: list[dict[str, Any]],
) -> list[Run]:  # fmt: skip
    """:func:`_described_runs`, kept (in ``service.runs``) for the same profile, GPUs, sites
    and layout options: a request that changes only its budget, objective or usage reuses
    the layout search (most of a recommendation's time)."""
    if not profile.profile_id:
        return _described_runs(service, s, profile, shape, gpus, max_gpus, excluded)
    r, c = s.request, s.constraints
    key = (
        service.knowledge.version, profile.profile_id, tuple(g.id for g in gpus), max_gpus,
        s.stack, r.global_batch_size, c.deployment, tuple(sorted(c.providers)),
        "gpu_price_usd" in r.onprem,
    )  # fmt: skip

    def described() -> tuple[list[Run], list[dict[str, Any]]]:
        mine: list[dict[str, Any]] = []
        return _described_runs(service, s, profile, shape, gpus, max_gpus, mine), mine

    found = service.runs.get_or_make(key, described)
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
