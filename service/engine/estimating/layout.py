"""Parallel layouts: how a training or inference run is split over GPUs, and the memory each
GPU then holds.

A :class:`Layout` names the degrees of data, tensor, pipeline and context parallelism, the
ZeRO stage (FSDP full shard = 3, shard-grad-op = 2), sequence parallelism, activation
checkpointing, the micro-batch and gradient accumulation, and what is offloaded to the
host. :func:`check` refuses a layout the model cannot take (naming the rule it breaks);
:func:`memory_per_gpu` divides a profile's memory (counted for one micro-batch on one GPU)
as the layout divides it:

- model states as ZeRO divides them (Rajbhandari et al. 2020, "ZeRO: Memory Optimizations
  Toward Training Trillion Parameter Models", section 5): tensor and pipeline parallelism
  split every state; stage 1 shards the optimizer states and fp32 master weights over the
  data-parallel group, stage 2 the gradients too, stage 3 the 16-bit parameters as well,
  which then gathers the largest layer's parameters (and prefetches the next) on each GPU;
- activations as Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large
  Transformer Models", eqs. 1-6) divide them: per layer 34 sbh bytes in 16 bits without
  the attention scores (flash attention keeps none), of which tensor parallelism divides
  24 sbh and sequence parallelism the other 10; selective recomputation drops only the
  attention scores (none with flash attention); full recomputation keeps each layer's
  2 sbh input and one layer's activations at a time; context parallelism divides the
  sequence; a 1F1B pipeline's first stage holds min(p, micro-batches) micro-batches of
  its L/p layers, an interleaved schedule (1 + (p - 1) / (p v)) times that where there are
  more micro-batches than stages (see :func:`in_flight`), and one layer fewer where the
  split counts the embedding and the loss as layers;
- on a fused stack (:func:`fused_memory`), a dense transformer's activations as
  Korthikanti's count gives them for its widths (GQA, a gated MLP) rather than eager
  PyTorch's saved tensors, which the profile counts (fp32 copies in the norms, the
  activation's output beside its input);
- the KV cache of inference split over the tensor-parallel ranks (heads), replicated where
  there are fewer KV heads than ranks, and over the pipeline stages (layers);
- offloading: the optimizer states and master weights (ZeRO-Offload), and with stage 3 the
  parameters (ZeRO-Infinity), move to host memory, reported as ``cpu_bytes`` per GPU;
- the runtime's overhead: the CUDA context and the allocator's fragmentation as the profile
  counts them, the fragmentation on what this GPU itself allocates and frees in a step.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from service.engine.errors import InvalidRequest

CHECKPOINTING = ("none", "selective", "full")

OFFLOAD = ("none", "optimizer", "parameters")

ZERO_STAGES = (0, 1, 2, 3)

# Korthikanti et al. 2022, eq. 2: activations per transformer layer, in units of s*b*h bytes
# (16-bit values, no attention scores): 10 that tensor parallelism replicates (layer norm
# inputs, dropout masks, the attention and MLP inputs), 24 that it splits
LAYER_REPLICATED = 10.0

LAYER_SPLIT = 24.0

LAYER_TOTAL = LAYER_REPLICATED + LAYER_SPLIT

LAYER_INPUT = 2.0  # what full recomputation keeps per layer: its 16-bit input

GATHERED_LAYERS = 2  # ZeRO-3 holds the gathered layer and prefetches the next

ACTIVATION_BYTES = {"fp32": 4, "tf32": 4}  # bytes per activation value by precision; else 2


class LayoutError(InvalidRequest):
    """A layout the model or the machine cannot take: ``rule`` names the constraint."""

    def __init__(self, rule: str, field: str, detail: str) -> None:
        super().__init__(field, f"{detail} (rule {rule})")
        self.rule = rule


@dataclass(frozen=True, slots=True)
class ModelShape:
    """What a layout needs to know of a transformer: its layers, widths and heads."""

    layers: int
    hidden: int
    heads: int
    kv_heads: int
    vocab: int
    parameters: float
    ffn: int = 0  # MLP width (0: 4 x hidden)
    gated: bool = False  # gate and up projections (SwiGLU)
    head_dim: int = 0  # width of one attention head (0: hidden / heads)
    # one stack of identical dense layers with flash attention, trained in full: what a
    # fused stack keeps of it for backward is counted by :meth:`fused_activation_sbh`
    fused: bool = False
    final_norm: bool = True
    lm_head: bool = True  # the loss over the vocabulary (else a small classifier)

    @classmethod
    def from_profile(cls, profile: Mapping[str, Any]) -> ModelShape | None:
        """From a profile's ``model`` (None for a model that is not a transformer)."""
        model = profile.get("model") or {}
        spec = model.get("spec") or {}
        if model.get("family") != "transformer" or not spec.get("layers"):
            return None
        workload = profile.get("workload") or {}
        fused = (
            spec.get("arch") in ("decoder", "encoder")
            and not spec.get("decoder_layers")
            and not spec.get("moe_experts")
            and not spec.get("parallel_block")
            and workload.get("attention", "flash") == "flash"
            and workload.get("method") in (None, "full")
        )
        return cls(
            layers=int(spec["layers"]) + int(spec.get("decoder_layers") or 0),
            hidden=int(spec["hidden"]),
            heads=int(spec["heads"]),
            kv_heads=int(spec.get("kv_heads") or spec["heads"]),
            vocab=int(spec.get("vocab") or 0),
            parameters=float(model.get("parameters") or 0.0),
            ffn=int(spec.get("ffn") or 4 * int(spec["hidden"])),
            gated=bool(spec.get("gated")),
            head_dim=int(spec.get("head_dim") or 0),
            fused=fused,
            final_norm=bool(spec.get("final_norm", True)),
            lm_head=spec.get("head", "lm") == "lm",
        )

    def largest_layer_parameters(self) -> float:
        """Parameters of the largest block ZeRO-3 gathers: a transformer layer, or the
        embedding table where it is larger."""
        per_layer = self.parameters / max(self.layers, 1)
        return max(per_layer, float(self.vocab * self.hidden))

    def fused_activation_sbh(self) -> float:
        """Bytes per token and hidden unit (s b h) a fused stack keeps for backward, whole
        model, in 16 bits: Korthikanti et al. 2022, eq. 2, for this model's widths, without
        dropout masks or attention scores (flash attention). Per layer: the two norms'
        inputs (4); the normalised input of the attention and of the MLP (2 + 2); queries,
        keys and values and attention's output (what flash attention keeps; the output is
        also the next projection's input); the MLP's first projection's output (gate and up
        where gated; the activation is fused into it) and the second's input. Beyond the
        layers: the final norm's input and output, and the loss's fp32 probabilities over
        the vocabulary."""
        h = self.hidden
        head = self.head_dim or h // self.heads
        queries, kv = self.heads * head / h, self.kv_heads * head / h
        width = (self.ffn or 4 * h) / h
        attention = 2 + 2 * queries + 4 * kv + 2 * queries
        mlp = 2 + 2 * width * (2 if self.gated else 1) + 2 * width
        return self.layers * (4 + attention + mlp) + self.head_sbh()

    def operator_policy_sbh(self) -> float:
        """Bytes per token and hidden unit (s b h) torchtitan's operator policy for selective
        checkpointing keeps, whole model, in 16 bits: each layer's input (2), attention's
        output (2 q), and the output of every other matmul in the order they run (queries,
        values, the MLP's first projection, its last: 2 q + 2 kv + 2 w + 2; keys, the
        attention's output projection, the gate and everything pointwise are recomputed);
        beyond the layers as :meth:`fused_activation_sbh`."""
        h = self.hidden
        head = self.head_dim or h // self.heads
        queries, kv = self.heads * head / h, self.kv_heads * head / h
        width = (self.ffn or 4 * h) / h
        layer = 2 + 2 * queries + 2 * queries + 2 * kv + 2 * width + 2
        return self.layers * layer + self.head_sbh()

    def head_sbh(self, loss_bytes: float = 4.0) -> float:
        """Bytes per token and hidden unit (s b h) kept for backward beyond the layers, in
        16 bits: the final norm's input and output, and what the loss keeps over the
        vocabulary (``loss_bytes`` a logit: eager PyTorch's fp32 log-probabilities, 4)."""
        norm = 4.0 if self.final_norm else 0.0
        return norm + (loss_bytes * self.vocab / self.hidden if self.lm_head else 0.0)


