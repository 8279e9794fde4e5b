"""A task called off stops at the profiler's next time-limit check (profiles.interrupt):
what lets a compute process drop a profile its caller abandoned and stay warm."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from profiles import interrupt
from profiles.description import resolve
from profiles.errors import ProfileTooSlow
from profiles.model_catalog import Catalog
from profiles.profile import profile
from profiles.workload import WorkloadSchema

MOE = {"family": "transformer", "layers": 100, "hidden": 1024, "heads": 16, "ffn": 4096,
       "vocab": 50001, "moe_experts": 10000, "moe_top_k": 10000, "gated": True}  # fmt: skip


@pytest.fixture
def called_off() -> Iterator[list[bool]]:
    """A switch the probe reads; no probe afterwards."""
    switch = [False]
    interrupt.install(lambda: switch[0])
    yield switch
    interrupt.install(None)


def test_a_profile_called_off_stops_at_once(called_off: list[bool]) -> None:
    model = resolve(MOE, Catalog.load())
    workload = WorkloadSchema().load({"task": "training", "batch_size": 1, "seq_len": 128})
    called_off[0] = True
    started = time.monotonic()
    with pytest.raises(ProfileTooSlow):
        profile(model, workload, 60.0)
    assert time.monotonic() - started < 10  # its own limit is 60 s; counting takes longer


def test_without_a_probe_nothing_is_called_off() -> None:
    interrupt.install(None)
    assert not interrupt.requested()
