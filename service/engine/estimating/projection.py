"""Project a traced step onto other GPUs, and the software fixes worth making first.

Each part of the measured step is scaled by the ratio of the resource that bounds it on
the reference GPU and on the target: tensor-core rate at the trace's precision for
tensor-core GEMMs and convolutions, vector fp32 rate for SIMT GEMMs, memory bandwidth for
memory-bound kernels and device copies, the GPU-to-GPU link for NCCL, PCIe for host
copies. Idle time (input, synchronisation, launching, other host work) is not scaled by
any GPU (Amdahl): a faster GPU cannot shorten it.
"""

from __future__ import annotations

from typing import Any

from knowledge import Knowledge
from knowledge.records import Gpu
from service.engine.estimating.scaling import link_for
from service.engine.rules import RuleBook

MEMORY_BOUND = ("elementwise", "reduction", "memcpy_d2d", "memset", "other")
PCIE_GB_PER_S = {3: 15.75, 4: 31.5, 5: 63.0, 6: 126.0}  # x16, one direction


def resource(part: str) -> str:
    """The estimate's name for what bounds a step whose largest part is ``part``."""
    if part == "idle_input":
        return "input"
    if part.startswith("idle_"):
        return "host"  # launches, synchronisation, the host's own work: no GPU shortens it
    if part == "communication":
        return "communication"
    if part in ("memcpy_h2d", "memcpy_d2h"):
        return "host_transfer"
    if part in MEMORY_BOUND:
        return "memory_bandwidth"
    return "compute"


def _tensor_rate(gpu: Gpu, precision: str, sixteen: str) -> float:
    """Dense rate of a tensor-core kernel of ``precision`` on ``gpu`` (falls back down)."""
    if precision == "tf32":
        return gpu.tf32_tflops or gpu.fp32_tflops
    if precision == "fp8":
        return gpu.fp8_tflops or _tensor_rate(gpu, "16-bit", sixteen)
    if precision == "int8":
        return gpu.int8_tops or _tensor_rate(gpu, "16-bit", sixteen)
    if precision == "fp32":
        return gpu.fp32_tflops
    rate = gpu.bf16_tflops if sixteen == "bf16" else gpu.fp16_tflops
    return rate or gpu.fp16_tflops or gpu.bf16_tflops or gpu.fp32_tflops


def mixed_tensor_rate(gpu: Gpu, shares: dict[str, float], sixteen: str) -> float:
    """Harmonic mix: the time of a GEMM mix scales with sum(share / rate)."""
    if not shares:
        shares = {"16-bit": 1.0}
    return 1.0 / sum(s / _tensor_rate(gpu, p, sixteen) for p, s in shares.items())


def link_gb_per_s(gpu: Gpu, count: int, knowledge: Knowledge) -> float:
    """GPU-to-GPU bandwidth one direction, per GPU, of the link a ring over ``count`` GPUs
    crosses (:func:`service.engine.estimating.scaling.link_for`); PCIe for one GPU."""
    if count <= 1:
        return PCIE_GB_PER_S.get(gpu.pcie_generation, 31.5)
    return link_for(knowledge, gpu, count).bandwidth_gb_per_s


def ratios(
    ref: Gpu,
    target: Gpu,
    analysis: dict[str, Any],
    knowledge: Knowledge,
    count: int,
    sixteen: str = "fp16",
) -> dict[str, float]:
    """Time on target / time on reference, per kind of GPU activity."""
    shares = analysis.get("tensor_core_precision") or {}
    world = int((analysis.get("distributed") or {}).get("world_size") or count)
    out = {
        "tensor_gemm": mixed_tensor_rate(ref, shares, sixteen)
        / mixed_tensor_rate(target, shares, sixteen),
        "convolution": mixed_tensor_rate(ref, shares, sixteen)
        / mixed_tensor_rate(target, shares, sixteen),
        "simt_gemm": ref.fp32_tflops / target.fp32_tflops,
        "communication": link_gb_per_s(ref, world, knowledge)
        / link_gb_per_s(target, max(count, world), knowledge),
        "memcpy_h2d": PCIE_GB_PER_S.get(ref.pcie_generation, 31.5)
        / PCIE_GB_PER_S.get(target.pcie_generation, 31.5),
    }
    out["memcpy_d2h"] = out["memcpy_h2d"]
    bandwidth = ref.memory_bandwidth_gb_per_s / target.memory_bandwidth_gb_per_s
    out.update(dict.fromkeys(MEMORY_BOUND, bandwidth))
    return out