@dataclass(frozen=True, slots=True)
class Layout:
    data_parallel: int = 1
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    context_parallel: int = 1
    zero_stage: int = 0
    sequence_parallel: bool = False
    activation_checkpointing: str = "none"
    micro_batch_size: int = 1
    gradient_accumulation: int = 1
    offload: str = "none"
    virtual_stages: int = 1  # interleaved pipeline: model chunks per stage
    # the pipeline split counts the embedding and the loss as a layer each, so the first
    # and last stages hold one layer fewer (Megatron-LM's account_for_embedding_in_pipeline_
    # split and account_for_loss_in_pipeline_split; Llama 3, section 3.3.2)
    ends_as_layers: bool = False

    @property
    def gpus(self) -> int:
        return (
            self.data_parallel
            * self.tensor_parallel
            * self.pipeline_parallel
            * self.context_parallel
        )

    @property
    def model_parallel(self) -> int:
        """GPUs one copy of the model is split over (tensor x pipeline)."""
        return self.tensor_parallel * self.pipeline_parallel

    @property
    def shard_group(self) -> int:
        """GPUs ZeRO shards the model states over: the data-parallel ranks, context-parallel
        ones included (they hold the same weights and reduce the same gradients)."""
        return self.data_parallel * self.context_parallel

    @property
    def global_batch(self) -> int:
        """Samples per optimizer step: micro-batch x accumulation x data parallel."""
        return self.micro_batch_size * self.gradient_accumulation * self.data_parallel

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check(
    layout: Layout, shape: ModelShape | None, gpus_per_node: int, seq_len: int | None
) -> None:
    """Raise :class:`LayoutError` naming the first rule ``layout`` breaks."""
    _check_options(layout)
    _check_machine(layout, gpus_per_node, seq_len)
    _check_model(layout, shape)


