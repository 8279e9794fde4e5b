"""The planner's search for the fastest fitting layout, against timing every layout."""

from __future__ import annotations

from typing import Any

import pytest

from knowledge import Knowledge
from profiles.catalog import Catalog
from profiles.description import resolve
from profiles.profile import profile
from profiles.workload import WorkloadSchema
from service.engine.errors import InvalidRequest
from service.engine.estimate import USABLE_MEMORY_SHARE
from service.engine.layout import ModelShape
from service.engine.model import PerformanceModel
from service.engine.parallel import fastest_fitting, network, planned_at, sized_at, work
from service.engine.roofline import math_mode
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
