"""The links a parallel layout runs over: inside an instance and between instances."""

from __future__ import annotations

from dataclasses import dataclass

from knowledge import Knowledge
from knowledge.records import Gpu
from service.engine.errors import InvalidRequest
from service.engine.estimating import scaling


@dataclass(frozen=True, slots=True)
class Network:
    """The links a layout's groups talk over: inside a node, and between nodes."""

    intra: scaling.Link
    inter: scaling.Link
    gpus_per_node: int
    sms: int = 0  # the GPU's streaming multiprocessors (0: GEMM waves not modelled)


def network(
    knowledge: Knowledge,
    gpu: Gpu,
    gpus_per_node: int = scaling.GPUS_PER_NODE,
    intra: str | None = None,
    inter: str | None = None,
    nvlink: bool | None = None,
) -> Network:
    """The links of a server of ``gpus_per_node`` GPUs (the GPU's own, unless ``intra``
    names an interconnect record) and between servers (``inter``, else the default)."""
    inside = scaling.link_for(knowledge, gpu, gpus_per_node, nvlink)
    if intra is not None:
        inside = _named_link(knowledge, intra, gpu, "inside a node")
    between = _named_link(
        knowledge, inter or scaling.server_network(knowledge, gpu).id, gpu, "between nodes"
    )
    return Network(inside, between, gpus_per_node, gpu.sm_count)


def _named_link(knowledge: Knowledge, link_id: str, gpu: Gpu, where: str) -> scaling.Link:
    rec = knowledge.interconnects.get(link_id)
    if rec is None:
        known = ", ".join(sorted(knowledge.interconnects))
        raise InvalidRequest("interconnect", f"unknown interconnect '{link_id}' (known: {known})")
    bandwidth = rec.bandwidth_gb_per_s_per_direction
    if rec.kind in ("nvlink", "nvswitch") and gpu.nvlink_bandwidth_gb_per_s:
        bandwidth = min(bandwidth, gpu.nvlink_bandwidth_gb_per_s / 2)
    why = f"{rec.name} {where}, {bandwidth:g} GB/s per GPU per direction"
    return scaling.Link(rec.id, rec.name, bandwidth, rec.latency_us, True, why)
