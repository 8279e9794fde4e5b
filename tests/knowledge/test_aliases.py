"""Name normalisation and the alias index."""

from __future__ import annotations

import pytest

from knowledge.aliases import AliasConflict, AliasIndex, normalise_name


class TestNormalise:
    @pytest.mark.parametrize(
        ("raw", "folded"),
        [
            pytest.param("NVIDIA GeForce RTX 4090", "rtx4090", id="vendor-and-brand-words"),
            pytest.param("RTX 2080Ti", "rtx2080ti", id="no-space"),
            pytest.param("Tesla V100-SXM2-16GB", "v100sxm216gb", id="trace-device-name"),
            pytest.param("NVIDIA A100 - PCIe - 80 GB", "a100pcie80gb", id="mlperf-spacing"),
            pytest.param("Quadro RTX 8000", "rtx8000", id="quadro"),
            pytest.param("NVIDIA", "nvidia", id="a lone vendor word is kept"),
        ],
    )
    def test_folds(self, raw: str, folded: str) -> None:
        assert normalise_name(raw) == folded


class TestAliasIndex:
    def test_resolves_id_and_aliases(self) -> None:
        index = AliasIndex()
        index.add("h100-sxm-80gb", ["H100 80GB SXM5", "NVIDIA H100-SXM5-80GB"])
        assert index.resolve("h100 sxm 80gb") == "h100-sxm-80gb"
        assert index.resolve("NVIDIA H100 80GB SXM5") == "h100-sxm-80gb"
        assert index.resolve("H200") is None

    def test_conflict_names_both_ids(self) -> None:
        index = AliasIndex()
        index.add("quadro-rtx-6000", ["RTX 6000"])
        with pytest.raises(AliasConflict, match=r"quadro-rtx-6000.*rtx-6000-ada"):
            index.add("rtx-6000-ada", ["RTX6000"])

    def test_suggests_close_ids(self) -> None:
        index = AliasIndex()
        for ident in ("h100-sxm-80gb", "h100-pcie-80gb", "a100-sxm4-80gb"):
            index.add(ident, [])
        assert "h100-sxm-80gb" in index.suggest("h100-sxm")
        assert index.suggest("zzzz") == []
