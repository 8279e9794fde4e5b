"""Data-parallel scaling: the link that joins the GPUs, ring all-reduce, DDP overlap.

One data-parallel step on ``n`` GPUs (per-GPU batch constant) takes the single-GPU step,
slowed a little by stragglers, plus the part of the gradient all-reduce that backward
cannot hide, plus a fixed per-step synchronisation cost. The ring all-reduce moves
2(n-1)/n of the gradient bytes over the slowest link, in PyTorch DDP's 25 MiB buckets;
each bucket is reduced while backward goes on, except the last, which is only ready
when backward ends (Li et al., "PyTorch Distributed", VLDB 2020; NCCL's bus-bandwidth
convention, nccl-tests PERFORMANCE.md).

Link figures come from the knowledge records (GPU record, interconnects.yaml); the few
free constants (:class:`Params`) are calibrated by :func:`fit` on Lambda's multi-GPU rows,
each predicted from the measured 1-GPU row of the same suite, workload, GPU and precision,
and :func:`validate_scaling` reports how well that does.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from knowledge import Knowledge
from knowledge.records import Benchmark, Gpu, Interconnect, Workload
from service.engine.estimating.observations import BenchmarkProfiles

GPUS_PER_NODE = 8  # above this the GPUs sit in several servers joined by the network
# between servers of a GPU whose architecture no interconnect record names (servers_of):
# one 400G port per GPU, as DGX/HGX H100 nodes
DEFAULT_NETWORK = "infiniband-ndr"
DDP_BUCKET_BYTES = 25 * 2**20  # torch DistributedDataParallel bucket_cap_mb default
# GeForce cards without P2P stage every transfer through pinned host memory: a device-to-
# host then a host-to-device copy over the same PCIe, so about half the link, and the
# latency interconnects.yaml's PCIe notes give for staged copies ("10 us or more").
HOST_STAGED_BANDWIDTH_SHARE = 0.5
HOST_STAGED_LATENCY_US = 10.0
# DGX-1 / HGX-1 (V100 SXM2) join 8 GPUs in a hybrid cube-mesh, not through NVSwitch
# (interconnects.yaml, nvlink-2 notes): those links keep their direct-link record.
CUBE_MESH_LINKS = frozenset({"nvlink-2"})
LAMBDA_SUITES = ("lambda-v0", "lambda-v1", "lambda-v2", "lambda-v2-host")


@dataclass(frozen=True, slots=True)
class Link:
    """The slowest link a ring over ``count`` GPUs crosses, one direction, per GPU."""

    id: str
    name: str
    bandwidth_gb_per_s: float
    latency_us: float
    p2p: bool
    why: str


@dataclass(frozen=True, slots=True)
class Params:
    """The scaling model's free constants (see :data:`DEFAULT` for the fitted values)."""

    bandwidth_share: float  # achieved share of the link's bandwidth (NCCL bus bandwidth)
    overlap: float  # share of backward during which bucket all-reduces actually hide
    sync_us: float  # per-step cost of synchronising the replicas (barrier, launch, optimizer)
    straggler: float  # compute slowdown per doubling of GPUs (the slowest replica sets pace)


# Fitted by fit(load_knowledge()) on the Lambda multi-GPU rows of knowledge 2026-12-02
# (see tests/engine/test_scaling.py for the figures they reach).
DEFAULT = Params(bandwidth_share=0.7, overlap=0.8, sync_us=1000.0, straggler=0.02)


@dataclass(frozen=True, slots=True)
class Scaling:
    """One data-parallel step on ``count`` GPUs, split into its parts (seconds)."""

    count: int
    single_step_s: float  # the same batch on one GPU alone
    compute_s: float  # that, slowed by the slowest replica
    allreduce_s: float
    overlapped_s: float
    exposed_s: float
    sync_s: float
    step_s: float
    bound: str  # "compute" or "communication"
    link: Link | None

    def throughput(self, batch_per_gpu: float) -> float:
        """Samples per second over all GPUs."""
        return self.count * batch_per_gpu / self.step_s

    @property
    def efficiency(self) -> float:
        """Per-GPU throughput on ``count`` GPUs over that of one GPU alone."""
        return self.single_step_s / self.step_s


def server_network(knowledge: Knowledge, gpu: Gpu) -> Interconnect:
    """The network between servers of ``gpu``: the one its architecture's reference servers
    have, a port per GPU (the record's ``servers_of``), else :data:`DEFAULT_NETWORK`."""
    for link in knowledge.interconnects.values():
        if gpu.architecture in link.servers_of:
            return link
    return knowledge.interconnects[DEFAULT_NETWORK]


