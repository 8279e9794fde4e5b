"""The software stacks in answers: a stack's properties, its fitted constants, each
property's allowed values (``GET /v1/stacks``) and the stack an estimate, plan or
recommendation assumed (:meth:`service.engine.estimating.software.Stack.to_dict`).

The properties are knowledge/stack_schemas.py's ``PROPERTIES`` (stacks.yaml's header says
what each does at length); every stack has every one, so they are fields, not a free map.
"""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from knowledge.stack_schemas import LIST_VALUES, PROPERTIES

# What each property says, in a line (knowledge/data/stacks.yaml's header in full).
MEANING = {
    "kernels": "the kernels the step runs: step-model (stock PyTorch, timed by the step model "
    "fitted on Lambda's benchmarks), eager (one ATen kernel per operator), compiled "
    "(torch.compile, pointwise chains fused by Inductor) or fused (hand-written or "
    "Transformer Engine kernels)",
    "attention": "the attention kernels: sdpa (PyTorch's scaled_dot_product_attention, "
    "FlashAttention-2's algorithm) or native (FlashAttention-3 or cuDNN's fused attention on "
    "Hopper and data-centre Blackwell, FlashAttention-2 elsewhere)",
    "cuda_graphs": "kernel launches replayed from a CUDA graph (no per-kernel host cost)",
    "loss": "how the loss is computed: full-fp32 (logits upcast to fp32 and kept for "
    "backward), chunked (output projection and loss in chunks) or fused (loss and gradient "
    "in one kernel, no fp32 logits kept)",
    "master_weights": "fp32 (mixed precision: fp32 copies take the optimizer's updates) or "
    "none (pure bf16: the 16-bit weights updated in place)",
    "optimizer_states": "the precision of the optimizer's states: fp32, bf16 or 8bit "
    "(bitsandbytes' block-wise 8-bit states)",
    "paged_optimizer": "the optimizer's states live in unified memory, paged to the host "
    "under pressure (not counted on the GPU)",
    "optimizer_in_backward": "each parameter updated as its gradient is made and the gradient "
    "freed: no whole set of gradients is held",
    "activation_offload": "saved activations streamed to host memory during forward",
    "fused_activations": "backward keeps the fused kernels' set of activations (Korthikanti "
    "et al. 2022), not eager PyTorch's saved tensors",
    "reshard_after_forward": "FSDP frees the gathered parameters after each layer's forward",
    "selective_recompute": "what selective activation checkpointing recomputes: attention "
    "(Megatron's: the attention scores) or operators (torchtitan's operator policy)",
    "context_parallel": "how the sequence is split over GPUs for attention: none, allgather "
    "(each rank gathers every rank's keys and values first) or ring (keys and values pass "
    "round a ring, hidden behind attention)",
    "sharding": "how data parallelism holds the model states when the request gives no "
    "layout: none (DDP), optimizer (ZeRO-1) or full (FSDP full shard, ZeRO-3)",
    "continuous_batching": "serving: requests join and leave the batch at every step",
    "paged_kv": "serving: the KV cache allocated in pages as tokens arrive",
    "weight_precisions": "the weight formats the stack trains or serves in",
    "parallelism": "the ways the stack splits a step over GPUs: data (DDP, FSDP, ZeRO), "
    "tensor, pipeline, context; layouts naming another are refused",
}


def _value(name: str) -> fields.Field:
    """Property ``name``'s value as a stack holds it (what property_error accepts)."""
    allowed = PROPERTIES[name]
    meta = {"description": MEANING[name]}
    if allowed is bool:
        return fields.Boolean(metadata=meta)
    if allowed is list:
        item = fields.String(validate=validate.OneOf(LIST_VALUES[name]))
        return fields.List(item, metadata=meta)
    assert isinstance(allowed, tuple)
    return fields.String(validate=validate.OneOf(allowed), metadata=meta)


def _allowed(name: str) -> fields.Field:
    """Property ``name``'s allowed values as GET /v1/stacks lists them (api/stacks._values):
    a list of the values for a choice, a sentence for a boolean or a list property."""
    allowed = PROPERTIES[name]
    if allowed is bool:
        said = 'the sentence "true or false" (it is a boolean)'
    elif allowed is list:
        said = f'the sentence "a list of {", ".join(LIST_VALUES[name])}"'
    else:
        return fields.List(
            fields.String(), metadata={"description": f"{MEANING[name]}; the values it takes"}
        )
    return fields.String(metadata={"description": f"{MEANING[name]}; {said}"})


