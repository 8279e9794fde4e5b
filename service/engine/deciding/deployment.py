"""Deployments: where a candidate runs, and the links its GPUs talk over there.

A cloud deployment is an offer (provider, instance type, GPUs per instance) taken as one or
more instances; an on-premise one is a server design (workstation, 4- or 8-GPU PCIe server,
HGX board) taken as one or more servers. Its topology comes from the knowledge:

- inside an instance or server, the GPUs' own link
(:func:`service.engine.estimating.scaling.link_for`:
  NVLink / NVSwitch on SXM boards, PCIe with peer-to-peer, or staged through host memory
  where the card has none);
- between instances, the instance's network (``knowledge/data/instance_networks.csv``:
  EFA, InfiniBand, RoCE, GPUDirect-TCPX(O), plain Ethernet, or a marketplace host's internet
  connection); between owned servers, the design's fabric (``server_designs.yaml``), the GPU
  generation's reference InfiniBand (one port per GPU) for HGX boards.

A deployment's :class:`Site` carries the :class:`~service.engine.planning.network.Network` the
planner times layouts on, so a data-parallel job over 10 Gb/s pays its gradients at 10 Gb/s,
and a layout that splits layers over instances is never planned (tensor parallelism stays
inside ``gpus_per_node``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from knowledge import Knowledge
from knowledge.records import Gpu, Offer
from service.engine.deciding import cost
from service.engine.estimating import scaling
from service.engine.planning.network import Network

# One message's latency between instances, by the network's kind (microseconds): RDMA
# fabrics a few microseconds (InfiniBand ~1, RoCE ~2-5); AWS's SRD-based EFA ~15 (AWS,
# "EFA: A high-performance network for HPC", re:Invent 2019, CMP 319: 15.5 us for 8 bytes);
# GPUDirect-TCPX(O) and a kernel TCP stack tens of microseconds; hosts reached over the
# public internet milliseconds (same-region round trips of 1-10 ms).
LATENCY_US = {
    "infiniband": 1.0,
    "roce": 3.0,
    "efa": 15.0,
    "gpudirect-tcpxo": 15.0,
    "gpudirect-tcpx": 25.0,
    "ethernet": 30.0,
    "internet": 5000.0,
}
# Without RDMA, NCCL's socket transport copies every message through the host's TCP stack:
# it reaches about half of the line rate (assumption: NCCL issue threads and vendor tests
# report 40-70% of 25-100 GbE with NCCL_SOCKET_NTHREADS tuned)
TCP_SHARE = 0.5
ONPREM = "on-premise"


@dataclass(frozen=True, slots=True)
class LinkFact:
    """A link a deployment's traffic crosses, as the answer shows it."""

    scope: str  # "inside" (between the GPUs of an instance or server) or "between"
    id: str
    name: str
    gb_per_s: float  # per direction: per GPU inside; per instance between
    rdma: bool
    source: str
    as_of: str | None
    notes: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "scope": self.scope, "id": self.id, "name": self.name, "gb_per_s": self.gb_per_s,
            "rdma": self.rdma, "source": self.source, "as_of": self.as_of, "notes": self.notes,
        }  # fmt: skip


@dataclass(frozen=True, slots=True)
class Site:
    """One deployment of a GPU type before its size: an offer or a server design."""

    kind: str  # "cloud" | "on-premise"
    provider: str
    name: str  # the instance type, or the server design's id
    gpus_per_instance: int
    vcpus: float  # per instance or server
    memory_gib: float
    marketplace: bool
    cluster: bool  # instances can be placed on one fabric
    network: Network  # what the planner times layouts on
    links: tuple[LinkFact, ...]
    max_instances: int | None = None  # None: no stated limit
    offer: Offer | None = None
    counts: tuple[int, int] = (1, 1 << 30)  # the GPU counts it is taken at (a design's range)

    @property
    def topology(self) -> tuple[Any, ...]:
        """What a layout's step depends on: sites that share it share their plans."""
        n = self.network
        return (n.gpus_per_node, n.intra.bandwidth_gb_per_s, n.intra.latency_us,
                n.inter.bandwidth_gb_per_s, n.inter.latency_us)  # fmt: skip

    def instances(self, count: int) -> int:
        return math.ceil(count / self.gpus_per_instance)

    def admits(self, count: int) -> bool:
        """Whether ``count`` GPUs are a size this site is taken at: whole instances (a cloud
        count fills its instances), within its instance limit."""
        if not self.counts[0] <= count <= self.counts[1]:
            return False
        if self.kind == "cloud" and count % self.gpus_per_instance:
            return False
        return self.max_instances is None or self.instances(count) <= self.max_instances


def _inside(knowledge: Knowledge, gpu: Gpu, gpus: int, where: str) -> tuple[scaling.Link, LinkFact]:
    link = scaling.link_for(knowledge, gpu, gpus)
    rec = knowledge.interconnects.get(link.id.removesuffix("-host-staged"))
    fact = LinkFact(
        "inside", link.id, link.name, link.bandwidth_gb_per_s, link.p2p,
        rec.sources[0] if rec and rec.sources else "knowledge/data/gpus",
        rec.as_of.isoformat() if rec else None, f"{where}: {link.why}",
    )  # fmt: skip
    return link, fact


