"""How fast a profiled workload runs on a GPU (and n of them), and how sure that is.

Step time on one GPU = roofline of the profile's operator mix x the learned efficiency
(:mod:`service.engine.efficiency`); on n GPUs, data parallel with the gradient all-reduce
over the link that joins them (:mod:`service.engine.scaling`). The input pipeline is a
bound of its own (Amdahl): a faster GPU cannot feed itself faster than its input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from knowledge import Knowledge
from knowledge.records import Gpu
from service.engine import scaling
from service.engine.efficiency import Case, make_case
from service.engine.model import PerformanceModel
from service.engine.roofline import OpMix, math_mode, roofline

HEADROOM = 0.9  # a workload fits when it needs at most this share of the GPU's memory
BENCHMARK_PRECISION = {"fp16": "fp16", "bf16": "fp16", "fp32": "fp32", "tf32": "fp32"}


@dataclass(frozen=True)
class InputCeiling:
    samples_per_s_per_gpu: float
    source: str  # "request", "trace" or "benchmarks"
    note: str


def benchmark_workload(profile: Mapping[str, Any], knowledge: Knowledge) -> str | None:
    """The benchmarked workload this profile is, when its model and shape are one of them."""
    workload = profile["workload"]
    if workload["task"] == "inference":
        return None
    # an image size the request left out is the model's own (the profile counted at it);
    # token models have no default length: the profile requires seq_len
    spec = profile["model"].get("spec") or {}
    image_size = workload.get("image_size") or spec.get("image_size")
    for wid, record in knowledge.workloads.items():
        shape = record.profile
        if shape is None or record.model != profile["model"].get("name"):
            continue
        if shape.seq_len not in (None, workload.get("seq_len")):
            continue
        if shape.image_size not in (None, image_size):
            continue
        return wid
    return None


def _interval(value: float, q: float) -> dict[str, float]:
    return {"low": value * math.exp(-q), "high": value * math.exp(q)}


def _memory(profile: Mapping[str, Any], gpu: Gpu) -> dict[str, Any]:
    need = float(profile["memory"]["total_bytes"])
    have = gpu.memory_gb * 1e9
    return {
        "memory_per_gpu_bytes": need,
        "gpu_memory_bytes": have,
        "fits": need <= HEADROOM * have,
        "memory_headroom": round(1 - need / have, 4),
    }


def estimate(
    profile: Mapping[str, Any],
    gpu: Gpu,
    count: int,
    model: PerformanceModel,
    knowledge: Knowledge,
    ceiling: InputCeiling | None = None,
    nvlink: bool | None = None,
) -> dict[str, Any]:
    """The estimate for ``count`` GPUs of ``gpu`` (batch per GPU as the profile's)."""
    workload = profile["workload"]
    precision = workload["precision"]
    mode = math_mode(gpu, precision)  # raises UnsupportedPrecision
    mix = OpMix.from_profile(profile)
    assumptions = [
        f"math mode: {mode.name} ({mode.note})",
        f"{gpu.id}: dense peaks {mode.tensor_flops / 1e12:.1f} TFLOPS (tensor), "
        f"{mode.vector_flops / 1e12:.1f} TFLOPS (vector), "
        f"{mode.bytes_per_s / 1e9:.0f} GB/s",
    ]
    if workload["task"] == "inference":
        result = _inference(profile, gpu, count, mix, model, assumptions)
    else:
        result = _training(profile, gpu, count, mix, model, knowledge, ceiling, nvlink, assumptions)
    result.update(_memory(profile, gpu))
    if not result["fits"]:
        assumptions.append(
            f"does not fit: needs {result['memory_per_gpu_bytes'] / 1e9:.1f} GB per GPU of "
            f"{gpu.memory_gb:g} GB (with {1 - HEADROOM:.0%} headroom); the time is what it "
            "would take if it did"
        )
    result.update(
        {
            "gpu": gpu.id,
            "count": count,
            "precision": precision,
            "math_mode": mode.name,
            "profile_id": profile.get("profile_id"),
            "assumptions": assumptions,
        }
    )
    return result


def _case(
    profile: Mapping[str, Any], gpu: Gpu, mix: OpMix, model: PerformanceModel, known: str | None
) -> tuple[Case, float, float]:
    workload = profile["workload"]
    precision = workload["precision"]
    bench = BENCHMARK_PRECISION.get(precision)
    ident = known if known is not None and bench is not None else None
    case = make_case(mix, gpu, precision, float(workload["batch_size"]), ident)
    if ident is not None:  # the benchmarks' name for the precision: their identity key
        case = replace(case, precision=bench or precision)
    log_eff = float(model.fitted.predict([case])[0])
    return case, log_eff, model.fitted.quantile(case)


def _training(
    profile: Mapping[str, Any],
    gpu: Gpu,
    count: int,
    mix: OpMix,
    model: PerformanceModel,
    knowledge: Knowledge,
    ceiling: InputCeiling | None,
    nvlink: bool | None,
    assumptions: list[str],
) -> dict[str, Any]:
    known = benchmark_workload(profile, knowledge)
    case, log_eff, q = _case(profile, gpu, mix, model, known)
    efficiency = math.exp(-log_eff)
    single = case.roof.total_s / efficiency
    assumptions.append(
        f"efficiency {efficiency:.2f} of the roofline, learned from the stored benchmarks "
        + (
            f"(this is the benchmarked workload {known})"
            if model.fitted.is_known(case)
            else "(a model the benchmarks did not measure: from its operator mix alone, so the "
            "interval is wider)"
        )
    )
    backward = roofline(mix, case.mode, phases=["backward"]).total_s / efficiency
    link = scaling.link_for(knowledge, gpu, count, nvlink) if count > 1 else None
    multi = scaling.data_parallel(
        single, backward, float(profile["memory"]["gradients_bytes"]), count, link
    )
    if link is not None:
        assumptions.append(f"data parallel over {link.name}: {link.why}")
    step = multi.step_s
    samples = float(profile["samples_per_step"]) * count
    tokens = float(profile["tokens_per_step"]) * count
    bound = _bound(case, multi)
    gpu_samples_per_s = samples / step
    if ceiling is not None:
        limit = ceiling.samples_per_s_per_gpu * count
        assumptions.append(
            f"input ceiling {ceiling.samples_per_s_per_gpu:g} samples/s per GPU ({ceiling.source}"
            f": {ceiling.note})"
        )
        if gpu_samples_per_s >= 0.999 * limit:  # at the ceiling (within 0.1%) or past it
            bound = "input"
        if limit < gpu_samples_per_s:
            step = samples / limit
            assumptions.append(
                "the input pipeline binds: a faster GPU buys nothing until it is fixed "
                f"(the GPUs could do {gpu_samples_per_s:.4g} samples/s)"
            )
    result: dict[str, Any] = {
        "step_time_s": step,
        "throughput": {"samples_per_s": samples / step, "tokens_per_s": tokens / step},
        "bound": bound,
        "interval": _interval(step, q),
        "throughput_interval": {
            "samples_per_s": _interval(samples / step, q),
        },
        "breakdown": {
            "roofline_s": case.roof.total_s,
            "tensor_s": case.roof.tensor_s,
            "vector_s": case.roof.vector_s,
            "memory_s": case.roof.memory_s,
            "efficiency": efficiency,
            "single_gpu_step_s": single,
            "allreduce_s": multi.allreduce_s,
            "exposed_communication_s": multi.exposed_s,
            "sync_s": multi.sync_s,
        },
    }
    dataset = profile.get("dataset") or {}
    if dataset.get("steps"):
        steps = float(dataset["steps"]) / count
        result["time_to_train_s"] = steps * step
        result["time_to_train_interval"] = _interval(steps * step, q)
    return result


def _bound(case: Case, multi: scaling.Scaling) -> str:
    if multi.bound == "communication":
        return "communication"
    tensor, vector, memory = case.roof.shares()
    return "memory_bandwidth" if memory > tensor + vector else "compute"


def _inference(
    profile: Mapping[str, Any],
    gpu: Gpu,
    count: int,
    mix: OpMix,
    model: PerformanceModel,
    assumptions: list[str],
) -> dict[str, Any]:
    workload = profile["workload"]
    batch = float(workload["batch_size"])
    phases = {phase for phase, _ in mix.work}
    mode = math_mode(gpu, workload["precision"])

    def timed(names: list[str]) -> tuple[float, float, str]:
        part = OpMix({k: v for k, v in mix.work.items() if k[0] in names}, mix.launches)
        case = make_case(part, gpu, workload["precision"], batch, None)
        log_eff = float(model.fitted.predict([case])[0])
        tensor, vector, memory = case.roof.shares()
        bound = "memory_bandwidth" if memory > tensor + vector else "compute"
        return case.roof.total_s * math.exp(log_eff), model.fitted.quantile(case), bound

    assumptions.append(
        "inference: efficiencies learned from training benchmarks applied to each phase "
        "(no stored PyTorch inference benchmark calibrates them); one replica per GPU"
    )
    if "prefill" in phases:
        prefill, q, prefill_bound = timed(["prefill"])
        output = float(workload.get("output_tokens") or 0)
        prompt = float(workload.get("prompt_tokens") or 0)
        per_token, decode_bound = 0.0, prefill_bound
        if output and "decode-first" in phases:
            first, _, decode_bound = timed(["decode-first"])
            last, _, _ = timed(["decode-last"])
            per_token = (first + last) / 2
        latency = prefill + per_token * output
        return {
            "step_time_s": latency,
            "latency_s": latency,
            "prefill_s": prefill,
            "decode_per_token_s": per_token or None,  # None: nothing generated
            "throughput": {
                "samples_per_s": batch * count / latency,
                "tokens_per_s": batch * output * count / latency if output else 0.0,
                "prefill_tokens_per_s": batch * prompt * count / prefill,
                "decode_tokens_per_s": batch * count / per_token if per_token else None,
            },
            "bound": decode_bound if per_token * output > prefill else prefill_bound,
            "interval": _interval(latency, q),
        }
    step, q, bound = timed(sorted(phases))
    return {
        "step_time_s": step,
        "latency_s": step,
        "throughput": {
            "samples_per_s": batch * count / step,
            "tokens_per_s": float(profile["tokens_per_step"]) * count / step,
        },
        "bound": bound,
        "interval": _interval(step, q),
        "math_mode": mode.name,
    }