def project(
    analysis: dict[str, Any],
    ref: Gpu,
    target: Gpu,
    knowledge: Knowledge,
    count: int = 1,
    sixteen: str = "fp16",
) -> dict[str, Any]:
    """The traced step as it would run on ``target`` (``count`` GPUs per node)."""
    part = analysis["breakdown"]
    scale = ratios(ref, target, analysis, knowledge, count, sixteen)
    busy = {k: v * scale.get(k, 1.0) for k, v in part["busy_us"].items()}
    idle = dict(part["idle_us"])
    step = sum(busy.values()) + sum(idle.values())
    parts = {**busy, **{f"idle_{k}": v for k, v in idle.items()}}
    bound = max(parts, key=lambda k: parts[k]) if step else None
    notes = []
    world = int((analysis.get("distributed") or {}).get("world_size") or 1)
    if world > 8 and part["busy_us"].get("communication"):
        notes.append(
            "the trace spans more than one node: communication is scaled by the "
            "GPU link only; the network between nodes is not known"
        )
    if target.vendor != "nvidia":
        notes.append(
            "kernel names are NVIDIA's: on another vendor's GPU the software stack "
            "and the kernels differ; treat the projection as rough"
        )
    return {
        "gpu_id": target.id,
        "count": count,
        "step_time_us": step,
        "speedup": part["wall_us"] / step if step else None,
        "breakdown_us": parts,
        "bound": bound,
        "scale": scale,
        "notes": notes,
    }


def advice(
    analysis: dict[str, Any], ref: Gpu | None, knowledge: Knowledge, rules: RuleBook
) -> list[dict[str, Any]]:
    """Software fixes, each with the share of the step it is predicted to save: the trace
    rules of ``knowledge/rules`` (:mod:`service.engine.rules`) over the trace's breakdown."""
    part = analysis.get("breakdown")
    if not part or not part["wall_us"]:
        return []
    wall = part["wall_us"]
    busy, idle = part["busy_us"], part["idle_us"]
    fp32_saved = 0.0
    if ref is not None and ref.tensor_cores and (ref.bf16_tflops or ref.fp16_tflops):
        fast = ref.bf16_tflops or ref.fp16_tflops or ref.fp32_tflops
        tf32 = busy["tensor_gemm"] * (analysis.get("tensor_core_precision") or {}).get("tf32", 0)
        fp32_saved = busy["simt_gemm"] * (1 - ref.fp32_tflops / fast)
        fp32_saved += tf32 * (1 - (ref.tf32_tflops or fast) / fast)
    context = {
        "wall_ms": wall / 1e3,
        "fp32_gemm_saving_share": fp32_saved / wall,
        "input_idle_share": idle["input"] / wall,
        "short_kernel_share": analysis.get("short_kernel_share") or 0.0,
        "busy_share": 1 - sum(idle.values()) / wall,
        "launch_saving_share": (idle["launch"] + idle["host"] * 0.5) / wall,
        "h2d_share": busy["memcpy_h2d"] / wall,
        "communication_share": busy["communication"] / wall,
        # overlapping it with backward hides about half (the other half is the last bucket)
        "overlap_saving_share": busy["communication"] * 0.5 / wall,
        "faster_link": _faster_link(ref, knowledge),
    }
    out = []
    for fired in rules.fire("trace", context):
        saved = context[fired.rule.saving or ""] * wall
        out.append(
            {
                **fired.to_dict(),
                "predicted_saving_share": saved / wall,
                "predicted_step_time_us": wall - saved,
            }
        )
    return sorted(out, key=lambda a: -a["predicted_saving_share"])


def _faster_link(ref: Gpu | None, knowledge: Knowledge) -> str:
    if ref is None or not ref.gpu_link:
        return "GPUs joined by NVLink/NVSwitch (e.g. an HGX H100 node, 450 GB/s per direction)"
    link = knowledge.interconnects.get(ref.gpu_link)
    name = link.name if link else ref.gpu_link
    return (
        f"a faster interconnect than {name} (more NVLink bandwidth, or InfiniBand NDR "
        "between nodes)"
    )
