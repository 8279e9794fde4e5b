"""The parallel layouts and serving figures in the answers of ``POST /v1/plans`` and
``POST /v1/estimates``, every field described: a layout as given or chosen, a layout's
memory and step (:class:`PlannedLayoutSchema`, the engine's ``Planned.to_dict``), the links
a plan runs over, and inference per tensor-parallel group.

Memory is in bytes per GPU; bandwidths in GB/s per GPU per direction; times in seconds.
"""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from service.api.base import StrictBoolean
from service.api.described import integer, number, text
from service.api.profiles import MemorySchema
from service.engine.estimating.layout import CHECKPOINTING, OFFLOAD


def _degree(description: str) -> fields.Integer:
    return fields.Integer(
        load_default=1,
        validate=validate.Range(1, 4096),
        strict=True,
        metadata={"description": description},
    )


class LayoutSchema(Schema):
    """How a run is split over GPUs (Megatron-LM / DeepSpeed / FSDP terms)."""

    data_parallel = _degree("replicas of the model")
    tensor_parallel = _degree("GPUs each layer is split over (inside one node)")
    pipeline_parallel = _degree("stages the layers are split into")
    context_parallel = _degree("GPUs each sequence is split over")
    zero_stage = fields.Integer(
        load_default=0,
        strict=True,
        validate=validate.OneOf([0, 1, 2, 3]),
        metadata={"description": "ZeRO stage; FSDP full shard = 3, shard-grad-op = 2"},
    )
    sequence_parallel = StrictBoolean(
        load_default=False,
        metadata={"description": "tensor parallelism also splits the norms' and dropouts' "
                  "activations along the sequence (Megatron-LM)"},
    )  # fmt: skip
    activation_checkpointing = fields.String(
        load_default="none",
        validate=validate.OneOf(CHECKPOINTING),
        metadata={"description": "none, selective (the attention's scores recomputed, "
                  "Korthikanti et al. 2022; on a stack with an operator policy, the operators "
                  "it names) or full (each layer's forward recomputed in backward)"},
    )  # fmt: skip
    micro_batch_size = _degree("sequences (samples) per micro-batch per replica")
    gradient_accumulation = _degree("micro-batches per optimizer step")
    offload = fields.String(
        load_default="none",
        validate=validate.OneOf(OFFLOAD),
        metadata={"description": "optimizer states (ZeRO-Offload) or parameters too"},
    )
    virtual_stages = _degree("interleaved pipeline: model chunks per stage")
    ends_as_layers = StrictBoolean(
        load_default=False,
        metadata={
            "description": "the pipeline split counts the embedding and the loss as a layer "
            "each: the first and last stages hold one layer fewer (Megatron-LM's "
            "account_for_embedding_in_pipeline_split; Llama 3)"
        },
    )


class LayoutMemorySchema(MemorySchema):
    """Memory one GPU holds under a layout, bytes: the profile's memory split as the layout
    splits it."""

    parameters_bytes = number("weights on this GPU: split by tensor and pipeline parallelism, "
                            "sharded by ZeRO 3")  # fmt: skip
    gradients_bytes = number("gradients on this GPU (sharded by ZeRO 2 and 3)")
    optimizer_states_bytes = number("optimizer states on this GPU (sharded by ZeRO 1 to 3)")
    kv_cache_bytes = number("the KV cache on this GPU")
    gathered_parameters_bytes = number(
        "parameters gathered from the other shards for a layer's forward or backward "
        "(ZeRO 3 / FSDP full shard)"
    )
    cpu_bytes = number("host memory per GPU for what is offloaded (not in total_bytes)")
    model_states_bytes = number(
        "parameters, gradients, optimizer states and master weights on this GPU"
    )
    total_bytes = number("one GPU's memory at the step's peak under the layout")


