"""The roofline of one step on one GPU: what the profile's operator mix needs of its peaks.

Each operator kind of each phase takes ``max(FLOPs / rate, bytes / bandwidth)``, where the
rate is the tensor-core rate of the math mode for matmuls, attention and convolutions, and the
vector fp32 rate for everything else. The sum is the time a perfect GPU would take; the
learned efficiency (:mod:`service.engine.efficiency`) turns it into a real one.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from knowledge.records import Gpu

TENSOR_KINDS = frozenset({"matmul", "attention", "convolution"})
AMPERE_AND_NEWER = frozenset({"ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3"})
LAUNCH_S = 5e-6  # host time per eager operator launch (PyTorch eager, order of magnitude)


class UnsupportedPrecision(ValueError):
    """The GPU cannot run the workload's precision."""

    def __init__(self, gpu: Gpu, precision: str) -> None:
        self.gpu, self.precision = gpu, precision
        supported = ", ".join(usable_precisions(gpu))
        super().__init__(
            f"{gpu.id} does not support {precision}; it supports {supported}",
        )


def usable_precisions(gpu: Gpu) -> list[str]:
    """Workload precisions this GPU runs (fp16 storage runs everywhere; bf16 from Ampere)."""
    found = ["fp32"]
    if gpu.tf32_tflops:
        found.append("tf32")
    if gpu.bf16_tflops:
        found.append("bf16")
    found.append("fp16")
    if gpu.fp8_tflops:
        found.append("fp8")
    if gpu.int8_tops:
        found.extend(["int8", "int4"])
    return found


@dataclass(frozen=True)
class MathMode:
    """How the GPU does the arithmetic of a precision, and at what dense peak."""

    precision: str
    name: str  # e.g. "tf32 tensor cores"
    tensor_flops: float  # FLOP/s for matmuls, attention, convolutions
    vector_flops: float  # FLOP/s for the rest
    bytes_per_s: float
    note: str


def math_mode(gpu: Gpu, precision: str) -> MathMode:
    """The math mode the estimate assumes for ``precision`` on ``gpu``.

    ``fp32`` is what the stored benchmarks mean by it: PyTorch in NVIDIA's containers, which
    run fp32 matmuls and convolutions on TF32 tensor cores on Ampere and newer. ``fp16`` on
    a GPU without tensor cores keeps fp16 storage and does fp32 arithmetic (as cuBLAS does
    for mixed precision there), so it runs at the fp32 rate.
    """
    if precision not in usable_precisions(gpu):
        raise UnsupportedPrecision(gpu, precision)
    vector = gpu.fp32_tflops * 1e12
    bandwidth = gpu.memory_bandwidth_gb_per_s * 1e9
    if precision in ("fp32", "tf32"):
        if gpu.tf32_tflops and gpu.architecture.lower() in AMPERE_AND_NEWER:
            return MathMode(
                precision,
                "tf32 tensor cores",
                gpu.tf32_tflops * 1e12,
                vector,
                bandwidth,
                "fp32 storage; matmuls and convolutions in TF32 on tensor cores, as the stored "
                "benchmarks ran (NVIDIA's PyTorch containers allow TF32 by default)",
            )
        return MathMode(
            precision, "fp32", vector, vector, bandwidth, "fp32 arithmetic (no TF32 on this GPU)"
        )
    if precision in ("fp8", "int8", "int4"):
        rate = gpu.fp8_tflops if precision == "fp8" else gpu.int8_tops
        assert rate is not None  # usable_precisions checked it
        return MathMode(
            precision,
            f"{precision} tensor cores",
            rate * 1e12,
            vector,
            bandwidth,
            f"{precision} matmuls on tensor cores; the rest in 16-bit or fp32",
        )
    rate = (gpu.bf16_tflops if precision == "bf16" else gpu.fp16_tflops) or 0.0
    if gpu.tensor_cores == 0 or rate < gpu.fp32_tflops:
        return MathMode(
            precision,
            "fp32 arithmetic, 16-bit storage",
            vector,
            vector,
            bandwidth,
            f"{gpu.id} has no fast {precision} math: {precision} storage with fp32 arithmetic",
        )
    return MathMode(
        precision,
        f"{precision} tensor cores (fp32 accumulate)",
        rate * 1e12,
        vector,
        bandwidth,
        f"mixed precision: {precision} matmuls and convolutions on tensor cores with fp32 "
        "accumulate (the dense rate, never the sparse one)",
    )


@dataclass(frozen=True)
class OpMix:
    """A step's work by (phase, kind): FLOPs and bytes moved, and the operator launches."""

    work: Mapping[tuple[str, str], tuple[float, float]]
    launches: float

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any]) -> OpMix:
        work: dict[tuple[str, str], tuple[float, float]] = {}
        for entry in profile["by_kind"]:
            key = (entry["phase"], entry["kind"])
            flops, moved = work.get(key, (0.0, 0.0))
            work[key] = (
                flops + entry["flops"],
                moved + entry["bytes_read"] + entry["bytes_written"],
            )
        launches = float(sum(op.get("calls", 0) for op in profile.get("by_op", [])))
        return cls(work, launches)

    @classmethod
    def between(cls, one: OpMix, two: OpMix, batch: float) -> OpMix:
        """The mix at ``batch`` from the mixes at batch 1 and 2 (linear in the batch)."""
        keys = set(one.work) | set(two.work)
        work = {}
        for key in keys:
            f1, b1 = one.work.get(key, (0.0, 0.0))
            f2, b2 = two.work.get(key, (0.0, 0.0))
            work[key] = (
                max(f1 + (f2 - f1) * (batch - 1), 0.0),
                max(b1 + (b2 - b1) * (batch - 1), 0.0),
            )
        launches = max(one.launches, two.launches)
        return cls(work, launches)

    def to_dict(self) -> dict[str, Any]:
        return {
            "work": [[p, k, f, b] for (p, k), (f, b) in sorted(self.work.items())],
            "launches": self.launches,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OpMix:
        return cls({(p, k): (f, b) for p, k, f, b in data["work"]}, data["launches"])


@dataclass(frozen=True)
class Roofline:
    """Ideal step time on one GPU, split by what bounds each part."""

    tensor_s: float  # matmul-like work bound by the tensor rate
    vector_s: float  # other compute-bound work, at the vector rate
    memory_s: float  # work bound by memory bandwidth
    launch_s: float  # host time to launch the step's operators (eager)
    by_phase: Mapping[str, float]

    @property
    def total_s(self) -> float:
        return self.tensor_s + self.vector_s + self.memory_s

    def shares(self) -> tuple[float, float, float]:
        total = self.total_s or 1.0
        return self.tensor_s / total, self.vector_s / total, self.memory_s / total


def roofline(mix: OpMix, mode: MathMode, phases: Iterable[str] | None = None) -> Roofline:
    """Sum over kinds of max(compute time, memory time) on ``mode``'s peaks."""
    wanted = set(phases) if phases is not None else None
    tensor = vector = memory = 0.0
    by_phase: dict[str, float] = defaultdict(float)
    for (phase, kind), (flops, moved) in mix.work.items():
        if wanted is not None and phase not in wanted:
            continue
        rate = mode.tensor_flops if kind in TENSOR_KINDS else mode.vector_flops
        compute, traffic = flops / rate, moved / mode.bytes_per_s
        if compute >= traffic:
            if kind in TENSOR_KINDS:
                tensor += compute
            else:
                vector += compute
        else:
            memory += traffic
        by_phase[phase] += max(compute, traffic)
    return Roofline(tensor, vector, memory, mix.launches * LAUNCH_S, dict(by_phase))
