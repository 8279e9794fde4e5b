"""The memory each GPU of a parallel layout holds: weights, gradients, optimizer states and
activations by part, as each tool reports it, and the layouts that fit."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from profiles.profile import CONTEXT_BYTES, Memory, runtime_overhead_bytes
from service.engine.estimating.layout import (
    ACTIVATION_BYTES,
    CHECKPOINTING,
    GATHERED_LAYERS,
    LAYER_INPUT,
    LAYER_SPLIT,
    LAYER_TOTAL,
    Layout,
    LayoutError,
    ModelShape,
    check,
)


@dataclass(frozen=True, slots=True)
class LayoutMemory:
    """Memory one GPU holds under a layout (bytes), as the profile's memory is split.
    ``cpu_bytes``: host memory per GPU for what is offloaded (not in ``total_bytes``)."""

    parameters_bytes: float
    gradients_bytes: float
    optimizer_states_bytes: float
    master_weights_bytes: float
    gathered_parameters_bytes: float
    activations_bytes: float
    kv_cache_bytes: float
    temporary_peak_bytes: float
    runtime_overhead_bytes: float
    freed_before_peak_bytes: float
    cpu_bytes: float

    @property
    def model_states_bytes(self) -> float:
        return (
            self.parameters_bytes
            + self.gradients_bytes
            + self.optimizer_states_bytes
            + self.master_weights_bytes
        )

    @property
    def total_bytes(self) -> float:
        return (
            self.model_states_bytes
            + self.gathered_parameters_bytes
            + self.activations_bytes
            + self.kv_cache_bytes
            + self.temporary_peak_bytes
            + self.runtime_overhead_bytes
            - self.freed_before_peak_bytes
        )

    def to_dict(self) -> dict[str, float]:
        return {
            **asdict(self),
            "model_states_bytes": self.model_states_bytes,
            "total_bytes": self.total_bytes,
        }


def as_reported(memory: Any) -> dict[str, float]:
    """A GPU's memory (a profile's or a layout's, bytes) as each tool reports it: the
    allocator's peak (``torch.cuda.max_memory_allocated``: the step's tensors), what the
    caching allocator reserves (``max_memory_reserved``: its fragmentation too) and what
    ``nvidia-smi`` shows (the CUDA context and workspaces too)."""
    total = float(memory.total_bytes)
    overhead = float(memory.runtime_overhead_bytes)
    context = min(overhead, CONTEXT_BYTES)
    return {
        "allocated_peak_bytes": total - overhead,
        "reserved_bytes": total - context,
        "nvidia_smi_bytes": total,
    }


def memory_parts(memory: Any) -> dict[str, float]:
    """A GPU's memory (a profile's or a layout's, bytes) in the parts a reader compares
    against the GPU's: the parts sum to its total."""
    states = memory.parameters_bytes + memory.gradients_bytes + memory.optimizer_states_bytes
    other = (memory.total_bytes - states - memory.master_weights_bytes
             - memory.activations_bytes - memory.kv_cache_bytes)  # fmt: skip
    return {
        "parameters": memory.parameters_bytes,
        "gradients": memory.gradients_bytes,
        "optimizer_states": memory.optimizer_states_bytes + memory.master_weights_bytes,
        "activations": memory.activations_bytes,
        "kv_cache": memory.kv_cache_bytes,
        "other": other,
    }


def activation_share(layout: Layout, layers: int | None = None) -> float:
    """The share of one micro-batch's activations (as counted on one GPU, whole model) that
    one GPU of ``layout`` holds at its peak (Korthikanti et al. 2022; see the module), for a
    model of ``layers`` layers (needed where the pipeline counts its ends as layers)."""
    t = layout.tensor_parallel
    if layout.activation_checkpointing == "full":  # inputs only (memory_per_gpu adds the
        # layer being recomputed)
        share = LAYER_INPUT / (t if layout.sequence_parallel else 1) / LAYER_TOTAL
    else:  # sequence parallelism splits what tensor parallelism replicates
        split = LAYER_TOTAL if layout.sequence_parallel else LAYER_SPLIT
        share = (LAYER_TOTAL - split + split / t) / LAYER_TOTAL
    share /= layout.context_parallel
    return share * in_flight(layout, layers)


def in_flight(layout: Layout, layers: int | None = None) -> float:
    """Micro-batches of the whole model whose activations the first pipeline stage holds at
    its peak. 1F1B: min(p, m) micro-batches of its L/p layers. Interleaved over v model
    chunks (Megatron-LM's schedule): (p - 1) 2 + (v - 1) p warm-up chunks and one more, or all
    m v chunks where there are fewer (m = p runs every forward first), each L/(p v) layers;
    for m >= p that is Narayanan et al.'s (1 + (p - 1) / (p v)) times the 1F1B figure. Where
    the split counts the embedding and the loss as layers (``layers`` = L given), the stage
    holds (L + 2) / p - 1 layers, not L / p."""
    p, v, m = layout.pipeline_parallel, layout.virtual_stages, layout.gradient_accumulation
    if p == 1:
        return 1.0
    # chunks of L / (p v) layers in flight (1F1B: v = 1, min(p, m) of them)
    chunks = min(p, m) if v == 1 else min(m * v, 2 * (p - 1) + (v - 1) * p + 1)
    held = chunks / (p * v)
    if layout.ends_as_layers and layers:
        held *= max(layers + 2 - p, 0) / layers
    return held


