"""The planner's search for the fastest fitting layout, against timing every layout; the
step's data-parallel traffic and host time."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from knowledge import Knowledge
from profiles.catalog import Catalog
from profiles.description import resolve
from profiles.profile import profile
from profiles.workload import WorkloadSchema
from service.engine.errors import InvalidRequest
from service.engine.estimate import USABLE_MEMORY_SHARE
from service.engine.layout import Layout, ModelShape
from service.engine.model import PerformanceModel
from service.engine.parallel import (
    OVERLAP_SLOWDOWN,
    LayoutStep,
    fastest_fitting,
    layout_step,
    model_flops,
    native_attention,
    network,
    planned_at,
    sized_at,
    stacked,
    work,
)
from service.engine.roofline import math_mode
from service.engine.scaling import DEFAULT
from service.engine.stacks import LOSS_BYTES, LOSS_SHARE, as_stack
from service.engine.step_profile import StepProfile


@pytest.fixture(scope="module")
def llama8b(catalog: Catalog) -> dict[str, Any]:
    request = {"task": "training", "batch_size": 1, "seq_len": 4096, "precision": "bf16",
               "optimizer": "adamw"}  # fmt: skip
    return profile(resolve({"name": "llama-3-8b"}, catalog), WorkloadSchema().load(request),
                   120.0).to_dict()  # fmt: skip


@pytest.mark.parametrize("stack", ["pytorch", "optimized"])
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
        done = work(step_profile, gpu, mode, stack, model.step_model)
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
    stack: str = "optimized",
) -> LayoutStep:  # fmt: skip
    gpu = knowledge.gpu("H100 SXM5 80GB")
    step_profile = StepProfile.from_profile(llama8b)
    mode = math_mode(gpu, "bf16")
    done = work(step_profile, gpu, mode, stack, model.step_model)
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
    one = _h100_step(llama8b, model, knowledge, Layout(gradient_accumulation=1))
    four = _h100_step(llama8b, model, knowledge, Layout(gradient_accumulation=4))
    host = as_stack("optimized").compute.host_s  # Megatron's, as fitted
    assert host > 0
    assert one.host_s == four.host_s == pytest.approx(host)
    assert four.step_s - one.step_s == pytest.approx(3 * one.compute_s)


def test_only_a_training_step_on_the_optimized_stack_keeps_fused_activations(
    llama8b: dict[str, Any], catalog: Catalog
) -> None:
    """The optimized stack's Llama 3 8B step keeps Korthikanti's count for its widths, less
    than eager PyTorch's saved tensors; the pytorch stack and inference keep the profile's
    count; LoRA (whose frozen layers keep other tensors) keeps the profile's count less
    only what the fused loss does not hold."""
    found = StepProfile.from_profile(llama8b)
    shape = ModelShape.from_profile(llama8b)
    fused = stacked(found, shape, "optimized")
    assert fused.memory.activations_bytes < 0.85 * found.memory.activations_bytes
    assert fused.mix is found.mix
    assert stacked(found, shape, "pytorch") is found
    model = resolve({"name": "llama-3-8b"}, catalog)
    for request in (
        {"task": "inference", "batch_size": 1, "prompt_tokens": 512, "output_tokens": 64},
        {"task": "fine-tuning", "method": "lora", "batch_size": 1, "seq_len": 4096},
    ):
        other = profile(model, WorkloadSchema().load(request), 120.0).to_dict()
        kept = StepProfile.from_profile(other)
        held = stacked(kept, ModelShape.from_profile(other), "optimized")
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
    fused = as_stack("optimized").compute
    flash2 = replace(fused, native_attention_speedup=1.0)
    for gid, faster in (("h100-sxm-80gb", True), ("a100-sxm4-80gb", False)):
        gpu = gpus[gid]
        mode = math_mode(gpu, "bf16")
        native = work(step, gpu, mode, "optimized", model.step_model, optimized=fused)
        fa2 = work(step, gpu, mode, "optimized", model.step_model, optimized=flash2)
        if not faster:
            assert native == fa2
            continue
        attention = sum(
            step.mix.work.get((p, "attention"), (0.0, 0.0))[0] for p in ("forward", "backward")
        )
        at_fa2 = attention / mode.tensor_flops / fused.attention_share / fused.efficiency_16bit
        saved = (fa2.forward_s + fa2.backward_s) - (native.forward_s + native.backward_s)
        assert saved == pytest.approx(at_fa2 * (1 - 1 / fused.native_attention_speedup))
