"""Parallel layouts: the memory each GPU holds, checked against published figures, and the
rules a layout must keep."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from profiles.description import resolve
from profiles.model_catalog import Catalog
from profiles.profile import CONTEXT_BYTES, Memory, profile
from profiles.workload import WorkloadSchema
from service.engine.estimating.layout import LAYER_TOTAL, Layout, LayoutError, ModelShape, check
from service.engine.estimating.layout_memory import (
    activation_share,
    fused_memory,
    layouts_for,
    memory_per_gpu,
    smallest_fitting,
)

GB = 1e9
GIB = 2**30


def _zero_memory(parameters: float) -> Memory:
    """Mixed-precision Adam's model states as ZeRO counts them: 2 bytes of fp16 parameters
    and 2 of gradients per parameter, 12 of fp32 optimizer state (master weights 4, the two
    moments 8)."""
    return Memory(2 * parameters, 2 * parameters, 8 * parameters, 4 * parameters, 0, 0, 0, 0)


@pytest.mark.parametrize(
    ("stage", "published_gb"),
    [(0, 120.0), (1, 31.4), (2, 16.6), (3, 1.9)],
)
def test_zero_divides_the_model_states_as_the_paper_prints(stage: int, published_gb: float) -> None:
    """Rajbhandari et al. 2020 (ZeRO, Figure 1): a 7.5B-parameter model on 64 GPUs holds
    120, 31.4, 16.6 and 1.9 GB of model states per GPU at stages 0-3. Within 3%."""
    found = memory_per_gpu(_zero_memory(7.5e9), Layout(64, zero_stage=stage), None, True)
    assert found.model_states_bytes / GB == pytest.approx(published_gb, rel=0.03)


def test_korthikanti_activation_shares() -> None:
    """Korthikanti et al. 2022, eqs. 2-5 (no attention scores, flash attention): tensor
    parallelism t splits 24 of the 34 sbh per layer, sequence parallelism the other 10;
    a 1F1B pipeline's first stage holds p micro-batches of L/p layers; interleaving adds
    (p - 1) / (p v)."""
    assert activation_share(Layout(tensor_parallel=8)) == pytest.approx((10 + 24 / 8) / 34)
    assert activation_share(Layout(tensor_parallel=8, sequence_parallel=True)) == pytest.approx(
        1 / 8
    )
    pipeline = Layout(pipeline_parallel=4, gradient_accumulation=8)
    assert activation_share(pipeline) == pytest.approx(1.0)
    interleaved = Layout(pipeline_parallel=4, gradient_accumulation=8, virtual_stages=2)
    assert activation_share(interleaved) == pytest.approx(1 + 3 / 8)
    # as many micro-batches as stages: Megatron-LM runs every forward before any backward
    every = Layout(pipeline_parallel=4, gradient_accumulation=4, virtual_stages=2)
    assert activation_share(every) == pytest.approx(1.0)
    few = Layout(pipeline_parallel=4, gradient_accumulation=2)  # fewer micro-batches than p
    assert activation_share(few) == pytest.approx(2 / 4)
    full = Layout(tensor_parallel=4, sequence_parallel=True, activation_checkpointing="full")
    assert activation_share(full) == pytest.approx(2 / 4 / LAYER_TOTAL)
    assert activation_share(Layout(context_parallel=2)) == pytest.approx(0.5)


@pytest.fixture(scope="module")
def llama70b() -> dict[str, Any]:
    request = {
        "task": "training",
        "batch_size": 1,
        "seq_len": 4096,
        "precision": "bf16",
        "optimizer": "adamw",
    }
    model = resolve({"name": "llama-3-70b"}, Catalog.load())
    return profile(model, WorkloadSchema().load(request), 120.0).to_dict()


def test_llama_3_70b_training_fits_80_gb_only_sharded(llama70b: dict[str, Any]) -> None:
    """Llama 3 70B, bf16, AdamW, one 4,096-token sequence per GPU: plain data parallel on 8
    GPUs holds all 16 bytes per parameter on each (over 1 TB); FSDP (ZeRO-3) over 64 GPUs
    with full recomputation fits an 80 GB card, and so does tensor parallel 8 with a
    sharded optimizer over 8 more."""
    memory = Memory.from_dict(llama70b["memory"])
    shape = ModelShape.from_profile(llama70b)
    assert shape is not None
    assert (shape.layers, shape.heads, shape.kv_heads) == (80, 64, 8)
    plain = memory_per_gpu(memory, Layout(8), shape, True)
    assert plain.total_bytes > 1000 * GB
    fsdp = Layout(64, zero_stage=3, activation_checkpointing="full")
    sharded = memory_per_gpu(memory, fsdp, shape, True)
    assert sharded.total_bytes < 80 * GIB
    states = (
        memory.parameters_bytes
        + memory.gradients_bytes
        + memory.optimizer_states_bytes
        + memory.master_weights_bytes
    )
    assert sharded.model_states_bytes == pytest.approx(states / 64)
    assert sharded.gathered_parameters_bytes > 0  # the largest layer, gathered
    tensor = Layout(8, tensor_parallel=8, zero_stage=1, sequence_parallel=True,
                    activation_checkpointing="selective")  # fmt: skip
    found = memory_per_gpu(memory, tensor, shape, True)
    assert found.total_bytes < 80 * GIB
    assert found.activations_bytes == pytest.approx(memory.activations_bytes / 8)


def test_offloading_moves_the_optimizer_to_the_host(llama70b: dict[str, Any]) -> None:
    memory = Memory.from_dict(llama70b["memory"])
    shape = ModelShape.from_profile(llama70b)
    kept = memory_per_gpu(memory, Layout(16, zero_stage=3), shape, True)
    off = memory_per_gpu(memory, Layout(16, zero_stage=3, offload="optimizer"), shape, True)
    moved = kept.optimizer_states_bytes + kept.master_weights_bytes
    assert off.cpu_bytes == pytest.approx(moved)
    assert off.total_bytes == pytest.approx(kept.total_bytes - moved)


def test_the_kv_cache_splits_over_at_most_the_kv_heads() -> None:
    memory = Memory(0, 0, 0, 0, 0, 16 * GB, 0, 0)
    shape = ModelShape(80, 8192, 64, 8, 128256, 70e9)
    assert memory_per_gpu(memory, Layout(tensor_parallel=4), shape, False).kv_cache_bytes == (
        4 * GB
    )
    # 16 ranks, 8 KV heads: each head on two ranks
    found = memory_per_gpu(memory, Layout(tensor_parallel=16), shape, False)
    assert found.kv_cache_bytes == 2 * GB


LLAMA = ModelShape(80, 8192, 64, 8, 128256, 70e9)


@pytest.mark.parametrize(
    ("layout", "rule", "field"),
    [
        (Layout(tensor_parallel=6), "tensor-parallel-divides-heads", "layout.tensor_parallel"),
        (Layout(tensor_parallel=16), "tensor-parallel-in-node", "layout.tensor_parallel"),
        (Layout(pipeline_parallel=3), "pipeline-divides-layers", "layout.pipeline_parallel"),
        (
            Layout(sequence_parallel=True),
            "sequence-parallel-needs-tensor-parallel",
            "layout.sequence_parallel",
        ),
        (Layout(zero_stage=2, offload="parameters"), "offload-needs-zero-3", "layout.offload"),
        (Layout(offload="optimizer"), "offload-needs-zero", "layout.offload"),
        (Layout(zero_stage=4), "zero-stage", "layout.zero_stage"),
        (
            Layout(context_parallel=3),
            "context-parallel-divides-sequence",
            "layout.context_parallel",
        ),
        (Layout(data_parallel=0), "positive-degree", "layout.data_parallel"),
    ],
)
def test_a_layout_that_breaks_a_rule_is_refused_naming_it(
    layout: Layout, rule: str, field: str
) -> None:
    with pytest.raises(LayoutError) as raised:
        check(layout, LLAMA, gpus_per_node=8, seq_len=4096)
    assert raised.value.rule == rule
    assert raised.value.field == field
    assert f"rule {rule}" in raised.value.message


def test_a_valid_layout_passes() -> None:
    layout = Layout(8, tensor_parallel=8, pipeline_parallel=4, context_parallel=2,
                    zero_stage=1, sequence_parallel=True, gradient_accumulation=16)  # fmt: skip
    check(layout, LLAMA, gpus_per_node=8, seq_len=8192)
    assert layout.gpus == 512
    assert layout.global_batch == 128


def test_model_parallel_needs_a_transformer() -> None:
    with pytest.raises(LayoutError) as raised:
        check(Layout(tensor_parallel=2), None, gpus_per_node=8, seq_len=None)
    assert raised.value.rule == "model-parallel-needs-transformer"


def test_llama_3_70b_fine_tuning_is_planned_on_the_fewest_80_gb_gpus(
    llama70b: dict[str, Any],
) -> None:
    """Full fine-tuning of Llama 3 70B in bf16 with AdamW on 80 GB cards (8 per node): no
    layout of 8 GPUs holds its 1.1 TB of model states; 16 do, sharded or split, and every
    layout named there fits with what it holds per GPU."""
    memory = Memory.from_dict(llama70b["memory"])
    shape = ModelShape.from_profile(llama70b)
    usable = 80 * GIB * 0.985
    found = smallest_fitting(memory, shape, usable, 8, 4096, True, 256)
    assert found is not None
    count, layouts = found
    assert count == 16
    assert all(m.total_bytes <= usable for _, m in layouts)
    assert all(layout.gpus == 16 for layout, _ in layouts)
    # every fitting layout shards the model states, or splits them at least 8 ways
    assert all(layout.zero_stage >= 1 or layout.model_parallel >= 8 for layout, _ in layouts)


def test_every_layout_listed_keeps_the_rules() -> None:
    found = layouts_for(16, LLAMA, 8, 4096, True)
    assert found
    for layout in found:
        check(layout, LLAMA, 8, 4096)
        assert layout.gpus == 16
    assert {layout.tensor_parallel for layout in found} == {1, 2, 4, 8}
    assert not any(layout.zero_stage and layout.data_parallel == 1 for layout in found)


def test_fragmentation_follows_what_each_gpu_allocates(llama70b: dict[str, Any]) -> None:
    """The allocator's fragmentation (10%) is counted on what a GPU itself holds of the
    step's transient memory at its peak (activations, temporaries and KV cache, less what
    the backward has freed), not on the whole model's on one GPU: recomputation, which
    keeps a layer's input instead of its activations, cuts it tenfold."""
    memory = Memory.from_dict(llama70b["memory"])
    shape = ModelShape.from_profile(llama70b)
    overheads = {}
    for checkpointing in ("none", "full"):
        layout = Layout(16, zero_stage=3, activation_checkpointing=checkpointing)
        held = memory_per_gpu(memory, layout, shape, True)
        transient = (
            held.activations_bytes
            + held.temporary_peak_bytes
            + held.kv_cache_bytes
            - held.freed_before_peak_bytes
        )
        assert held.runtime_overhead_bytes == pytest.approx(CONTEXT_BYTES + 0.1 * transient)
        overheads[checkpointing] = held.runtime_overhead_bytes
    assert overheads["full"] < overheads["none"] / 10