def domain(gpu: Gpu) -> int:
    """The GPUs one NVLink switch domain joins: the GPU's own where it is larger than a
    server (GB200 NVL72: 72), else a server's :data:`GPUS_PER_NODE`."""
    return gpu.nvlink_domain or GPUS_PER_NODE


def link_for(knowledge: Knowledge, gpu: Gpu, count: int, nvlink: bool | None = None) -> Link:
    """The link a ring all-reduce over ``count`` GPUs of this type is limited by.

    SXM parts use their NVLink (NVSwitch on 8-GPU baseboards), as do superchips in an
    NVLink domain (GB200 NVL72); bridged cards use the bridge only for a pair (``nvlink``
    True, ``count`` <= 2); others go over PCIe of their generation, through host memory
    where the card has no P2P; above the NVLink domain (:func:`domain`) the network between
    servers joins in (the slower one binds).
    """
    node = domain(gpu)
    if count > node:
        inside = link_for(knowledge, gpu, node, nvlink)
        net = server_network(knowledge, gpu)
        slow = min(inside.bandwidth_gb_per_s, net.bandwidth_gb_per_s_per_direction)
        return Link(
            id=f"{inside.id}+{net.id}",
            name=f"{inside.name}, then {net.name} between servers",
            bandwidth_gb_per_s=slow,
            latency_us=max(inside.latency_us, net.latency_us),
            p2p=inside.p2p,
            why=f"{count} GPUs span {math.ceil(count / node)} servers: "
            f"{inside.why}; between servers {net.name} (assumed: one port per GPU, as "
            f"{gpu.architecture} reference servers have)",
        )
    per_gpu = gpu.nvlink_bandwidth_gb_per_s / 2  # the record quotes both directions
    link_id = gpu.gpu_link
    switched = gpu.form_factor in ("sxm", "oam") or gpu.nvlink_domain is not None
    if link_id and switched and link_id in knowledge.interconnects:
        switch = "nvswitch-" + link_id.replace("-", "")
        if count > 4 and link_id not in CUBE_MESH_LINKS and switch in knowledge.interconnects:
            link_id = switch
        rec = knowledge.interconnects[link_id]
        return Link(
            rec.id, rec.name, per_gpu, rec.latency_us, True, f"{gpu.name}: {rec.name}, per GPU"
        )
    if link_id and nvlink and count <= 2 and link_id in knowledge.interconnects:
        rec = knowledge.interconnects[link_id]
        why = f"two {gpu.name} joined by an NVLink bridge ({per_gpu:g} GB/s per direction)"
        return Link(rec.id, rec.name, per_gpu, rec.latency_us, True, why)
    rec = knowledge.interconnects[f"pcie-{gpu.pcie_generation}-x16"]
    bandwidth = rec.bandwidth_gb_per_s_per_direction * gpu.pcie_lanes / 16
    name = f"{rec.name.removesuffix(' x16')} x{gpu.pcie_lanes}"
    bridged = " (bridges join pairs only)" if link_id and nvlink and count > 2 else ""
    if gpu.p2p_supported:
        why = f"{count} {gpu.name} over {name} with peer-to-peer{bridged}"
        return Link(rec.id, name, bandwidth, rec.latency_us, True, why)
    why = (
        f"{gpu.name} has no peer-to-peer: transfers are staged through host memory, "
        f"modelled as {HOST_STAGED_BANDWIDTH_SHARE:.0%} of {name} and "
        f"{HOST_STAGED_LATENCY_US:g} us per hop"
    )
    return Link(
        rec.id + "-host-staged",
        name + " through host memory",
        bandwidth * HOST_STAGED_BANDWIDTH_SHARE,
        HOST_STAGED_LATENCY_US,
        False,
        why,
    )


def ring_allreduce_s(
    gradient_bytes: float, count: int, bandwidth_gb_per_s: float, latency_us: float
) -> float:
    """Ring all-reduce of ``gradient_bytes`` in DDP buckets over ``count`` GPUs.

    2(n-1)/n x bytes / bandwidth, plus 2(n-1) latency-bound ring steps per bucket.
    """
    if count <= 1 or gradient_bytes <= 0:
        return 0.0
    buckets = max(1, math.ceil(gradient_bytes / DDP_BUCKET_BYTES))
    volume = 2 * (count - 1) / count * gradient_bytes / (bandwidth_gb_per_s * 1e9)
    return volume + 2 * (count - 1) * latency_us * 1e-6 * buckets


def _straggle(count: int, straggler: float) -> float:
    return 1.0 + straggler * math.log2(count) if count > 1 else 1.0


