"""The offer derivation: real counts, real prices, the GCP sums, and every left-out row reported.

Tests that read ``../shared/data`` use the ``shared_data`` fixture, which skips (saying why)
where the raw data is absent; the parsing and mapping helpers are tested without it.
Expected prices are copied from the raw files (and the examples in ``SOURCES.md``).
"""

from __future__ import annotations

import csv
import re
from collections import Counter
from pathlib import Path

import pytest

from knowledge import Knowledge
from knowledge.derive import Derived, offers, render_csv
from knowledge.derive.offers_aws import memory_gib
from knowledge.derive.offers_azure import rows as azure_rows
from knowledge.derive.offers_common import PCIE_LINK, Book, Family, Price, Spec, resolve, usd
from knowledge.derive.offers_gcp import Attach, attachments
from knowledge.derive.offers_vast import region as vast_region
from knowledge.loader import default_root

Row = dict[str, object]
SKYPILOT = "cloud-prices-anycloud-skypilot-format"


@pytest.fixture(scope="module")
def derived(shared_data: Path) -> Derived:
    return offers.derive(shared_data)


def _offers(derived: Derived) -> list[Row]:
    return derived.tables["offers.csv"][1]


def _prices(derived: Derived) -> list[Row]:
    return derived.tables["offer_prices.csv"][1]


def _offer(derived: Derived, provider: str, instance_type: str) -> Row:
    found = [
        r
        for r in _offers(derived)
        if r["provider"] == provider and r["instance_type"] == instance_type
    ]
    assert len(found) == 1, f"{len(found)} offers {provider}:{instance_type}"
    return found[0]


def _price(derived: Derived, provider: str, instance_type: str, region: str) -> Row:
    found = [
        r
        for r in _prices(derived)
        if (r["provider"], r["instance_type"], r["region"]) == (provider, instance_type, region)
    ]
    assert len(found) == 1, f"{len(found)} prices {provider}:{instance_type} in {region}"
    return found[0]


def _left_out_rows(derived: Derived, provider: str) -> int:
    counts = [
        int(m.group(1))
        for line in derived.excluded
        if line.startswith(f"{provider} ") and (m := re.search(r"\((\d+) rows?\):", line))
    ]
    return sum(counts)