GPT3 = ModelShape(96, 12288, 96, 96, 50257, 175e9, final_norm=False, lm_head=False)
LLAMA_405B = ModelShape(126, 16384, 128, 8, 128256, 405e9, ffn=53248, gated=True,
                        final_norm=False, lm_head=False, fused=True)  # fmt: skip


def test_fused_activations_follow_korthikanti_for_the_model_widths() -> None:
    """Korthikanti et al. 2022, eq. 2: GPT-3's layer keeps 34 sbh bytes, two of them dropout
    masks (none here): 32. Llama 3 405B (GQA with 8 of 128 heads, a gated MLP 3.25 h wide):
    4 (norms) + 2 + 2 + 0.25 + 2 (attention) + 2 + 13 + 6.5 (MLP) = 31.75. The final norm and
    the loss's fp32 probabilities come on top of the layers."""
    assert GPT3.fused_activation_sbh() == pytest.approx(96 * 32)
    assert LLAMA_405B.fused_activation_sbh() == pytest.approx(126 * 31.75)
    with_head = ModelShape(126, 16384, 128, 8, 128256, 405e9, ffn=53248, gated=True)
    assert with_head.fused_activation_sbh() == pytest.approx(126 * 31.75 + 4 + 4 * 128256 / 16384)


def test_a_fused_stack_keeps_fewer_of_llama_activations(llama70b: dict[str, Any]) -> None:
    """Eager PyTorch keeps an fp32 copy in each RMSNorm and SiLU's output beside the gate's
    (what the profile counts); the fused stack's count replaces it, and what backward frees
    before the peak shrinks with it. A model the count does not cover keeps the profile's."""
    memory = Memory.from_dict(llama70b["memory"])
    shape = ModelShape.from_profile(llama70b)
    assert shape is not None
    assert shape.fused
    tokens, h = 4096, shape.hidden
    fused = fused_memory(memory, shape, tokens, "bf16")
    assert fused.activations_bytes == pytest.approx(shape.fused_activation_sbh() * tokens * h)
    eager_per_layer = memory.activations_bytes / (tokens * h * shape.layers)
    assert 36 < eager_per_layer < 42
    assert fused.activations_bytes < 0.85 * memory.activations_bytes
    assert fused.freed_before_peak_bytes < memory.freed_before_peak_bytes
    assert fused.parameters_bytes == memory.parameters_bytes
    fp32 = fused_memory(memory, shape, tokens, "fp32")
    assert fp32.activations_bytes == pytest.approx(2 * fused.activations_bytes)
    assert fused_memory(memory, LLAMA, tokens, "bf16") is memory  # not fused: unchanged