class LayoutStepPartsSchema(Schema):
    """One optimizer step of a layout on one GPU, by part, seconds."""

    compute_s = number("forward and backward of every micro-batch of the step")
    recompute_s = number("forward recomputed in backward (activation checkpointing)")
    tensor_parallel_s = number("tensor-parallel collectives (none hidden)")
    context_parallel_s = number("context-parallel traffic computation does not hide")
    pipeline_bubble_s = number("pipeline stages idle: (p - 1) / virtual_stages micro-batches")
    pipeline_send_s = number("activations sent between pipeline stages, not hidden")
    data_parallel_exposed_s = number(
        "data-parallel gradient traffic (and ZeRO 3 parameter gathers) backward does not hide"
    )
    optimizer_s = number("the optimizer update of this GPU's shard (on the host when offloaded)")
    host_s = number("the host's time and kernel launches")


class LinkTrafficSchema(Schema):
    """One parallel group's traffic per step over the link it crosses."""

    group = text("tensor, context, pipeline or data")
    link = text("the link's id (GET /v1/interconnects)")
    link_name = text("the link, as named")
    link_gb_per_s = number(
        "the link's bandwidth per GPU per direction, GB/s (between nodes: the ports a "
        "group uses in parallel)"
    )
    bytes_per_step = number("bytes each GPU sends per step, one direction")
    time_s = number("the transfers' time per step")
    exposed_s = number("the part of time_s no computation hides")
    needed_gb_per_s = number(
        "the bandwidth per direction, GB/s, at which this traffic costs at most 10% of the "
        "step beyond what computation hides"
    )


class PlannedLayoutSchema(Schema):
    """A layout on one GPU type: its memory per GPU and its optimizer step."""

    layout = fields.Nested(LayoutSchema)
    gpus = integer("GPUs it takes: data x tensor x pipeline x context parallel")
    fits = fields.Boolean(
        metadata={"description": "memory_per_gpu_bytes fits in the GPU's usable memory"}
    )
    memory_per_gpu_bytes = number("one GPU's memory at the step's peak (memory.total_bytes)")
    memory_headroom = number(
        "share of the GPU's usable memory left, 4 decimals (negative: does not fit)"
    )
    memory = fields.Nested(LayoutMemorySchema, metadata={"description": "per GPU, by part"})
    step_time_s = number("one optimizer step, all its micro-batches")
    samples_per_s = number("samples a second, all GPUs")
    tokens_per_s = number("tokens a second, all GPUs")
    mfu = number(
        "model FLOPs utilisation: model FLOPs a second (no recomputation) over the GPUs' "
        "dense peak at the precision, 0 to 1"
    )
    bound = text(
        "the step's largest part: compute, tensor_parallel_communication, "
        "context_parallel_communication, pipeline_bubble, data_parallel_communication or host"
    )
    global_batch_size = number("samples per optimizer step: micro-batch x accumulation x data")
    breakdown = fields.Nested(LayoutStepPartsSchema)
    links = fields.List(
        fields.Nested(LinkTrafficSchema),
        metadata={"description": "each parallel group's traffic and the bandwidth it needs"},
    )


class RankedLayoutSchema(PlannedLayoutSchema):
    rank = integer("1 is the best: fitting first, then by throughput")


class LayoutAtCountSchema(PlannedLayoutSchema):
    """The fastest fitting layout at a count; where none fits, only count and fits (false)."""

    count = integer("GPUs")


class OtherLinksSchema(Schema):
    """The best layout's step on other links inside or between nodes."""

    intra_node = text("the link inside a node (interconnect id)")
    inter_node = text("the link between nodes (interconnect id)")
    step_time_s = number("the step on these links")
    slowdown = number("its step time over the plan's (below 1: faster)")
    bound = text("the step's largest part on these links (as a layout's bound)")
    reason = text("what changes and what it costs, in words")


class NetworkLinkSchema(Schema):
    id = text("the interconnect's id (GET /v1/interconnects)")
    name = text("the interconnect, as named")
    gb_per_s = number("bandwidth per GPU per direction, GB/s")
    why = text("where the link and its figure come from")


