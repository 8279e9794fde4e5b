"""The workload: what is done with the model. Field names are fixed (clients rely on them).

``WorkloadSchema`` validates a JSON workload (unknown fields rejected) and returns a
:class:`Workload` with every default filled in, so the profile states what it assumed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from marshmallow import Schema, ValidationError, fields, post_load, validate, validates_schema

TASKS = ("training", "fine-tuning", "inference")
METHODS = ("full", "lora", "qlora")
LORA_METHODS = ("lora", "qlora")  # the methods that take a lora_rank
PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8", "int4")
TRAINING_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8")  # int8 and int4: inference only
OPTIMIZERS = ("adamw", "adam", "sgd", "sgd+momentum", "adafactor", "8-bit adam")
CHECKPOINTING = ("none", "full", "selective")
ATTENTION = ("flash", "materialized")
MAX_SEQ_LEN = 10_000_000
# Recommenders train at millions of samples per GPU (Lambda's NCF rows: 10^7); the meta
# device does not care about sizes, so the bound only stops absurd requests.
MAX_BATCH = 100_000_000
# the fields each task takes beside ``task``: any other is refused, naming the task it is for
_ANY_TASK = ("batch_size", "precision", "image_size", "attention")
_TRAINS = ("seq_len", "optimizer", "activation_checkpointing", "dataset_samples",
           "dataset_tokens", "epochs")  # fmt: skip
TASK_FIELDS: dict[str, tuple[str, ...]] = {
    "training": (*_ANY_TASK, *_TRAINS),
    "fine-tuning": (*_ANY_TASK, *_TRAINS, "method", "lora_rank"),
    "inference": (*_ANY_TASK, "prompt_tokens", "output_tokens"),
}


@dataclass(frozen=True)
class Workload:
    task: str
    batch_size: int
    precision: str
    method: str | None = None
    lora_rank: int | None = None
    seq_len: int | None = None
    image_size: int | None = None
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    optimizer: str | None = None
    activation_checkpointing: str = "none"
    attention: str = "flash"
    dataset_samples: int | None = None
    dataset_tokens: int | None = None
    epochs: float = 1.0

    @property
    def trains(self) -> bool:
        return self.task != "inference"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _int(low: int, high: int, description: str, required: bool = False) -> fields.Integer:
    return fields.Integer(
        validate=validate.Range(low, high, error=f"must be between {low} and {high}"),
        metadata={"description": description},
        strict=True,
        required=required,
    )


class WorkloadSchema(Schema):
    task = fields.String(required=True, validate=validate.OneOf(TASKS))
    method = fields.String(
        validate=validate.OneOf(METHODS),
        metadata={"description": "fine-tuning only: full, lora or qlora (default full)"},
    )
    lora_rank = _int(1, 4096, "LoRA / QLoRA adapter rank (default 16)")
    batch_size = _int(
        1, MAX_BATCH, "samples per step per GPU (data-parallel replica)", required=True
    )
    seq_len = _int(1, MAX_SEQ_LEN, "tokens per sample (training and fine-tuning)")
    image_size = _int(8, 16384, "input height and width in pixels (vision models)")
    prompt_tokens = _int(1, MAX_SEQ_LEN, "inference: tokens in the prompt")
    output_tokens = _int(0, MAX_SEQ_LEN, "inference: tokens generated")
    precision = fields.String(
        validate=validate.OneOf(PRECISIONS),
        metadata={
            "description": "compute precision; bf16/fp16 mean mixed precision with "
            "fp32 master weights when training (default bf16)"
        },
    )
    optimizer = fields.String(
        validate=validate.OneOf(OPTIMIZERS), metadata={"description": "default adamw"}
    )
    activation_checkpointing = fields.String(validate=validate.OneOf(CHECKPOINTING))
    attention = fields.String(
        validate=validate.OneOf(ATTENTION),
        metadata={"description": "flash (fused, the default) or materialized scores"},
    )
    dataset_samples = _int(1, 10**15, "samples in the dataset (for time and cost to train)")
    dataset_tokens = _int(1, 10**16, "tokens in the dataset (alternative to dataset_samples)")
    epochs = fields.Float(validate=validate.Range(min=0, min_inclusive=False, max=1e6))

    @validates_schema
    def _coherent(self, data: dict[str, Any], **_: Any) -> None:
        """The rules across fields (the OpenAPI document states them too: its ``oneOf``
        by task is made from :data:`TASK_FIELDS` and the tuples above)."""
        task = data["task"]
        errors: dict[str, str] = {}
        for name in data.keys() - {"task", *TASK_FIELDS[task]}:
            tasks = " or ".join(t for t, names in TASK_FIELDS.items() if name in names)
            hint = " (use seq_len)" if name in ("prompt_tokens", "output_tokens") else ""
            errors[name] = f"only for task {tasks}{hint}"
        if "lora_rank" in data and data.get("method") not in LORA_METHODS:
            errors.setdefault("lora_rank", "needs method lora or qlora")
        if task != "inference" and data.get("precision") not in (None, *TRAINING_PRECISIONS):
            errors["precision"] = "int8 and int4 are inference precisions"
        if "dataset_samples" in data and "dataset_tokens" in data:
            errors["dataset_tokens"] = "give dataset_samples or dataset_tokens, not both"
        if errors:
            raise ValidationError(errors)

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> Workload:
        if data["task"] != "inference":
            data.setdefault("optimizer", "adamw")
            data.setdefault("epochs", 1.0)
        if data["task"] == "fine-tuning":
            data.setdefault("method", "full")
            if data["method"] != "full":
                data.setdefault("lora_rank", 16)
        data.setdefault("precision", "bf16")
        return Workload(**data)
