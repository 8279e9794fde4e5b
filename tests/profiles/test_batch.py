"""A step at any batch size from three counted ones: the profile carried along the batch is
the one counting it gives, and anything that leaves the line is counted."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from profiles import batch
from profiles import profile as profile_module
from profiles.counting import Totals
from profiles.profile import Profile
from profiles.step import Measured


def _measured(samples: int, activations: int = 100, gradients: int = 5000) -> Measured:
    """A step whose counts grow per sample, save the weights, optimizer and launches."""
    return Measured(
        totals={("forward", "gemm"): Totals(10.0 * samples + 3, 4.0 * samples + 9, 2.0, 9.0, 7)},
        by_op={("forward", "aten.mm"): Totals(10.0 * samples, 4.0 * samples, 2.0, 9.0, 7)},
        activations_bytes=activations * samples + 7,
        temporary_peak_bytes=30,
        gradient_bytes=gradients,
        optimizer_state_bytes=200,
        launches={"forward": 12},
    )


KEY = ("transformer", "spec", "workload")


def test_three_batch_sizes_on_a_line_carry_any_larger_one() -> None:
    lines = batch.Lines()
    for samples in (2, 4, 7):
        assert lines.at(KEY, 16) is None  # fewer than three counted
        lines.add(KEY, samples, _measured(samples))
    assert lines.at(KEY, 16) == _measured(16)
    assert lines.at(KEY, 3) == _measured(3)  # between the counted ones
    assert lines.at(KEY, 1) is None  # below them the peak could be elsewhere: counted
    assert lines.at(("other",) * 3, 16) is None


def test_a_batch_size_that_leaves_the_line_is_never_carried() -> None:
    lines = batch.Lines()
    bent = _measured(7)
    bent.totals[("forward", "gemm")] = Totals(71.5, 37.0, 2.0, 9.0, 7)  # not 10 per sample
    for samples, measured in ((2, _measured(2)), (4, _measured(4)), (7, bent)):
        lines.add(KEY, samples, measured)
    assert lines.at(KEY, 16) is None


def test_a_peak_that_could_move_is_never_carried() -> None:
    """Memory held at the backward's end (gradients freed late) growing slower than the
    activations would: counted."""
    lines = batch.Lines()
    for samples in (2, 4, 7):
        m = _measured(samples)
        m.freed_before_peak_bytes = 60 * samples  # the peak holds 40 per sample, not 100
        lines.add(KEY, samples, m)
    assert lines.at(KEY, 16) is None


def test_the_lines_kept_are_bounded() -> None:
    lines = batch.Lines(size=2)
    for name in ("a", "b", "c"):
        for samples in (1, 2, 3):
            lines.add((name,) * 3, samples, _measured(samples))
    assert lines.at(("a",) * 3, 8) is None
    assert lines.at(("c",) * 3, 8) == _measured(8)


WORKLOADS = [
    ("bert-base", {"task": "fine-tuning", "seq_len": 384, "precision": "fp16"}),
    ("llama-3-8b", {"task": "training", "seq_len": 4096, "precision": "bf16"}),
    ("llama-3-8b", {"task": "inference", "prompt_tokens": 512, "output_tokens": 64,
                    "precision": "int8"}),
    ("gpt2", {"task": "fine-tuning", "method": "lora", "seq_len": 512, "precision": "bf16"}),
]  # fmt: skip


def _comparable(p: Profile) -> dict[str, Any]:
    out = p.to_dict()
    out.pop("seconds")
    return out


@pytest.fixture
def counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The batch sizes the profiler counted (rather than carried)."""
    found: list[int] = []
    measure = profile_module._measure

    def spied(runnable: Any, workload: Any, deadline: float) -> Measured:
        found.append(workload.batch_size)
        return measure(runnable, workload, deadline)

    monkeypatch.setattr(profile_module, "_measure", spied)
    return found


@pytest.mark.parametrize(("name", "workload"), WORKLOADS)
def test_a_profile_carried_along_the_batch_is_the_counted_one(
    run: Callable[..., Profile], counted: list[int], name: str, workload: dict[str, Any]
) -> None:
    """Every figure of the profile (FLOPs and bytes by kind and operator, launches, memory,
    dataset time) at a batch size carried from three counted ones is the one counting it
    gives."""
    for samples in (2, 3, 5):
        run(name, batch_size=samples, **workload)
    before = len(counted)
    carried = [_comparable(run(name, batch_size=b, **workload)) for b in (4, 9, 64)]
    assert len(counted) == before  # none counted
    profile_module._LINES.clear()
    assert carried == [_comparable(run(name, batch_size=b, **workload)) for b in (4, 9, 64)]
    assert len(counted) > before


@pytest.mark.parametrize(
    ("name", "workload"),
    [
        # recomputed: the activations (811 MB a sample) outgrow what the peak holds (8 MB)
        ("llama-3-8b", {"task": "training", "seq_len": 1024, "precision": "bf16",
                        "activation_checkpointing": "full"}),
        # experts touched: min(8, 2 x tokens), on a line from 2 to 4 sequences, not beyond
        ("mixtral-8x7b", {"task": "inference", "prompt_tokens": 256, "output_tokens": 32,
                          "precision": "bf16"}),
        # not a transformer (a CNN's peak falls at a layer of the backward that moves)
        ("resnet-50", {"task": "training", "image_size": 224, "precision": "fp16"}),
    ],
)  # fmt: skip
@pytest.mark.slow  # counted at every batch size
def test_a_step_that_can_bend_with_the_batch_is_counted_at_every_batch_size(
    run: Callable[..., Profile], counted: list[int], name: str, workload: dict[str, Any]
) -> None:
    for samples in (2, 3, 4, 7):
        run(name, batch_size=samples, **workload)
    assert len(counted) == 4 * counted.count(2)


def test_the_three_largest_batch_sizes_counted_are_kept() -> None:
    """A batch of one can leave the line (a reduction over it drops out): counting a larger
    batch size replaces the smallest kept, so the line forms from there."""
    lines = batch.Lines()
    odd = _measured(1)
    odd.by_op[("forward", "aten.mm")] = Totals(10.0, 4.0, 2.0, 9.0, 6)  # one op fewer
    lines.add(KEY, 1, odd)
    for samples in (2, 3):
        lines.add(KEY, samples, _measured(samples))
    assert lines.at(KEY, 16) is None
    lines.add(KEY, 5, _measured(5))
    assert lines.at(KEY, 16) == _measured(16)
