"""Physical bounds a submitted benchmark row is held to: what no GPU, memory or calendar allows.

A row that passes its schema (:class:`knowledge.benchmark_schemas.SubmittedRowSchema`) may
still be no measurement: 1e308 images/s, a batch no memory holds, a date before its GPU
existed. Stored, such a row bends the performance model or breaks its fit (ten rows of
1e308 overflow to inf), and the submissions file keeps it. :meth:`RowBounds.faults` names
each field out of bounds, with the bound and the figures it follows from:

- ``throughput``: at most what the GPUs' peak allows, ``gpu_count × peak TFLOPS × MARGIN``
  over the workload's training FLOPs per unit of its throughput (forward + backward, about
  3 × forward; ``MARGIN`` because peaks and FLOP counts are approximate: the curated rows
  reach 1.4 × this count, fp32 GNMT and Mask R-CNN on Volta and Turing). Where the FLOPs
  are not known, ``FALLBACK`` × the best curated rate of the workload per GPU per peak
  TFLOPS. At least one step of the row's batch a day.
- ``batch_size_per_gpu``: 1 up to the GPU's memory over ``MIN_BYTES_PER_SAMPLE``.
- ``as_of``: not before 1 January of the GPU's release year, not after today (UTC) plus a
  day for time zones.
- ``watt_total`` and ``price_usd``: at most the GPUs' TDP plus ``HOST_W_PER_GPU`` each, and
  ``MAX_PRICE_USD_PER_GPU`` a GPU.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from dataclasses import dataclass

from knowledge.base import Knowledge
from knowledge.records import Benchmark, Gpu, Workload

KIND = "training-throughput"
MARGIN = 2.0
FALLBACK = 20.0
MIN_BYTES_PER_SAMPLE = 16  # two 64-bit ids (NCF's user and item): less is no training sample
MAX_STEP_S = 86_400.0  # a step of the row's batch in at most a day
FUTURE_DAYS = 1  # as_of may be tomorrow in UTC where the submitter's day is ahead
HOST_W_PER_GPU = 1_000.0  # CPUs, memory, fans and NICs of a server: 2-3 kW for 8 GPUs
MAX_PRICE_USD_PER_GPU = 1_000_000.0  # the curated rows' dearest: 36,700 USD a GPU (H100 SXM)
MIXED = ("fp32", "tf32", "fp16", "bf16")

Fault = tuple[str, str]  # (field, message)


def row_peak_tflops(gpu: Gpu, precision: str) -> float:
    """The highest dense rate, TFLOPS, a row labelled ``precision`` may have run at: fp32
    rows with TF32 allowed (NVIDIA's containers, Ampere and newer), fp16 rows (mixed
    precision) on fp16, bf16, TF32 or fp32 units, FP16 accumulate included."""
    rates = [gpu.peak_tflops(p) for p in (("fp32", "tf32") if precision == "fp32" else MIXED)]
    if precision != "fp32":
        rates.append(gpu.fp16_fp16acc_tflops)
    return max(r for r in rates if r)


@dataclass(frozen=True)
class RowBounds:
    """The bounds of one knowledge base: ``flops_per_unit`` (workload id -> training FLOPs
    per unit of its throughput, where known) and ``best_per_peak`` (workload id -> the best
    curated throughput per GPU per peak TFLOPS)."""

    flops_per_unit: Mapping[str, float]
    best_per_peak: Mapping[str, float]

    @classmethod
    def of(
        cls, knowledge: Knowledge, flops_per_unit: Mapping[str, float] | None = None
    ) -> RowBounds:
        best: dict[str, float] = {}
        for b in knowledge.benchmarks:
            if b.kind != KIND or b.gpu_id is None or not b.precision or "submission" in b.details:
                continue
            rate = b.value / b.gpu_count / row_peak_tflops(knowledge.gpus[b.gpu_id], b.precision)
            best[b.workload] = max(rate, best.get(b.workload, 0.0))
        return cls(dict(flops_per_unit or {}), best)

    def faults(self, row: Benchmark, gpu: Gpu, workload: Workload, today: dt.date) -> list[Fault]:
        """Every field of ``row`` (measured on ``gpu``, of ``workload``) out of bounds."""
        numbers = {
            "throughput": row.value,
            "batch_size_per_gpu": row.batch_size_per_gpu,
            **{k: row.details.get(k) for k in ("watt_total", "price_usd", "batch_size_global")},
        }
        infinite = [
            (k, "a finite number")
            for k, v in numbers.items()
            if v is not None and not math.isfinite(v)
        ]
        if infinite:
            return infinite
        batch = _batch(row, gpu)
        return [
            *self._throughput(row, gpu, workload, floor=not batch),
            *batch,
            *_as_of(row, gpu, today),
            *_power_and_price(row, gpu),
        ]

    def throughput_limit(self, row: Benchmark, gpu: Gpu, workload: Workload) -> tuple[float, str]:
        """The most ``row`` may measure on ``gpu`` in ``workload``'s unit, and why."""
        count, precision = row.gpu_count, row.precision or "fp32"
        peak = row_peak_tflops(gpu, precision)
        gpus = f"{count} × {peak:g} TFLOPS (the {gpu.name}'s {precision} peak)"
        items = workload.unit.split("/")[0]
        flops = self.flops_per_unit.get(workload.id)
        best = self.best_per_peak.get(workload.id)
        if flops:
            return MARGIN * count * peak * 1e12 / flops, (
                f"{gpus} × {MARGIN:g} (peaks and FLOP counts are approximate) over "
                f"{flops:.3g} FLOPs to train on one of its {items} (forward + backward, as "
                "the workload's step profile counts them)"
            )
        if best:
            return FALLBACK * best * count * peak, (
                f"{gpus} × {FALLBACK:g} × the best curated rate of this workload, "
                f"{best:.3g} {workload.unit} per GPU per peak TFLOPS (its FLOPs are not known)"
            )
        return (
            MARGIN * count * peak * 1e12,
            f"{gpus} × {MARGIN:g}, at one FLOP per one of its {items}",
        )

    def _throughput(self, row: Benchmark, gpu: Gpu, workload: Workload, floor: bool) -> list[Fault]:
        unit = workload.unit
        limit, why = self.throughput_limit(row, gpu, workload)
        if row.value > limit:
            return [("throughput", f"at most {limit:,.4g} {unit}, not {row.value:,.6g}: {why}")]
        per_sample = workload.profile.items_per_sample if workload.profile is not None else 1
        batch = row.batch_size_per_gpu
        if not (floor and batch and isinstance(per_sample, (int, float))):
            return []
        least = batch * row.gpu_count * per_sample / MAX_STEP_S
        if row.value < least:
            return [
                (
                    "throughput",
                    f"at least {least:.3g} {unit}: one step of {batch:g} × "
                    f"{row.gpu_count} samples a day at the slowest",
                )
            ]
        return []


