"""How fast a profiled workload runs on a GPU (and n of them), and how sure that is.

:func:`estimate_many` is the one function the API serves and the validation checks: typed
requests (a :class:`StepProfile`, a GPU, a count) in, typed :class:`Estimate` out. On one
GPU the step model (:mod:`service.engine.estimating.step_model`) gives the step and its parts; on n
GPUs data parallel adds the gradient all-reduce over the link that joins them
(:mod:`service.engine.estimating.scaling`); the input pipeline is a bound of its own (Amdahl: a
faster GPU cannot feed itself faster than its input).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from knowledge import Knowledge
from knowledge.records import Gpu
from profiles.profile import Memory
from service.engine.estimating import scaling
from service.engine.estimating.ceiling import InputCeiling
from service.engine.estimating.layout_memory import as_reported
from service.engine.estimating.roofline import MathMode, math_mode
from service.engine.estimating.step_model import DEFAULT_SUITE, StepParts
from service.engine.estimating.step_profile import StepProfile

if TYPE_CHECKING:
    from service.engine.estimating.model import PerformanceModel

# what the driver and ECC leave of the memory the datasheet quotes ("80 GB" cards have
# 80 GiB; nvidia-smi shows about 99.5% of it, an H200 "141 GB" shows 139.8 GiB)
USABLE_MEMORY_SHARE = 0.985
COMFORT_HEADROOM = 0.10  # below this share of usable memory left, the estimate warns
BENCHMARK_PRECISION = {"fp16": "fp16", "bf16": "fp16", "fp32": "fp32", "tf32": "fp32"}


@dataclass(frozen=True, slots=True)
class EstimateInput:
    """One estimate to make: ``profile`` on ``count`` GPUs of ``gpu`` (batch per GPU)."""

    profile: StepProfile
    gpu: Gpu
    count: int = 1
    nvlink: bool | None = None
    ceiling: InputCeiling | None = None
    workload: str | None = None  # the benchmarked workload this is (None: match by model)
    suite: str = DEFAULT_SUITE  # the software generation whose host times apply


@dataclass(frozen=True, slots=True)
class Interval:
    low: float
    high: float

    @classmethod
    def around(cls, value: float, log_quantile: float) -> Interval:
        return cls(value * math.exp(-log_quantile), value * math.exp(log_quantile))

    def to_dict(self) -> dict[str, float]:
        return {"low": self.low, "high": self.high}


@dataclass(frozen=True, slots=True)
class MemoryFit:
    """The memory one GPU needs against what it has."""

    need: Memory
    capacity_bytes: float  # the datasheet's memory (GiB, as GPU memory is quoted)
    usable_bytes: float  # what the driver leaves of it

    @property
    def required_bytes(self) -> float:
        return self.need.total_bytes

    @property
    def fits(self) -> bool:
        return self.required_bytes <= self.usable_bytes

    @property
    def headroom(self) -> float:
        """Share of the usable memory left (negative: does not fit)."""
        return 1.0 - self.required_bytes / self.usable_bytes


def memory_fit(need: Memory, gpu: Gpu) -> MemoryFit:
    capacity = gpu.memory_gb * 2**30
    return MemoryFit(need, capacity, capacity * USABLE_MEMORY_SHARE)


@dataclass(frozen=True, slots=True)
class StepBreakdown:
    """Where one step's time goes (seconds); training estimates."""

    tensor_s: float
    cuda_core_s: float
    vector_s: float
    memory_s: float
    gpu_s: float  # the four above: the part a faster GPU shortens
    optimizer_s: float  # the optimizer update's share of gpu_s
    launch_s: float  # kernel launches: no GPU shortens them
    host_s: float  # the training loop's host time per step: no GPU shortens it
    input_s: float  # the input pipeline's time per step (per sample): no GPU shortens it
    single_gpu_step_s: float
    efficiency: float  # ideal GPU time (each resource at its peak) over gpu_s
    allreduce_s: float = 0.0
    exposed_communication_s: float = 0.0
    sync_s: float = 0.0
    input_wait_s: float = 0.0  # the GPUs wait this long per step on the input pipeline

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class InferenceTimes:
    latency_s: float
    prefill_s: float | None
    decode_per_token_s: float | None  # None: nothing generated
    prefill_tokens_per_s: float | None
    decode_tokens_per_s: float | None


