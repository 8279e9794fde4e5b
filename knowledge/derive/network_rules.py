"""The network of each instance family of GCP, Azure, Lambda and Vast.ai, as data.

Each :class:`Rule` transcribes one provider page (``source``, read on ``as_of``): a figure
per instance type (``by_type``), one for the whole family (``gbps``), or a per-vCPU rate up
to a cap. Figures are the provider's stated maximum, in Gb/s per direction, all NICs
together; ``notes`` say what else the page states and where a figure is an assumption.
AWS needs no rule: its source table states each type's network (see
:mod:`knowledge.derive.networks`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

READ_ON = "2026-12-06"  # the day the pages below were read
NOT_STATED = "not stated by the provider; conservative assumption"

GCP_GPU_NETWORK = "https://cloud.google.com/compute/docs/gpus/gpu-network-bandwidth"
GCP_MACHINES = "https://cloud.google.com/compute/docs/accelerator-optimized-machines"
GCP_BANDWIDTH = "https://cloud.google.com/compute/docs/network-bandwidth"
AZURE_SIZES = "https://learn.microsoft.com/azure/virtual-machines/sizes/gpu-accelerated/"
LAMBDA_ON_DEMAND = "https://docs.lambda.ai/public-cloud/on-demand/"
VAST_DOCS = "https://docs.vast.ai/"

COMPACT = "compact placement policy"
EGRESS = "the machine type's maximum egress bandwidth"
AZURE_IB = "joined in one virtual machine scale set, with GPUDirect RDMA"
AZURE_EXPECTED = "the size's expected network bandwidth, all NICs and destinations"
PROXIMITY = "proximity placement group"


@dataclass(frozen=True)
class Network:
    """What one offer's row says, less provider, instance type, source and date."""

    gbps: float
    kind: str
    rdma: bool
    cluster: bool
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Rule:
    """The network of the instance types of ``provider`` whose names match ``pattern``."""

    provider: str
    pattern: str
    kind: str
    source: str
    by_type: dict[str, float] = field(default_factory=dict)
    gbps: float | None = None
    gbps_per_vcpu: float | None = None
    max_gbps: float | None = None
    cluster: bool = True
    notes: tuple[str, ...] = ()
    as_of: str = READ_ON

    def figure(self, instance_type: str, vcpus: int) -> float | None:
        """The stated Gb/s of ``instance_type`` (with ``vcpus``), or None where not stated."""
        if instance_type in self.by_type:
            return self.by_type[instance_type]
        if self.gbps_per_vcpu is not None:
            top = self.max_gbps if self.max_gbps is not None else float("inf")
            return min(self.gbps_per_vcpu * vcpus, top)
        return self.gbps

    def covers(self, instance_type: str, vcpus: int) -> bool:
        return bool(re.fullmatch(self.pattern, instance_type)) and (
            self.figure(instance_type, vcpus) is not None
        )

    def network(self, instance_type: str, vcpus: int) -> Network:
        gbps = self.figure(instance_type, vcpus)
        if gbps is None:
            raise ValueError(f"{self.pattern!r} states no figure for {instance_type!r}")
        rdma = self.kind not in ("ethernet", "internet")
        return Network(gbps, self.kind, rdma, self.cluster, self.notes)


def _azure(
    pattern: str,
    page: str,
    kind: str,
    *,
    gbps: float | None = None,
    mbps: dict[str, float] | None = None,
    cluster: bool = True,
    notes: tuple[str, ...] = (),
) -> Rule:
    """An Azure rule citing its size page; ``mbps``: the page's Mb/s by size, less
    ``Standard_``."""
    by_type = {f"Standard_{k}": v / 1000 for k, v in (mbps or {}).items()}
    return Rule("azure", pattern, kind, AZURE_SIZES + page, by_type, gbps,
                cluster=cluster, notes=notes)  # fmt: skip


