"""From a model description and a workload to a :class:`Profile`: what the workload needs.

The model is built on the meta device and one step is counted (see :mod:`profiles.step`);
memory is the measured breakdown plus the stated pieces no single step shows (master
weights, optimizer states, runtime overhead).
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import torch

from profiles.batch import Lines, line_key
from profiles.build import build
from profiles.counting import KERNELS_PER_TIME_STEP, KINDS, ProfileTimeout, Totals
from profiles.depth import COUNTED, deeper, shallow, uniform_layers
from profiles.errors import InvalidDescription, ProfileTooSlow
from profiles.line import peaks_stay
from profiles.lora import NF4_BYTES_PER_PARAMETER, apply_lora
from profiles.models.runnable import Runnable
from profiles.resolved import ResolvedModel
from profiles.step import Measured, inference, train_step
from profiles.workload import Workload

PROFILER_VERSION = "2"
DTYPES = {
    "fp32": torch.float32,
    "tf32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp8": torch.bfloat16,
    "int8": torch.float16,
    "int4": torch.float16,
}
# Stored bytes per weight for quantised inference (int4: group-128 fp16 scales).
QUANTISED_BYTES = {"int8": 1.0, "int4": 0.5 + 2 / 128}
CONTEXT_BYTES = 512 * 2**20
FRAGMENTATION = 0.10


@dataclass
class PhaseCost:
    flops: float
    bytes_read: float
    bytes_written: float

    @property
    def arithmetic_intensity(self) -> float | None:
        moved = self.bytes_read + self.bytes_written
        return self.flops / moved if moved else None


@dataclass
class KindCost(PhaseCost):
    phase: str = ""
    kind: str = ""


@dataclass
class OpCost(PhaseCost):
    phase: str = ""
    op: str = ""
    calls: int = 0


@dataclass
class Memory:
    parameters_bytes: float
    gradients_bytes: float
    optimizer_states_bytes: float
    master_weights_bytes: float
    activations_bytes: float
    kv_cache_bytes: float
    temporary_peak_bytes: float
    runtime_overhead_bytes: float
    # Training: gradients are written while backward frees the activations, so the lines
    # above are never all alive at once; this much of their sum is freed at the step's peak.
    freed_before_peak_bytes: float = 0.0

    @property
    def total_bytes(self) -> float:
        """The step's peak (the lines summed, less what is freed before it) plus overhead."""
        lines = asdict(self)
        freed = lines.pop("freed_before_peak_bytes")
        return sum(lines.values()) - freed

    def to_dict(self) -> dict[str, float]:
        return {**asdict(self), "total_bytes": self.total_bytes}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Memory:
        """From :meth:`to_dict`'s output (a profile's ``memory``, as cached and served)."""
        return cls(**{f.name: float(data.get(f.name) or 0.0) for f in fields(cls)})


@dataclass
class Profile:
    profile_id: str
    profiler_version: str
    model: dict[str, Any]
    workload: dict[str, Any]
    samples_per_step: int
    tokens_per_step: int
    flops: dict[str, float | None]
    phases: dict[str, PhaseCost]
    by_kind: list[KindCost]
    by_op: list[OpCost]
    memory: Memory
    dataset: dict[str, float | None]
    assumptions: list[str]
    seconds: float = 0.0
    # Kernels launched, per phase and in all ("total": one training step; for inference
    # the prefill and every decode step, each costed as the mean of the first and last).
    launches: dict[str, float] = field(default_factory=dict)

    @property
    def arithmetic_intensity(self) -> float | None:
        """FLOPs per byte of the whole training step, or of the prefill for inference."""
        names = ("prefill",) if "prefill" in self.phases else tuple(self.phases)
        flops = sum(self.phases[n].flops for n in names)
        moved = sum(self.phases[n].bytes_read + self.phases[n].bytes_written for n in names)
        return flops / moved if moved else None

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["memory"]["total_bytes"] = self.memory.total_bytes
        out["arithmetic_intensity"] = self.arithmetic_intensity
        for name, cost in self.phases.items():
            out["phases"][name]["arithmetic_intensity"] = cost.arithmetic_intensity
        for key in ("by_kind", "by_op"):
            for entry, cost in zip(out[key], getattr(self, key), strict=True):
                entry["arithmetic_intensity"] = cost.arithmetic_intensity
        return out