class PlanNetworkSchema(Schema):
    """The links the layouts run over."""

    intra_node = fields.Nested(NetworkLinkSchema, metadata={"description": "inside a node"})
    inter_node = fields.Nested(NetworkLinkSchema, metadata={"description": "between nodes"})
    gpus_per_node = integer("GPUs one NVLink or PCIe domain joins")


class DecodeBreakdownSchema(Schema):
    """One decode step of the batch, by part, seconds (time_per_output_token_s is
    max(weights' read, compute) + the KV cache's read + communication_s + launch_s)."""

    memory_s = number("reading the weights and the sequences' KV caches once")
    compute_s = number("the decode GEMMs at the batch's FLOPs")
    communication_s = number("tensor-parallel all-reduces, two per layer")
    launch_s = number("the stack's step overhead and kernel launches (none with CUDA graphs)")


class MemoryPartsBytesSchema(Schema):
    """What one GPU holds, bytes, by part: the parts sum to its total (empty: not
    estimated)."""

    parameters = number("weights")
    gradients = number("gradients")
    optimizer_states = number("optimizer states and master weights")
    activations = number("activations")
    kv_cache = number("the KV cache")
    other = number("temporaries at the peak, the CUDA context, less what is freed before it")


class ServingGroupSchema(Schema):
    tensor_parallel = integer("GPUs of one serving group (1: one GPU a replica)")
    fits = fields.Boolean(
        metadata={
            "description": "decoding: the group holds the weights and one sequence's KV "
            "cache; else: the model and its batch fit one GPU"
        }
    )
    bound = text("decoding: memory_bandwidth or compute, of a decoded token; else the "
                 "estimate's bound")  # fmt: skip


class DecodeServingSchema(ServingGroupSchema):
    """A generative model served by one tensor-parallel group."""

    weight_precision = text("the weights' precision")
    kv_precision = text("the KV cache's precision")
    concurrency = integer("sequences decoded together (default: max_concurrency, at least 1)")
    max_concurrency = integer("sequences whose KV cache fits beside the weights")
    weights_bytes_per_gpu = number("the weights on each GPU of the group, bytes")
    kv_bytes_per_sequence_per_gpu = number("one whole sequence's KV cache per GPU, bytes")
    kv_bytes_held_per_gpu = number(
        "the KV cache concurrency sequences hold per GPU, bytes (paged: on average so far)"
    )
    time_to_first_token_s = number("one request's prefill, s")
    time_per_output_token_s = number("one decode step of the batch, s")
    inter_token_latency_s = number(
        "between two tokens of a request, the prefills of joining requests interleaved "
        "(continuous batching), s"
    )
    output_tokens_per_s = number("output tokens a second of the group at the concurrency")
    decode_breakdown = fields.Nested(DecodeBreakdownSchema)


class ServedAloneSchema(ServingGroupSchema):
    """A model without a decode phase, one GPU a replica at the workload's batch."""

    batch_size = integer("requests per batch")
    batch_latency_s = number("a batch's latency, s")
    requests_per_s = number("requests a second of one GPU", True)
    memory_per_gpu_bytes = number("the GPU's memory at the peak, bytes (null: not estimated)", True)
    usable_memory_bytes = number("what the driver leaves of the GPU's memory, bytes", True)
    memory_parts_bytes = fields.Nested(MemoryPartsBytesSchema)


class InferenceOptionSchema(DecodeServingSchema, ServedAloneSchema):
    """One serving group: a generative model's tensor-parallel group (the decoding fields),
    or, for a model without a decode phase, one GPU at the workload's batch (batch_size,
    batch_latency_s, requests_per_s and the memory fields)."""


class InferenceEstimateSchema(InferenceOptionSchema):
    """A serving group; in a plain estimate, also its replicas over the count."""

    data_parallel = integer("plain estimate: groups (replicas) on the count's GPUs")
    all_output_tokens_per_s = number(
        "plain estimate: output tokens a second of all the replicas at the concurrency"
    )
