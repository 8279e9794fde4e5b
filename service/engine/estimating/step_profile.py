"""The typed profile the engine estimates from: what one step of a workload needs.

A :class:`StepProfile` is read once from a profile (:func:`StepProfile.from_profile`, the
JSON the profiler writes and the cache keeps), or made for any batch from the profiles of
the same workload at batch 1 and 2 (:func:`StepProfile.between`: FLOPs, bytes and the
batch-dependent memory are affine in the batch), which is how the stored benchmarks'
configurations are estimated without profiling each one. Field names carry units.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from profiles.profile import Memory
from service.engine.estimating.roofline import OpMix

TRAINING_TASKS = frozenset({"training", "fine-tuning"})


@dataclass(frozen=True, slots=True)
class StepProfile:
    """One step (training) or one request (inference) of a workload, as the engine sees it."""

    task: str
    precision: str
    batch_size: float
    samples_per_step: float
    tokens_per_step: float
    mix: OpMix
    memory: Memory
    model_name: str | None = None
    seq_len: int | None = None
    image_size: int | None = None  # as asked, else the model's own (what was counted)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    dataset_steps: float | None = None
    profile_id: str | None = None
    method: str | None = None  # fine-tuning: full, lora or qlora
    optimizer: str | None = None  # as asked (None: the profiler's default, AdamW)
    # what selective checkpointing keeps where the stack recomputes operators (None: the
    # attention scores only, which flash attention does not keep)
    selective_activations_bytes: float | None = None
    # FSDP frees each layer's gathered parameters after its forward (False: kept for the
    # backward, FSDP2's reshard_after_forward=False, gathered once)
    reshard_after_forward: bool = True
    # context parallelism's key and value transfers hidden behind the attention (a ring
    # of point-to-point sends: Megatron-Core's), else waited on (an all-gather first)
    context_parallel_overlap: bool = False
    # what of one micro-batch's activations lies beyond the layers (the final norm's, what
    # the loss keeps over the vocabulary): checkpointing the layers leaves it whole
    head_activations_bytes: float = 0.0
    # the layout dimensions the stack splits a training step over (None: any)
    parallelism: tuple[str, ...] | None = None

    @property
    def trains(self) -> bool:
        return self.task in TRAINING_TASKS

    @property
    def launches(self) -> float:
        return self.mix.launches

    @property
    def gradients_bytes(self) -> float:
        return self.memory.gradients_bytes

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any]) -> StepProfile:
        """From the profiler's JSON (``Profile.to_dict()``, as cached and served)."""
        workload = profile["workload"]
        model = profile.get("model") or {}
        spec = model.get("spec") or {}
        dataset = profile.get("dataset") or {}
        return cls(
            task=workload["task"],
            precision=workload["precision"],
            batch_size=float(workload["batch_size"]),
            samples_per_step=float(profile["samples_per_step"]),
            tokens_per_step=float(profile["tokens_per_step"]),
            mix=OpMix.from_profile(profile),
            memory=Memory.from_dict(profile["memory"]),
            model_name=model.get("name"),
            seq_len=workload.get("seq_len"),
            image_size=workload.get("image_size") or spec.get("image_size"),
            prompt_tokens=workload.get("prompt_tokens"),
            output_tokens=workload.get("output_tokens"),
            dataset_steps=float(dataset["steps"]) if dataset.get("steps") else None,
            profile_id=profile.get("profile_id"),
            method=workload.get("method"),
            optimizer=workload.get("optimizer"),
        )

    @classmethod
    def between(cls, one: StepProfile, two: StepProfile, batch: float) -> StepProfile:
        """The profile at ``batch`` from the same workload's profiles at batch 1 and 2.

        Work and bytes are affine in the batch (weights are read once per step, every
        activation once per sample); so are the activations, the temporary peak and the
        fragmentation share of the runtime overhead. Weights, gradients and optimizer
        states do not depend on it. Tokens and samples per step scale with it.
        """

        def at(a: float, b: float) -> float:
            return max(a + (b - a) * (batch - 1), 0.0)

        memory = Memory(
            **{
                f.name: at(getattr(one.memory, f.name), getattr(two.memory, f.name))
                for f in fields(Memory)
            }
        )
        return replace(
            one,
            batch_size=batch,
            samples_per_step=at(one.samples_per_step, two.samples_per_step),
            tokens_per_step=at(one.tokens_per_step, two.tokens_per_step),
            mix=OpMix.between(one.mix, two.mix, batch),
            memory=memory,
            dataset_steps=None,
            profile_id=None,
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready, for the derived-data file (see :mod:`service.engine.mixes`)."""
        return {
            "task": self.task,
            "precision": self.precision,
            "batch_size": self.batch_size,
            "samples_per_step": self.samples_per_step,
            "tokens_per_step": self.tokens_per_step,
            "mix": self.mix.to_dict(),
            "memory": self.memory.to_dict(),
            "model_name": self.model_name,
            "seq_len": self.seq_len,
            "image_size": self.image_size,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> StepProfile:
        return cls(
            task=data["task"],
            precision=data["precision"],
            batch_size=float(data["batch_size"]),
            samples_per_step=float(data["samples_per_step"]),
            tokens_per_step=float(data["tokens_per_step"]),
            mix=OpMix.from_dict(data["mix"]),
            memory=Memory.from_dict(data["memory"]),
            model_name=data.get("model_name"),
            seq_len=data.get("seq_len"),
            image_size=data.get("image_size"),
        )
