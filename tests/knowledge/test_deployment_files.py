"""The deployment files load into typed records, and their cross-references are checked.

The curated files come from small fixtures (``fixtures/deployment``, not real figures)
copied over a copy of the shipped data, so these tests do not depend on the curated
figures; ``instance_networks.csv`` is the shipped, derived one.
"""

from __future__ import annotations

import datetime as dt
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from knowledge import Knowledge, KnowledgeInvalid, UnknownId, load_knowledge, records
from knowledge.loader import REQUIRED_FILES, default_root

pytestmark = pytest.mark.slow  # copies of the knowledge loaded again, one per case

FIXTURES = Path(__file__).parent / "fixtures" / "deployment"
CURATED = ("providers.yaml", "grid_intensity.csv", "input_rates.yaml", "server_designs.yaml")


@pytest.fixture
def data(tmp_path: Path) -> Path:
    """A copy of the shipped data with the fixture curated files."""
    root = tmp_path / "data"
    shutil.copytree(default_root(), root)
    for name in CURATED:
        shutil.copy(FIXTURES / name, root / name)
    return root


@pytest.fixture
def loaded(data: Path) -> Knowledge:
    return load_knowledge(data)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert old in text, f"fixture text {old!r} not found in {path.name}"
    path.write_text(text.replace(old, new, 1), encoding="utf-8")


def _drop_line(path: Path, start: str) -> str:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    found = [line for line in lines if line.startswith(start)]
    assert len(found) == 1, f"{len(found)} lines of {path.name} start with {start!r}"
    path.write_text("".join(line for line in lines if line is not found[0]), encoding="utf-8")
    return found[0]


def _problems(root: Path) -> list[tuple[str, str | None, str | None, str]]:
    with pytest.raises(KnowledgeInvalid) as info:
        load_knowledge(root)
    return [(e.file, e.row, e.field, e.message) for e in info.value.errors]


def _one(
    problems: list[tuple[str, str | None, str | None, str]], file: str, field: str, words: str
) -> tuple[str, str | None, str | None, str]:
    """The only problem of ``file`` at ``field`` whose message has ``words``."""
    found = [p for p in problems if p[0] == file and p[2] == field and words in p[3]]
    assert len(found) == 1, problems
    return found[0]


class TestLoading:
    def test_the_files_enter_the_version(self) -> None:
        for name in ("instance_networks.csv", *CURATED):
            assert name in REQUIRED_FILES

    def test_every_offer_has_its_network(self, loaded: Knowledge) -> None:
        assert set(loaded.networks) == {o.id for o in loaded.offers}
        net = loaded.networks["aws:p5.48xlarge"]
        assert isinstance(net, records.InstanceNetwork)
        assert (net.network_gbps, net.network_kind, net.rdma, net.cluster) == (
            3200,
            "efa",
            True,
            True,
        )

    def test_providers_carry_sourced_facts(self, loaded: Knowledge) -> None:
        assert set(loaded.providers) == {"aws", "azure", "gcp", "lambda", "vast", "on-premise"}
        vast = loaded.provider("vast")
        assert vast.marketplace
        assert vast.spot_interruptions_per_hour == records.Fact(
            0.01, "test fixture", dt.date(2026, 12, 6)
        )

    def test_an_unknown_provider_suggests_close_ids(self, loaded: Knowledge) -> None:
        with pytest.raises(UnknownId, match="did you mean gcp"):
            loaded.provider("gpc")

    @pytest.mark.parametrize(
        ("provider", "region", "expected"),
        [
            pytest.param("aws", "us-east-1", 380, id="the-region-row"),
            pytest.param("aws", "eu-west-1", 475, id="the-world-average"),
            pytest.param("gcp", "us-central1", 300, id="the-provider-fallback"),
            pytest.param("vast", "Bulgaria, BG, EU", 410, id="a-marketplace-region"),
            pytest.param("on-premise", "anywhere", 475, id="on-premise"),
        ],
    )
    def test_grid_intensity_falls_back_to_the_star_rows(
        self, loaded: Knowledge, provider: str, region: str, expected: float
    ) -> None:
        assert loaded.grid_intensity(provider, region).g_co2e_per_kwh == expected

    def test_input_rates_and_the_reserved_vcpus(self, loaded: Knowledge) -> None:
        text = loaded.input_rates["text"]
        assert text.bytes_per_token is not None
        assert text.bytes_per_token.value == 2
        assert text.bytes_per_sample is None
        reserved = loaded.input_rates["reserved"].vcpus_per_gpu
        assert reserved is not None
        assert reserved.value == 1

    def test_server_designs_take_a_port_count_plain_or_sourced(self, loaded: Knowledge) -> None:
        designs = loaded.server_designs
        assert designs["hgx_8gpu"].form_factors == ("sxm",)
        assert designs["pcie_4gpu"].network_ports_per_server == 1
        assert designs["pcie_8gpu"].network_ports_per_server == 2
        assert designs["workstation"].network == "none"

    def test_stats_count_the_new_records(self, loaded: Knowledge) -> None:
        stats = loaded.stats()
        assert stats["instance_networks"] == stats["offers"]
        assert stats["server_designs"] == 4