RULES: tuple[Rule, ...] = (
    # GCP: A3 and A4 from the GPU network page, A2, G2 and A3 High 1-4g from the machine
    # tables; N1 from the general bandwidth rule (P100/P4 VMs get only that, T4/V100 may
    # get more with enough vCPUs, which is not assumed)
    Rule(
        "gcp",
        r"a4-highgpu-8g.*|a3-ultragpu-8g.*",
        "roce",
        GCP_GPU_NETWORK,
        gbps=3600,
        notes=(
            "3,200 Gb/s on eight ConnectX-7 NICs for GPU-to-GPU RDMA plus 400 Gb/s on "
            "two gVNICs for other traffic",
            COMPACT,
        ),
    ),
    Rule(
        "gcp",
        r"a3-megagpu-8g",
        "gpudirect-tcpxo",
        GCP_GPU_NETWORK,
        gbps=1800,
        notes=("eight GPU NICs plus one general-purpose NIC (8+1)", COMPACT),
    ),
    Rule(
        "gcp",
        r"a3-highgpu-8g",
        "gpudirect-tcpx",
        GCP_GPU_NETWORK,
        gbps=1000,
        notes=("four GPU NICs plus one general-purpose NIC (4+1)", COMPACT),
    ),
    Rule(
        "gcp",
        r"a3-edgegpu-8g.*",
        "gpudirect-tcpx",
        GCP_MACHINES,
        gbps=400,
        notes=(
            "400 Gb/s in most A3 Edge regions, 600 in asia-south1 and "
            "northamerica-northeast2: the lower kept",
            COMPACT,
        ),
    ),
    Rule(
        "gcp",
        r"a3-highgpu-[124]g",
        "ethernet",
        GCP_MACHINES,
        by_type={"a3-highgpu-1g": 25, "a3-highgpu-2g": 50, "a3-highgpu-4g": 100},
        notes=("a single NIC: GPUDirect-TCPX needs the 8-GPU type", COMPACT),
    ),
    Rule(
        "gcp",
        r"a2-.+",
        "ethernet",
        GCP_MACHINES,
        by_type={
            "a2-highgpu-1g": 24,
            "a2-highgpu-2g": 32,
            "a2-highgpu-4g": 50,
            "a2-highgpu-8g": 100,
            "a2-megagpu-16g": 100,
            "a2-ultragpu-1g": 24,
            "a2-ultragpu-2g": 32,
            "a2-ultragpu-4g": 50,
            "a2-ultragpu-8g": 100,
        },
        notes=(EGRESS, COMPACT),
    ),
    Rule(
        "gcp",
        r"g2-standard-\d+",
        "ethernet",
        GCP_MACHINES,
        by_type={
            "g2-standard-4": 10,
            "g2-standard-8": 16,
            "g2-standard-12": 16,
            "g2-standard-16": 32,
            "g2-standard-24": 32,
            "g2-standard-32": 32,
            "g2-standard-48": 50,
            "g2-standard-96": 100,
        },
        notes=(EGRESS, COMPACT),
    ),
    Rule(
        "gcp",
        r"n1-.+",
        "ethernet",
        GCP_BANDWIDTH,
        gbps_per_vcpu=2,
        max_gbps=32,
        cluster=False,
        notes=(
            "2 Gb/s per vCPU up to 32 Gb/s, the N1 rate without GPUs (n1-standard-8: "
            "16 Gb/s); T4 and V100 VMs may reach up to 100 Gb/s with enough vCPUs and "
            "gVNIC, not assumed",
            "compact placement not assumed for N1",
        ),
    ),
    # Azure: ND sizes have InfiniBand, one link per GPU (ND v2: one per VM); NC and NV
    # sizes have ethernet at the expected bandwidth of their size page's network table
    _azure(
        r"Standard_ND96isr_H100_v5",
        "ndh100v5-series",
        "infiniband",
        gbps=3200,
        notes=("8 x 400 Gb/s NDR InfiniBand, one link per GPU", AZURE_IB),
    ),
    _azure(
        r"Standard_ND96isr_H200_v5",
        "nd-h200-v5-series",
        "infiniband",
        gbps=3200,
        notes=("8 x 400 Gb/s NDR InfiniBand, one link per GPU", AZURE_IB),
    ),
    _azure(
        r"Standard_ND96isr_MI300X_v5",
        "ndmi300xv5-series",
        "infiniband",
        gbps=3200,
        notes=("8 x 400 Gb/s NDR InfiniBand, one link per GPU", AZURE_IB),
    ),
    _azure(
        r"Standard_ND96asr_v4",
        "ndasra100v4-series",
        "infiniband",
        gbps=1600,
        notes=("8 x 200 Gb/s HDR InfiniBand, one link per GPU", AZURE_IB),
    ),
    _azure(
        r"Standard_ND96amsr_A100_v4",
        "ndma100v4-series",
        "infiniband",
        gbps=1600,
        notes=("8 x 200 Gb/s HDR InfiniBand, one link per GPU", AZURE_IB),
    ),
    _azure(
        r"Standard_ND40rs_v2",
        "ndv2-series",
        "infiniband",
        gbps=100,
        notes=("one 100 Gb/s EDR InfiniBand link per VM", AZURE_IB),
    ),
    _azure(
        r"Standard_NC\d+ads_A100_v4",
        "nca100v4-series",
        "ethernet",
        mbps={"NC24ads_A100_v4": 20000, "NC48ads_A100_v4": 40000, "NC96ads_A100_v4": 80000},
        notes=(AZURE_EXPECTED, PROXIMITY),
    ),
    _azure(
        r"Standard_NC\d+adi?s_H100_v5",
        "ncadsh100v5-series",
        "ethernet",
        mbps={"NC40ads_H100_v5": 40000, "NC80adis_H100_v5": 80000},
        notes=(AZURE_EXPECTED, PROXIMITY),
    ),
    _azure(
        r"Standard_NCC40ads_H100_v5",
        "nccadsh100v5-series",
        "ethernet",
        mbps={"NCC40ads_H100_v5": 40000},
        notes=(AZURE_EXPECTED, PROXIMITY),
    ),
    _azure(
        r"Standard_NC\d+as_T4_v3",
        "ncast4v3-series",
        "ethernet",
        mbps={
            "NC4as_T4_v3": 8000,
            "NC8as_T4_v3": 8000,
            "NC16as_T4_v3": 8000,
            "NC64as_T4_v3": 32000,
        },
        notes=(AZURE_EXPECTED, PROXIMITY),
    ),
    _azure(
        r"Standard_NV\d+adm?s_A10_v5",
        "nvadsa10v5-series",
        "ethernet",
        mbps={
            "NV6ads_A10_v5": 5000,
            "NV12ads_A10_v5": 10000,
            "NV18ads_A10_v5": 20000,
            "NV36ads_A10_v5": 40000,
            "NV36adms_A10_v5": 80000,
            "NV72ads_A10_v5": 80000,
        },
        notes=(AZURE_EXPECTED, PROXIMITY),
    ),
    _azure(
        r"Standard_NV\d+s_v3",
        "nvv3-series",
        "ethernet",
        mbps={"NV12s_v3": 6000, "NV24s_v3": 12000, "NV48s_v3": 24000},
        notes=(AZURE_EXPECTED, PROXIMITY),
    ),
    _azure(
        r"Standard_NV\d+as_v4",
        "nvv4-series",
        "ethernet",
        mbps={"NV4as_v4": 1000, "NV8as_v4": 2000, "NV16as_v4": 4000, "NV32as_v4": 8000},
        notes=(AZURE_EXPECTED, PROXIMITY),
    ),
    # The NCv3 page lists NIC counts only, and no page found states NC A10 v4 bandwidth
    _azure(
        r"Standard_NC\d+r?s_v3",
        "ncv3-series",
        "ethernet",
        gbps=10,
        cluster=False,
        notes=(
            NOT_STATED,
            "the RDMA-capable NC24rs_v3 also has InfiniBand of unstated speed, not counted",
        ),
    ),
    _azure(
        r"Standard_NC\d+ads_A10_v4",
        "nc-family",
        "ethernet",
        gbps=10,
        cluster=False,
        notes=(NOT_STATED,),
    ),
    # Lambda's offers are on-demand instances; its 1-Click Clusters are another product
    Rule(
        "lambda",
        r".+",
        "ethernet",
        LAMBDA_ON_DEMAND,
        gbps=10,
        cluster=False,
        notes=(
            NOT_STATED,
            "Lambda's 1-Click Clusters (not these on-demand types) give each "
            "8-GPU node 3,200 Gb/s of InfiniBand",
        ),
    ),
    # Vast.ai hosts belong to many owners and meet over the public internet
    Rule(
        "vast",
        r".+",
        "internet",
        VAST_DOCS,
        gbps=1,
        cluster=False,
        notes=(
            "assumption: each marketplace host lists its own measured internet speeds, "
            "commonly 0.1 to 10 Gb/s; 1 Gb/s assumed",
            "hosts share no fabric",
        ),
    ),
)
# Any offer that no rule covers: the conservative case
FALLBACK = Rule("*", r".*", "ethernet", "none: " + NOT_STATED, gbps=10, cluster=False,
                notes=(NOT_STATED,))  # fmt: skip