@dataclass(frozen=True)
class Estimate:
    """An estimate of ``count`` GPUs of ``gpu_id`` running the profile's step."""

    gpu_id: str
    count: int
    precision: str
    math_mode: str
    step_time_s: float
    interval: Interval  # of step_time_s, 80%
    samples_per_s: float | None  # all GPUs together (None: a trace without its batch)
    tokens_per_s: float | None
    bound: str  # compute, memory_bandwidth, kernel_launches, host, communication, input
    memory: MemoryFit | None  # None: a projected trace (its memory is not estimated)
    assumptions: tuple[str, ...]
    breakdown: StepBreakdown | None = None  # training
    inference: InferenceTimes | None = None
    time_to_train_s: float | None = None
    time_to_train_interval: Interval | None = None
    known_workload: str | None = None  # the benchmarked workload it was fitted on
    profile_id: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # trace projections' own fields

    @property
    def fits(self) -> bool | None:
        return self.memory.fits if self.memory is not None else None

    def to_dict(self) -> dict[str, Any]:
        """The API's representation (see ``EstimateSchema``)."""
        low, high = self.interval.low, self.interval.high
        out: dict[str, Any] = {
            "gpu": self.gpu_id,
            "count": self.count,
            "precision": self.precision,
            "math_mode": self.math_mode,
            "step_time_s": self.step_time_s,
            "interval": self.interval.to_dict(),
            "throughput": {"samples_per_s": self.samples_per_s, "tokens_per_s": self.tokens_per_s},
            "bound": self.bound,
            "known_workload": self.known_workload,
            "profile_id": self.profile_id,
            "assumptions": list(self.assumptions),
        }
        if self.samples_per_s is not None:
            work = self.samples_per_s * self.step_time_s
            out["throughput_interval"] = {"samples_per_s": {"low": work / high, "high": work / low}}
        if self.memory is not None:
            out |= {
                "fits": self.memory.fits,
                "memory_per_gpu_bytes": self.memory.required_bytes,
                "gpu_memory_bytes": self.memory.capacity_bytes,
                "usable_memory_bytes": self.memory.usable_bytes,
                "memory_headroom": round(self.memory.headroom, 4),
                "memory": self.memory.need.to_dict(),
                "memory_reported": as_reported(self.memory.need),
            }
        if self.breakdown is not None:
            out["breakdown"] = self.breakdown.to_dict()
        if self.inference is not None:
            inf = self.inference
            out |= {"latency_s": inf.latency_s, "prefill_s": inf.prefill_s}
            out["decode_per_token_s"] = inf.decode_per_token_s
            if inf.prefill_tokens_per_s is not None:
                out["throughput"]["prefill_tokens_per_s"] = inf.prefill_tokens_per_s
                out["throughput"]["decode_tokens_per_s"] = inf.decode_tokens_per_s
        if self.time_to_train_s is not None and self.time_to_train_interval is not None:
            out["time_to_train_s"] = self.time_to_train_s
            out["time_to_train_interval"] = self.time_to_train_interval.to_dict()
        out |= self.extra
        return out


def benchmark_workload(profile: StepProfile, knowledge: Knowledge) -> str | None:
    """The benchmarked workload this profile is, when its model and shape are one of them."""
    if not profile.trains or profile.model_name is None:
        return None
    for wid, record in knowledge.workloads.items():
        shape = record.profile
        if shape is None or record.model != profile.model_name:
            continue
        if shape.seq_len not in (None, profile.seq_len):
            continue
        if shape.image_size not in (None, profile.image_size):
            continue
        return wid
    return None


def estimate_many(
    requests: Sequence[EstimateInput], model: PerformanceModel, knowledge: Knowledge
) -> list[Estimate]:
    """The estimate of each request (the API asks for one; validation for thousands)."""
    return [_one(r, model, knowledge) for r in requests]


def estimate(request: EstimateInput, model: PerformanceModel, knowledge: Knowledge) -> Estimate:
    return estimate_many([request], model, knowledge)[0]