def head_bytes(shape: ModelShape | None, tokens: float, precision: str, loss_bytes: float) -> float:
    """What one micro-batch of ``tokens`` keeps for backward beyond the layers: the final
    norm's values and what the loss keeps, ``loss_bytes`` a logit (0 for a model without a
    language-model head)."""
    if shape is None or not shape.lm_head or tokens <= 0:
        return 0.0
    norm = shape.head_sbh(0.0) * shape.hidden * ACTIVATION_BYTES.get(precision, 2) / 2
    return tokens * (norm + loss_bytes * shape.vocab)


def fused_memory(memory: Memory, shape: ModelShape | None, tokens: float, precision: str) -> Memory:
    """``memory`` (a profile's: eager PyTorch's saved tensors) as a fused stack holds it:
    the activations :meth:`ModelShape.fused_activation_sbh` counts for the ``tokens`` of one
    micro-batch, and what backward frees before the peak in the same proportion. Unchanged
    for a model that count does not cover (``shape.fused`` false)."""
    if shape is None or not shape.fused or tokens <= 0 or memory.activations_bytes <= 0:
        return memory
    per_value = ACTIVATION_BYTES.get(precision, 2)
    activations = shape.fused_activation_sbh() * tokens * shape.hidden * per_value / 2
    lines = memory.activations_bytes + memory.gradients_bytes
    freed = memory.freed_before_peak_bytes * (activations + memory.gradients_bytes) / lines
    return replace(memory, activations_bytes=activations, freed_before_peak_bytes=freed)


def _activations_per_gpu(
    memory: Memory, layout: Layout, shape: ModelShape | None, trains: bool,
    selective: float | None, head_activations: float,
) -> float:  # fmt: skip
    """What one GPU of ``layout`` keeps of one micro-batch's activations at its peak (see
    :func:`memory_per_gpu`)."""
    layers = shape.layers if shape is not None else None
    if not trains:
        return memory.activations_bytes / layout.context_parallel
    kept = memory.activations_bytes
    if layout.activation_checkpointing == "selective" and selective:
        kept = min(kept, selective)
    head = min(head_activations, kept)
    activations = (kept - head) * activation_share(layout, layers)
    if head:
        # the loss runs on the last pipeline stage, on one micro-batch, over the vocabulary
        # tensor parallelism splits (a vocabulary-parallel loss) and the tokens context
        # parallelism splits; the first stage holds the most micro-batches of its layers
        beyond = head / (layout.tensor_parallel * layout.context_parallel)
        if layout.pipeline_parallel > 1:
            alone = activation_share(replace(layout, pipeline_parallel=1), layers)
            last = (kept - head) * alone / layout.pipeline_parallel + beyond
            activations = max(activations, last)
        else:
            activations += beyond
    if layout.activation_checkpointing == "full" and shape is not None:
        # one layer recomputed at a time, at the tensor-parallel split
        activations += (
            (memory.activations_bytes - head)
            / shape.layers
            * activation_share(
                replace(layout, activation_checkpointing="none", pipeline_parallel=1)
            )
        )
    return activations