def cloud_site(knowledge: Knowledge, gpu: Gpu, offer: Offer) -> Site:
    """The offer's instance as a site: its GPUs' own link inside, its network between."""
    gpi = int(offer.gpu_count)
    inside, inside_fact = _inside(knowledge, gpu, gpi, offer.instance_type)
    provider = knowledge.providers[offer.provider]
    net = knowledge.networks[offer.id]
    kind = net.network_kind
    share = 1.0 if net.rdma else TCP_SHARE
    per_gpu = net.network_gbps / 8 / gpi * share  # GB/s, one direction, per GPU's share
    why = (f"{offer.instance_type}: {net.network_gbps:g} Gb/s {kind}"
           f"{'' if net.rdma else f' without RDMA ({TCP_SHARE:.0%} of it reached)'}"
           f", shared by its {gpi} GPUs")  # fmt: skip
    latency = LATENCY_US.get(kind, LATENCY_US["ethernet"])
    between = scaling.Link(f"{offer.provider}:{kind}", f"{kind} ({net.network_gbps:g} Gb/s)",
                           per_gpu, latency, net.rdma, why)  # fmt: skip
    between_fact = LinkFact(
        "between", between.id, between.name, net.network_gbps / 8, net.rdma, net.source,
        net.as_of.isoformat(), net.notes,
    )  # fmt: skip
    network = Network(inside, between, gpi, gpu.sm_count)
    return Site("cloud", offer.provider, offer.instance_type, gpi, float(offer.vcpus),
                float(offer.memory_gib), provider.marketplace, net.cluster, network,
                (inside_fact, between_fact), None, offer)  # fmt: skip


def onprem_design(knowledge: Knowledge, gpu: Gpu, count: int) -> str | None:
    """The server design ``count`` x ``gpu`` are bought in (:func:`cost.server_kind`), or
    None where that design takes no GPU of its form factor (superchips, laptop GPUs)."""
    design = cost.server_kind(gpu, count)
    return design if gpu.form_factor in knowledge.server_designs[design].form_factors else None


def onprem_site(
    knowledge: Knowledge, gpu: Gpu, design_id: str, counts: tuple[int, int] = (1, 1 << 30)
) -> Site:
    """A server design as a site: the GPUs' own link inside, the design's fabric between
    servers (the generation's reference InfiniBand, one port per GPU, for HGX boards)."""
    design = knowledge.server_designs[design_id]
    gpi = design.max_gpus
    inside, inside_fact = _inside(knowledge, gpu, gpi, design.name)
    if design.network == "none":
        between, fact, limit = inside, None, 1
    else:
        rec = (scaling.server_network(knowledge, gpu) if design.network == "reference"
               else knowledge.interconnects[design.network])  # fmt: skip
        ports = gpi if design.network == "reference" else (design.network_ports_per_server or 1)
        rdma = rec.kind != "ethernet"  # plain Ethernet ports: NCCL over TCP sockets
        share = 1.0 if rdma else TCP_SHARE
        per_gpu = rec.bandwidth_gb_per_s_per_direction * ports / gpi * share
        why = (f"{design.name}: {ports} x {rec.name} per server, shared by its {gpi} GPUs"
               f"{'' if rdma else f' (without RDMA, {TCP_SHARE:.0%} of it reached)'}")  # fmt: skip
        between = scaling.Link(rec.id, rec.name, per_gpu, rec.latency_us, rdma, why)
        fact = LinkFact("between", rec.id, f"{ports} x {rec.name}",
                        rec.bandwidth_gb_per_s_per_direction * ports, rdma,
                        rec.sources[0] if rec.sources else "knowledge/data/interconnects.yaml",
                        rec.as_of.isoformat(), None)  # fmt: skip
        limit = None
    network = Network(inside, between, gpi, gpu.sm_count)
    links = (inside_fact,) if fact is None else (inside_fact, fact)
    return Site(ONPREM, ONPREM, design_id, gpi, float(design.vcpus.value),
                float(design.memory_gib.value), False, design.network != "none", network,
                links, limit, None, counts)  # fmt: skip


def sites(
    knowledge: Knowledge, gpu: Gpu, allowed: str, providers: Any, onprem_priced: bool
) -> list[Site]:
    """Every site ``gpu`` can run on under the request's deployment constraint: each cloud
    offer of whole GPUs (of the named providers), and the server designs it is bought in."""
    out = []
    if allowed != "on-premise":
        for offer in knowledge.offers_by_gpu.get(gpu.id, ()):
            if offer.gpu_count < 1 or (providers and offer.provider not in providers):
                continue
            if offer.gpu_count != int(offer.gpu_count) or not offer.prices:
                continue
            out.append(cloud_site(knowledge, gpu, offer))
    if allowed != "cloud" and onprem_priced:
        ranges: dict[str, tuple[int, int]] = {}
        for n in range(1, 9):  # beyond 8 GPUs, the 8-GPU design's servers multiply
            design = onprem_design(knowledge, gpu, n)
            if design is None:
                break
            lo, _ = ranges.get(design, (n, n))
            ranges[design] = (lo, n if n < 8 else 1 << 30)
        out.extend(onprem_site(knowledge, gpu, d, r) for d, r in sorted(ranges.items()))
    return out
