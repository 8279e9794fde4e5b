"""A uniform stack counted at 1, 2 and 3 layers: the whole depth's profile is the one counting
every layer gives, and the counter falls back to counting every layer where the small
counts cannot say what the deep one holds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from profiles import depth, line
from profiles import profile as profile_module
from profiles.counting import Totals
from profiles.profile import Profile
from profiles.step import Measured


def _measured(layers: int, activations: int = 100, gradients: int = 50) -> Measured:
    """A step whose counts grow by whole layers (what a uniform stack's do)."""
    return Measured(
        totals={("forward", "gemm"): Totals(10.0 * layers + 3, 4.0 * layers, 2.0, 1.0, layers)},
        by_op={("forward", "aten.mm"): Totals(10.0 * layers, 4.0 * layers, 2.0, 1.0, layers)},
        activations_bytes=activations * layers + 7,
        temporary_peak_bytes=30,
        freed_before_peak_bytes=gradients * layers,
        gradient_bytes=gradients * layers,
        optimizer_state_bytes=200 * layers,
        launches={"forward": 5 * layers + 1},
    )


def test_counts_that_grow_by_whole_layers_are_carried_to_the_full_depth() -> None:
    found = [_measured(n) for n in depth.COUNTED]
    deep = depth.deeper(found, 32)
    assert deep == _measured(32)


def test_a_third_layer_that_adds_something_else_means_counting_whole() -> None:
    found = [_measured(n) for n in depth.COUNTED]
    found[2] = replace(found[2], temporary_peak_bytes=31)
    assert depth.deeper(found, 32) is None
    found = [_measured(n) for n in depth.COUNTED]
    found[2].by_op[("forward", "aten.bmm")] = Totals(1.0)
    assert depth.deeper(found, 32) is None


def test_gradients_outgrowing_activations_mean_counting_whole() -> None:
    """The peak with gradients at 1-3 layers is at the forward's end (it grows by a layer's
    activations); gradients growing faster would overtake it at some depth."""
    found = [_measured(n, activations=100, gradients=150) for n in depth.COUNTED]
    assert not line.peaks_stay(found[0], found[1])
    assert depth.deeper(found, 32) is None


WORKLOADS = [
    ("gpt2", {"task": "training", "batch_size": 4, "seq_len": 512, "precision": "bf16"}),
    ("llama-3-8b", {"task": "inference", "batch_size": 2, "prompt_tokens": 256,
                    "output_tokens": 16, "precision": "bf16"}),
    ("llama-3-8b", {"task": "fine-tuning", "batch_size": 1, "seq_len": 512, "precision": "bf16",
                    "method": "lora", "lora_rank": 8}),
    ("mixtral-8x7b", {"task": "training", "batch_size": 1, "seq_len": 1024, "precision": "bf16"}),
]  # fmt: skip


def _comparable(found: Profile) -> dict[str, Any]:
    out = found.to_dict()
    out.pop("seconds", None)
    out.get("model", {}).pop("profile_seconds", None)
    return out


@pytest.fixture
def carried(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Whether each profile counted by depth was carried to the full depth (or counted
    whole)."""
    found: list[bool] = []
    deeper = depth.deeper

    def spied(steps: list[Measured], layers: int) -> Measured | None:
        out = deeper(steps, layers)
        found.append(out is not None)
        return out

    monkeypatch.setattr(profile_module, "deeper", spied)
    return found


@pytest.mark.parametrize(("name", "workload"), WORKLOADS)
@pytest.mark.slow  # whole models counted
def test_the_profile_by_depth_is_the_whole_count(
    run: Callable[..., Profile], monkeypatch: pytest.MonkeyPatch, carried: list[bool],
    name: str, workload: dict[str, Any],
) -> None:  # fmt: skip
    """Every figure of the profile (FLOPs and bytes by kind and operator, launches, memory)
    is the same counted by depth as counted layer by layer."""
    by_depth = _comparable(run(name, **workload))
    assert carried == [True]
    monkeypatch.setattr(profile_module, "uniform_layers", lambda model: None)
    assert by_depth == _comparable(run(name, **workload))


def test_a_step_whose_peak_would_move_is_counted_whole(
    run: Callable[..., Profile], carried: list[bool]
) -> None:
    """Llama 3 8B trained on two 1,024-token sequences: a layer adds 436 MB of gradients
    and only 344 MB of activations, so at some depth the peak moves from the forward's end
    to the backward's: counted whole."""
    whole = run("llama-3-8b", task="training", batch_size=2, seq_len=1024, precision="bf16")
    assert carried == [False]
    assert whole.memory.gradients_bytes > 0