def data_parallel(
    single_step_s: float,
    backward_s: float,
    gradient_bytes: float,
    count: int,
    link: Link | None,
    params: Params = DEFAULT,
) -> Scaling:
    """The step on ``count`` GPUs, each running the batch that took ``single_step_s`` alone."""
    compute = single_step_s * _straggle(count, params.straggler)
    if count <= 1 or link is None:
        return Scaling(
            count, single_step_s, single_step_s, 0.0, 0.0, 0.0, 0.0, single_step_s, "compute", link
        )
    bandwidth = link.bandwidth_gb_per_s * params.bandwidth_share
    allreduce = ring_allreduce_s(gradient_bytes, count, bandwidth, link.latency_us)
    buckets = max(1, math.ceil(gradient_bytes / DDP_BUCKET_BYTES))
    hideable = allreduce * (buckets - 1) / buckets  # the last bucket waits for backward
    window = backward_s * params.overlap
    overlapped = min(hideable, window)
    exposed = allreduce - overlapped
    sync = params.sync_us * 1e-6
    bound = "communication" if hideable > window else "compute"
    step = compute + exposed + sync
    return Scaling(
        count, single_step_s, compute, allreduce, overlapped, exposed, sync, step, bound, link
    )


@dataclass(frozen=True, slots=True)
class Case:
    """One multi-GPU benchmark row with the 1-GPU row it is predicted from."""

    row: Benchmark
    reference: Benchmark
    batch: float  # per GPU, of the row
    single_step_s: float  # 1-GPU step at the row's batch (reference scaled by batch)
    backward_share: float
    gradient_bytes: float
    link: Link
    superlinear: bool  # measured per-GPU throughput above the 1-GPU row's

    def predict(self, params: Params) -> tuple[float, Scaling]:
        s = data_parallel(
            self.single_step_s,
            self.single_step_s * self.backward_share,
            self.gradient_bytes,
            self.row.gpu_count,
            self.link,
            params,
        )
        per_gpu = self.reference.value / (self.reference.batch_size_per_gpu or self.batch)
        return per_gpu * self.batch * self.single_step_s * self.row.gpu_count / s.step_s, s


def _host(system: str) -> str:
    """The server a Lambda row ran on, GPU counts and NVLink marks removed."""
    return re.sub(r"\d+x[ _]?|\s*NVLink", "", system).strip(" _")