def profile_id(model: ResolvedModel, workload: Workload) -> str:
    """Content hash of the canonical request (resolved model, workload) and profiler version."""
    canonical = json.dumps(
        {
            "model": asdict(model.spec),
            "family": model.family,
            "workload": workload.as_dict(),
            "version": PROFILER_VERSION,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:24]


def check_compatible(model: ResolvedModel, workload: Workload) -> None:
    """Workload fields that contradict the model: 422 naming the field."""
    spec = model.spec
    text = model.family == "transformer"
    if text:
        if workload.image_size is not None:
            raise InvalidDescription("workload.image_size", "not used by a token model")
        needed = "seq_len" if workload.trains else "prompt_tokens"
        if getattr(workload, needed) is None:
            raise InvalidDescription(f"workload.{needed}", "required for this model and task")
        if not workload.trains and workload.output_tokens and spec.head != "lm":
            raise InvalidDescription(
                "workload.output_tokens", "this model has no language-model head to generate with"
            )
        length = (
            workload.seq_len
            if workload.trains
            else ((workload.prompt_tokens or 0) + (workload.output_tokens or 0))
        )
        if spec.position == "learned" and length and length > spec.max_positions:
            field_name = "seq_len" if workload.trains else "prompt_tokens"
            raise InvalidDescription(
                f"workload.{field_name}",
                f"{length} tokens exceed the model's {spec.max_positions} learned positions",
            )
        return
    for name in ("seq_len", "prompt_tokens", "output_tokens"):
        if getattr(workload, name) is not None:
            raise InvalidDescription(f"workload.{name}", f"not used by a {model.family} model")
    if model.family == "vit" and workload.image_size not in (None, spec.image_size):
        raise InvalidDescription(
            "workload.image_size", f"this ViT's position table is for {spec.image_size} px"
        )


def _runnable(
    model: ResolvedModel, workload: Workload, deadline: float, limit_s: float
) -> tuple[Runnable, dict[str, float]]:
    runnable = build(model, DTYPES[workload.precision], deadline, limit_s)
    module = runnable.module
    counts = {"parameters": float(sum(p.numel() for p in module.parameters()))}
    if workload.method in ("lora", "qlora"):
        assert workload.lora_rank is not None
        adapters = apply_lora(module, workload.lora_rank)
        if adapters == 0:
            raise InvalidDescription(
                "workload.method", "this model has no linear layers to put LoRA adapters on"
            )
        counts["adapters"] = float(adapters)
    counts["trainable_parameters"] = float(
        sum(p.numel() for p in module.parameters() if p.requires_grad) if workload.trains else 0
    )
    counts["parameters"] = float(sum(p.numel() for p in module.parameters()))
    return runnable, counts


def _weights_bytes(runnable: Runnable, workload: Workload) -> tuple[float, float]:
    """(bytes the weights take, factor applied to bytes read from frozen/quantised weights)."""
    params = list(runnable.module.parameters())
    plain = float(sum(p.numel() * p.element_size() for p in params))
    if workload.precision in QUANTISED_BYTES:
        n = sum(p.numel() for p in params)
        return n * QUANTISED_BYTES[workload.precision], QUANTISED_BYTES[workload.precision] / 2
    if workload.method == "qlora":
        frozen = [p for p in params if not p.requires_grad]
        n = sum(p.numel() for p in frozen)
        trainable = sum(p.numel() * p.element_size() for p in params if p.requires_grad)
        return n * NF4_BYTES_PER_PARAMETER + trainable, NF4_BYTES_PER_PARAMETER / 2
    return plain, 1.0


def _read(t: Totals, weight_factor: float) -> float:
    """Bytes read, with weight reads at the stored (frozen or quantised) width."""
    return t.bytes_read - t.weight_bytes_read * (1 - weight_factor)


def _by_kind(measured: Measured, weight_factor: float) -> list[KindCost]:
    ordered = sorted(measured.totals.items(), key=lambda kv: (kv[0][0], KINDS.index(kv[0][1])))
    return [
        KindCost(t.flops, _read(t, weight_factor), t.bytes_written, phase=phase, kind=kind)
        for (phase, kind), t in ordered
    ]


def _by_op(measured: Measured, weight_factor: float) -> list[OpCost]:
    """Per aten operator and phase, the heaviest traffic first."""
    ordered = sorted(measured.by_op.items(), key=lambda kv: (kv[0][0], -kv[1].bytes))
    return [
        OpCost(t.flops, _read(t, weight_factor), t.bytes_written, phase=phase, op=op, calls=t.ops)
        for (phase, op), t in ordered
    ]


_COUNTING = threading.Lock()


_LINES = Lines()  # this process's counted steps by batch size (see profiles.batch)


def profile(model: ResolvedModel, workload: Workload, time_limit_s: float = 20.0) -> Profile:
    """Count one step of ``workload`` on ``model``; raise ProfileTooSlow past the limit.

    One profile counts at a time in a process: the counter switches the process's garbage
    collector off and freezes its heap while it runs, and two at once would only share the
    interpreter's lock. The time limit starts when this one's turn comes. A batch size the
    process can carry along the counts of three others (:mod:`profiles.batch`) is not
    counted, and does not wait for its turn."""
    check_compatible(model, workload)
    key = line_key(model, workload)
    start = time.monotonic()
    measured = None if key is None else _LINES.at(key, workload.batch_size)
    if measured is not None:
        try:
            runnable, counts = _runnable(model, workload, start + time_limit_s, time_limit_s)
        except ProfileTimeout:
            raise ProfileTooSlow(time_limit_s) from None
        return _assemble(model, workload, runnable, counts, measured, time.monotonic() - start)
    with _COUNTING:
        found = _profile(model, workload, time_limit_s)
    if key is not None:
        _LINES.add(key, workload.batch_size, found[1])
    return found[0]


def _profile(
    model: ResolvedModel, workload: Workload, time_limit_s: float
) -> tuple[Profile, Measured]:
    start = time.monotonic()
    deadline = start + time_limit_s
    try:
        runnable, counts = _runnable(model, workload, deadline, time_limit_s)
        measured = None
        layers = uniform_layers(model)
        if layers is not None:  # see profiles.depth
            found: list[Measured] = []
            for n in COUNTED:
                small, _ = _runnable(shallow(model, n), workload, deadline, time_limit_s)
                found.append(_measure(small, workload, deadline))
                if len(found) == 2 and not peaks_stay(*found):
                    break
            measured = deeper(found, layers)
        if measured is None:
            measured = _measure(runnable, workload, deadline)
    except ProfileTimeout:
        raise ProfileTooSlow(time_limit_s) from None
    seconds = time.monotonic() - start
    return _assemble(model, workload, runnable, counts, measured, seconds), measured


def _measure(runnable: Runnable, workload: Workload, deadline: float) -> Measured:
    if workload.trains:
        mixed = workload.precision in ("bf16", "fp16", "fp8")
        return train_step(runnable, workload, mixed, deadline)
    return inference(runnable, workload, deadline)


def runtime_overhead_bytes(transient: float) -> float:
    """The CUDA context and workspaces, and the allocator's fragmentation on the step's
    transient memory (what is allocated and freed within it, at its peak)."""
    return CONTEXT_BYTES + FRAGMENTATION * transient


# long: a profile's fields from the counts, a field a line
def _assemble(
    model: ResolvedModel,
    workload: Workload,
    runnable: Runnable,
    counts: dict[str, float],
    measured: Measured,
    seconds: float,
) -> Profile:
    weights, factor = _weights_bytes(runnable, workload)
    by_kind = _by_kind(measured, factor)
    phases: dict[str, PhaseCost] = {}
    for cost in by_kind:
        phase = phases.setdefault(cost.phase, PhaseCost(0.0, 0.0, 0.0))
        phase.flops += cost.flops
        phase.bytes_read += cost.bytes_read
        phase.bytes_written += cost.bytes_written
    samples = workload.batch_size
    tokens = samples * runnable.tokens_per_sample(workload)
    flops = _flops_summary(workload, phases, samples, tokens)
    transient = (
        measured.activations_bytes
        + measured.temporary_peak_bytes
        + measured.kv_cache_bytes
        - measured.freed_before_peak_bytes
    )
    memory = Memory(
        parameters_bytes=weights,
        gradients_bytes=measured.gradient_bytes,
        optimizer_states_bytes=measured.optimizer_state_bytes,
        master_weights_bytes=measured.master_weight_bytes,
        activations_bytes=measured.activations_bytes,
        kv_cache_bytes=measured.kv_cache_bytes,
        temporary_peak_bytes=measured.temporary_peak_bytes,
        runtime_overhead_bytes=runtime_overhead_bytes(transient),
        freed_before_peak_bytes=measured.freed_before_peak_bytes,
    )
    model_info = {
        "name": model.name,
        "family": model.family,
        "source": model.source,
        "notes": model.notes,
        "spec": asdict(model.spec),
        **counts,
        "active_parameters": _active_parameters(model, counts["parameters"]),
        "parameter_dtype": str(DTYPES[workload.precision]).removeprefix("torch."),
    }
    return Profile(
        profile_id=profile_id(model, workload),
        profiler_version=PROFILER_VERSION,
        model=model_info,
        workload=workload.as_dict(),
        samples_per_step=samples,
        tokens_per_step=tokens,
        flops=flops,
        phases=phases,
        by_kind=by_kind,
        by_op=_by_op(measured, factor),
        memory=memory,
        dataset=_dataset(workload, flops, runnable.tokens_per_sample(workload)),
        assumptions=assumptions(model, workload),
        seconds=round(seconds, 4),
        launches=_launches(workload, measured.launches),
    )


def _launches(workload: Workload, phases: dict[str, int]) -> dict[str, float]:
    out: dict[str, float] = {name: float(n) for name, n in phases.items()}
    if workload.trains:
        out["total"] = float(sum(phases.values()))
        return out
    output = workload.output_tokens or 0
    decode = (phases.get("decode-first", 0) + phases.get("decode-last", 0)) / 2 if output else 0
    out["total"] = phases.get("prefill", 0) + decode * output
    return out


def _active_parameters(model: ResolvedModel, total: float) -> float:
    """Parameters one token passes through (top-k of the experts in MoE layers)."""
    spec = model.spec
    if model.family != "transformer" or not spec.moe_experts:
        return total
    per_expert = (3 if spec.gated else 2) * spec.hidden * spec.ffn
    idle = spec.moe_experts - spec.moe_top_k
    return total - spec.layers * idle * per_expert


def _flops_summary(
    workload: Workload, phases: dict[str, PhaseCost], samples: int, tokens: int
) -> dict[str, float | None]:
    def f(name: str) -> float:
        return phases[name].flops if name in phases else 0.0

    if workload.trains:
        total = f("forward") + f("backward") + f("optimizer")
        return {
            "forward": f("forward"),
            "backward": f("backward"),
            "optimizer": f("optimizer"),
            "total": total,
            "per_sample": total / samples,
            "per_token": total / tokens if tokens else None,
        }
    output = workload.output_tokens or 0
    decode = (f("decode-first") + f("decode-last")) / 2 if output else 0.0
    total = f("prefill") + decode * output
    generated = samples * output
    return {
        "prefill": f("prefill"),
        "decode_per_step": decode or None,
        "total": total,
        "per_sample": total / samples,
        "per_token": total / (tokens + generated) if tokens + generated else None,
    }


def _dataset(
    workload: Workload, flops: dict[str, float | None], tokens_per_sample: int
) -> dict[str, float | None]:
    samples: float | None = workload.dataset_samples
    if workload.dataset_tokens is not None:
        samples = workload.dataset_tokens / tokens_per_sample if tokens_per_sample else None
    if samples is None:
        return {"samples": None, "steps": None, "total_flops": None}
    epochs = workload.epochs
    per_sample = flops["per_sample"] or 0.0
    return {
        "samples": samples,
        "steps": math.ceil(samples / workload.batch_size) * epochs,
        "total_flops": per_sample * samples * epochs,
    }


# long: sentences, one a condition
def assumptions(model: ResolvedModel, workload: Workload) -> list[str]:
    """What the profile takes for granted, in words (returned with every profile)."""
    out = []
    p = workload.precision
    if workload.trains and p in ("bf16", "fp16", "fp8"):
        out.append(
            f"mixed precision: {'bf16' if p == 'fp8' else p} weights and gradients, "
            "fp32 master weights updated by the optimizer"
        )
    if p == "fp8":
        out.append(
            "fp8: matrix multiplies run in fp8 (Transformer Engine style); the model is "
            "held in bf16, so bytes moved are those of bf16 tensors"
        )
    if p == "tf32":
        out.append("tf32: fp32 tensors, matrix multiplies on TF32 tensor cores")
    if p == "fp32":
        out.append(
            "fp32: full fp32 math; on Ampere and newer PyTorch may use TF32 for "
            "convolutions by default (cuDNN), not for matmuls"
        )
    if p in QUANTISED_BYTES:
        out.append(
            f"{p}: weights stored at {QUANTISED_BYTES[p]:.3g} bytes each; activations "
            "and KV cache in fp16"
        )
    if workload.trains:
        out.append(
            f"optimizer {workload.optimizer}: update accounted as one fused kernel per "
            "parameter (states in fp32; 8-bit Adam: one byte per state)"
        )
    if model.family in ("transformer", "vit", "unet", "layers"):
        out.append(
            "attention: "
            + (
                "flash (fused; causal blocks skipped, so half the FLOPs of the full score matrix)"
                if workload.attention == "flash"
                else "materialized score matrix (s² scores saved for backward)"
            )
        )
        if model.family == "transformer" and model.spec.moe_experts:
            out.append("mixture of experts: tokens spread evenly over the experts")
    if workload.method == "qlora":
        out.append(
            "QLoRA: frozen base weights in NF4 with double quantisation "
            f"({NF4_BYTES_PER_PARAMETER:.4f} bytes each)"
        )
    if workload.method in ("lora", "qlora"):
        out.append(f"LoRA rank {workload.lora_rank} on every linear layer inside the blocks")
    out.append(
        "elementwise FLOPs approximated: 1 per output element (norms 5, reductions 2); "
        "matrix multiply, convolution and attention FLOPs are exact"
    )
    out.append(
        "kernel launches: one per dispatched operator that does work (eager PyTorch: no CUDA "
        "graphs, no compiler fusion), one fused optimizer kernel per parameter, and for "
        f"LSTM/GRU layers {KERNELS_PER_TIME_STEP} kernels per time step, layer and direction "
        "(cuDNN), in forward and again in backward"
    )
    out.append(
        f"runtime overhead: {CONTEXT_BYTES // 2**20} MiB CUDA context and workspaces "
        f"plus {FRAGMENTATION:.0%} allocator fragmentation on transient memory"
    )
    if not workload.trains and (workload.output_tokens or 0) > 0:
        out.append(
            "decode: KV cache preallocated for prompt + output; per-step cost is the "
            "mean of the first and last step (it grows linearly with the context)"
        )
    return out
