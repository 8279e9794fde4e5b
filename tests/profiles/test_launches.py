"""Kernel launches: dispatched operators, and the per-time-step kernels of recurrences."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from profiles.counting import KERNELS_PER_TIME_STEP
from profiles.profile import Profile

Run = Callable[..., Profile]
TRAIN = {"task": "training", "batch_size": 2}


def _lstm(steps: int, **layer: Any) -> dict[str, Any]:
    return {"input_shape": [steps, 32], "layers": [{"type": "lstm", "hidden": 64, **layer}]}


class TestDispatchedOperators:
    def test_launches_are_the_operators_that_do_work(self, run: Run) -> None:
        p = run("gpt2", **TRAIN, seq_len=64)
        for phase in ("forward", "backward"):
            calls = sum(op.calls for op in p.by_op if op.phase == phase)
            assert p.launches[phase] == calls
        assert p.launches["total"] == sum(
            p.launches[k] for k in ("forward", "backward", "optimizer")
        )

    def test_the_optimizer_launches_one_fused_kernel_per_parameter(self, run: Run) -> None:
        p = run(_lstm(10), **TRAIN)
        assert p.launches["optimizer"] == 4  # weight_ih, weight_hh, bias_ih, bias_hh

    def test_inference_counts_every_decode_step(self, run: Run) -> None:
        p = run("gpt2", task="inference", batch_size=1, prompt_tokens=16, output_tokens=10)
        decode = (p.launches["decode-first"] + p.launches["decode-last"]) / 2
        assert p.launches["total"] == p.launches["prefill"] + 10 * decode


class TestRecurrences:
    @pytest.mark.parametrize(
        ("layer", "runs"),
        [
            pytest.param({}, 1, id="lstm"),
            pytest.param({"layers": 2, "bidirectional": True}, 4, id="two-bidirectional-layers"),
        ],
    )
    def test_each_time_step_launches_its_kernels(
        self, run: Run, layer: dict[str, Any], runs: int
    ) -> None:
        short = run(_lstm(50, **layer), **TRAIN)
        long = run(_lstm(150, **layer), **TRAIN)
        per_phase = KERNELS_PER_TIME_STEP * 100 * runs  # layers x directions
        assert long.launches["forward"] - short.launches["forward"] == per_phase
        assert long.launches["backward"] - short.launches["backward"] == per_phase

    def test_inference_steps_through_forward_only(self, run: Run) -> None:
        p = run(_lstm(100), task="inference", batch_size=1)
        trained = run(_lstm(100), **TRAIN)
        assert p.launches["prefill"] >= KERNELS_PER_TIME_STEP * 100
        assert "backward" not in p.launches
        assert trained.launches["backward"] >= KERNELS_PER_TIME_STEP * 100
