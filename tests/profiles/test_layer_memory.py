"""What a layer list keeps for backward: frozen groups, frozen batch norm, branches that
join the loss at once."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from profiles.description import resolve_family
from profiles.errors import InvalidDescription
from profiles.profile import Profile

Run = Callable[..., Profile]
TRAIN = {"task": "training", "batch_size": 2, "precision": "fp32", "optimizer": "sgd"}
CONV = {"type": "conv2d", "out_channels": 16, "kernel": 3, "bias": False}


def _model(*layers: dict[str, Any]) -> dict[str, Any]:
    return {"input_shape": [3, 64, 64], "layers": list(layers)}


class TestFrozenBatchNorm:
    def test_has_no_weights_to_train(self, run: Run) -> None:
        frozen = run(_model(CONV, {"type": "frozen_batchnorm"}, {"type": "relu"}), **TRAIN)
        trained = run(_model(CONV, {"type": "batchnorm"}, {"type": "relu"}), **TRAIN)
        assert frozen.model["parameters"] == 3 * 16 * 9
        assert trained.model["parameters"] == 3 * 16 * 9 + 2 * 16

    def test_keeps_less_for_backward_than_batch_norm(self, run: Run) -> None:
        block = [CONV, {"type": "relu"}, {**CONV, "out_channels": 16}]
        frozen = run(_model(*block, {"type": "frozen_batchnorm"}, {"type": "relu"}), **TRAIN)
        trained = run(_model(*block, {"type": "batchnorm"}, {"type": "relu"}), **TRAIN)
        one_map = 2 * 16 * 64 * 64 * 4  # batch 2, fp32
        saved = trained.memory.activations_bytes - frozen.memory.activations_bytes
        assert saved == pytest.approx(one_map, rel=0.01)  # batch norm saves its input


class TestFrozenGroups:
    def test_frozen_weights_get_no_gradients_or_states(self, run: Run) -> None:
        frozen = {"type": "group", "frozen": True, "layers": [CONV, {"type": "relu"}]}
        p = run(_model(frozen, {**CONV, "out_channels": 8}), **{**TRAIN, "optimizer": "adam"})
        assert p.model["parameters"] == 3 * 16 * 9 + 16 * 8 * 9
        assert p.model["trainable_parameters"] == 16 * 8 * 9
        assert p.memory.gradients_bytes == 4 * 16 * 8 * 9
        assert p.memory.optimizer_states_bytes == 8 * 16 * 8 * 9

    def test_a_frozen_stem_saves_nothing_for_backward(self, run: Run) -> None:
        stem = [CONV, {"type": "relu"}, CONV, {"type": "relu"}]
        head = {**CONV, "out_channels": 8}
        frozen = run(_model({"type": "group", "frozen": True, "layers": stem}, head), **TRAIN)
        trained = run(_model({"type": "group", "layers": stem}, head), **TRAIN)
        stem_input = 2 * 16 * 64 * 64 * 4  # what the trained head saves: the stem's output
        assert frozen.memory.activations_bytes == pytest.approx(stem_input, rel=0.01)
        assert trained.memory.activations_bytes > 2 * stem_input  # + the stem's own


class TestBranchesJoinedAtOnce:
    def test_an_unheld_branch_is_freed_when_made(self, run: Run) -> None:
        wide = {"type": "conv2d", "out_channels": 256, "kernel": 1}
        held = run(_model(*[{"type": "branch", "layers": [wide]}] * 4), **TRAIN)
        unheld = run(_model(*[{"type": "branch", "held": False, "layers": [wide]}] * 4), **TRAIN)
        one_output = 2 * 256 * 64 * 64 * 4
        held_peak = held.memory.total_bytes - held.memory.runtime_overhead_bytes
        unheld_peak = unheld.memory.total_bytes - unheld.memory.runtime_overhead_bytes
        assert held_peak - unheld_peak >= 2 * one_output
        assert unheld.flops["forward"] == pytest.approx(held.flops["forward"], rel=1e-6)

    def test_a_named_branch_must_be_held(self) -> None:
        with pytest.raises(InvalidDescription) as caught:
            resolve_family(
                _model({"type": "branch", "name": "p2", "held": False, "layers": [CONV]})
            )
        assert caught.value.field == "model.layers[0].held"
