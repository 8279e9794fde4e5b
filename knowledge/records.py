"""Typed, immutable records that the loaders build from the validated data files."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

PRECISIONS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
ANY = "*"  # grid_intensity.csv: a fallback row for any provider or any region


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU model, with its datasheet figures (dense peaks, no sparsity)."""

    id: str
    vendor: str
    name: str
    architecture: str
    compute_capability: str | None
    release_year: int
    segment: str
    form_factor: str
    memory_gb: float
    memory_type: str
    memory_bandwidth_gb_per_s: float
    fp64_tflops: float | None
    fp32_tflops: float
    tf32_tflops: float | None
    bf16_tflops: float | None
    fp16_tflops: float | None
    fp16_fp16acc_tflops: float | None
    fp8_tflops: float | None
    int8_tops: float | None
    tensor_cores: int
    sm_count: int
    boost_clock_mhz: float
    l2_cache_mb: float
    ecc: bool
    tdp_w: float
    nvlink_bandwidth_gb_per_s: float
    gpu_link: str | None
    pcie_generation: int
    pcie_lanes: int
    p2p_supported: bool
    cooling: str
    datacenter_use_allowed: bool
    price_usd: float | None
    price_kind: str | None
    price_as_of: dt.date | None
    sources: tuple[str, ...]
    as_of: dt.date
    aliases: tuple[str, ...]
    notes: str | None = None
    # GPUs one NVLink switch domain joins where it is larger than a server's baseboard (GB200
    # NVL72: 72); None: a server's GPUs (scaling.GPUS_PER_NODE)
    nvlink_domain: int | None = None

    def peak_tflops(self, precision: str) -> float | None:
        """Dense peak rate at ``precision`` (TOPS for int8); None where unsupported."""
        if precision == "int8":
            return self.int8_tops
        value: float | None = getattr(self, f"{precision}_tflops")
        return value

    @property
    def sm_cycles_per_s(self) -> float:
        """SM-cycles per second at the vendor's boost clock (AMD: CU-cycles)."""
        return self.sm_count * self.boost_clock_mhz * 1e6

    @property
    def precisions(self) -> tuple[str, ...]:
        """The precisions this GPU supports, in :data:`PRECISIONS` order."""
        return tuple(p for p in PRECISIONS if self.peak_tflops(p) is not None)


@dataclass(frozen=True, slots=True)
class Interconnect:
    """A link between GPUs, between a GPU and its host, or between nodes."""

    id: str
    kind: str
    name: str
    scope: str
    bandwidth_gb_per_s_per_direction: float
    latency_us: float
    sources: tuple[str, ...]
    as_of: dt.date
    notes: str | None = None
    # GPU architectures whose reference 8-GPU servers have one port of this network per GPU
    # (DGX A100: HDR; DGX H100 and B200: NDR): the network assumed between their servers
    servers_of: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class OfferPrice:
    """What one instance type costs in one region."""

    region: str
    on_demand_usd_per_hour: float
    spot_usd_per_hour: float | None
    reserved_usd_per_hour: float | None
    catalog_date: dt.date
    source: str


@dataclass(frozen=True, slots=True)
class Offer:
    """A cloud instance type with GPUs, and its prices by region."""

    provider: str
    instance_type: str
    gpu_id: str
    gpu_count: float
    vcpus: int
    memory_gib: float
    interconnect: str | None
    catalog_date: dt.date
    source: str
    notes: str | None
    prices: tuple[OfferPrice, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.provider}:{self.instance_type}"


@dataclass(frozen=True, slots=True)
class OnpremParameter:
    """One on-premise cost parameter (a default a request may override)."""

    id: str
    value: float
    unit: str
    description: str
    source: str
    as_of: dt.date
    notes: str | None = None


@dataclass(frozen=True, slots=True)
class ProfileShape:
    """How to profile one row of a benchmarked workload, and its unit per sample."""

    optimizer: str
    items_per_sample: float | str  # a number, or "tokens": the profile's tokens per sample
    seq_len: int | None = None
    image_size: int | None = None
    attention: str | None = None  # "materialized" where the reference keeps the score matrix


@dataclass(frozen=True, slots=True)
class Workload:
    """A benchmarked workload: a model, a dataset and a task, with the unit it is measured in."""

    id: str
    name: str
    kind: str
    task: str
    model: str
    dataset: str
    unit: str
    aliases: tuple[str, ...]
    description: str
    source: str
    as_of: dt.date
    profile: ProfileShape | None = None


