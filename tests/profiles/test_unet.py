"""The Stable Diffusion U-Net family: exact parameter counts, validation, the counted step."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from profiles.description import resolve_family
from profiles.errors import InvalidDescription
from profiles.model_catalog import Catalog
from profiles.models.unet import build_unet, unet_spec
from profiles.profile import Profile

Run = Callable[..., Profile]


def _total(p: Profile) -> float:
    return sum(phase.flops for phase in p.phases.values())


SD15 = {
    "family": "unet",
    "block_out_channels": [320, 640, 1280, 1280],
    "layers_per_block": 2,
    "cross_attention_dim": 768,
    "attention_heads": 8,
    "sample_size": 64,
}
SD2 = {
    **SD15,
    "cross_attention_dim": 1024,
    "attention_heads": [5, 10, 20, 20],
    "linear_projection": True,
    "sample_size": 96,
}


def _unet(**changes: Any) -> dict[str, Any]:
    return {**SD15, **changes}


def _parameters(description: dict[str, Any]) -> int:
    module = build_unet(unet_spec(description), torch.bfloat16).module
    return sum(p.numel() for p in module.parameters())


class TestParameterCounts:
    @pytest.mark.parametrize(
        ("description", "published"),
        [
            pytest.param(SD15, 859_520_964, id="SD 1.5 859,520,964 (runwayml unet config)"),
            pytest.param(SD2, 865_910_724, id="SD 2 865,910,724 (stabilityai unet config)"),
        ],
    )
    def test_published_counts_are_exact(self, description: dict[str, Any], published: int) -> None:
        assert _parameters(description) == published

    def test_head_width_and_head_count_describe_the_same_model(self) -> None:
        without_heads = {k: v for k, v in SD2.items() if k != "attention_heads"}
        by_width = unet_spec({**without_heads, "attention_head_dim": 64})
        assert by_width.attention_heads == (5, 10, 20, 20)
        assert by_width == unet_spec(SD2)

    @pytest.mark.parametrize(
        ("name", "published"),
        [
            pytest.param("stable-diffusion-1.5-unet", 859_520_964, id="sd-1.5"),
            pytest.param("stable-diffusion-v2", 865_910_724, id="sd-2"),
            pytest.param("stable-diffusion-2-base", 865_910_724, id="sd-2-base"),
        ],
    )
    def test_catalog_entries_build_their_published_count(
        self, catalog: Catalog, name: str, published: int
    ) -> None:
        entry = catalog.get(name)
        assert entry.parameters == published
        assert _parameters(entry.description) == published

    @pytest.mark.parametrize(
        "alias", ["sd-1.5", "runwayml/stable-diffusion-v1-5", "sd15-unet", "SD15-UNet"]
    )
    def test_aliases_find_sd15(self, catalog: Catalog, alias: str) -> None:
        assert catalog.get(alias).name == "stable-diffusion-1.5-unet"


class TestDescription:
    @pytest.mark.parametrize(
        ("changes", "field"),
        [
            pytest.param({"colour": "red"}, "model.colour", id="unknown-key"),
            pytest.param(
                {"attention_head_dim": 40}, "model.attention_heads", id="both-head-fields"
            ),
            pytest.param({"attention_heads": 7}, "model.attention_heads", id="heads-do-not-divide"),
            pytest.param(
                {"attention_heads": [8, 8]}, "model.attention_heads", id="wrong-list-length"
            ),
            pytest.param(
                {"block_out_channels": [320, 650]},
                "model.block_out_channels",
                id="channels-not-multiple-of-32",
            ),
            pytest.param({"sample_size": 60}, "model.sample_size", id="latent-not-divisible"),
            pytest.param({"layers_per_block": 0}, "model.layers_per_block", id="no-layers"),
            pytest.param({"in_channels": "4"}, "model.in_channels", id="string-channels"),
        ],
    )
    def test_errors_name_the_field(self, changes: dict[str, Any], field: str) -> None:
        with pytest.raises(InvalidDescription) as caught:
            resolve_family(_unet(**changes))
        assert caught.value.field == field

    def test_missing_head_fields_are_refused(self) -> None:
        description = {k: v for k, v in SD15.items() if k != "attention_heads"}
        with pytest.raises(InvalidDescription, match="attention_heads or attention_head_dim"):
            resolve_family(description)

    def test_resolves_through_the_family_dispatch(self) -> None:
        model = resolve_family(SD15)
        assert model.family == "unet"
        assert model.spec.attention_heads == (8, 8, 8, 8)


class TestStep:
    def test_trains_at_batch_one(self, run: Run) -> None:
        p = run("stable-diffusion-1.5-unet", task="training", batch_size=1)
        assert p.model["parameters"] == 859_520_964
        kinds = {c.kind for c in p.by_kind if c.phase == "forward"}
        assert {"convolution", "attention", "matmul", "normalisation"} <= kinds
        assert p.tokens_per_step == 1

    @pytest.mark.slow  # UNet steps counted
    def test_image_size_sets_the_latent(self, run: Run) -> None:
        at_512 = run("stable-diffusion-v2", task="training", batch_size=1, image_size=512)
        base = run("stable-diffusion-2-base", task="training", batch_size=1)
        assert _total(at_512) == pytest.approx(_total(base))
        at_768 = run("stable-diffusion-v2", task="training", batch_size=1)
        assert _total(at_768) > 2.2 * _total(at_512)  # 2.25x the latent area

    def test_image_size_must_fit_the_levels(self, run: Run) -> None:
        with pytest.raises(InvalidDescription) as caught:
            run("stable-diffusion-v2", task="training", batch_size=1, image_size=500)
        assert caught.value.field == "workload.image_size"

    def test_attention_kernel_choice_applies(self, run: Run) -> None:
        flash = run("stable-diffusion-1.5-unet", task="training", batch_size=1)
        naive = run(
            "stable-diffusion-1.5-unet", task="training", batch_size=1, attention="materialized"
        )
        scores = 8 * 4096 * 4096 * 2  # heads x (64x64 latent)^2 at bf16, one self-attention
        assert naive.memory.activations_bytes - flash.memory.activations_bytes > 4 * scores

    @pytest.mark.slow  # UNet steps counted
    def test_checkpointing_trades_memory_for_recompute(self, run: Run) -> None:
        none = run("stable-diffusion-1.5-unet", task="training", batch_size=1)
        selective = run(
            "stable-diffusion-1.5-unet",
            task="training",
            batch_size=1,
            activation_checkpointing="selective",
        )
        full = run(
            "stable-diffusion-1.5-unet",
            task="training",
            batch_size=1,
            activation_checkpointing="full",
        )
        assert full.memory.activations_bytes < selective.memory.activations_bytes
        assert selective.memory.activations_bytes < none.memory.activations_bytes
        assert full.phases["backward"].flops > none.phases["backward"].flops

    def test_inference_is_one_denoising_step(self, run: Run) -> None:
        p = run("stable-diffusion-1.5-unet", task="inference", batch_size=2)
        train = run("stable-diffusion-1.5-unet", task="training", batch_size=2)
        assert p.phases["prefill"].flops == pytest.approx(train.phases["forward"].flops, rel=0.01)