def _one(request: EstimateInput, model: PerformanceModel, knowledge: Knowledge) -> Estimate:
    profile, gpu = request.profile, request.gpu
    mode = math_mode(gpu, profile.precision)  # raises UnsupportedPrecision
    assumptions = [
        f"math mode: {mode.name} ({mode.note})",
        f"{gpu.id}: dense peaks {mode.tensor_flops / 1e12:.1f} TFLOPS (matmul), "
        f"{mode.vector_flops / 1e12:.1f} TFLOPS (vector), "
        f"{mode.bytes_per_s / 1e9:.0f} GB/s",
    ]
    usable = model.step_model.bandwidth(gpu)
    if usable < 0.999 * mode.bytes_per_s:
        assumptions.append(
            f"memory-bound kernels use at most {usable / 1e9:.0f} GB/s of its "
            f"{mode.bytes_per_s / 1e9:.0f} GB/s: no measured GPU supplied its SMs more bytes "
            "per cycle, and an SM's requests in flight bound what it streams (Little's law)"
        )
    fit = memory_fit(profile.memory, gpu)
    if not fit.fits:
        assumptions.append(
            f"does not fit: needs {fit.required_bytes / 2**30:.1f} GiB per GPU of the "
            f"{fit.usable_bytes / 2**30:.1f} GiB usable on {gpu.id}; the time is what it "
            "would take if it did"
        )
    elif fit.headroom < COMFORT_HEADROOM:
        assumptions.append(
            f"fits with {fit.headroom:.0%} of the usable memory to spare: allocator "
            "fragmentation or a longer sample can push it over"
        )
    if profile.trains:
        return _training(request, mode, model, knowledge, fit, assumptions)
    return _inference(request, mode, model, fit, assumptions)


# long: a training estimate's figures from the step model's parts, a field a line
def _training(
    request: EstimateInput,
    mode: MathMode,
    model: PerformanceModel,
    knowledge: Knowledge,
    fit: MemoryFit,
    assumptions: list[str],
) -> Estimate:
    profile, gpu, count = request.profile, request.gpu, request.count
    known = request.workload or benchmark_workload(profile, knowledge)
    if known is not None and known not in model.step_model.workloads:
        known = None
    parts = model.step_model.parts(profile, gpu, mode, known, request.suite)
    single = parts.total_s
    assumptions.append(_explain(parts, known))
    backward = model.step_model.phase_gpu_s(profile, gpu, mode, known, ["backward"])
    link = scaling.link_for(knowledge, gpu, count, request.nvlink) if count > 1 else None
    multi = scaling.data_parallel(single, backward, profile.gradients_bytes, count, link)
    if link is not None:
        assumptions.append(f"data parallel over {link.name}: {link.why}")
    step = multi.step_s
    samples = profile.samples_per_step * count
    tokens = profile.tokens_per_step * count
    bound = "communication" if multi.bound == "communication" else parts.largest()
    input_wait = 0.0
    ceiling = request.ceiling
    if ceiling is not None:
        limit = ceiling.samples_per_s_per_gpu * count
        gpu_rate = samples / step
        assumptions.append(
            f"input ceiling {ceiling.samples_per_s_per_gpu:g} samples/s per GPU "
            f"({ceiling.source}: {ceiling.note})"
        )
        if gpu_rate >= 0.999 * limit:  # at the ceiling (within 0.1%) or past it
            bound = "input"
        if limit < gpu_rate:
            input_wait = samples / limit - step
            step = samples / limit
            assumptions.append(
                "the input pipeline binds: a faster GPU buys nothing until it is fixed "
                f"(the GPUs could do {gpu_rate:.4g} samples/s)"
            )
    q = model.quantile(known)
    g = parts.gpu
    breakdown = StepBreakdown(
        tensor_s=g.tensor_s,
        cuda_core_s=g.cuda_core_s,
        vector_s=g.vector_s,
        memory_s=g.memory_s,
        gpu_s=parts.gpu_s,
        optimizer_s=parts.optimizer_s,
        launch_s=parts.launch_s,
        host_s=parts.host_s,
        input_s=parts.input_s,
        single_gpu_step_s=single,
        efficiency=parts.efficiency,
        allreduce_s=multi.allreduce_s,
        exposed_communication_s=multi.exposed_s,
        sync_s=multi.sync_s,
        input_wait_s=input_wait,
    )
    to_train = to_train_interval = None
    if profile.dataset_steps:
        to_train = profile.dataset_steps / count * step
        to_train_interval = Interval.around(to_train, q)
    return Estimate(
        gpu_id=gpu.id,
        count=count,
        precision=profile.precision,
        math_mode=mode.name,
        step_time_s=step,
        interval=Interval.around(step, q),
        samples_per_s=samples / step,
        tokens_per_s=tokens / step,
        bound=bound,
        memory=fit,
        assumptions=tuple(assumptions),
        breakdown=breakdown,
        time_to_train_s=to_train,
        time_to_train_interval=to_train_interval,
        known_workload=known,
        profile_id=profile.profile_id,
    )


