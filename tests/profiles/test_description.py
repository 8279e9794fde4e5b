"""Model descriptions: catalog names, Hugging Face configs, families; bad input named."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from profiles.description import resolve
from profiles.errors import InvalidDescription, LimitExceeded, UnknownModel, UnsupportedModelType
from profiles.model_catalog import Catalog
from profiles.profile import Profile, profile_id
from profiles.workload import WorkloadSchema
from tests.profiles.conftest import hf_config

Run = Callable[..., Profile]


class TestCatalogNames:
    @pytest.mark.parametrize(
        ("alias", "name"),
        [
            pytest.param("resnet50", "resnet-50", id="resnet50"),
            pytest.param("Llama-2-7b-hf", "llama-2-7b", id="hf-repo-name"),
            pytest.param("meta-llama/Meta-Llama-3-8B", "llama-3-8b", id="org-prefixed"),
            pytest.param("LLAMA-3.1-405B", "llama-3.1-405b", id="case"),
            pytest.param("bert_base", "bert-base", id="underscore"),
        ],
    )
    def test_aliases_resolve(self, catalog: Catalog, alias: str, name: str) -> None:
        assert catalog.get(alias).name == name

    def test_has_the_required_entries(self, catalog: Catalog) -> None:
        required = {
            "gpt2",
            "gpt2-medium",
            "gpt2-large",
            "gpt2-xl",
            "bert-base",
            "bert-large",
            "t5-base",
            "llama-2-7b",
            "llama-2-13b",
            "llama-2-70b",
            "llama-3-8b",
            "llama-3-70b",
            "llama-3.1-8b",
            "llama-3.1-70b",
            "llama-3.1-405b",
            "mistral-7b",
            "mixtral-8x7b",
            "qwen2.5-7b",
            "qwen2.5-72b",
            "phi-3-mini",
            "falcon-7b",
            "gemma-2-9b",
            "vit-b-16",
            "vit-l-16",
            "resnet-50",
            "resnet-101",
            "resnet-152",
            "efficientnet-b0",
            "whisper-small",
            "transformer-xl-base",
            "transformer-xl-large",
        }
        assert required <= set(catalog.entries)
        assert len(catalog.entries) >= 25

    def test_unknown_name_lists_close_matches(self, catalog: Catalog) -> None:
        with pytest.raises(UnknownModel) as info:
            resolve({"name": "llama-3-9b"}, catalog)
        assert "llama-3-8b" in info.value.suggestions

    def test_approximations_are_stated(self, catalog: Catalog) -> None:
        for name in ("transformer-xl-base", "transformer-xl-large"):
            assert "approximation" in (catalog.get(name).notes or "")


class TestHfConfigs:
    @pytest.mark.parametrize(
        "name",
        [
            "llama-2-7b",
            "llama-3-8b",
            "mistral-7b",
            "mixtral-8x7b",
            "qwen2.5-7b",
            "gemma-2-9b",
            "phi-3-mini",
            "gpt2",
            "bert-base",
            "t5-base",
            "vit-b-16",
        ],
    )
    def test_config_json_gives_the_catalog_model(self, catalog: Catalog, name: str) -> None:
        from_config = resolve({"hf_config": hf_config(name)}, catalog)
        named = catalog.resolve(name)
        workload = WorkloadSchema().load(
            {"task": "inference", "batch_size": 1, "prompt_tokens": 8}
            if from_config.family == "transformer"
            else {"task": "inference", "batch_size": 1}
        )
        assert profile_id(from_config, workload) == profile_id(named, workload)

    def test_unknown_model_type_names_the_supported_ones(self, catalog: Catalog) -> None:
        with pytest.raises(UnsupportedModelType) as info:
            resolve({"hf_config": {"model_type": "mamba"}}, catalog)
        assert "llama" in info.value.supported
        assert info.value.field == "model.hf_config.model_type"

    def test_missing_key_is_named(self, catalog: Catalog) -> None:
        config = hf_config("llama-2-7b")
        del config["hidden_size"]
        with pytest.raises(InvalidDescription, match=r"model\.hf_config\.hidden_size"):
            resolve({"hf_config": config}, catalog)


def _family(**overrides: Any) -> dict[str, Any]:
    return {
        "family": "transformer",
        "layers": 2,
        "hidden": 64,
        "heads": 4,
        "ffn": 128,
        "vocab": 100,
        **overrides,
    }


class TestBadShapes:
    @pytest.mark.parametrize(
        ("overrides", "field"),
        [
            pytest.param({"hidden": 100, "heads": 3}, "model.hidden", id="hidden-not-divisible"),
            pytest.param({"kv_heads": 3}, "model.kv_heads", id="heads-not-multiple-of-kv"),
            pytest.param({"layers": -1}, "model.layers", id="negative-layers"),
            pytest.param({"hidden": 0}, "model.hidden", id="zero-hidden"),
            pytest.param({"colour": "red"}, "model.colour", id="unknown-field"),
            pytest.param({"moe_experts": 4}, "model.moe_top_k", id="experts-without-top-k"),
            pytest.param({"layers": 2.5}, "model.layers", id="fractional-layers"),
            pytest.param({"family": "rnn"}, "model.family", id="unknown-family"),
        ],
    )
    def test_named_field(self, catalog: Catalog, overrides: dict[str, Any], field: str) -> None:
        with pytest.raises(InvalidDescription) as info:
            resolve(_family(**overrides), catalog)
        assert info.value.field == field

    @pytest.mark.parametrize(
        ("overrides", "quoted"),
        [
            pytest.param({"layers": 10_001}, "10000", id="layers-over-10^4"),
            pytest.param(
                {"layers": 10_000, "hidden": 65536, "heads": 64, "ffn": 262144},
                "2e+13",
                id="parameters-over-2e13",
            ),
        ],
    )
    def test_limits_are_quoted_before_building(
        self, catalog: Catalog, overrides: dict[str, Any], quoted: str
    ) -> None:
        with pytest.raises(InvalidDescription, match=quoted.replace("+", r"\+")):
            resolve(_family(**overrides), catalog)

    def test_limit_error_is_a_limit(self, catalog: Catalog) -> None:
        big = _family(layers=10_000, hidden=65536, heads=64, ffn=262144)
        with pytest.raises(LimitExceeded):
            resolve(big, catalog)

    def test_exactly_one_kind_of_description(self, catalog: Catalog) -> None:
        with pytest.raises(InvalidDescription, match="exactly one"):
            resolve({"name": "gpt2", "family": "transformer"}, catalog)
        with pytest.raises(InvalidDescription, match="exactly one"):
            resolve({}, catalog)