@dataclass(frozen=True, slots=True)
class Benchmark:
    """One stored measurement, whatever its kind, in the project's common shape.

    ``value`` is in ``unit``: a throughput summed over all GPUs, a time to train in
    minutes, or an operator time in milliseconds. ``details`` keeps the kind's own columns.
    """

    kind: str
    suite: str
    workload: str
    gpu: str
    gpu_id: str | None
    gpu_count: int
    precision: str | None
    batch_size_per_gpu: float | None
    metric: str
    value: float
    unit: str
    system: str
    source: str
    as_of: dt.date
    note: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    model: str | None = None


@dataclass(frozen=True, slots=True)
class Fact:
    """One sourced figure of a curated record; ``notes`` says where it is an assumption."""

    value: float
    source: str
    as_of: dt.date
    notes: str | None = None


@dataclass(frozen=True, slots=True)
class InstanceNetwork:
    """An offer's network to the other instances of its job, per direction, all NICs together."""

    provider: str
    instance_type: str
    network_gbps: float
    network_kind: str
    rdma: bool  # GPU memory reaches the network without the host's TCP stack
    cluster: bool  # instances of the type can be placed together on this network
    source: str
    as_of: dt.date
    notes: str | None = None

    @property
    def id(self) -> str:
        """The offer id (``provider:instance_type``) this row describes."""
        return f"{self.provider}:{self.instance_type}"


@dataclass(frozen=True, slots=True)
class Provider:
    """What running a job with one provider costs besides the GPU hours: start-up, billing
    granularity, interruptions, power overhead and the instance's storage and internet."""

    id: str
    name: str
    marketplace: bool  # hosts from many owners, no shared fabric; a host may disappear
    start_up_s: Fact
    billing_increment_s: Fact
    billing_minimum_s: Fact
    on_demand_interruptions_per_hour: Fact  # per instance
    spot_interruptions_per_hour: Fact  # per instance (a marketplace: host loss per hour)
    pue: Fact
    storage_gb_per_s: Fact
    internet_gbps: Fact
    notes: str | None = None


@dataclass(frozen=True, slots=True)
class GridIntensity:
    """Carbon intensity of the electricity where a provider's region runs.

    ``provider`` or ``region`` is ``*`` in the fallback rows.
    """

    provider: str
    region: str
    g_co2e_per_kwh: float
    source: str
    as_of: dt.date
    notes: str | None = None


@dataclass(frozen=True, slots=True)
class InputRate:
    """How fast one host vCPU prepares one kind of input for the GPU.

    The ``reserved`` record carries only ``vcpus_per_gpu``: the vCPUs the training process
    itself takes per GPU. Other records have ``samples_per_s_per_vcpu`` and the size of what
    is read, per sample or per token.
    """

    id: str
    description: str | None
    samples_per_s_per_vcpu: Fact | None = None
    bytes_per_sample: Fact | None = None
    bytes_per_token: Fact | None = None
    vcpus_per_gpu: Fact | None = None
    notes: str | None = None


@dataclass(frozen=True, slots=True)
class ServerDesign:
    """A class of owned server (on premise): GPU slots, form factors, host and network.

    ``network`` is an inter-node interconnect id, ``none`` (the server joins no cluster) or
    ``reference`` (the GPU generation's reference network, one port per GPU).
    """

    id: str
    name: str
    max_gpus: int
    form_factors: tuple[str, ...]
    vcpus: Fact
    memory_gib: Fact
    network: str
    network_ports_per_server: int | None = None
    notes: str | None = None


@dataclass(frozen=True, slots=True)
class Stack:
    """A software stack a run is made with: what it does that changes a step's time and
    memory (``properties``, see knowledge/data/stacks.yaml), and the constants fitted on its
    published runs (``compute`` and ``serving``: name -> value, with ``fit`` naming them)."""

    id: str
    name: str
    tasks: tuple[str, ...]
    properties: dict[str, Any]
    sources: tuple[str, ...]
    as_of: dt.date
    version: str
    aliases: tuple[str, ...] = ()
    default_for: tuple[str, ...] = ()
    compute: dict[str, Any] = field(default_factory=dict)
    serving: dict[str, Any] = field(default_factory=dict)
    # where its prior constants were fitted, when on its own runs (it borrows no other
    # stack's fit then)
    priors_fitted_on: str | None = None