def test_the_pipeline_ends_can_count_the_embedding_and_loss_as_layers() -> None:
    """Llama 3 405B's 126 layers with the embedding and the loss make 128: 16 stages of 8
    virtual stages take one each, the first stage then holding 7 layers rather than 7.875.
    Without counting the ends, 126 layers do not divide into 128 virtual stages."""
    layout = Layout(64, tensor_parallel=8, pipeline_parallel=16, virtual_stages=8,
                    sequence_parallel=True, gradient_accumulation=32,
                    ends_as_layers=True)  # fmt: skip
    check(layout, LLAMA_405B, gpus_per_node=8, seq_len=8192)
    with pytest.raises(LayoutError) as raised:
        check(replace(layout, ends_as_layers=False), LLAMA_405B, 8, 8192)
    assert raised.value.rule == "pipeline-divides-layers"
    with pytest.raises(LayoutError) as raised:
        check(Layout(ends_as_layers=True), LLAMA_405B, 8, 8192)
    assert raised.value.rule == "ends-as-layers-needs-pipeline"
    memory = Memory(0, 0, 0, 0, 100 * GB, 0, 0, 0)
    short = memory_per_gpu(memory, layout, LLAMA_405B, True).activations_bytes
    even = memory_per_gpu(memory, replace(layout, ends_as_layers=False), LLAMA_405B, True)
    assert short == pytest.approx(even.activations_bytes * 7 / 7.875)