# long: each part of the memory split as the layout splits it, a term a line
def memory_per_gpu(
    memory: Memory,
    layout: Layout,
    shape: ModelShape | None,
    trains: bool,
    selective_activations: float | None = None,
    reshard_after_forward: bool = True,
    head_activations: float = 0.0,
) -> LayoutMemory:
    """One GPU's memory under ``layout``, from ``memory``: the profile's, counted for one
    micro-batch of the whole model on one GPU (``selective_activations``: what a stack
    whose selective checkpointing recomputes operators keeps, whole model;
    ``head_activations``: what of the activations lies beyond the layers, the final norm's
    and the loss's, which checkpointing the layers does not recompute)."""
    mp, group = layout.model_parallel, layout.shard_group
    stage = layout.zero_stage if trains else 0
    params = memory.parameters_bytes / mp
    grads = memory.gradients_bytes / mp
    states = memory.optimizer_states_bytes / mp
    master = memory.master_weights_bytes / mp
    if stage >= 1:
        states /= group
        master /= group
    if stage >= 2:
        grads /= group
    gathered = 0.0
    if stage == 3:
        params /= group
        if shape is not None and memory.parameters_bytes > 0 and shape.parameters > 0:
            per_parameter = memory.parameters_bytes / shape.parameters
            layer = shape.largest_layer_parameters() * per_parameter / layout.tensor_parallel
            gathered = min(GATHERED_LAYERS * layer, memory.parameters_bytes / mp)
        if not reshard_after_forward:  # every layer's gathered parameters kept for backward
            gathered = memory.parameters_bytes / mp - params
    cpu = 0.0
    if layout.offload in ("optimizer", "parameters"):
        cpu += states + master
        states = master = 0.0
    if layout.offload == "parameters":
        cpu += params
        params = 0.0
    activations = _activations_per_gpu(
        memory, layout, shape, trains, selective_activations, head_activations
    )
    kv_split = 1
    if shape is not None:
        kv_split = min(layout.tensor_parallel, shape.kv_heads)
    kv = memory.kv_cache_bytes / kv_split / layout.pipeline_parallel
    # backward frees activations while it writes gradients: what is freed before the peak
    # keeps the profile's proportion, and is never more than either
    counted = memory.activations_bytes + memory.gradients_bytes
    freed = 0.0
    if counted > 0:
        freed = memory.freed_before_peak_bytes * min(1.0, (activations + grads) / counted)
    freed = min(freed, activations, grads) if trains else 0.0
    # the step's transient buffers (logits, attention's workspace) grow with the tokens a
    # GPU handles: tensor parallelism splits them, and context parallelism the sequence
    temporary = memory.temporary_peak_bytes / layout.tensor_parallel / layout.context_parallel
    # the allocator's fragmentation grows with what this GPU allocates and frees in a step,
    # not with the whole model's activations on one GPU (the profile's figure); never
    # negative: ``freed`` is at most the activations
    transient = activations + temporary + kv - freed
    return LayoutMemory(
        parameters_bytes=params,
        gradients_bytes=grads if trains else 0.0,
        optimizer_states_bytes=states if trains else 0.0,
        master_weights_bytes=master if trains else 0.0,
        gathered_parameters_bytes=gathered,
        activations_bytes=activations,
        kv_cache_bytes=kv,
        temporary_peak_bytes=temporary,
        runtime_overhead_bytes=runtime_overhead_bytes(transient),
        freed_before_peak_bytes=freed,
        cpu_bytes=cpu,
    )


def layouts_for(
    count: int,
    shape: ModelShape | None,
    gpus_per_node: int,
    seq_len: int | None,
    trains: bool,
    gradient_accumulation: int = 1,
) -> list[Layout]:
    """Every layout of ``count`` GPUs that keeps the rules: tensor parallel within a node
    (with sequence parallelism, as Megatron runs it), pipeline stages that divide the
    layers (or the layers with the embedding and the loss counted as two more, as Llama 3's
    126 layers make 128), context parallel for long sequences, data parallel over the rest;
    for training each ZeRO stage that shards something (none without data or context
    parallelism) and each kind of activation checkpointing."""
    out = []
    for t in _divisors(count):
        for p in _divisors(count // t):
            ends = shape is not None and shape.layers % p != 0 and (shape.layers + 2) % p == 0
            for c in _context_degrees(count // (t * p), seq_len, trains):
                d = count // (t * p * c)
                stages = (0, 1, 2, 3) if trains and d * c > 1 else (0,)
                kinds = CHECKPOINTING if trains else ("none",)
                for stage in stages:
                    for kind in kinds:
                        layout = Layout(
                            data_parallel=d,
                            tensor_parallel=t,
                            pipeline_parallel=p,
                            context_parallel=c,
                            zero_stage=stage,
                            sequence_parallel=t > 1,
                            activation_checkpointing=kind,
                            gradient_accumulation=max(gradient_accumulation, p),
                            ends_as_layers=ends,
                        )
                        try:
                            check(layout, shape, gpus_per_node, seq_len)
                        except LayoutError:
                            continue
                        out.append(layout)
    return out


LONG_SEQUENCE = 8192  # context parallelism is tried from this sequence length on


def _context_degrees(n: int, seq_len: int | None, trains: bool) -> list[int]:
    """Context-parallel degrees worth trying on ``n`` GPUs: 1, and for training on long
    sequences each power of two up to 16 that divides ``n``."""
    if not trains or not seq_len or seq_len < LONG_SEQUENCE:
        return [1]
    return [c for c in (1, 2, 4, 8, 16) if n % c == 0]


def smallest_fitting(
    memory: Memory,
    shape: ModelShape | None,
    capacity_bytes: float,
    gpus_per_node: int,
    seq_len: int | None,
    trains: bool,
    max_count: int,
) -> tuple[int, list[tuple[Layout, LayoutMemory]]] | None:
    """The fewest GPUs (1, 2, 4, ... up to ``max_count``) on which some layout fits
    ``capacity_bytes`` per GPU, and every layout that fits there (least memory first);
    None where none fits up to ``max_count``."""
    count = 1
    while count <= max_count:
        found = []
        for layout in layouts_for(count, shape, gpus_per_node, seq_len, trains):
            held = memory_per_gpu(memory, layout, shape, trains)
            if held.total_bytes <= capacity_bytes:
                found.append((layout, held))
        if found:
            found.sort(key=lambda pair: pair[1].total_bytes)
            return count, found
        count *= 2
    return None


def _divisors(n: int) -> list[int]:
    return [k for k in range(1, n + 1) if n % k == 0]