def _reference(row: Benchmark, singles: Sequence[Benchmark]) -> Benchmark:
    def key(b: Benchmark) -> tuple[bool, float]:
        batch, ref = row.batch_size_per_gpu, b.batch_size_per_gpu
        gap = abs(math.log(batch / ref)) if batch and ref else 0.0
        return _host(b.system) != _host(row.system), gap

    best = min(key(b) for b in singles)
    tied = sorted((b for b in singles if key(b) == best), key=lambda b: b.value)
    return tied[len(tied) // 2]


def _replica_costs(
    store: BenchmarkProfiles, workload: Workload, precision: str
) -> tuple[float, float, float]:
    """(gradient bytes, backward share of step FLOPs, tokens per sample) of a workload,
    from its benchmark profile (gradient bytes do not depend on the batch)."""
    step = store.step(workload, precision, 1)
    share = store.backward_share(workload, precision)
    return step.gradients_bytes, share, step.tokens_per_step / step.samples_per_step


def cases(
    knowledge: Knowledge, store: BenchmarkProfiles
) -> tuple[list[Case], list[tuple[Benchmark, str]]]:
    """Every Lambda multi-GPU row as a :class:`Case`, and the rows left out with why; the
    replicas' costs come from the benchmarked workloads' profiles in ``store``."""
    rows = [
        b for b in knowledge.benchmarks if b.kind == "training-throughput" and b.gpu_id is not None
    ]
    rows = [b for b in rows if b.suite in LAMBDA_SUITES]
    singles: dict[tuple[Any, ...], list[Benchmark]] = defaultdict(list)
    for b in rows:
        if b.gpu_count == 1:
            singles[(b.suite, b.workload, b.gpu_id, b.precision)].append(b)
    out: list[Case] = []
    excluded: list[tuple[Benchmark, str]] = []
    for b in rows:
        if b.gpu_count == 1:
            continue
        group = singles.get((b.suite, b.workload, b.gpu_id, b.precision))
        shape = knowledge.workloads[b.workload].profile
        if not group:
            excluded.append((b, "no 1-GPU row of the same suite, workload, GPU and precision"))
            continue
        if shape is None:
            excluded.append((b, "the workload has no profiler settings"))
            continue
        ref = _reference(b, group)
        w = knowledge.workloads[b.workload]
        grad, share, tokens = _replica_costs(store, w, b.precision or "fp32")
        items = tokens if shape.items_per_sample == "tokens" else float(shape.items_per_sample)
        batch = b.batch_size_per_gpu or ref.batch_size_per_gpu or 1.0
        ref_batch = ref.batch_size_per_gpu or batch
        single = ref_batch * items / ref.value * batch / ref_batch
        gpu = knowledge.gpus[b.gpu_id]  # type: ignore[index]
        link = link_for(knowledge, gpu, b.gpu_count, b.details.get("nvlink"))
        superlinear = b.value / (b.gpu_count * batch) > ref.value / ref_batch
        out.append(Case(b, ref, batch, single, share, grad, link, superlinear))
    return out, excluded


def _log_errors(params: Params, data: Iterable[Case]) -> list[float]:
    return [math.log(c.predict(params)[0] / c.row.value) for c in data]


def fit(knowledge: Knowledge, data: Sequence[Case], start: Params = DEFAULT) -> Params:
    """Least absolute log error of n-GPU throughput over the multi-GPU rows.

    Superlinear rows are left out (no overhead model can make n GPUs faster than n
    times one); a coarse grid finds the basin, scipy's robust least squares polishes it.
    """
    from scipy.optimize import least_squares

    pool = [c for c in data if not c.superlinear]

    def loss(p: Params) -> float:
        return sum(abs(e) for e in _log_errors(p, pool))

    best = start
    for share in (0.3, 0.5, 0.7, 0.9):
        for overlap in (0.2, 0.5, 0.8, 1.0):
            for sync in (0.0, 500.0, 2000.0):
                for strag in (0.0, 0.02, 0.05):
                    p = Params(share, overlap, sync, strag)
                    if loss(p) < loss(best):
                        best = p

    def residuals(x: Sequence[float]) -> list[float]:
        return _log_errors(Params(x[0], x[1], x[2] * 1000, x[3]), pool)

    x0 = [best.bandwidth_share, best.overlap, best.sync_us / 1000, best.straggler]
    result = least_squares(
        residuals, x0, bounds=([0.05, 0.0, 0.0, 0.0], [1.0, 1.0, 20.0, 0.3]), loss="soft_l1",
        f_scale=0.05,
    )  # fmt: skip
    x = result.x
    return replace(best, bandwidth_share=float(x[0]), overlap=float(x[1]),
                   sync_us=float(x[2] * 1000), straggler=float(x[3]))  # fmt: skip


def _ape(rows: Sequence[dict[str, Any]]) -> dict[str, float | int | None]:
    errors = [abs(r["error"]) for r in rows]
    if not errors:
        return {"rows": 0, "median_ape": None, "mean_ape": None}
    return {
        "rows": len(errors),
        "median_ape": statistics.median(errors),
        "mean_ape": statistics.fmean(errors),
    }


def validate_scaling(
    knowledge: Knowledge, store: BenchmarkProfiles, params: Params = DEFAULT
) -> dict[str, Any]:
    """Per-row predictions and their absolute percentage errors, grouped.

    Groups: by GPU count, by NVLink (``details["nvlink"]`` where the data says, else
    "unknown"), by suite, with and without the superlinear rows. ``excluded`` lists the
    rows that could not be predicted, with the reason.
    """
    data, excluded = cases(knowledge, store)
    rows = []
    for c in data:
        predicted, s = c.predict(params)
        nvlink = c.row.details.get("nvlink")
        rows.append(
            {
                "suite": c.row.suite,
                "workload": c.row.workload,
                "gpu_id": c.row.gpu_id,
                "count": c.row.gpu_count,
                "precision": c.row.precision,
                "system": c.row.system,
                "nvlink": "unknown" if nvlink is None else str(bool(nvlink)).lower(),
                "measured": c.row.value,
                "predicted": predicted,
                "error": predicted / c.row.value - 1,
                "measured_efficiency": c.row.value
                / (c.row.gpu_count * c.batch)
                / (c.reference.value / (c.reference.batch_size_per_gpu or c.batch)),
                "predicted_efficiency": s.efficiency,
                "bound": s.bound,
                "link": c.link.id,
                "superlinear": c.superlinear,
                "reference_system": c.reference.system,
            }
        )
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups["all"].append(r)
        groups[f"count={r['count']}"].append(r)
        groups[f"nvlink={r['nvlink']}"].append(r)
        groups[f"suite={r['suite']}"].append(r)
        if not r["superlinear"]:
            groups["all-but-superlinear"].append(r)
    return {
        "params": params,
        "summary": {k: _ape(v) for k, v in sorted(groups.items())},
        "rows": rows,
        "excluded": [{"row": b, "reason": why} for b, why in excluded],
        "superlinear": [r for r in rows if r["superlinear"]],
    }
