"""What a step's operator mix needs of a GPU's peaks: its time on each resource.

A :class:`MathMode` says how the GPU does the arithmetic of a precision (tensor cores or
not, at which dense peak). :func:`resource_times` splits a step's ideal time by resource:
tensor-core (or CUDA-core) matmul work at the math mode's rate, other arithmetic at the
vector fp32 rate, and all bytes moved at the bandwidth the GPU's SMs can use (the
datasheet figure, capped by what its SMs keep in flight: :func:`usable_bandwidth`). The
step model (:mod:`service.engine.estimating.step_model`) weighs these times with learned
efficiencies and adds what does not speed up with the GPU.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from knowledge.records import Gpu
from service.engine.errors import UnsupportedPrecision

TENSOR_KINDS = frozenset({"matmul", "attention", "convolution"})
AMPERE_AND_NEWER = frozenset({"ampere", "ada", "hopper", "blackwell", "cdna2", "cdna3"})


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
    bytes_per_s: float  # the datasheet's DRAM bandwidth
    note: str
    tensor_cores: bool  # matmul-like work runs on tensor cores (else on the CUDA cores)

    @property
    def tf32(self) -> bool:
        """fp32 matmuls on TF32 tensor cores (an efficiency of its own)."""
        return self.tensor_cores and self.precision in ("fp32", "tf32")


# long: one decision table: the precision asked and what the GPU's generation runs
def math_mode(gpu: Gpu, precision: str) -> MathMode:
    """The math mode the estimate assumes for ``precision`` on ``gpu``.

    ``fp32`` is what the stored benchmarks mean by it: PyTorch in NVIDIA's containers, which
    run fp32 matmuls and convolutions on TF32 tensor cores on Ampere and newer. ``fp16`` on
    a GPU without tensor cores keeps fp16 storage and does fp32 arithmetic (as cuBLAS does
    for mixed precision there), so it runs at the fp32 rate. 16-bit tensor rates are the
    FP32-accumulate ones: PyTorch's autocast GEMMs and convolutions accumulate in fp32
    (half the FP16-accumulate rate on GeForce cards; knowledge/README.md).
    """
    if precision not in usable_precisions(gpu):
        raise UnsupportedPrecision(gpu.id, precision, usable_precisions(gpu))
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
                True,
            )
        return MathMode(
            precision,
            "fp32",
            vector,
            vector,
            bandwidth,
            "fp32 arithmetic (no TF32 on this GPU)",
            False,
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
            gpu.tensor_cores > 0,
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
            False,
        )
    return MathMode(
        precision,
        f"{precision} tensor cores (fp32 accumulate)",
        rate * 1e12,
        vector,
        bandwidth,
        f"mixed precision: {precision} matmuls and convolutions on tensor cores with fp32 "
        "accumulate (the dense rate, never the sparse one)",
        True,
    )


def usable_bandwidth(gpu: Gpu, bytes_per_sm_cycle: float | None) -> float:
    """DRAM bandwidth (bytes/s) the GPU's kernels can use: the datasheet's figure, capped
    at ``bytes_per_sm_cycle`` x the SM cycles per second.

    Little's law: a kernel streams at most the bytes its SMs keep in flight divided by
    the memory latency, and neither the requests an SM keeps in flight nor DRAM latency
    grow with a faster memory. A GPU whose memory outruns its SMs (an H200 has an H100's
    SMs and clocks with 1.4x its bandwidth) cannot use all of it in ordinary kernels. The
    cap is learned: the most bytes per SM cycle that any fitted GPU supplies.
    """
    peak = gpu.memory_bandwidth_gb_per_s * 1e9
    if bytes_per_sm_cycle is None:
        return peak
    return min(peak, bytes_per_sm_cycle * gpu.sm_cycles_per_s)


@dataclass(frozen=True)
class OpMix:
    """A step's work by (phase, kind): FLOPs and bytes moved; and kernel launches by phase."""

    work: Mapping[tuple[str, str], tuple[float, float]]
    launches_by_phase: Mapping[str, float]

    @property
    def launches(self) -> float:
        return float(sum(self.launches_by_phase.values()))

    def phase_launches(self, phases: Iterable[str] | None) -> float:
        if phases is None:
            return self.launches
        return float(sum(self.launches_by_phase.get(p, 0.0) for p in phases))

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any]) -> OpMix:
        """From the profile's ``by_kind`` work and its launches: the ``launches`` it states
        per phase where it has them (recurrent layers launch per time step), else one
        launch per counted operator call."""
        work: dict[tuple[str, str], tuple[float, float]] = {}
        for entry in profile["by_kind"]:
            key = (entry["phase"], entry["kind"])
            flops, moved = work.get(key, (0.0, 0.0))
            work[key] = (
                flops + entry["flops"],
                moved + entry["bytes_read"] + entry["bytes_written"],
            )
        stated = profile.get("launches")
        if isinstance(stated, Mapping):  # by phase, and their "total"
            return cls(work, {str(k): float(v) for k, v in stated.items() if k != "total"})
        launches: dict[str, float] = {}
        for op in profile.get("by_op", []):
            launches[op["phase"]] = launches.get(op["phase"], 0.0) + float(op.get("calls", 0))
        return cls(work, launches)

    @classmethod
    def between(cls, one: OpMix, two: OpMix, batch: float) -> OpMix:
        """The mix at ``batch`` from the mixes at batch 1 and 2 (affine in the batch; the
        launches do not depend on it)."""
        keys = set(one.work) | set(two.work)
        work = {}
        for key in keys:
            f1, b1 = one.work.get(key, (0.0, 0.0))
            f2, b2 = two.work.get(key, (0.0, 0.0))
            work[key] = (
                max(f1 + (f2 - f1) * (batch - 1), 0.0),
                max(b1 + (b2 - b1) * (batch - 1), 0.0),
            )
        phases = set(one.launches_by_phase) | set(two.launches_by_phase)
        launches = {
            p: max(one.launches_by_phase.get(p, 0.0), two.launches_by_phase.get(p, 0.0))
            for p in phases
        }
        return cls(work, launches)

    def to_dict(self) -> dict[str, Any]:
        return {
            "work": [[p, k, f, b] for (p, k), (f, b) in sorted(self.work.items())],
            "launches": dict(sorted(self.launches_by_phase.items())),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> OpMix:
        return cls(
            {(p, k): (f, b) for p, k, f, b in data["work"]},
            {str(k): float(v) for k, v in data["launches"].items()},
        )


@dataclass(frozen=True, slots=True)
class ResourceTimes:
    """Ideal time of a step's work on each resource of one GPU (seconds), each at peak.

    ``tensor_s``: matmul-like work on tensor cores; ``cuda_core_s``: the same work where
    the math mode has no tensor cores; ``vector_s``: other arithmetic at the fp32 rate;
    ``memory_s``: every byte read or written at the usable bandwidth. The step model
    weighs each by a learned efficiency (a kernel is rarely at one peak alone).
    """

    tensor_s: float
    cuda_core_s: float
    vector_s: float
    memory_s: float

    @property
    def total_s(self) -> float:
        return self.tensor_s + self.cuda_core_s + self.vector_s + self.memory_s

    @property
    def roofline_s(self) -> float:
        """The least time the work can take: all its arithmetic at peak, or all its bytes
        at the usable bandwidth, whichever is longer (no kernel beats either)."""
        return max(self.tensor_s + self.cuda_core_s + self.vector_s, self.memory_s)

    def at_least(self, floor_s: float) -> ResourceTimes:
        """These times, raised in proportion where their sum is under ``floor_s``."""
        total = self.total_s
        if total <= 0 or total >= floor_s:
            return self
        return self.scaled(floor_s / total)

    def scaled(self, factor: float) -> ResourceTimes:
        return ResourceTimes(
            self.tensor_s * factor,
            self.cuda_core_s * factor,
            self.vector_s * factor,
            self.memory_s * factor,
        )


def resource_times(
    mix: OpMix, mode: MathMode, bandwidth: float, phases: Iterable[str] | None = None
) -> ResourceTimes:
    """The mix's work on each resource at ``mode``'s peaks and ``bandwidth`` (bytes/s)."""
    wanted = set(phases) if phases is not None else None
    matmul = other = moved = 0.0
    for (phase, kind), (flops, nbytes) in mix.work.items():
        if wanted is not None and phase not in wanted:
            continue
        if kind in TENSOR_KINDS:
            matmul += flops
        else:
            other += flops
        moved += nbytes
    matmul_s = matmul / mode.tensor_flops
    return ResourceTimes(
        tensor_s=matmul_s if mode.tensor_cores else 0.0,
        cuda_core_s=0.0 if mode.tensor_cores else matmul_s,
        vector_s=other / mode.vector_flops,
        memory_s=moved / bandwidth,
    )