class StackPropertiesSchema(Schema):
    """What a stack does (every property; a request overrides any in stack_options)."""

    kernels = _value("kernels")
    attention = _value("attention")
    cuda_graphs = _value("cuda_graphs")
    loss = _value("loss")
    master_weights = _value("master_weights")
    optimizer_states = _value("optimizer_states")
    paged_optimizer = _value("paged_optimizer")
    optimizer_in_backward = _value("optimizer_in_backward")
    activation_offload = _value("activation_offload")
    fused_activations = _value("fused_activations")
    reshard_after_forward = _value("reshard_after_forward")
    selective_recompute = _value("selective_recompute")
    context_parallel = _value("context_parallel")
    sharding = _value("sharding")
    continuous_batching = _value("continuous_batching")
    paged_kv = _value("paged_kv")
    weight_precisions = _value("weight_precisions")
    parallelism = _value("parallelism")


class StackPropertyValuesSchema(Schema):
    """Each property's allowed values (what stack_options takes)."""

    kernels = _allowed("kernels")
    attention = _allowed("attention")
    cuda_graphs = _allowed("cuda_graphs")
    loss = _allowed("loss")
    master_weights = _allowed("master_weights")
    optimizer_states = _allowed("optimizer_states")
    paged_optimizer = _allowed("paged_optimizer")
    optimizer_in_backward = _allowed("optimizer_in_backward")
    activation_offload = _allowed("activation_offload")
    fused_activations = _allowed("fused_activations")
    reshard_after_forward = _allowed("reshard_after_forward")
    selective_recompute = _allowed("selective_recompute")
    context_parallel = _allowed("context_parallel")
    sharding = _allowed("sharding")
    continuous_batching = _allowed("continuous_batching")
    paged_kv = _allowed("paged_kv")
    weight_precisions = _allowed("weight_precisions")
    parallelism = _allowed("parallelism")


def _fit() -> fields.String:
    return fields.String(
        metadata={"description": "where the constants were fitted: the published rows and "
                  "tables (knowledge/data/stack_runs), the scale on the priors and the date"}
    )  # fmt: skip


def _share(what: str) -> fields.Float:
    return fields.Float(metadata={"description": f"{what} (a fraction, 0 to 1)"})


class StackComputeSchema(Schema):
    """A stack's training constants fitted on its published runs (knowledge/stack_schemas.py
    ``COMPUTE_CONSTANTS``); only those fitted appear, empty before a fit (the engine's
    defaults, service/engine/estimating/software.py ``OPTIMIZED``, apply)."""

    efficiency_16bit = _share("the share of the GPU's dense 16-bit tensor peak its GEMMs reach")
    efficiency_8bit = _share("the share of the GPU's dense FP8 peak its FP8 GEMMs reach")
    memory_share = _share("the share of the eager step's memory traffic left after fusion")
    attention_share = fields.Float(
        metadata={"description": "attention kernels' rate over the GEMMs' (a ratio)"}
    )
    native_attention_speedup = fields.Float(
        metadata={"description": "FlashAttention-3 or cuDNN attention over FlashAttention-2 "
                  "on the GPUs that have them (Hopper, data-centre Blackwell; a ratio)"}
    )  # fmt: skip
    host_s = fields.Float(
        metadata={"description": "seconds per optimizer step no GPU work hides (the training "
                  "loop, data loader, launches)"}
    )  # fmt: skip
    fit = _fit()


class StackServingSchema(Schema):
    """A stack's serving constants fitted on its published runs (knowledge/stack_schemas.py
    ``SERVING_CONSTANTS``); only those fitted appear, empty before a fit (the engine's
    defaults, software.py ``SERVING_DEFAULTS``, apply)."""

    decode_bandwidth_share = _share("the share of the GPU's memory bandwidth decode reaches")
    prefill_efficiency = _share("the share of the GPU's dense peak prefill reaches")
    step_overhead_s = fields.Float(
        metadata={"description": "seconds each decode step spends on launches (eager stacks)"}
    )
    fit = _fit()


class StackUsedSchema(Schema):
    """The stack an answer assumed: named or the default for the work, with the request's
    stack_options applied (software.Stack.to_dict)."""

    id = fields.String(metadata={"description": "its id in GET /v1/stacks"})
    name = fields.String()
    version = fields.String(metadata={"description": "the versions its properties were read at"})
    as_of = fields.String(
        metadata={"description": "the date its properties were read (ISO 8601)", "format": "date"}
    )
    properties = fields.Nested(
        StackPropertiesSchema, metadata={"description": "its properties, overrides applied"}
    )
    overridden = fields.List(
        fields.String(validate=validate.OneOf(tuple(PROPERTIES))),
        metadata={"description": "the properties the request's stack_options changed"},
    )
    sources = fields.List(
        fields.String(), metadata={"description": "where its properties were read"}
    )
