"""Catalog.search (names, aliases and families by the words of a query) and the catalog's data."""

from __future__ import annotations

import datetime
from pathlib import Path

import pytest
import yaml

from profiles.model_catalog import Catalog, CatalogError, fold

DATA = Path(__file__).resolve().parents[2] / "profiles" / "data"


def names(found: list) -> list[str]:
    return [e.name for e in found]


class TestSearch:
    @pytest.mark.parametrize(
        ("query", "first"),
        [
            pytest.param("Qwen2.5-7B", "qwen2.5-7b", id="hf-repo-name"),
            pytest.param("meta-llama/Llama-3.2-1B", "llama-3.2-1b", id="org-prefixed"),
            pytest.param("QWEN 2.5 7b", "qwen2.5-7b", id="case-and-spaces"),
            pytest.param("smollm2_135m", "smollm2-135m", id="underscore"),
            pytest.param("resnet-50", "resnet-50", id="name"),
            pytest.param("Llama-3.1-8B-Instruct", "llama-3.1-8b", id="instruct-alias"),
        ],
    )
    def test_exact_name_or_alias_comes_first(
        self, catalog: Catalog, query: str, first: str
    ) -> None:
        assert names(catalog.search(query))[0] == first

    def test_every_word_must_match(self, catalog: Catalog) -> None:
        assert names(catalog.search("llama 3.2")) == ["llama-3.2-1b", "llama-3.2-3b"]
        assert names(catalog.search("llama 405b")) == ["llama-3.1-405b"]
        assert catalog.search("llama whisper") == []

    def test_a_name_finds_its_family_members_by_name(self, catalog: Catalog) -> None:
        found = names(catalog.search("whisper"))
        assert {"whisper-tiny", "whisper-small", "whisper-large-v3"} <= set(found)
        assert found == sorted(found)
        assert all(name.startswith("whisper-") for name in found)

    def test_exact_then_prefix_then_the_rest(self, catalog: Catalog) -> None:
        found = names(catalog.search("gpt2"))
        assert found[0] == "gpt2"
        assert found[1:4] == ["gpt2-large", "gpt2-medium", "gpt2-xl"]
        # "t5" is an alias of t5-base; the other t5-* start with it; flan-t5-* hold it
        t5 = names(catalog.search("t5"))
        assert t5[0] == "t5-base"
        prefixed = [n for n in t5[1:] if n.startswith("t5-")]
        assert t5[1 : 1 + len(prefixed)] == sorted(prefixed)
        assert t5[1 + len(prefixed) :] == sorted(n for n in t5 if n.startswith("flan-t5-"))
        assert len(prefixed) >= 3

    def test_short_words_start_a_word(self, catalog: Catalog) -> None:
        """``t5`` is not found inside ``resnet50-v1.5``; ``bert`` is found inside ``roberta``."""
        assert "resnet-50" not in names(catalog.search("t5"))
        assert {"distilbert-base", "roberta-base", "bert-base"} <= set(
            names(catalog.search("bert"))
        )

    def test_the_family_is_searched(self, catalog: Catalog) -> None:
        unets = {n for n, e in catalog.entries.items() if e.model.family == "unet"}
        assert unets
        assert unets <= set(names(catalog.search("unet")))
        vits = names(catalog.search("vit"))
        assert "deit-tiny" in vits  # family vit, no "vit" in its name

    def test_org_prefix_alone(self, catalog: Catalog) -> None:
        found = names(catalog.search("meta-llama"))
        assert "llama-3.2-1b" in found
        assert "qwen2.5-7b" not in found

    def test_limit_and_no_words(self, catalog: Catalog) -> None:
        everything = catalog.search("")
        assert names(everything) == sorted(catalog.entries)
        assert names(catalog.search("  ,  ")) == sorted(catalog.entries)
        assert catalog.search("llama", limit=3) == catalog.search("llama")[:3]
        assert catalog.search("llama", limit=0) == []
        with pytest.raises(ValueError, match="limit"):
            catalog.search("llama", limit=-1)

    def test_no_match(self, catalog: Catalog) -> None:
        assert catalog.search("no-such-model-zzz") == []


def _raw_entries() -> list[dict]:
    entries: list[dict] = []
    for path in sorted(DATA.glob("catalog*.yaml")):
        entries += yaml.safe_load(path.read_text(encoding="utf-8"))
    return entries


class TestCatalogData:
    def test_has_at_least_80_entries(self, catalog: Catalog) -> None:
        assert len(catalog.entries) >= 80

    @pytest.mark.parametrize("entry", [pytest.param(e, id=e["name"]) for e in _raw_entries()])
    def test_source_is_https_and_as_of_a_date(self, entry: dict) -> None:
        assert entry["source"].startswith("https://")
        assert isinstance(entry["as_of"], str)
        datetime.date.fromisoformat(entry["as_of"])
        assert entry["parameters"] is None or entry["parameters"] > 0
        assert entry["parameters"] is not None or entry.get("notes")

    def test_names_and_aliases_are_unique_across_entries(self) -> None:
        owner: dict[str, str] = {}
        for entry in _raw_entries():
            for spelling in {fold(s) for s in (entry["name"], *entry.get("aliases", []))}:
                assert owner.setdefault(spelling, entry["name"]) == entry["name"], spelling

    def test_a_shared_alias_is_refused(self, tmp_path: Path) -> None:
        twice = [
            {"name": f"m{i}", "aliases": ["same"], "description": {"family": "resnet", "depth": 18}}
            for i in (1, 2)
        ]
        (tmp_path / "catalog.yaml").write_text(yaml.safe_dump(twice), encoding="utf-8")
        with pytest.raises(CatalogError, match="same"):
            Catalog.load(tmp_path)
