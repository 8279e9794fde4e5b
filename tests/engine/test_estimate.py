"""Estimates for every catalog model on every GPU, and the input bound."""

from __future__ import annotations

import math
from typing import Any

import pytest

from knowledge import Knowledge
from profiles.catalog import Catalog
from profiles.description import resolve
from profiles.profile import profile
from profiles.workload import WorkloadSchema
from service.engine.estimate import InputCeiling, estimate
from service.engine.model import PerformanceModel
from service.engine.roofline import UnsupportedPrecision, usable_precisions

BOUNDS = {"compute", "memory_bandwidth", "communication", "input"}


def _profile(catalog: Catalog, name: str, **workload: Any) -> dict[str, Any]:
    request = {"batch_size": 1, **workload}
    return profile(resolve({"name": name}, catalog), WorkloadSchema().load(request), 120).to_dict()


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


def _check(result: dict[str, Any], label: str) -> None:
    step = result["step_time_s"]
    assert math.isfinite(step), label
    assert step > 0, label
    assert result["interval"]["low"] < step < result["interval"]["high"], label
    assert result["bound"] in BOUNDS, label
    assert result["throughput"]["samples_per_s"] > 0, label
    assert isinstance(result["fits"], bool), label
    assert result["memory_per_gpu_bytes"] > 0, label


@pytest.mark.parametrize("task", ["training", "inference"])
def test_every_catalog_model_on_every_gpu_returns_or_fails_cleanly(
    knowledge: Knowledge, catalog: Catalog, model: PerformanceModel, task: str
) -> None:
    """3,000+ estimates per task in bf16: each one is a finite, bracketed estimate, or
    (on GPUs without bf16) an UnsupportedPrecision naming what the GPU supports (the API's
    422); nothing else."""
    without = {g.id for g in knowledge.gpus.values() if "bf16" not in usable_precisions(g)}
    assert 0 < len(without) < len(knowledge.gpus) / 2
    for name in sorted(catalog.entries):
        p = _profile(catalog, name, **_workload(catalog, name, task))
        for gpu in knowledge.gpus.values():
            label = f"{name} {task} on {gpu.id}"
            if gpu.id in without:
                with pytest.raises(UnsupportedPrecision, match="fp16"):  # names what it has
                    estimate(p, gpu, 1, model, knowledge)
                continue
            _check(estimate(p, gpu, 1, model, knowledge), label)


def test_a_multi_gpu_estimate_on_every_gpu(
    knowledge: Knowledge, catalog: Catalog, model: PerformanceModel
) -> None:
    p = _profile(catalog, "llama-2-7b", task="training", precision="fp16", seq_len=2048)
    for gpu in knowledge.gpus.values():
        if "fp16" not in usable_precisions(gpu):
            continue
        for count in (2, 8, 16):
            result = estimate(p, gpu, count, model, knowledge)
            _check(result, f"{gpu.id} x{count}")
            assert result["breakdown"]["allreduce_s"] > 0


def test_an_input_bound_workload_names_the_input(
    knowledge: Knowledge, catalog: Catalog, model: PerformanceModel
) -> None:
    """ResNet-50 on an H100 with a host that decodes 1,500 images/s per GPU: the input
    binds, and a faster GPU buys nothing."""
    p = _profile(catalog, "resnet-50", task="training", precision="fp16", batch_size=256)
    ceiling = InputCeiling(1500.0, "request", "input_samples_per_s")
    h100 = estimate(p, knowledge.gpus["h100-sxm-80gb"], 1, model, knowledge, ceiling)
    b200 = estimate(p, knowledge.gpus["b200-sxm-180gb"], 1, model, knowledge, ceiling)
    assert h100["bound"] == b200["bound"] == "input"
    assert h100["throughput"]["samples_per_s"] == pytest.approx(1500.0)
    assert b200["throughput"]["samples_per_s"] == pytest.approx(1500.0)
    assert any("faster GPU buys nothing" in a for a in h100["assumptions"])
    free = estimate(p, knowledge.gpus["h100-sxm-80gb"], 1, model, knowledge)
    assert free["bound"] != "input"
    assert free["throughput"]["samples_per_s"] > 1500.0