# A corruption returns the file, field and words of the message it must cause, and whether
# the problem is a row's (else the file's, e.g. a record that is missing)
Problem = tuple[str, str, str, bool]
Corruption = Callable[[Path], Problem]


def offer_without_network(root: Path) -> Problem:
    _drop_line(root / "instance_networks.csv", "aws,p5.48xlarge,")
    return "instance_networks.csv", "instance_type", "offer 'aws:p5.48xlarge'", False


def network_without_offer(root: Path) -> Problem:
    _edit(root / "instance_networks.csv", "aws,p5.48xlarge,", "aws,p5.96xlarge,")
    return "instance_networks.csv", "instance_type", "no offer 'aws:p5.96xlarge'", True


def network_rdma_on_internet(root: Path) -> Problem:
    path = root / "instance_networks.csv"
    line = next(x for x in path.read_text().splitlines() if x.startswith("vast,"))
    _edit(path, line, line.replace(",internet,false,false,", ",internet,true,false,"))
    return "instance_networks.csv", "rdma", "internet", True


def provider_missing(root: Path) -> Problem:
    text = (root / "providers.yaml").read_text(encoding="utf-8")
    start = text.index("- id: vast")
    end = text.index("- id: on-premise")
    (root / "providers.yaml").write_text(text[:start] + text[end:], encoding="utf-8")
    return "providers.yaml", "id", "provider 'vast'", False


def provider_unknown_field(root: Path) -> Problem:
    _edit(root / "providers.yaml", "  marketplace: true\n", "  marketplace: true\n  colour: red\n")
    return "providers.yaml", "colour", "Unknown field", True


def provider_pue_out_of_range(root: Path) -> Problem:
    _edit(root / "providers.yaml", "pue: {value: 1.2,", "pue: {value: 0.5,")
    return "providers.yaml", "pue.value", "greater than or equal to 1", True


def on_premise_pue_differs(root: Path) -> Problem:
    _edit(root / "providers.yaml", "pue: {value: 1.56,", "pue: {value: 1.4,")
    return "providers.yaml", "pue.value", "pue.average", True


def grid_region_unknown(root: Path) -> Problem:
    _edit(root / "grid_intensity.csv", "aws,us-east-1,", "aws,us-east-one,")
    return "grid_intensity.csv", "region", "did you mean us-east-2, us-east-1", True


def grid_without_world_average(root: Path) -> Problem:
    _drop_line(root / "grid_intensity.csv", "*,*,")
    return "grid_intensity.csv", "provider", "'*,*'", False


def input_rate_with_two_sizes(root: Path) -> Problem:
    _edit(
        root / "input_rates.yaml",
        "  bytes_per_sample: {value: 110000,",
        "  bytes_per_token: {value: 2, source: x y z, as_of: '2026-12-06'}\n"
        "  bytes_per_sample: {value: 110000,",
    )
    return "input_rates.yaml", "bytes_per_sample", "exactly one", True


def design_network_unknown(root: Path) -> Problem:
    _edit(root / "server_designs.yaml", "network: ethernet-100g", "network: ethernet-100")
    return "server_designs.yaml", "network", "did you mean ethernet-100g", True


def design_network_inside_a_server(root: Path) -> Problem:
    _edit(root / "server_designs.yaml", "network: ethernet-100g", "network: nvlink-4")
    return "server_designs.yaml", "network", "not inter-node", True


def design_without_its_cost(root: Path) -> Problem:
    _edit(root / "server_designs.yaml", "- id: workstation", "- id: tower")
    return "server_designs.yaml", "id", "server_cost_usd_per_gpu_slot.tower", True


@pytest.mark.parametrize(
    "corrupt",
    [
        offer_without_network,
        network_without_offer,
        network_rdma_on_internet,
        provider_missing,
        provider_unknown_field,
        provider_pue_out_of_range,
        on_premise_pue_differs,
        grid_region_unknown,
        grid_without_world_average,
        input_rate_with_two_sizes,
        design_network_unknown,
        design_network_inside_a_server,
        design_without_its_cost,
    ],
    ids=lambda f: f.__name__,
)
def test_a_bad_reference_names_file_row_and_field(data: Path, corrupt: Corruption) -> None:
    file, field, words, of_a_row = corrupt(data)
    _, row, _, _ = _one(_problems(data), file, field, words)
    assert (row is not None) == of_a_row


def test_a_missing_curated_file_is_named(data: Path) -> None:
    (data / "server_designs.yaml").unlink()
    assert ("server_designs.yaml", None, None, "required file is missing") in _problems(data)
