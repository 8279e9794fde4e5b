"""The whole job, not only its steps: time to result, what it is billed, the energy it draws.

Time to result = start-up (provisioning, boot, image; the pretrained weights downloaded for
fine-tuning and serving) + staging the dataset (its bytes over the slower of the instance's
storage and, for a marketplace host, its internet connection) + the steps + checkpoint
writes + for capacity that can be taken away (spot, marketplace hosts) the expected
restarts: each interruption costs a new start-up, the staging again and, on average, half
a checkpoint interval of lost work. The checkpoint interval is Young's first-order optimum
``sqrt(2 C / lambda)`` (Young 1974, "A first order approximation to the optimum checkpoint
interval", CACM 17(9)) for the write time ``C`` and the deployment's interruption rate
``lambda`` (per instance-hour times instances), kept between a quarter of an hour and four
hours; with no interruptions, hourly. Every job writes its final state once.

A cloud job is billed per instance for its whole time, rounded up to the provider's
increment and at least its minimum; an owned one at the owned GPU-hour's cost.

Energy: each GPU draws :data:`IDLE_SHARE` of its board power idle and its board power when
busy, in proportion to the share of the step its kernels run (the step's bound); the host
draws ``server_power_overhead_w_per_gpu_slot`` per GPU; times the data centre's PUE; kg CO2e
from the region's grid intensity.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from knowledge.records import Provider

SECONDS_PER_HOUR = 3600.0
CHECKPOINT_HOURS = (0.25, 4.0)  # shortest and longest checkpoint interval
DEFAULT_CHECKPOINT_H = 1.0
# A GPU's draw idle, as a share of its board power (NVIDIA A100 SXM idles near 50-60 W of
# 400 W, H100 SXM near 70-100 W of 700 W: nvidia-smi readings reported in
# arXiv:2310.03003, "From Words to Watts", section 4): with clocks held for a job, 15%
IDLE_SHARE = 0.15


@dataclass(frozen=True, slots=True)
class Sizes:
    """What a job moves besides its steps (bytes)."""

    dataset_bytes: float  # staged once onto each instance
    download_bytes: float  # pretrained weights fetched at start-up (fine-tuning, serving)
    checkpoint_bytes: float  # the state a restart needs (trainable weights, optimizer)


@dataclass(frozen=True, slots=True)
class JobTime:
    """A job's wall-clock hours by part."""

    start_up_hours: float
    staging_hours: float
    steps_hours: float
    checkpoint_hours: float
    restart_hours: float
    expected_restarts: float
    checkpoints: int
    checkpoint_interval_hours: float

    @property
    def hours(self) -> float:
        return (self.start_up_hours + self.staging_hours + self.steps_hours
                + self.checkpoint_hours + self.restart_hours)  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {"hours": self.hours, **asdict(self)}


def interruptions_per_hour(provider: Provider, pricing: str) -> float:
    """How often one instance (or owned server) is lost per hour at ``pricing``: spot
    capacity taken back, a marketplace host gone, hardware failing."""
    fact = provider.spot_interruptions_per_hour if pricing == "spot" else (
        provider.on_demand_interruptions_per_hour)  # fmt: skip
    return float(fact.value)


def job_time(
    provider: Provider, instances: int, steps_hours: float, sizes: Sizes, pricing: str,
    network_gbps: float | None, trains: bool,
) -> JobTime:  # fmt: skip
    """The job's parts on ``instances`` instances of ``provider`` at ``pricing``
    (``network_gbps``: the instance's own network, which bounds staging too)."""
    storage = float(provider.storage_gb_per_s.value) * 1e9
    internet = float(provider.internet_gbps.value) / 8 * 1e9
    stage_rate = storage
    if provider.marketplace:  # the data comes over the host's internet connection
        stage_rate = min(stage_rate, internet)
    if network_gbps:
        stage_rate = min(stage_rate, network_gbps / 8 * 1e9)
    start = (float(provider.start_up_s.value) + sizes.download_bytes / internet) / SECONDS_PER_HOUR
    staging = sizes.dataset_bytes / stage_rate / SECONDS_PER_HOUR
    rate = interruptions_per_hour(provider, pricing) * instances
    write = sizes.checkpoint_bytes / (storage * instances) / SECONDS_PER_HOUR if trains else 0.0
    interval = DEFAULT_CHECKPOINT_H
    if rate > 0 and write > 0:
        interval = math.sqrt(2 * write / rate)
    interval = min(max(interval, CHECKPOINT_HOURS[0]), CHECKPOINT_HOURS[1])
    checkpoints = (int(steps_hours / interval) + 1) if trains else 0
    checkpoint = checkpoints * write
    expected = rate * (steps_hours + checkpoint)
    lost = interval / 2 if trains else 0.0
    restarts = expected * (start + staging + lost)
    return JobTime(start, staging, steps_hours, checkpoint, restarts, expected, checkpoints,
                   interval if trains else 0.0)  # fmt: skip


def billed_hours(provider: Provider, hours: float) -> float:
    """One instance's billed hours for a job of ``hours``: whole increments, at least the
    minimum."""
    increment = max(float(provider.billing_increment_s.value), 1.0)
    seconds = math.ceil(hours * SECONDS_PER_HOUR / increment - 1e-9) * increment
    return max(seconds, float(provider.billing_minimum_s.value)) / SECONDS_PER_HOUR


@dataclass(frozen=True, slots=True)
class Energy:
    """A job's energy and emissions."""

    kwh: float
    kg_co2e: float
    gpu_watts: float  # each GPU's mean draw while stepping
    host_watts_per_gpu: float
    pue: float
    pue_source: str
    grid_g_co2e_per_kwh: float
    grid_source: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def energy(
    tdp_w: float, count: int, job: JobTime, busy: float, host_w_per_gpu: float,
    pue: tuple[float, str], grid: tuple[float, str],
) -> Energy:  # fmt: skip
    """The job's kWh and kg CO2e: each GPU at its busy draw while stepping and idle
    otherwise, its host's share throughout, times PUE; emissions at the grid's intensity."""
    busy = min(max(busy, 0.0), 1.0)
    stepping = tdp_w * (IDLE_SHARE + (1 - IDLE_SHARE) * busy)
    idle = tdp_w * IDLE_SHARE
    other = job.hours - job.steps_hours
    wh = count * (stepping * job.steps_hours + idle * other + host_w_per_gpu * job.hours)
    kwh = wh / 1000 * pue[0]
    return Energy(kwh, kwh * grid[0] / 1000, stepping, host_w_per_gpu, pue[0], pue[1],
                  grid[0], grid[1])  # fmt: skip