def _raw(shared: Path, folder: str, name: str) -> list[dict[str, str]]:
    with (shared / folder / name).open(newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


class TestHelpers:
    @pytest.mark.parametrize(
        ("text", "expected"),
        [
            pytest.param("55.04", 55.04, id="price"),
            pytest.param("0.00", None, id="zero means none (Vast spot)"),
            pytest.param("", None, id="empty"),
            pytest.param("0.0", None, id="zero host (GCP a4)"),
        ],
    )
    def test_usd(self, text: str, expected: float | None) -> None:
        assert usd(text) == expected

    def test_aws_memory_gb_is_taken_as_gib_with_a_note(self) -> None:
        value, note = memory_gib("488 GB")
        assert value == 488.0
        assert note is not None
        assert "GiB" in note
        assert memory_gib("1152 GiB") == (1152.0, None)

    def test_azure_v1_v2_generation_is_joined(self, tmp_path: Path) -> None:
        path = tmp_path / "azure.csv"
        path.write_text(
            "InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,"
            "SpotPrice,Region,Generation\r\n"
            "Standard_NC6s_v3,V100,1,6,112,V100,3.06,0.5,eastus,V1,V2\r\n"
            "Standard_NC6s_v3,V100,1,6,112,V100,3.06,0.5,westus,V2\r\n"
            "short,row\r\n",
            encoding="utf-8",
        )
        got = list(azure_rows(path))
        assert got[0][1] is not None
        assert got[0][1]["Generation"] == "V1,V2"
        assert got[0][1]["Region"] == "eastus"
        assert got[1][1] is not None
        assert got[1][1]["Generation"] == "V2"
        assert got[2] == (4, None)

    @pytest.mark.parametrize(
        ("host", "vcpus", "expected"),
        [
            pytest.param("a3-highgpu-8g", 208, [Attach("H100", 8, "a3-highgpu-8g")], id="a3"),
            pytest.param(
                "a3-edgegpu-8g-nolssd",
                208,
                [Attach("H100", 8, "a3-edgegpu-8g-nolssd")],
                id="nolssd",
            ),
            pytest.param(
                "a3-megagpu-8g", 208, [Attach("H100-MEGA", 8, "a3-megagpu-8g")], id="mega"
            ),
            pytest.param(
                "a2-megagpu-16g", 96, [Attach("A100", 16, "a2-megagpu-16g")], id="a2 mega"
            ),
            pytest.param("g2-standard-24", 24, [Attach("L4", 2, "g2-standard-24")], id="g2 x2"),
            pytest.param("g2-standard-32", 32, [Attach("L4", 1, "g2-standard-32")], id="g2 x1"),
            pytest.param("e2-standard-4", 4, [], id="no GPU"),
        ],
    )
    def test_gcp_fixed_attachments(self, host: str, vcpus: int, expected: list[Attach]) -> None:
        assert attachments(host, vcpus) == expected

    def test_gcp_n1_attachments_follow_the_vcpu_limits(self) -> None:
        small = {(a.accelerator, a.count) for a in attachments("n1-standard-8", 8)}
        assert small == {
            ("T4", 1),
            ("T4", 2),
            ("T4", 4),
            ("V100", 1),
            ("V100", 2),
            ("V100", 4),
            ("V100", 8),
            ("P100", 1),
            ("P100", 2),
            ("P100", 4),
            ("P4", 1),
            ("P4", 2),
            ("P4", 4),
        }
        names = {a.instance_type for a in attachments("n1-standard-16", 16)}
        assert "n1-standard-16+1xV100" not in names  # V100×1 allows 12 vCPUs at most
        assert "n1-standard-16+2xV100" in names
        big = {(a.accelerator, a.count) for a in attachments("n1-highmem-96", 96)}
        assert big == {("T4", 4), ("V100", 8), ("P100", 4), ("P4", 4)}

    def test_vast_region_without_state(self) -> None:
        assert vast_region(", CA, NA") == "CA, NA"
        assert vast_region("Denmark, DK, EU") == "Denmark, DK, EU"

    def test_mismatched_accelerator_is_reported_not_guessed(self) -> None:
        families = (Family(r"p4d\..+", "NVIDIA A100", "a100-sxm4-40gb"),)
        assert isinstance(resolve(families, "p4d.24xlarge", "NVIDIA H100"), str)
        assert isinstance(resolve(families, "p9.48xlarge", "NVIDIA A100"), str)
        memory = (Family("A100", "A100", "a100-sxm4-80gb", memory_gb=80),)
        assert isinstance(resolve(memory, "A100", "A100", 40960), str)
        assert resolve(memory, "A100", "A100", 81920) == memory[0]

    def test_book_keeps_the_lower_duplicate_and_reports_it(self) -> None:
        book = Book("test", "f.csv", "2026-01-01", "src")
        spec = Spec("x.large", "t4", 1, 4, 16.0, None)
        book.add(spec, Price("r1", 2.0), "x.large")
        book.add(spec, Price("r1", 1.5), "x.large")
        book.add(spec, Price("r2", None), "x.large")
        assert [p["on_demand_usd_per_hour"] for p in book.price_rows()] == [1.5]
        derived = Derived()
        book.report(derived)
        assert any("prices differ" in line for line in derived.excluded)
        assert any("no on-demand price" in line for line in derived.excluded)

    def test_pcie_links_match_the_catalogs_pcie_generation(self, knowledge: Knowledge) -> None:
        for gpu_id, link in PCIE_LINK.items():
            assert gpu_id in knowledge.gpus, gpu_id
            assert link == f"pcie-{knowledge.gpus[gpu_id].pcie_generation}-x16", gpu_id


class TestCounts:
    def test_instance_types_per_provider(self, derived: Derived) -> None:
        counts = Counter(r["provider"] for r in _offers(derived))
        assert counts == {"aws": 75, "gcp": 176, "azure": 36, "lambda": 23, "vast": 44}

    def test_price_rows_per_provider(self, derived: Derived) -> None:
        counts = Counter(r["provider"] for r in _prices(derived))
        assert counts == {"aws": 1007, "gcp": 1889, "azure": 829, "lambda": 391, "vast": 61}

    @pytest.mark.parametrize(
        ("provider", "folder", "file"),
        [
            pytest.param(
                "aws", "cloud-prices-aws-vantage", "aws_gpu_instances_by_region.csv", id="aws"
            ),
            pytest.param("azure", SKYPILOT, "azure_vms_gpu.csv", id="azure"),
            pytest.param("lambda", SKYPILOT, "lambda_vms_gpu.csv", id="lambda"),
            pytest.param("vast", SKYPILOT, "vast_vms_gpu.csv", id="vast"),
        ],
    )
    def test_every_source_row_is_priced_or_reported(
        self, derived: Derived, shared_data: Path, provider: str, folder: str, file: str
    ) -> None:
        raw = len(_raw(shared_data, folder, file))
        priced = sum(1 for r in _prices(derived) if r["provider"] == provider)
        assert priced + _left_out_rows(derived, provider) == raw

    def test_gcp_rows_left_out(self, derived: Derived) -> None:
        # 2709 source rows: 1464 host rows and 716 GPU rows combine in some zone, the rest not
        assert _left_out_rows(derived, "gcp") == 2709 - 1464 - 716

    def test_every_azure_row_parses_including_the_11_field_ones(self, shared_data: Path) -> None:
        path = shared_data / SKYPILOT / "azure_vms_gpu.csv"
        with path.open(newline="", encoding="utf-8") as handle:
            widths = Counter(len(fields) for fields in csv.reader(handle))
        assert widths == {10: 248, 11: 582}  # header included in the 10s
        parsed = [row for _, row in azure_rows(path)]
        assert len(parsed) == 829
        assert all(parsed)
        assert Counter(r["Generation"] for r in parsed if r) == {"V1,V2": 582, "V2": 247}

    def test_the_11_field_row_keeps_its_prices(self, derived: Derived) -> None:
        row = _price(derived, "azure", "Standard_NC12s_v3", "australiaeast")
        assert (row["on_demand_usd_per_hour"], row["spot_usd_per_hour"]) == (8.468, 1.564886)

    def test_tables_are_sorted_and_stable(self, derived: Derived, shared_data: Path) -> None:
        keys = [(r["provider"], r["instance_type"]) for r in _offers(derived)]
        assert keys == sorted(keys)
        assert len(set(keys)) == len(keys)
        price_keys = [(r["provider"], r["instance_type"], r["region"]) for r in _prices(derived)]
        assert price_keys == sorted(price_keys)
        assert len(set(price_keys)) == len(price_keys)
        again = offers.derive(shared_data)
        assert again.tables == derived.tables
        assert again.excluded == derived.excluded

    def test_stored_tables_are_fresh(self, derived: Derived) -> None:
        for relpath, (columns, rows) in derived.tables.items():
            stored = (default_root() / relpath).read_text(encoding="utf-8")
            assert stored == render_csv(columns, rows), f"{relpath} is stale"


class TestPrices:
    @pytest.mark.parametrize(
        ("instance_type", "usd_per_hour"),
        [
            pytest.param("p5.48xlarge", 55.04, id="p5"),
            pytest.param("p4d.24xlarge", 21.96, id="p4d"),
            pytest.param("p5en.48xlarge", 63.296, id="p5en"),
            pytest.param("p6-b200.48xlarge", 113.9328, id="p6-b200"),
            pytest.param("g6e.xlarge", 1.861, id="g6e"),
            pytest.param("g5.xlarge", 1.006, id="g5"),
            pytest.param("g4dn.xlarge", 0.526, id="g4dn"),
            pytest.param("p3.2xlarge", 3.06, id="p3"),
        ],
    )
    def test_aws_us_east_1_on_demand(
        self, derived: Derived, instance_type: str, usd_per_hour: float
    ) -> None:
        row = _price(derived, "aws", instance_type, "us-east-1")
        assert row["on_demand_usd_per_hour"] == pytest.approx(usd_per_hour, abs=0.005)
        assert row["spot_usd_per_hour"] is None  # the AWS source has no spot prices

    def test_lambda_prices(self, derived: Derived) -> None:
        h100 = {
            p["on_demand_usd_per_hour"]
            for p in _prices(derived)
            if p["instance_type"] == "gpu_8x_h100_sxm5"
        }
        assert h100 == {31.92}
        assert _price(derived, "lambda", "gpu_1x_b200_sxm6", "us-east-1")[
            "on_demand_usd_per_hour"
        ] == pytest.approx(6.99)

    def test_vast_zero_spot_means_none(self, derived: Derived) -> None:
        assert all(
            p["spot_usd_per_hour"] is None for p in _prices(derived) if p["provider"] == "vast"
        )


class TestGcpSums:
    def _gcp(self, shared: Path) -> list[dict[str, str]]:
        return _raw(shared, SKYPILOT, "gcp_vms_gpu_and_gpu_hosts.csv")

    def _row(self, rows: list[dict[str, str]], zone: str, **match: str) -> dict[str, str]:
        found = [
            r
            for r in rows
            if r["AvailabilityZone"] == zone and all(r[k] == v for k, v in match.items())
        ]
        assert len(found) == 1
        return found[0]

    def test_gpu_rows_are_the_price_of_all_the_gpus(self, shared_data: Path) -> None:
        rows = self._gcp(shared_data)
        one = self._row(rows, "us-central1-a", AcceleratorName="H100", AcceleratorCount="1")
        eight = self._row(rows, "us-central1-a", AcceleratorName="H100", AcceleratorCount="8")
        assert float(eight["Price"]) == pytest.approx(8 * float(one["Price"]), abs=1e-4)

    def test_a3_highgpu_8g_is_host_plus_the_h100x8_row(
        self, derived: Derived, shared_data: Path
    ) -> None:
        rows = self._gcp(shared_data)
        host = self._row(rows, "us-central1-a", InstanceType="a3-highgpu-8g")
        gpus = self._row(rows, "us-central1-a", AcceleratorName="H100", AcceleratorCount="8")
        assert (host["Price"], gpus["Price"]) == ("9.46006", "33.60609")
        row = _price(derived, "gcp", "a3-highgpu-8g", "us-central1")
        assert row["on_demand_usd_per_hour"] == pytest.approx(9.46006 + 33.60609)
        assert row["spot_usd_per_hour"] == pytest.approx(3.86318 + 32.0104)
        offer = _offer(derived, "gcp", "a3-highgpu-8g")
        assert (offer["gpu_id"], offer["gpu_count"], offer["interconnect"]) == (
            "h100-sxm-80gb",
            8.0,
            "nvswitch-nvlink4",
        )

    def test_n1_host_plus_attached_t4s(self, derived: Derived) -> None:
        row = _price(derived, "gcp", "n1-standard-8+2xT4", "us-central1")
        assert row["on_demand_usd_per_hour"] == pytest.approx(0.38 + 0.7)
        offer = _offer(derived, "gcp", "n1-standard-8+2xT4")
        assert (offer["gpu_id"], offer["gpu_count"], offer["vcpus"]) == ("t4", 2.0, 8)

    def test_n1_offers_respect_the_vcpu_limits(self, derived: Derived) -> None:
        n1 = {
            r["instance_type"]
            for r in _offers(derived)
            if r["provider"] == "gcp" and str(r["instance_type"]).startswith("n1-")
        }
        assert len(n1) == 149
        assert "n1-standard-8+1xV100" in n1
        assert "n1-standard-16+1xV100" not in n1

    def test_a4_host_priced_zero_is_taken_as_bundled(self, derived: Derived) -> None:
        row = _price(derived, "gcp", "a4-highgpu-8g", "us-central1")
        assert row["on_demand_usd_per_hour"] == pytest.approx(90.216)
        assert "bundled" in str(_offer(derived, "gcp", "a4-highgpu-8g")["notes"])


class TestMappings:
    @pytest.mark.parametrize(
        ("provider", "instance_type", "gpu_id", "gpu_count", "interconnect"),
        [
            pytest.param(
                "aws", "p4de.24xlarge", "a100-sxm4-80gb", 8, "nvswitch-nvlink3", id="p4de"
            ),
            pytest.param("aws", "p5.4xlarge", "h100-sxm-80gb", 1, None, id="p5 single"),
            pytest.param("aws", "g5g.16xlarge", "t4", 2, "pcie-3-x16", id="g5g corrected"),
            pytest.param("aws", "g6f.large", "l4", 0.125, None, id="g6f corrected"),
            pytest.param(
                "aws", "g7e.48xlarge", "rtx-pro-6000-blackwell-server", 8, "pcie-5-x16", id="g7e"
            ),
            pytest.param("azure", "Standard_NV4as_v4", "mi25", 0.125, None, id="NVv4 eighth"),
            pytest.param(
                "azure", "Standard_NC24ads_A100_v4", "a100-pcie-80gb", 1, None, id="NC A100 v4"
            ),
            pytest.param(
                "azure",
                "Standard_NC80adis_H100_v5",
                "h100-nvl-94gb",
                2,
                "pcie-5-x16",
                id="NC H100 v5",
            ),
            pytest.param(
                "azure",
                "Standard_ND96isr_MI300X_v5",
                "mi300x",
                8,
                "infinity-fabric-cdna3",
                id="MI300X",
            ),
            pytest.param("lambda", "gpu_1x_a100", "a100-pcie-40gb", 1, None, id="lambda a100"),
            pytest.param(
                "lambda",
                "gpu_8x_a100",
                "a100-sxm4-40gb",
                8,
                "nvswitch-nvlink3",
                id="lambda 8x a100",
            ),
            pytest.param("lambda", "gpu_4x_a6000", "rtx-a6000", 4, "pcie-4-x16", id="a6000"),
            pytest.param("vast", "1x-H100_NVL-32-65536", "h100-nvl-94gb", 1, None, id="nvl"),
            pytest.param(
                "vast",
                "2x-A100_SXM4-32-65536+a100-sxm4-40gb",
                "a100-sxm4-40gb",
                2,
                "pcie-4-x16",
                id="vast a100 by memory",
            ),
        ],
    )
    def test_offer(
        self,
        derived: Derived,
        provider: str,
        instance_type: str,
        gpu_id: str,
        gpu_count: float,
        interconnect: str | None,
    ) -> None:
        offer = _offer(derived, provider, instance_type)
        assert (offer["gpu_id"], offer["gpu_count"], offer["interconnect"]) == (
            gpu_id,
            float(gpu_count),
            interconnect,
        )

    def test_corrections_are_noted(self, derived: Derived) -> None:
        for provider, instance_type in [
            ("aws", "g5g.xlarge"),
            ("aws", "g6f.xlarge"),
            ("aws", "gr6f.4xlarge"),
            ("azure", "Standard_NV8as_v4"),
        ]:
            assert "corrected" in str(_offer(derived, provider, instance_type)["notes"])

    def test_single_and_fractional_gpus_have_no_interconnect(self, derived: Derived) -> None:
        for offer in _offers(derived):
            if float(offer["gpu_count"]) <= 1:  # type: ignore[arg-type]
                assert offer["interconnect"] is None, offer["instance_type"]

    def test_offers_resolve_in_the_catalog(self, derived: Derived, knowledge: Knowledge) -> None:
        for offer in _offers(derived):
            assert offer["gpu_id"] in knowledge.gpus
            assert offer["interconnect"] is None or offer["interconnect"] in (
                knowledge.interconnects
            )


class TestReport:
    @pytest.mark.parametrize(
        ("pattern", "why"),
        [
            pytest.param(r"aws .* inf1\.xlarge \(22 rows\)", "Inferentia", id="inf1"),
            pytest.param(r"aws .* inf2\.48xlarge", "Inferentia", id="inf2"),
            pytest.param(r"aws .* trn1n\.32xlarge", "Trainium", id="trn1n"),
            pytest.param(r"aws .* trn2\.48xlarge", "Trainium", id="trn2"),
            pytest.param(r"aws .* dl2q\.24xlarge \(2 rows\)", "Qualcomm", id="dl2q"),
            pytest.param(r"aws .* p5e\.48xlarge", "no on-demand price", id="p5e unpriced"),
            pytest.param(r"aws .* u-p6e-gb200x72", "no on-demand price", id="gb200 unpriced"),
            pytest.param(r"vast .* 1x-RTX_3060_Ti", "not in the GPU catalog", id="3060 Ti"),
            pytest.param(r"vast .* 4x-RTX_4070S_Ti", "not in the GPU catalog", id="4070 Ti S"),
            pytest.param(r"gcp .* GPU row A100x16 \(11 rows\)", "no host", id="unused GPU rows"),
        ],
    )
    def test_left_out_and_why(self, derived: Derived, pattern: str, why: str) -> None:
        lines = [line for line in derived.excluded if re.search(pattern, line)]
        assert len(lines) == 1, lines
        assert why in lines[0]

    def test_non_gpu_accelerators_never_become_offers(self, derived: Derived) -> None:
        names = {r["instance_type"] for r in _offers(derived)}
        assert not {n for n in names if re.match(r"(inf|trn|dl)\d", str(n))}
