"""The schema of knowledge/data/stacks.yaml: the software stacks and their properties."""

from __future__ import annotations

from typing import Any

from marshmallow import Schema, ValidationError, fields, post_load, validate, validates_schema

from knowledge import records
from knowledge.schemas import ARCHITECTURES, ID

STACKS_FILE = "stacks.yaml"
TASKS = ("training", "fine-tuning", "inference")
# what a stack is the default for: a task, a fine-tuning method, or a kind of model
DEFAULT_FOR = (
    "training", "fine-tuning", "inference", "lora", "qlora", "vision", "encoder", "fp8",
    "model-parallel",
)  # fmt: skip
# property -> its allowed values (a tuple) or its type
PROPERTIES: dict[str, tuple[Any, ...] | type] = {
    "kernels": ("step-model", "eager", "compiled", "fused"),
    "attention": ("sdpa", "native"),
    "cuda_graphs": bool,
    "loss": ("full-fp32", "chunked", "fused"),
    "master_weights": ("fp32", "none"),
    "optimizer_states": ("fp32", "bf16", "8bit"),
    "paged_optimizer": bool,
    "optimizer_in_backward": bool,
    "activation_offload": bool,
    "fused_activations": bool,
    "reshard_after_forward": bool,
    "selective_recompute": ("attention", "operators"),
    "context_parallel": ("none", "allgather", "ring"),
    "sharding": ("none", "optimizer", "full"),
    "continuous_batching": bool,
    "paged_kv": bool,
    "weight_precisions": list,
    "parallelism": list,
}
WEIGHT_FORMATS = ("fp32", "fp16", "bf16", "fp8", "int8", "int4")
# the ways a stack splits a training step over GPUs (a layout's dimensions)
PARALLELISM = ("data", "tensor", "pipeline", "context")
LIST_VALUES = {"weight_precisions": WEIGHT_FORMATS, "parallelism": PARALLELISM}
# the fitted constants each block may hold (the fit script writes them with a `fit` line)
COMPUTE_CONSTANTS = (
    "efficiency_16bit", "efficiency_8bit", "memory_share", "attention_share",
    "native_attention_speedup", "host_s",
)  # fmt: skip
SERVING_CONSTANTS = ("decode_bandwidth_share", "prefill_efficiency", "step_overhead_s")


def property_error(name: str, value: Any) -> str | None:
    """What is wrong with ``value`` for property ``name`` (None: nothing)."""
    allowed = PROPERTIES.get(name)
    if allowed is None:
        return f"unknown property (known: {', '.join(PROPERTIES)})"
    if allowed is bool:
        return None if isinstance(value, bool) else "must be true or false"
    if allowed is list:
        known = LIST_VALUES[name]
        if not isinstance(value, list) or not value:
            return f"must be a non-empty list of {', '.join(known)}"
        bad = [v for v in value if v not in known]
        return f"unknown values {bad} (known: {', '.join(known)})" if bad else None
    assert isinstance(allowed, tuple)
    return None if value in allowed else f"must be one of {', '.join(allowed)}"


def _constants(names: tuple[str, ...]) -> fields.Dict:
    return fields.Dict(
        keys=fields.String(validate=validate.OneOf((*names, "fit"))),
        values=fields.Raw(),
        load_default=dict,
    )


class StackSchema(Schema):
    id = fields.String(required=True, validate=ID)
    name = fields.String(required=True, validate=validate.Length(min=3))
    tasks = fields.List(
        fields.String(validate=validate.OneOf(TASKS)), required=True, validate=validate.Length(1)
    )
    aliases = fields.List(fields.String(validate=ID), load_default=list)
    default_for = fields.List(
        fields.String(validate=validate.OneOf(DEFAULT_FOR)), load_default=list
    )
    version = fields.String(required=True)
    as_of = fields.Date(required=True)
    sources = fields.List(fields.String(validate=validate.Length(min=3)), required=True,
                          validate=validate.Length(min=1))  # fmt: skip
    properties = fields.Dict(keys=fields.String(), values=fields.Raw(), required=True)
    priors_fitted_on = fields.String(load_default=None)
    compute = _constants(COMPUTE_CONSTANTS)
    serving = _constants(SERVING_CONSTANTS)

    @validates_schema
    def _properties(self, data: dict[str, Any], **_: Any) -> None:
        props = data.get("properties") or {}
        errors = {k: msg for k, v in props.items() if (msg := property_error(k, v))}
        missing = [k for k in PROPERTIES if k not in props]
        if missing:
            errors["properties"] = f"missing {', '.join(missing)}"
        for block in ("compute", "serving"):
            values = data.get(block) or {}
            for k, v in values.items():
                if k == "fit":
                    if not isinstance(v, str) or len(v) < 10:
                        errors[f"{block}.fit"] = "name the tables and the date of the fit"
                elif not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0:
                    errors[f"{block}.{k}"] = "must be a number >= 0"
            if values and "fit" not in values:
                errors[f"{block}.fit"] = "fitted constants need their source (fit)"
        if errors:
            raise ValidationError(errors)

    @post_load
    def _make(self, data: dict[str, Any], **_: Any) -> records.Stack:
        for key in ("tasks", "aliases", "default_for", "sources"):
            data[key] = tuple(data[key])
        return records.Stack(**data)


ARCHITECTURE_FILE = "architecture_efficiency.yaml"


class ArchitectureEfficiencySchema(Schema):
    """knowledge/data/architecture_efficiency.yaml: one mapping, not a list of rows."""

    reference = fields.String(required=True, validate=validate.OneOf(ARCHITECTURES))
    fit = fields.String(required=True, validate=validate.Length(min=10))
    as_of = fields.Date(required=True)
    # "<architecture>": PyTorch's own kernels (eager or compiled); "fused:<architecture>":
    # stacks of fused kernels (Megatron, llm.c), which reach another share on each
    factors = fields.Dict(
        keys=fields.String(
            validate=validate.OneOf([*ARCHITECTURES, *(f"fused:{a}" for a in ARCHITECTURES)])
        ),
        values=fields.Float(validate=validate.Range(0.5, 2.0)),
        required=True,
    )
