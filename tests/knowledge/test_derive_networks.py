"""The network derivation: AWS network cells parsed, the other providers' rules, one row an offer.

Tests that read ``../shared/data`` use the ``shared_data`` fixture, which skips (saying why)
where the raw data is absent; the parsing and the rules are tested without it. Expected
figures are the providers' own (see the sources in ``knowledge/derive/network_rules.py``).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from knowledge.derive import Derived, networks, offers
from knowledge.derive.network_rules import FALLBACK, NOT_STATED, RULES
from knowledge.derive.networks import BURST_NOTE, aws_network, rule_for

Row = dict[str, object]


class TestAwsNetwork:
    @pytest.mark.parametrize(
        ("text", "instance_type", "gbps", "kind"),
        [
            pytest.param("Up to 25 Gigabit", "g4dn.xlarge", 25, "ethernet", id="burst"),
            pytest.param("100 Gigabit", "g4dn.metal", 100, "ethernet", id="plain"),
            pytest.param("3200 Gbps EFAv2", "p5.48xlarge", 3200, "efa", id="efa-v2"),
            pytest.param("400 Gbps EFA", "p4d.24xlarge", 400, "efa", id="efa"),
            pytest.param("16x 100 Gigabit", "trn1n.32xlarge", 1600, "ethernet", id="nics"),
            pytest.param("Up to 12.5 Gigabit", "trn1.2xlarge", 12.5, "ethernet", id="decimal"),
            pytest.param("High", "p2.xlarge", 1, "ethernet", id="class-high"),
            pytest.param("Moderate", "g2.2xlarge", 0.3, "ethernet", id="class-moderate"),
            pytest.param("100 Gigabit", "p5.4xlarge", 100, "efa", id="efa-family-no-efa-text"),
            pytest.param("6400 Gigabit", "p6-b300.48xlarge", 6400, "efa", id="p6-family"),
        ],
    )
    def test_reads_the_figure_and_the_kind(
        self, text: str, instance_type: str, gbps: float, kind: str
    ) -> None:
        net = aws_network(text, instance_type)
        assert (net.gbps, net.kind, net.rdma, net.cluster) == (gbps, kind, kind == "efa", True)

    def test_a_burst_figure_says_so(self) -> None:
        assert BURST_NOTE in aws_network("Up to 25 Gigabit", "g4dn.xlarge").notes
        assert BURST_NOTE not in aws_network("50 Gigabit", "g4dn.8xlarge").notes

    def test_a_class_gets_a_conservative_figure_and_says_so(self) -> None:
        notes = " ".join(aws_network("High", "p2.xlarge").notes)
        assert "conservative assumption" in notes
        assert "'High'" in notes

    def test_regions_that_disagree_give_the_lowest(self) -> None:
        net = aws_network("10 Gigabit | Up to 25 Gigabit", "g5.xlarge")
        assert net.gbps == 10
        assert any("disagree" in n for n in net.notes)

    def test_an_unreadable_cell_fails(self) -> None:
        with pytest.raises(ValueError, match="unreadable AWS network 'Very High'"):
            aws_network("Very High", "x1.large")


class TestRules:
    def test_each_rule_names_only_types_its_pattern_matches(self) -> None:
        for rule in RULES:
            for name in rule.by_type:
                assert re.fullmatch(rule.pattern, name), (rule.pattern, name)

    def test_each_rule_cites_a_page(self) -> None:
        for rule in RULES:
            assert rule.source.startswith("https://"), rule
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", rule.as_of), rule

    @pytest.mark.parametrize(
        ("provider", "instance_type", "vcpus", "gbps", "kind"),
        [
            pytest.param("gcp", "a3-megagpu-8g", 208, 1800, "gpudirect-tcpxo", id="a3-mega"),
            pytest.param("gcp", "a3-highgpu-8g", 208, 1000, "gpudirect-tcpx", id="a3-high"),
            pytest.param("gcp", "a3-highgpu-1g", 26, 25, "ethernet", id="a3-high-1g"),
            pytest.param("gcp", "a4-highgpu-8g", 224, 3600, "roce", id="a4"),
            pytest.param("gcp", "a2-ultragpu-4g", 48, 50, "ethernet", id="a2"),
            pytest.param("gcp", "g2-standard-8", 8, 16, "ethernet", id="g2"),
            pytest.param("gcp", "n1-standard-4+1xT4", 4, 8, "ethernet", id="n1-per-vcpu"),
            pytest.param("gcp", "n1-highmem-96+8xV100", 96, 32, "ethernet", id="n1-capped"),
            pytest.param("azure", "Standard_ND96isr_H100_v5", 96, 3200, "infiniband", id="nd-h100"),
            pytest.param("azure", "Standard_ND96asr_v4", 96, 1600, "infiniband", id="nd-a100"),
            pytest.param("azure", "Standard_NC24ads_A100_v4", 24, 20, "ethernet", id="nc-a100"),
            pytest.param("azure", "Standard_NV6ads_A10_v5", 6, 5, "ethernet", id="nv-a10"),
        ],
    )
    def test_a_family_rule_gives_the_stated_figure(
        self, provider: str, instance_type: str, vcpus: int, gbps: float, kind: str
    ) -> None:
        net = rule_for(provider, instance_type, vcpus).network(instance_type, vcpus)
        assert (net.gbps, net.kind, net.rdma) == (gbps, kind, kind != "ethernet")

    def test_a_type_missing_from_its_family_table_is_not_guessed(self) -> None:
        assert rule_for("gcp", "a2-highgpu-3g", 36) is FALLBACK
        assert rule_for("gcp", "g2-standard-6", 6) is FALLBACK

    def test_an_unknown_provider_gets_the_conservative_case(self) -> None:
        rule = rule_for("nowhere", "big-box", 64)
        net = rule.network("big-box", 64)
        assert rule is FALLBACK
        assert (net.kind, net.gbps, net.cluster) == ("ethernet", 10, False)
        assert NOT_STATED in net.notes


@pytest.fixture(scope="module")
def derived(shared_data: Path) -> Derived:
    return networks.derive(shared_data)


def _rows(derived: Derived) -> list[Row]:
    return derived.tables["instance_networks.csv"][1]


@pytest.mark.shared_data
class TestDerivedTable:
    def test_every_offer_has_exactly_one_row(self, derived: Derived, shared_data: Path) -> None:
        offer_rows = offers.derive(shared_data).tables["offers.csv"][1]
        wanted = Counter((o["provider"], o["instance_type"]) for o in offer_rows)
        got = Counter((r["provider"], r["instance_type"]) for r in _rows(derived))
        assert got == wanted
        assert max(got.values()) == 1

    def test_rows_are_sorted(self, derived: Derived) -> None:
        keys = [(str(r["provider"]), str(r["instance_type"])) for r in _rows(derived)]
        assert keys == sorted(keys)

    def test_vast_hosts_meet_over_the_internet(self, derived: Derived) -> None:
        vast = [r for r in _rows(derived) if r["provider"] == "vast"]
        assert vast
        for row in vast:
            assert (row["network_kind"], row["rdma"], row["cluster"]) == (
                "internet",
                "false",
                "false",
            )

    def test_aws_rows_cite_the_aws_source(self, derived: Derived) -> None:
        p5 = next(r for r in _rows(derived) if r["instance_type"] == "p5.48xlarge")
        assert (p5["network_gbps"], p5["network_kind"], p5["rdma"]) == (3200.0, "efa", "true")
        assert str(p5["source"]).startswith("aws-vantage:")

    def test_no_offer_falls_to_the_conservative_default(self, derived: Derived) -> None:
        """A new instance family needs its rule (or, where nothing is stated, an explicit
        conservative one): the catch-all is for nothing the offers hold today."""
        fallen = [r["instance_type"] for r in _rows(derived) if r["source"] == FALLBACK.source]
        assert fallen == []