def _check_options(layout: Layout) -> None:
    positive = (
        "data_parallel",
        "tensor_parallel",
        "pipeline_parallel",
        "context_parallel",
        "micro_batch_size",
        "gradient_accumulation",
        "virtual_stages",
    )
    for name in positive:
        if getattr(layout, name) < 1:
            raise LayoutError("positive-degree", f"layout.{name}", f"{name} must be at least 1")
    if layout.zero_stage not in ZERO_STAGES:
        raise LayoutError("zero-stage", "layout.zero_stage", "zero_stage is one of 0, 1, 2, 3")
    if layout.activation_checkpointing not in CHECKPOINTING:
        raise LayoutError(
            "checkpointing",
            "layout.activation_checkpointing",
            f"activation_checkpointing is one of {', '.join(CHECKPOINTING)}",
        )
    if layout.offload not in OFFLOAD:
        raise LayoutError("offload", "layout.offload", f"offload is one of {', '.join(OFFLOAD)}")
    if layout.offload == "optimizer" and layout.zero_stage < 1:
        raise LayoutError(
            "offload-needs-zero",
            "layout.offload",
            "offloading the optimizer needs zero_stage 1 or more (ZeRO-Offload)",
        )
    if layout.offload == "parameters" and layout.zero_stage != 3:
        raise LayoutError(
            "offload-needs-zero-3",
            "layout.offload",
            "offloading the parameters needs zero_stage 3 (ZeRO-Infinity)",
        )
    if layout.sequence_parallel and layout.tensor_parallel == 1:
        raise LayoutError(
            "sequence-parallel-needs-tensor-parallel",
            "layout.sequence_parallel",
            "sequence parallelism splits what tensor parallelism replicates: it needs "
            "tensor_parallel above 1",
        )
    if layout.virtual_stages > 1 and layout.pipeline_parallel == 1:
        raise LayoutError(
            "interleaving-needs-pipeline",
            "layout.virtual_stages",
            "an interleaved schedule needs pipeline_parallel above 1",
        )
    if layout.ends_as_layers and layout.pipeline_parallel == 1:
        raise LayoutError(
            "ends-as-layers-needs-pipeline",
            "layout.ends_as_layers",
            "counting the embedding and the loss as pipeline layers needs pipeline_parallel "
            "above 1",
        )


def _check_machine(layout: Layout, gpus_per_node: int, seq_len: int | None) -> None:
    t = layout.tensor_parallel
    if t > gpus_per_node:
        raise LayoutError(
            "tensor-parallel-in-node",
            "layout.tensor_parallel",
            f"tensor_parallel {t} exceeds the {gpus_per_node} GPUs of one node: its "
            "all-reduces run every layer and need the link inside a node",
        )
    cp = layout.context_parallel
    if cp > 1 and (not seq_len or seq_len % (2 * cp)):
        raise LayoutError(
            "context-parallel-divides-sequence",
            "layout.context_parallel",
            f"context_parallel {cp} needs a sequence length divisible by {2 * cp} (each rank "
            "takes two chunks, for balance under a causal mask)",
        )


def _check_model(layout: Layout, shape: ModelShape | None) -> None:
    t = layout.tensor_parallel
    if shape is not None:
        if shape.heads % t:
            raise LayoutError(
                "tensor-parallel-divides-heads",
                "layout.tensor_parallel",
                f"tensor_parallel {t} must divide the model's {shape.heads} attention heads",
            )
        if shape.kv_heads % t and t % shape.kv_heads:
            raise LayoutError(
                "tensor-parallel-divides-kv-heads",
                "layout.tensor_parallel",
                f"tensor_parallel {t} must divide the model's {shape.kv_heads} KV heads "
                "(or be a multiple of them, each KV head then replicated)",
            )
        stages = layout.pipeline_parallel * layout.virtual_stages
        split = shape.layers + (2 if layout.ends_as_layers else 0)
        if split % stages:
            ends = " and its embedding and loss" if layout.ends_as_layers else ""
            raise LayoutError(
                "pipeline-divides-layers",
                "layout.pipeline_parallel",
                f"pipeline_parallel x virtual_stages ({stages}) must divide the model's "
                f"{shape.layers} layers{ends}",
            )
    elif t > 1 or layout.pipeline_parallel > 1:
        raise LayoutError(
            "model-parallel-needs-transformer",
            "layout.tensor_parallel",
            "tensor and pipeline parallelism are estimated for transformers only",
        )