def test_the_planner_counts_the_ends_where_only_that_divides_the_layers() -> None:
    """126 layers take no pipeline of 4, 8 or 16 stages; with the embedding and the loss
    counted (128) they do, and the planner lists those layouts, each keeping the rules."""
    found = layouts_for(128, LLAMA_405B, 8, 8192, True)
    ends = {x.pipeline_parallel for x in found if x.ends_as_layers}
    assert {4, 8, 16} <= ends
    assert not any(x.ends_as_layers for x in found if 126 % x.pipeline_parallel == 0)
    for layout in found:
        check(layout, LLAMA_405B, 8, 8192)


def test_context_parallelism_splits_the_transient_buffers() -> None:
    """The logits and attention's workspace grow with the tokens a GPU handles: context
    parallelism over 16 GPUs leaves each a sixteenth, as tensor parallelism splits them."""
    memory = Memory(0, 0, 0, 0, 0, 0, 32 * GB, 0)
    layout = Layout(tensor_parallel=2, context_parallel=16)
    assert memory_per_gpu(memory, layout, LLAMA, True).temporary_peak_bytes == pytest.approx(GB)


def test_checkpointing_the_layers_leaves_what_lies_beyond_them_whole() -> None:
    """Full checkpointing keeps each layer's input, not what lies beyond the layers (the
    loss's log-probabilities over the vocabulary): that part stays whole, split only by
    tensor parallelism's vocabulary and context parallelism's tokens. torchtitan's Llama 3.1
    8B at 32k tokens a GPU reserved 84 GiB with it; without it the estimate was 18 GiB short."""
    head, layers = 16 * GB, 64 * GB
    memory = Memory(0, 0, 0, 0, layers + head, 0, 0, 0)
    for layout in (Layout(activation_checkpointing="full"),
                   Layout(tensor_parallel=4, context_parallel=2, sequence_parallel=True,
                          activation_checkpointing="full")):  # fmt: skip
        t, c = layout.tensor_parallel, layout.context_parallel
        without = memory_per_gpu(memory, layout, LLAMA, True).activations_bytes
        kept = memory_per_gpu(memory, layout, LLAMA, True, head_activations=head)
        share = activation_share(layout, LLAMA.layers)
        recomputed = (
            activation_share(replace(layout, activation_checkpointing="none"), LLAMA.layers)
            / LLAMA.layers
        )  # one layer recomputed at a time
        assert kept.activations_bytes == pytest.approx(
            layers * (share + recomputed) + head / (t * c)
        )
        assert kept.activations_bytes > without
    # with nothing checkpointed the head is kept either way (tensor parallelism splits it)
    plain = Layout(tensor_parallel=2)
    assert (
        memory_per_gpu(memory, plain, LLAMA, True, head_activations=head).activations_bytes
        <= memory_per_gpu(memory, plain, LLAMA, True).activations_bytes
    )
