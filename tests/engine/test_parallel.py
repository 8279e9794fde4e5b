"""The planner's search for the fastest fitting layout, against timing every layout; the
step's data-parallel traffic and host time."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from knowledge import Knowledge
from profiles.description import resolve
from profiles.model_catalog import Catalog
from profiles.profile import profile
from profiles.workload import WorkloadSchema
from service.engine.errors import InvalidRequest
from service.engine.estimating import scaling
from service.engine.estimating.estimate import USABLE_MEMORY_SHARE
from service.engine.estimating.layout import Layout, ModelShape
from service.engine.estimating.model import PerformanceModel
from service.engine.estimating.roofline import math_mode
from service.engine.estimating.scaling import DEFAULT
from service.engine.estimating.software import (
    LOSS_BYTES,
    LOSS_SHARE,
    OPTIMIZED,
    Stack,
    native_attention,
)
from service.engine.estimating.step_profile import StepProfile
from service.engine.planning.collectives import OVERLAP_SLOWDOWN
from service.engine.planning.network import network
from service.engine.planning.search import fastest_fitting, planned_at, sized_at
from service.engine.planning.step_time import LayoutStep, layout_step
from service.engine.planning.work import model_flops, stacked, work
from tests.stacks import shipped


@pytest.fixture(scope="module")
def llama8b(catalog: Catalog) -> dict[str, Any]:
    request = {"task": "training", "batch_size": 1, "seq_len": 4096, "precision": "bf16",
               "optimizer": "adamw"}  # fmt: skip
    return profile(resolve({"name": "llama-3-8b"}, catalog), WorkloadSchema().load(request),
                   120.0).to_dict()  # fmt: skip


@pytest.mark.parametrize("stack", ["pytorch", "optimized"])
@pytest.mark.slow  # every layout timed
def test_the_bounded_search_finds_what_timing_every_layout_finds(
    llama8b: dict[str, Any], model: PerformanceModel, knowledge: Knowledge, stack: str
) -> None:
    """On every GPU of the catalog at 1-64 GPUs, the layout (and its step) the pruned search
    returns is the first fitting one of the full ranking, and none where none fits."""
    step_profile = StepProfile.from_profile(llama8b)
    shape = ModelShape.from_profile(llama8b)
    compared = found = 0
    for gpu in knowledge.gpus.values():
        try:
            mode = math_mode(gpu, "bf16")
        except InvalidRequest:
            continue
        done = work(step_profile, gpu, mode, shipped(stack), model.step_model)
        net = network(knowledge, gpu, 8)
        usable = gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE
        for count in (1, 2, 4, 8, 16, 32, 64):
            every = [x for x in planned_at(count, step_profile, shape, done, net, mode, usable)
                     if x.fits]  # fmt: skip
            sized = sized_at(count, step_profile, shape, 8)
            fastest = fastest_fitting(step_profile, shape, done, net, mode, usable, sized)
            compared += 1
            if not every:
                assert fastest is None
                continue
            found += 1
            assert fastest is not None
            assert fastest.layout == every[0].layout
            assert fastest.step.step_s == every[0].step.step_s
    assert compared >= 100
    assert found >= compared / 2


def _h100_step(
    llama8b: dict[str, Any], model: PerformanceModel, knowledge: Knowledge, layout: Layout,
    stack: Stack | str = "optimized",
) -> LayoutStep:  # fmt: skip
    gpu = knowledge.gpu("H100 SXM5 80GB")
    step_profile = StepProfile.from_profile(llama8b)
    mode = math_mode(gpu, "bf16")
    done = work(step_profile, gpu, mode, shipped(stack) if isinstance(stack, str) else stack,
                model.step_model)  # fmt: skip
    shape = ModelShape.from_profile(llama8b)
    net = network(knowledge, gpu, 8)
    return layout_step(layout, step_profile, shape, done, net, mode.tensor_flops,
                       model_flops(step_profile))  # fmt: skip


def test_hidden_data_parallel_traffic_still_slows_the_computation_it_overlaps(
    llama8b: dict[str, Any], model: PerformanceModel, knowledge: Knowledge
) -> None:
    """FSDP over 8 H100s on NVSwitch: the gathers and scatters hide behind the micro-batches,
    and the step pays OVERLAP_SLOWDOWN of their time (the collectives' SMs and bandwidth);
    one all-gather per layer in the forward and the backward and one reduce-scatter, each
    paying the ring's latency, rather than DDP's gradient buckets."""
    layout = Layout(data_parallel=8, zero_stage=3, micro_batch_size=1, gradient_accumulation=4)
    step = _h100_step(llama8b, model, knowledge, layout)
    (data,) = [u for u in step.links if u.group == "data"]
    assert 0 < data.time_s < data.window_s  # hidden
    assert step.data_parallel_s == pytest.approx(OVERLAP_SLOWDOWN * data.time_s)
    link = data.link
    bandwidth_s = data.bytes_per_step / (link.bandwidth_gb_per_s * 1e9 * DEFAULT.bandwidth_share)
    latency_s = data.time_s - bandwidth_s
    assert latency_s == pytest.approx(4 * 3 * 32 * 7 * link.latency_us * 1e-6)


def test_the_optimized_stack_pays_its_host_time_once_per_optimizer_step(
    llama8b: dict[str, Any], model: PerformanceModel, knowledge: Knowledge
) -> None:
    """A framework's time per step (logging, the loss's synchronisation, the data loader)
    does not shrink with more micro-batches: it is paid once per optimizer step."""
    # llm-foundry's, as fitted on its one-micro-batch steps (the Megatron stack's own fit
    # finds none: NeMo's steps are of many micro-batches)
    stack = replace(shipped("optimized"), compute=OPTIMIZED)
    one = _h100_step(llama8b, model, knowledge, Layout(gradient_accumulation=1), stack)
    four = _h100_step(llama8b, model, knowledge, Layout(gradient_accumulation=4), stack)
    host = OPTIMIZED.host_s
    assert host > 0
    assert one.host_s == four.host_s == pytest.approx(host)
    assert four.step_s - one.step_s == pytest.approx(3 * one.compute_s)


def test_only_a_training_step_on_the_optimized_stack_keeps_fused_activations(
    llama8b: dict[str, Any], catalog: Catalog
) -> None:
    """The optimized stack's Llama 3 8B step keeps Korthikanti's count for its widths, less
    than eager PyTorch's saved tensors; the pytorch stack and inference keep the profile's
    count (the pytorch stack marks what of it lies beyond the layers: the final norm's
    values and the fp32 log-probabilities over the vocabulary); LoRA (whose frozen layers
    keep other tensors) keeps the profile's count less only what the fused loss does not
    hold."""
    found = StepProfile.from_profile(llama8b)
    shape = ModelShape.from_profile(llama8b)
    fused = stacked(found, shape, shipped("optimized"))
    assert fused.memory.activations_bytes < 0.85 * found.memory.activations_bytes
    assert fused.mix is found.mix
    eager = stacked(found, shape, shipped("pytorch"))
    assert eager.memory is found.memory
    assert eager.mix is found.mix
    assert eager.head_activations_bytes == 4096 * (4 * 4096 + 4 * 128256)
    # the fused loss keeps its 16-bit gradient over the logits, not fp32 log-probabilities
    assert fused.head_activations_bytes == 4096 * (4 * 4096 + 2 * 128256)
    model = resolve({"name": "llama-3-8b"}, catalog)
    for request in (
        {"task": "inference", "batch_size": 1, "prompt_tokens": 512, "output_tokens": 64},
        {"task": "fine-tuning", "method": "lora", "batch_size": 1, "seq_len": 4096},
    ):
        other = profile(model, WorkloadSchema().load(request), 120.0).to_dict()
        kept = StepProfile.from_profile(other)
        held = stacked(kept, ModelShape.from_profile(other), shipped("optimized"))
        if not kept.trains:
            assert held is kept
            continue
        loss = (1 - LOSS_SHARE["fused"]) * LOSS_BYTES * 4096 * 128256
        assert held.memory.activations_bytes <= kept.memory.activations_bytes
        assert kept.memory.total_bytes - held.memory.total_bytes == pytest.approx(loss)


def test_attention_runs_faster_only_on_gpus_with_asynchronous_tensor_cores(
    llama8b: dict[str, Any], model: PerformanceModel, knowledge: Knowledge
) -> None:
    """FlashAttention-3 and cuDNN's fused attention need Hopper's (or data-centre
    Blackwell's) asynchronous tensor-core instructions: the H100, H200 and B200 get them, the
    A100, L40S and the GeForce Blackwell parts run FlashAttention-2's rate. On the H100 only
    attention speeds up: the step falls by at most attention's share of it."""
    gpus = knowledge.gpus
    assert all(
        native_attention(gpus[g]) for g in ("h100-sxm-80gb", "h200-sxm-141gb", "b200-sxm-180gb")
    )
    assert not any(native_attention(gpus[g]) for g in ("a100-sxm4-80gb", "l40s"))
    geforce = [g for g in gpus.values() if (g.compute_capability or "").startswith("12.")]
    assert geforce
    assert not any(native_attention(g) for g in geforce)
    assert not any(native_attention(g) for g in gpus.values() if g.vendor != "nvidia")
    step = StepProfile.from_profile(llama8b)
    fused = shipped("optimized").compute
    flash2 = replace(fused, native_attention_speedup=1.0)
    for gid, faster in (("h100-sxm-80gb", True), ("a100-sxm4-80gb", False)):
        gpu = gpus[gid]
        mode = math_mode(gpu, "bf16")
        native = work(step, gpu, mode, shipped("optimized"), model.step_model, optimized=fused)
        fa2 = work(step, gpu, mode, shipped("optimized"), model.step_model, optimized=flash2)
        if not faster:
            assert native == fa2
            continue
        attention = sum(
            step.mix.work.get((p, "attention"), (0.0, 0.0))[0] for p in ("forward", "backward")
        )
        at_fa2 = attention / mode.tensor_flops / fused.attention_share / fused.efficiency_16bit
        saved = (fa2.forward_s + fa2.backward_s) - (native.forward_s + native.backward_s)
        assert saved == pytest.approx(at_fa2 * (1 - 1 / fused.native_attention_speedup))


def test_a_ring_of_point_to_point_sends_hides_context_parallel_traffic(
    catalog: Catalog, model: PerformanceModel, knowledge: Knowledge
) -> None:
    """Llama 3 8B at 64k tokens over 8 H100s, context parallel 8: Megatron's ring passes the
    keys and values behind the attention, paying OVERLAP_SLOWDOWN of their time; torchtitan's
    (PyTorch's context_parallel, all-gather first) waits on all of it."""
    request = {"task": "training", "batch_size": 1, "seq_len": 65536, "precision": "bf16"}
    found = profile(resolve({"name": "llama-3-8b"}, catalog), WorkloadSchema().load(request),
                    120.0).to_dict()  # fmt: skip
    gpu = knowledge.gpu("H100 SXM5 80GB")
    shape = ModelShape.from_profile(found)
    mode = math_mode(gpu, "bf16")
    net = network(knowledge, gpu, 8)
    layout = Layout(context_parallel=8, zero_stage=3, activation_checkpointing="full")
    steps = {}
    for name in ("megatron-te", "torchtitan"):
        stack = shipped(name)
        step_profile = stacked(StepProfile.from_profile(found), shape, stack)
        done = work(step_profile, gpu, mode, stack, model.step_model)
        steps[name] = layout_step(layout, step_profile, shape, done, net, mode.tensor_flops,
                                  model_flops(step_profile))  # fmt: skip
    ring = next(u for u in steps["megatron-te"].links if u.group == "context")
    gathered = next(u for u in steps["torchtitan"].links if u.group == "context")
    assert ring.bytes_per_step == gathered.bytes_per_step > 0
    assert 0 < ring.time_s < ring.window_s
    assert ring.exposed_s == pytest.approx(OVERLAP_SLOWDOWN * ring.time_s)
    assert gathered.exposed_s == gathered.time_s
    assert steps["megatron-te"].context_parallel_s < steps["torchtitan"].context_parallel_s


def test_a_gb200_nvl72_rack_is_one_nvlink_domain(knowledge: Knowledge) -> None:
    """GB200 NVL72 joins its 72 GPUs over NVLink 5 switches: a 64-GPU job never crosses
    InfiniBand, and even a 4-GPU tray talks over NVLink, not PCIe; past 72 the network joins
    in. An 8-GPU HGX H100 server stays 8."""
    gb200 = knowledge.gpu("gb200-186gb")
    assert scaling.domain(gb200) == 72
    assert scaling.domain(knowledge.gpu("h100-sxm-80gb")) == scaling.GPUS_PER_NODE == 8
    for count in (4, 64, 72):
        link = scaling.link_for(knowledge, gb200, count)
        assert link.id.endswith(("nvlink5", "nvlink-5")), (count, link.id)
        assert link.bandwidth_gb_per_s == gb200.nvlink_bandwidth_gb_per_s / 2
    beyond = scaling.link_for(knowledge, gb200, 144)
    assert "infiniband" in beyond.id
    net = network(knowledge, gb200, scaling.domain(gb200))
    assert net.gpus_per_node == 72
    assert net.intra.id == "nvswitch-nvlink5"


def test_a_stack_is_planned_and_advised_only_on_the_layouts_it_runs(
    llama8b: dict[str, Any], model: PerformanceModel, knowledge: Knowledge
) -> None:
    """Transformers' Trainer splits data only: its sized layouts over 8 GPUs are all data
    parallel, torchtitan's include tensor parallel ones; on a tensor-parallel layout the
    switch-stack advice names only a stack that runs it."""
    from service.engine.deciding import stack_advice
    from service.engine.estimating import software as stacks
    from service.engine.planning.search import unsupported

    found = StepProfile.from_profile(llama8b)
    shape = ModelShape.from_profile(llama8b)
    plain = stacked(found, shape, shipped("hf-transformers"))
    titan = stacked(found, shape, shipped("torchtitan"))
    assert plain.parallelism == ("data",)
    assert all(unsupported(x, plain.parallelism) is None for x, _ in sized_at(8, plain, shape, 8))
    assert all(x.tensor_parallel == 1 for x, _ in sized_at(8, plain, shape, 8))
    assert any(x.tensor_parallel > 1 for x, _ in sized_at(8, titan, shape, 8))
    gpu = knowledge.gpus["h100-sxm-80gb"]
    layout = Layout(data_parallel=2, tensor_parallel=4, sequence_parallel=True, zero_stage=1)
    usable = gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE
    current = stacks.resolve(knowledge, "torchtitan")
    switch = stack_advice.faster_stack(
        knowledge, model.step_model, current, found, shape, gpu, layout,
        network(knowledge, gpu, 8), usable,
    )  # fmt: skip
    assert switch is not None
    assert "tensor" in switch.stack.get("parallelism")
