"""The layer-list DSL: counts, validation, shape checks, recurrences, containers, catalog."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from torch import nn

from profiles.counting import StepCounter
from profiles.description import resolve_family
from profiles.errors import InvalidDescription, LimitExceeded
from profiles.model_catalog import Catalog
from profiles.models.layers import build_layers, parameters_of
from profiles.profile import Profile

Run = Callable[..., Profile]


def _total(p: Profile) -> float:
    return sum(phase.flops for phase in p.phases.values())


ROOT = Path(__file__).resolve().parents[2]
SPECIAL = yaml.safe_load((ROOT / "profiles" / "data" / "catalog-special.yaml").read_text())
WORKLOADS = yaml.safe_load((ROOT / "knowledge" / "data" / "workloads.yaml").read_text())
TRAIN = {"task": "training", "batch_size": 1}

SMALL_CNN = {
    "input_shape": [3, 32, 32],
    "layers": [
        {"type": "conv2d", "out_channels": 16, "kernel": 3},  # 3*16*9 + 16 = 448
        {"type": "batchnorm"},  # 2*16 = 32
        {"type": "relu"},
        {"type": "conv2d", "out_channels": 32, "kernel": 3, "stride": 2, "bias": False},  # 4608
        {"type": "groupnorm", "groups": 8},  # 64
        {"type": "gelu"},
        {"type": "maxpool", "kernel": 2},  # 16x16 -> 8x8
        {"type": "flatten"},  # 32*8*8 = 2048
        {"type": "dropout", "p": 0.1},
        {"type": "linear", "out_features": 10},  # 2048*10 + 10 = 20490
    ],
}
SMALL_CNN_PARAMETERS = 448 + 32 + 4608 + 64 + 20490


def _model(*layers: dict[str, Any], shape: list[int] | None = None, **top: Any) -> dict[str, Any]:
    return {"input_shape": shape or [3, 16, 16], "layers": list(layers), **top}


def _built(description: dict[str, Any]) -> nn.Module:
    return build_layers(resolve_family(description).spec, torch.float32).module


def _count(description: dict[str, Any]) -> int:
    return sum(p.numel() for p in _built(description).parameters())


def _error(description: dict[str, Any]) -> InvalidDescription:
    with pytest.raises(InvalidDescription) as caught:
        resolve_family(description)
    return caught.value


CONV = {"type": "conv2d", "out_channels": 8, "kernel": 3}


class TestCounts:
    def test_small_cnn_matches_the_hand_count(self) -> None:
        assert _count(SMALL_CNN) == SMALL_CNN_PARAMETERS
        assert parameters_of(resolve_family(SMALL_CNN).spec) == SMALL_CNN_PARAMETERS

    def test_family_key_is_optional(self) -> None:
        with_family = resolve_family({"family": "layers", **SMALL_CNN})
        assert with_family.family == resolve_family(SMALL_CNN).family == "layers"
        assert with_family.spec == resolve_family(SMALL_CNN).spec

    @pytest.mark.parametrize(
        ("layer", "shape", "expected"),
        [
            pytest.param(
                {"type": "conv1d", "out_channels": 4, "kernel": 5},
                [2, 9],
                2 * 4 * 5 + 4,
                id="conv1d",
            ),
            pytest.param(
                {"type": "conv3d", "out_channels": 4, "kernel": [1, 3, 3], "bias": False},
                [2, 4, 8, 8],
                2 * 4 * 9,
                id="conv3d-anisotropic",
            ),
            pytest.param(
                {"type": "conv2d", "out_channels": 8, "kernel": 3, "groups": 4},
                [8, 6, 6],
                8 * 2 * 9 + 8,
                id="grouped-conv",
            ),
            pytest.param(
                {"type": "conv_transpose2d", "out_channels": 6, "kernel": 2, "stride": 2},
                [4, 5, 5],
                4 * 6 * 4 + 6,
                id="conv-transpose",
            ),
            pytest.param(
                {"type": "attention", "heads": 4}, [10, 32], 4 * (32 * 32 + 32), id="attention-qkvo"
            ),
            pytest.param({"type": "layernorm"}, [10, 32], 64, id="layernorm"),
            pytest.param({"type": "rmsnorm"}, [10, 32], 32, id="rmsnorm"),
            pytest.param(
                {"type": "lstm", "hidden": 16, "layers": 2, "bidirectional": True},
                [7, 8],
                2 * (64 * (8 + 16) + 128) + 2 * (64 * (32 + 16) + 128),
                id="bidirectional-lstm",
            ),
            pytest.param({"type": "gru", "hidden": 16}, [7, 8], 48 * (8 + 16) + 96, id="gru"),
        ],
    )
    def test_layer_parameters(self, layer: dict[str, Any], shape: list[int], expected: int) -> None:
        assert _count(_model(layer, shape=shape)) == expected

    def test_embedding_takes_tokens(self, run: Run) -> None:
        description = _model(
            {"type": "embedding", "num_embeddings": 100, "dim": 8},
            {"type": "linear", "out_features": 3},
            shape=[12],
            input="tokens",
        )
        assert _count(description) == 100 * 8 + 8 * 3 + 3
        p = run(description, task="training", batch_size=4)
        assert p.tokens_per_step == 4 * 12


class TestValidation:
    @pytest.mark.parametrize(
        ("description", "field"),
        [
            pytest.param(
                _model({"type": "convolution", "out_channels": 8}),
                "model.layers[0].type",
                id="unknown-type",
            ),
            pytest.param(
                _model(CONV, {**CONV, "colour": "red"}), "model.layers[1].colour", id="unknown-key"
            ),
            pytest.param(
                _model({"type": "residual", "layers": [CONV, {"type": "relu", "x": 1}]}),
                "model.layers[0].layers[1].x",
                id="unknown-key-nested",
            ),
            pytest.param(
                _model({"type": "conv2d", "kernel": 3}),
                "model.layers[0].out_channels",
                id="missing-field",
            ),
            pytest.param(
                _model({**CONV, "out_channels": 1_000_001}),
                "model.layers[0].out_channels",
                id="width-over-10^6",
            ),
            pytest.param(
                _model({**CONV, "kernel": [3, 3, 3]}), "model.layers[0].kernel", id="kernel-rank"
            ),
            pytest.param(
                _model({**CONV, "padding": "valid"}), "model.layers[0].padding", id="bad-padding"
            ),
            pytest.param(
                _model({**CONV, "groups": 2}), "model.layers[0].groups", id="groups-do-not-divide"
            ),
            pytest.param(
                _model({"type": "attention", "heads": 3}, shape=[10, 8]),
                "model.layers[0].heads",
                id="heads-do-not-divide",
            ),
            pytest.param(
                _model({"type": "heads", "from": ["p3"], "layers": [CONV]}),
                "model.layers[0].from[0]",
                id="heads-from-unknown-branch",
            ),
            pytest.param(
                _model({"type": "linear", "out_features": 4}, shape=[8], input="tokens"),
                "model.layers[0]",
                id="tokens-need-an-embedding",
            ),
            pytest.param(
                _model({"type": "embedding", "num_embeddings": 9, "dim": 4}, shape=[8]),
                "model.layers[0]",
                id="embedding-needs-tokens",
            ),
            pytest.param(
                {"input_shape": [3, 8, 8], "layers": [CONV], "extra": 1},
                "model.extra",
                id="unknown-top-level-key",
            ),
            pytest.param({"input_shape": [3, 8, 8], "layers": []}, "model.layers", id="empty-list"),
            pytest.param(_model({"type": "relu"}), "model.layers", id="nothing-to-train"),
        ],
    )
    def test_errors_name_the_field(self, description: dict[str, Any], field: str) -> None:
        assert _error(description).field == field

    def test_unknown_type_suggests_close_names(self) -> None:
        error = _error(_model({"type": "conv2", "out_channels": 8, "kernel": 3}))
        assert "did you mean conv2d" in error.message

    def test_shape_error_names_the_layer_and_the_shapes(self) -> None:
        error = _error(
            _model(CONV, {"type": "flatten"}, {"type": "conv2d", "out_channels": 4, "kernel": 3})
        )
        assert error.field == "model.layers[2]"
        assert "[2048]" in error.message
        assert "[C, H, W]" in error.message

    def test_torch_shape_error_is_reported_with_the_layer(self) -> None:
        error = _error(_model({**CONV, "kernel": 5, "padding": 0}, shape=[3, 4, 4]))
        assert error.field == "model.layers[0]"
        assert "[3, 4, 4]" in error.message
        assert "Kernel size" in error.message

    def test_residual_must_give_back_its_input_shape(self) -> None:
        error = _error(_model({"type": "residual", "layers": [CONV]}))
        assert error.field == "model.layers[0].layers"
        assert "[3, 16, 16] into [8, 16, 16]" in error.message

    def test_error_in_a_later_repetition_says_which(self) -> None:
        shrink = {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 0}
        error = _error(_model({"type": "repeat", "times": 9, "layers": [shrink]}, shape=[3, 9, 9]))
        assert error.field == "model.layers[0].layers[0]"
        assert "repetition 5 of 9" in error.message

    def test_layer_count_limit_counts_repeats(self) -> None:
        inner = {"type": "repeat", "times": 101, "layers": [{"type": "relu"}]}
        with pytest.raises(LimitExceeded) as caught:
            resolve_family(_model({"type": "repeat", "times": 100, "layers": [inner]}))
        assert caught.value.field == "model.layers"

    def test_parameter_limit_stops_before_building(self) -> None:
        wide = {"type": "linear", "out_features": 1_000_000, "bias": False}
        huge = _model({"type": "repeat", "times": 5_000, "layers": [wide]}, shape=[1_000_000])
        with pytest.raises(LimitExceeded) as caught:
            resolve_family(huge)
        assert caught.value.field == "model"
        assert caught.value.limit == 2e13


class TestRecurrent:
    @staticmethod
    def _matmul(p: Profile, phase: str) -> float:
        return sum(c.flops for c in p.by_kind if c.phase == phase and c.kind == "matmul")

    @pytest.mark.parametrize(
        ("kind", "gates"), [pytest.param("lstm", 4, id="lstm"), pytest.param("gru", 3, id="gru")]
    )
    def test_forward_and_backward_flops(self, run: Run, kind: str, gates: int) -> None:
        t, f, h, batch = 50, 24, 32, 3
        p = run(
            _model({"type": kind, "hidden": h}, shape=[t, f]), task="training", batch_size=batch
        )
        forward = 2 * batch * t * (f + h) * gates * h  # input and recurrent matmuls, every step
        assert self._matmul(p, "forward") == forward
        # weight gradients (as much as the forward) and the gradient through the recurrence;
        # the data input needs none
        assert self._matmul(p, "backward") == forward + 2 * batch * t * h * gates * h

    def test_forward_matches_torchs_own_recurrence(self, run: Run) -> None:
        t, f, h = 20, 16, 24
        p = run(
            _model({"type": "lstm", "hidden": h, "layers": 2, "bidirectional": True}, shape=[t, f]),
            task="training",
            batch_size=2,
        )
        lstm = nn.LSTM(f, h, 2, batch_first=True, bidirectional=True, device="meta")
        counter = StepCounter()
        with counter, torch.no_grad():
            lstm(torch.empty(2, t, f, device="meta"))
        torch_matmul = sum(v.flops for (_, kind), v in counter.totals.items() if kind == "matmul")
        assert self._matmul(p, "forward") == torch_matmul


class TestContainers:
    def test_repeat_has_separate_weights(self) -> None:
        block = {"type": "conv2d", "out_channels": 3, "kernel": 3}
        once = _count(_model(block))
        assert _count(_model({"type": "repeat", "times": 5, "layers": [block]})) == 5 * once

    def test_residual_with_shortcut(self) -> None:
        description = _model(
            {
                "type": "residual",
                "layers": [CONV],
                "shortcut": [{"type": "conv2d", "out_channels": 8, "kernel": 1}],
            }
        )
        assert _count(description) == (3 * 8 * 9 + 8) + (3 * 8 + 8)

    def test_skip_concat_joins_along_the_channels(self) -> None:
        description = _model(
            {"type": "skip_concat", "layers": [CONV]},
            {"type": "conv2d", "out_channels": 1, "kernel": 1, "bias": False},
        )
        assert _count(description) == (3 * 8 * 9 + 8) + (3 + 8)

    def test_heads_share_weights_over_named_branches(self, run: Run) -> None:
        head = [{"type": "conv2d", "out_channels": 5, "kernel": 3}]
        description = _model(
            {"type": "branch", "name": "a", "layers": [CONV]},
            {"type": "conv2d", "out_channels": 8, "kernel": 3, "stride": 2},
            {"type": "branch", "name": "b", "layers": [{"type": "relu"}]},
            {"type": "heads", "from": ["a", "b"], "layers": head},
        )
        convs = 2 * (3 * 8 * 9 + 8)
        assert _count(description) == convs + (8 * 5 * 9 + 5)  # the head counted once
        p = run(description, **TRAIN)
        conv_flops = sum(
            c.flops for c in p.by_kind if c.phase == "forward" and c.kind == "convolution"
        )
        head_flops = 2 * 8 * 5 * 9 * (16 * 16 + 8 * 8)  # run on both levels
        assert conv_flops == 2 * 3 * 8 * 9 * (16 * 16 + 8 * 8) + head_flops

    def test_full_checkpointing_recomputes_regions(self, run: Run) -> None:
        block = {"type": "residual", "layers": [{**CONV, "out_channels": 3}, {"type": "relu"}]}
        description = _model({"type": "repeat", "times": 6, "layers": [block]}, shape=[3, 64, 64])
        none = run(description, **TRAIN)
        full = run(description, **TRAIN, activation_checkpointing="full")
        assert full.memory.activations_bytes < none.memory.activations_bytes
        assert full.phases["backward"].flops > none.phases["backward"].flops

    def test_attention_uses_the_workload_kernel(self, run: Run) -> None:
        description = _model({"type": "attention", "heads": 2, "causal": True}, shape=[512, 64])
        flash = run(description, **TRAIN)
        naive = run(description, **TRAIN, attention="materialized")
        assert naive.memory.activations_bytes - flash.memory.activations_bytes >= 2 * 512 * 512 * 2
        kinds = {c.kind for c in flash.by_kind}
        assert "attention" in kinds

    def test_roi_align_multiplies_the_samples(self, run: Run) -> None:
        description = _model(
            {"type": "roi_align", "rois": 10, "output_size": 4},
            {"type": "flatten"},
            {"type": "linear", "out_features": 2, "bias": False},
        )
        p = run(description, **TRAIN)
        matmul = sum(c.flops for c in p.by_kind if c.phase == "forward" and c.kind == "matmul")
        assert matmul == 2 * 10 * (3 * 4 * 4) * 2

    def test_fixed_input_shape_refuses_another_image_size(self, run: Run) -> None:
        with pytest.raises(InvalidDescription) as caught:
            run(SMALL_CNN, **TRAIN, image_size=64)
        assert caught.value.field == "workload.image_size"
        assert run(SMALL_CNN, **TRAIN, image_size=32).model["parameters"] == SMALL_CNN_PARAMETERS


class TestCatalogSpecial:
    @pytest.mark.parametrize("entry", [pytest.param(e, id=e["name"]) for e in SPECIAL])
    def test_profiles_for_training_at_batch_one(
        self, catalog: Catalog, run: Run, entry: dict[str, Any]
    ) -> None:
        p = run(entry["name"], **TRAIN)
        assert _total(p) > 0
        assert p.memory.total_bytes > p.memory.parameters_bytes
        model = catalog.resolve(entry["name"])
        if model.family == "layers":
            assert parameters_of(model.spec) == p.model["parameters"]
        if entry["parameters"] is not None:
            assert p.model["parameters"] == entry["parameters"]

    @pytest.mark.parametrize("entry", [pytest.param(e, id=e["name"]) for e in SPECIAL])
    def test_entries_are_complete(self, entry: dict[str, Any]) -> None:
        assert {"name", "aliases", "description", "parameters", "source", "as_of"} <= set(entry)
        assert "2026-12-02" <= entry["as_of"] <= "2026-12-04"  # written or last revised
        assert entry["source"].startswith("https://")
        assert entry["parameters"] is not None or entry.get("notes")

    @pytest.mark.parametrize("name", sorted({w["model"] for w in WORKLOADS}), ids=str)
    def test_every_benchmark_workload_model_is_in_the_catalog(
        self, catalog: Catalog, name: str
    ) -> None:
        assert catalog.get(name) is not None