def _explain(parts: StepParts, known: str | None) -> str:
    fixed = parts.launch_s + parts.host_s + parts.input_s
    share = fixed / parts.total_s if parts.total_s else 0.0
    source = (
        f"fitted to the benchmarked workload {known}"
        if known is not None
        else "a model the benchmarks did not measure: efficiencies and host time fitted "
        "across all benchmarked workloads, so the interval is wider"
    )
    return (
        f"step = GPU {parts.gpu_s * 1e3:.4g} ms + kernel launches {parts.launch_s * 1e3:.4g} ms "
        f"+ host {parts.host_s * 1e3:.4g} ms + input {parts.input_s * 1e3:.4g} ms ({source}); "
        f"{share:.0%} of it does not speed "
        f"up with the GPU, so no GPU makes this step more than {1 / max(share, 1e-9):.3g}x "
        "faster"
        if share > 0
        else f"step = GPU {parts.gpu_s * 1e3:.4g} ms ({source})"
    )


# long: an inference estimate's figures from the step model's parts, a field a line
def _inference(
    request: EstimateInput,
    mode: MathMode,
    model: PerformanceModel,
    fit: MemoryFit,
    assumptions: list[str],
) -> Estimate:
    profile, gpu, count = request.profile, request.gpu, request.count
    batch = profile.batch_size
    phases = {phase for phase, _ in profile.mix.work}
    assumptions.append(
        "inference: efficiencies fitted on training benchmarks, applied to each phase (no "
        "stored PyTorch inference benchmark calibrates them); one replica per GPU; each "
        "pass pays its kernel launches"
    )

    def timed(names: list[str]) -> StepParts:
        return model.step_model.parts(profile, gpu, mode, None, request.suite, names)

    q = model.quantile(None)
    output = float(profile.output_tokens or 0)
    if "prefill" in phases:
        prefill = timed(["prefill"])
        per_token: float | None = None
        decode_bound = prefill.largest()
        if output and "decode-first" in phases:
            first, last = timed(["decode-first"]), timed(["decode-last"])
            per_token = (first.total_s + last.total_s) / 2
            decode_bound = first.largest()
        latency = prefill.total_s + (per_token or 0.0) * output
        prompt = float(profile.prompt_tokens or 0)
        times = InferenceTimes(
            latency_s=latency,
            prefill_s=prefill.total_s,
            decode_per_token_s=per_token,
            prefill_tokens_per_s=batch * prompt * count / prefill.total_s,
            decode_tokens_per_s=batch * count / per_token if per_token else None,
        )
        tokens = batch * output * count / latency if output else 0.0
        bound = decode_bound if (per_token or 0.0) * output > prefill.total_s else prefill.largest()
    else:
        whole = timed(sorted(phases))
        latency = whole.total_s
        times = InferenceTimes(latency, None, None, None, None)
        tokens = profile.tokens_per_step * count / latency
        bound = whole.largest()
    return Estimate(
        gpu_id=gpu.id,
        count=count,
        precision=profile.precision,
        math_mode=mode.name,
        step_time_s=latency,
        interval=Interval.around(latency, q),
        samples_per_s=batch * count / latency,
        tokens_per_s=tokens,
        bound=bound,
        memory=fit,
        assumptions=tuple(assumptions),
        inference=times,
        profile_id=profile.profile_id,
    )
