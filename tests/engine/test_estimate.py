"""Estimates for every catalog model on every GPU, the parts no GPU shortens, the bounds."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import pytest

from knowledge import Knowledge
from knowledge.records import Gpu
from profiles.description import resolve
from profiles.model_catalog import Catalog
from profiles.profile import profile
from profiles.workload import WorkloadSchema
from service.engine.errors import EngineError, UnsupportedPrecision
from service.engine.estimating import step_model
from service.engine.estimating.ceiling import InputCeiling
from service.engine.estimating.estimate import Estimate, EstimateInput, estimate
from service.engine.estimating.model import PerformanceModel
from service.engine.estimating.roofline import usable_precisions
from service.engine.estimating.step_profile import StepProfile

BOUNDS = {"compute", "memory_bandwidth", "kernel_launches", "host", "communication", "input"}


def _profile(catalog: Catalog, name: str, **workload: Any) -> StepProfile:
    request = {"batch_size": 1, **workload}
    counted = profile(resolve({"name": name}, catalog), WorkloadSchema().load(request), 120)
    return StepProfile.from_profile(counted.to_dict())


def _workload(catalog: Catalog, name: str, task: str) -> dict[str, Any]:
    """A small workload every model takes: token models get a length, vision models none."""
    workload: dict[str, Any] = {"task": task, "precision": "bf16"}
    resolved = catalog.resolve(name)
    if resolved.family == "transformer":
        if task == "training":
            workload["seq_len"] = 128
        else:
            workload["prompt_tokens"] = 128
            if resolved.spec.head == "lm":
                workload["output_tokens"] = 16
    return workload


def _check(result: Estimate, label: str) -> None:
    step = result.step_time_s
    assert math.isfinite(step), label
    assert step > 0, label
    assert result.interval.low < step < result.interval.high, label
    assert result.bound in BOUNDS, label
    assert result.samples_per_s is not None, label
    assert result.samples_per_s > 0, label
    assert result.memory is not None, label
    assert isinstance(result.memory.fits, bool), label
    assert result.memory.required_bytes > 0, label


def _faster(gpu: Gpu, factor: float) -> Gpu:
    """The same GPU with every rate, its bandwidth and its SMs ``factor`` times larger."""

    def times(value: float | None) -> float | None:
        return None if value is None else value * factor

    return dataclasses.replace(
        gpu,
        id=f"{gpu.id}-x{factor:g}",
        fp32_tflops=gpu.fp32_tflops * factor,
        tf32_tflops=times(gpu.tf32_tflops),
        bf16_tflops=times(gpu.bf16_tflops),
        fp16_tflops=times(gpu.fp16_tflops),
        fp8_tflops=times(gpu.fp8_tflops),
        memory_bandwidth_gb_per_s=gpu.memory_bandwidth_gb_per_s * factor,
        sm_count=round(gpu.sm_count * factor),
    )


@pytest.mark.slow  # every catalog model on every GPU
class TestEveryModelEveryGpu:
    @pytest.mark.parametrize("task", ["training", "inference"])
    def test_returns_or_fails_cleanly(
        self, knowledge: Knowledge, catalog: Catalog, model: PerformanceModel, task: str
    ) -> None:
        """3,000+ estimates per task in bf16: each one is a finite, bracketed estimate, or
        (on GPUs without bf16) an UnsupportedPrecision naming what the GPU supports (the
        API's 422); nothing else."""
        without = {g.id for g in knowledge.gpus.values() if "bf16" not in usable_precisions(g)}
        assert 0 < len(without) < len(knowledge.gpus) / 2
        for name in sorted(catalog.entries):
            p = _profile(catalog, name, **_workload(catalog, name, task))
            for gpu in knowledge.gpus.values():
                label = f"{name} {task} on {gpu.id}"
                request = EstimateInput(p, gpu)
                if gpu.id in without:
                    with pytest.raises(UnsupportedPrecision, match="fp16") as raised:
                        estimate(request, model, knowledge)
                    assert raised.value.field == "workload.precision"
                    assert isinstance(raised.value, EngineError)
                    continue
                _check(estimate(request, model, knowledge), label)

    def test_a_multi_gpu_estimate_on_every_gpu(
        self, knowledge: Knowledge, catalog: Catalog, model: PerformanceModel
    ) -> None:
        p = _profile(catalog, "llama-2-7b", task="training", precision="fp16", seq_len=2048)
        for gpu in knowledge.gpus.values():
            if "fp16" not in usable_precisions(gpu):
                continue
            for count in (2, 8, 16):
                result = estimate(EstimateInput(p, gpu, count), model, knowledge)
                _check(result, f"{gpu.id} x{count}")
                assert result.breakdown is not None
                assert result.breakdown.allreduce_s > 0


class TestWhatNoGpuShortens:
    def test_a_host_bound_workload_barely_gains_from_a_gpu_twice_as_fast(
        self, knowledge: Knowledge, catalog: Catalog, model: PerformanceModel
    ) -> None:
        """Tacotron 2 at batch 48 steps its decoder frame by frame: its step is host time, so a GPU
        with twice every rate, bandwidth and SM count is less than 1.2x faster, and the
        bound names the host."""
        p = _profile(catalog, "tacotron2", task="training", precision="fp16", batch_size=48)
        h100 = knowledge.gpus["h100-sxm-80gb"]
        base = estimate(EstimateInput(p, h100), model, knowledge)
        fast = estimate(EstimateInput(p, _faster(h100, 2.0)), model, knowledge)
        assert base.known_workload == fast.known_workload == "tacotron2-ljspeech"
        assert 1.0 < base.step_time_s / fast.step_time_s < 1.2
        assert fast.bound in {"host", "kernel_launches"}
        assert fast.breakdown is not None
        assert fast.breakdown.host_s + fast.breakdown.launch_s > fast.breakdown.gpu_s
        assert any("does not speed up with the GPU" in a for a in fast.assumptions)

    def test_an_input_bound_workload_names_the_input(
        self, knowledge: Knowledge, catalog: Catalog, model: PerformanceModel
    ) -> None:
        """ResNet-50 with a host that decodes 500 images/s per GPU: the input binds on an
        H100 and on a GPU twice as fast alike; without the ceiling it does not."""
        p = _profile(catalog, "resnet-50", task="training", precision="fp16", batch_size=256)
        ceiling = InputCeiling(500.0, "request", "input_samples_per_s")
        h100 = knowledge.gpus["h100-sxm-80gb"]
        slow = estimate(EstimateInput(p, h100, ceiling=ceiling), model, knowledge)
        fast = estimate(EstimateInput(p, _faster(h100, 2.0), ceiling=ceiling), model, knowledge)
        assert slow.bound == fast.bound == "input"
        assert slow.samples_per_s == pytest.approx(500.0)
        assert fast.samples_per_s == pytest.approx(500.0)
        assert fast.breakdown is not None
        assert fast.breakdown.input_wait_s > 0
        assert any("faster GPU buys nothing" in a for a in slow.assumptions)
        free = estimate(EstimateInput(p, h100), model, knowledge)
        assert free.bound != "input"
        assert free.samples_per_s is not None
        assert free.samples_per_s > 500.0

    def test_the_gpu_part_shrinks_and_the_fixed_part_stays(
        self, knowledge: Knowledge, catalog: Catalog, model: PerformanceModel
    ) -> None:
        p = _profile(catalog, "bert-large", task="fine-tuning", precision="fp16", batch_size=32,
                     seq_len=384)  # fmt: skip
        a100 = knowledge.gpus["a100-sxm4-80gb"]
        slow = estimate(EstimateInput(p, a100), model, knowledge).breakdown
        fast = estimate(EstimateInput(p, _faster(a100, 4.0)), model, knowledge).breakdown
        assert slow is not None
        assert fast is not None
        assert fast.gpu_s < slow.gpu_s / 2
        fixed = ("launch_s", "host_s", "input_s")
        assert sum(getattr(fast, f) for f in fixed) == pytest.approx(
            sum(getattr(slow, f) for f in fixed)
        )
        assert fast.single_gpu_step_s == pytest.approx(
            fast.gpu_s + sum(getattr(fast, f) for f in fixed)
        )

    def test_bandwidth_beyond_what_any_gpu_has_shown_usable_is_not_counted_on(
        self, knowledge: Knowledge, model: PerformanceModel
    ) -> None:
        """An H200 (an H100's SMs with 1.4x its bandwidth) was measured to use its bandwidth;
        a B200 feeds each SM cycle more bytes than any GPU was shown to use, so its kernels
        are not counted on for the rest."""
        h100, h200 = knowledge.gpus["h100-sxm-80gb"], knowledge.gpus["h200-sxm-141gb"]
        b200 = knowledge.gpus["b200-sxm-180gb"]
        cap = model.step_model.bytes_per_sm_cycle
        measured = {o.gpu_id for o in model.single}
        assert "h200-sxm-141gb" not in measured
        shown = max(
            knowledge.gpus[g].memory_bandwidth_gb_per_s * 1e9 / knowledge.gpus[g].sm_cycles_per_s
            for g in measured
        )
        assert cap == pytest.approx(max(shown, step_model.DEMONSTRATED_BYTES_PER_SM_CYCLE))
        for gpu in (h100, h200):
            peak = gpu.memory_bandwidth_gb_per_s * 1e9
            assert model.step_model.bandwidth(gpu) == pytest.approx(peak, rel=0.01)
        assert model.step_model.bandwidth(b200) < 0.75 * b200.memory_bandwidth_gb_per_s * 1e9