def _batch(row: Benchmark, gpu: Gpu) -> list[Fault]:
    batch = row.batch_size_per_gpu
    limit = gpu.memory_gb * 1e9 / MIN_BYTES_PER_SAMPLE
    if batch is not None and batch < 1:
        return [("batch_size_per_gpu", "at least 1 sample per GPU")]
    if batch is not None and batch > limit:
        return [
            (
                "batch_size_per_gpu",
                f"at most {limit:,.0f} samples per GPU, not {batch:,.6g}: "
                f"the {gpu.memory_gb:g} GB of the {gpu.name} over {MIN_BYTES_PER_SAMPLE} bytes, "
                "the least a training sample takes (two 64-bit ids)",
            )
        ]
    return []


def _as_of(row: Benchmark, gpu: Gpu, today: dt.date) -> list[Fault]:
    released = dt.date(gpu.release_year, 1, 1)
    latest = today + dt.timedelta(days=FUTURE_DAYS)
    if row.as_of < released:
        return [
            ("as_of", f"not before {released}: the {gpu.name} was released in {gpu.release_year}")
        ]
    if row.as_of > latest:
        return [
            (
                "as_of",
                f"not after {latest} (today in UTC, plus a day for time zones): "
                "the date of a measurement already made",
            )
        ]
    return []


def _power_and_price(row: Benchmark, gpu: Gpu) -> list[Fault]:
    out = []
    count = row.gpu_count
    watts, price = row.details.get("watt_total"), row.details.get("price_usd")
    most_w = count * (gpu.tdp_w + HOST_W_PER_GPU)
    if watts is not None and watts > most_w:
        out.append(
            (
                "watt_total",
                f"at most {most_w:,.0f} W, not {watts:,.6g}: {count} × "
                f"({gpu.tdp_w:g} W TDP + {HOST_W_PER_GPU:,.0f} W of host)",
            )
        )
    most_usd = count * MAX_PRICE_USD_PER_GPU
    if price is not None and price > most_usd:
        out.append(
            (
                "price_usd",
                f"at most {most_usd:,.0f} USD, not {price:,.6g}: {count} × "
                f"{MAX_PRICE_USD_PER_GPU:,.0f} USD a GPU",
            )
        )
    return out
