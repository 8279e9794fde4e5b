"""GET /v1/recommendations/{id}/export.csv and /quote: a stored recommendation as CSV for a
spreadsheet and as a print-ready quote whose bill of materials the cost engine prices."""

from __future__ import annotations

import copy
import csv
import html
import io
from dataclasses import dataclass
from html.parser import HTMLParser
from typing import Any

import pytest
from flask.testing import FlaskClient

from knowledge import Knowledge
from service import create_app
from service.engine.requests import UsageAsked
from service.exports import COLUMNS, bill_of_materials, candidates_csv
from service.quote import quote_html
from tests.conftest import with_key
from tests.service.helpers import problem

LIGHT: dict[str, Any] = {
    "model": {"name": "bert-base"},
    "workload": {"task": "fine-tuning", "batch_size": 32, "seq_len": 384, "precision": "bf16",
                 "dataset_samples": 88000, "epochs": 2},
}  # fmt: skip
USAGE = {"gpu_hours_per_month": 600, "horizon_months": 36}
OWNED: dict[str, Any] = {**LIGHT, "constraints": {"deployment": "on-premise"}, "usage": USAGE}
ROUTES = ("/v1/recommendations/{}/export.csv", "/v1/recommendations/{}/quote")


@dataclass(frozen=True)
class Stored:
    """Two recommendations stored in one app: a cloud first choice and an owned one."""

    client: FlaskClient
    cloud: dict[str, Any]
    owned: dict[str, Any]


@pytest.fixture(scope="module")
def stored() -> Stored:
    client = with_key(create_app({"TESTING": True}).test_client())
    answers = []
    for body in (LIGHT, OWNED):
        response = client.post("/v1/recommendations", json=body)
        assert response.status_code == 200, response.get_data(as_text=True)
        answers.append(response.get_json())
    return Stored(client, *answers)


class Tags(HTMLParser):
    """Every tag opened is closed, in order (void elements aside)."""

    VOID = frozenset({"meta", "br", "hr", "img", "link", "input", "col", "wbr"})

    def __init__(self) -> None:
        super().__init__()
        self.open: list[str] = []
        self.seen: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.seen.add(tag)
        if tag not in self.VOID:
            self.open.append(tag)

    def handle_endtag(self, tag: str) -> None:
        assert self.open, f"</{tag}> closes nothing"
        assert self.open.pop() == tag, f"</{tag}> closes another tag"


def well_formed(page: str) -> set[str]:
    """The tags of ``page``, once checked that each is closed; fails otherwise."""
    parser = Tags()
    parser.feed(page)
    parser.close()
    assert parser.open == [], f"left open: {parser.open}"
    return parser.seen


def rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def candidate(**changes: Any) -> dict[str, Any]:
    """A cloud candidate as the answer gives one, with ``changes`` (dotted keys reach in)."""
    c: dict[str, Any] = {
        "rank": 1, "gpu": "h100-sxm-80gb", "gpu_name": "NVIDIA H100 SXM5 80GB", "count": 8,
        "vram_gib": 80.0, "links": [], "layout": None, "score": 1.0, "pareto": True,
        "deployment": {"kind": "cloud", "provider": "aws", "instance_type": "p5.48xlarge",
                       "server_design": None, "region": "us-east-1", "pricing": "on_demand",
                       "instances": 1, "gpus_per_instance": 8},
        "estimate": {"unit": "job", "memory_per_gpu_gib": 40.0, "memory_headroom": 0.4},
        "job": {"hours": 2.0},
        "cost": {"per_unit_usd": 100.0, "usd_per_gpu_hour": 6.25, "monthly_usd": 100.0,
                 "horizon_usd": 3600.0, "capital_usd": 0.0,
                 "usage": {"gpu_hours_per_month": 16.0, "horizon_months": 36}},
        "energy": {"kwh": 20.0, "kg_co2e": 8.0, "pue": 1.1, "pue_source": "aws",
                   "grid_g_co2e_per_kwh": 400.0, "grid_source": "ember"},
        "offer": {"offer_id": "aws:p5.48xlarge", "provider": "aws", "instance_type": "p5.48xlarge",
                  "region": "us-east-1", "catalog_date": "2026-01-01", "source": "aws price list",
                  "pricing": "on_demand", "gpus_per_instance": 8, "instances": 1,
                  "usd_per_gpu_hour": 6.25, "monthly_usd": 100.0, "horizon_usd": 3600.0},
        "reasons": [{"rule": "vram-beyond-fit", "effect": "advise", "message": "roomy",
                     "source": "rightsize", "as_of": "2026-01-01"}],
    }  # fmt: skip
    for dotted, value in changes.items():
        *path, last = dotted.split(".")
        node = c
        for key in path:
            node = node[key]
        node[last] = value
    return c


def answer(*candidates: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {
        "id": "0123456789abcdef01234567", "objective": "best_value", "why_first": None,
        "recommendations": list(candidates), "excluded": [], "advice": [], "summary": "",
        "assumptions": ["one assumption"], "knowledge_version": "k", "rules_version": "r",
        "created_at": "2026-12-01T10:00:00+00:00", "request": LIGHT, **fields,
    }  # fmt: skip


class TestCandidatesCsv:
    @pytest.mark.parametrize("which", ["cloud", "owned"])
    def test_one_row_per_candidate_as_the_json_says(self, stored: Stored, which: str) -> None:
        body = getattr(stored, which)
        response = stored.client.get(ROUTES[0].format(body["id"]))
        assert response.status_code == 200
        found = rows(response.get_data(as_text=True))
        recs = body["recommendations"]
        assert len(found) == len(recs) > 0
        assert set(found[0]) == set(COLUMNS)
        assert [int(r["rank"]) for r in found] == [r["rank"] for r in recs]
        assert [r["gpu"] for r in found] == [r["gpu"] for r in recs]
        assert [float(r["per_unit_usd"]) for r in found] == [
            r["cost"]["per_unit_usd"] for r in recs
        ]
        for row, rec in zip(found, recs, strict=True):
            assert row["deployment"] == rec["deployment"]["kind"]
            assert row["rules"] == ";".join(x["rule"] for x in rec["reasons"])
            assert row["rules"]  # every candidate here has a reason
            assert float(row["horizon_usd"]) == rec["cost"]["horizon_usd"]
            assert float(row["kg_co2e"]) == rec["energy"]["kg_co2e"]
            assert row["fits"] == "true"

    def test_owned_rows_give_the_capital_per_gpu_and_the_server_design(
        self, stored: Stored
    ) -> None:
        first = stored.owned["recommendations"][0]
        row = rows(stored.client.get(ROUTES[0].format(stored.owned["id"])).get_data(as_text=True))[
            0
        ]
        assert row["server_design"] == first["deployment"]["server_design"]
        assert row["instance_type"] == ""
        assert row["region"] == ""
        assert float(row["capital_usd_per_gpu"]) == first["cost"]["capital_usd"] / first["count"]
        assert row["usd_per_instance_hour"] == ""

    def test_is_a_utf8_attachment_named_after_the_id(self, stored: Stored) -> None:
        ident = stored.cloud["id"]
        response = stored.client.get(ROUTES[0].format(ident))
        assert response.headers["Content-Type"] == "text/csv; charset=utf-8"
        disposition = f'attachment; filename="rightsize-{ident}.csv"'
        assert response.headers["Content-Disposition"] == disposition

    def test_text_a_spreadsheet_would_run_is_quoted_and_numbers_keep_their_sign(self) -> None:
        changes = {
            "gpu_name": '=HYPERLINK("http://x")',
            "deployment.provider": "+cmd|' /C calc'!A0",
            "deployment.region": "-2+3",
            "deployment.instance_type": "@SUM(A1)",
            "cost.per_unit_usd": -1.5,
            "reasons": [{"rule": "=1+1"}, {"rule": "ok"}],
        }
        crafted = candidate(**changes)
        row = rows(candidates_csv(answer(crafted)))[0]
        assert row["gpu_name"] == '\'=HYPERLINK("http://x")'
        assert row["provider"] == "'+cmd|' /C calc'!A0"
        assert row["region"] == "'-2+3"
        assert row["instance_type"] == "'@SUM(A1)"
        assert row["rules"] == "'=1+1;ok"
        assert row["per_unit_usd"] == "-1.5"  # a number written here, not text
        assert row["usd_per_instance_hour"] == "50.0"  # 6.25 a GPU-hour x 8 GPUs

    def test_an_answer_without_candidates_is_a_header(self) -> None:
        assert candidates_csv(answer()).splitlines() == [",".join(COLUMNS)]


class TestQuote:
    def test_an_owned_first_choice_has_a_bill_priced_as_tco_prices_it(self, stored: Stored) -> None:
        first = stored.owned["recommendations"][0]
        response = stored.client.get(ROUTES[1].format(stored.owned["id"]))
        assert response.status_code == 200
        assert response.mimetype == "text/html"
        page = response.get_data(as_text=True)
        tags = well_formed(page)
        assert "script" not in tags
        assert "<script" not in page.lower()
        shown = (stored.owned["id"], stored.owned["knowledge_version"], first["gpu_name"],
                 "bert-base", "fine-tuning", "88,000 samples", "@media print", "size: A4",
                 "Print / Save as PDF", "Bill of materials", "<td>GPUs</td>", "<td>Servers</td>",
                 "Power and cooling", "kW", "Total cost of ownership")  # fmt: skip
        for part in shown:
            assert part in page, part
        tco = stored.client.post(
            "/v1/tco", json={"gpu": first["gpu"], "count": first["count"], "usage": USAGE}
        ).get_json()
        assert f"{tco['on_premise']['horizon_usd']:,.0f} USD" in page
        assert tco["on_premise"]["horizon_usd"] == pytest.approx(first["cost"]["horizon_usd"])
        assert f"{tco['on_premise']['capital_usd']:,.0f} USD" in page
        cloud = tco["cloud"]  # the answer has no cloud candidate: renting the same GPUs
        assert f"rent the same GPUs: {cloud['provider']} {cloud['instance_type']}" in page
        assert f"{cloud['monthly_usd']:,.0f} USD" in page
        for p in tco["parameters"]:  # each figure's source
            assert html.escape(p["source"]) in page

    def test_a_cloud_first_choice_quotes_its_offer(self, stored: Stored) -> None:
        first = stored.cloud["recommendations"][0]
        page = stored.client.get(ROUTES[1].format(stored.cloud["id"])).get_data(as_text=True)
        well_formed(page)
        offer = first["offer"]
        for part in (offer["provider"], offer["instance_type"], offer["region"],
                     offer["catalog_date"], first["gpu_name"]):  # fmt: skip
            assert part in page
        owned = any(
            r["deployment"]["kind"] == "on-premise" for r in stored.cloud["recommendations"]
        )
        assert ("On-premise alternative" in page) is owned

    @pytest.mark.parametrize("route", ROUTES)
    def test_an_unknown_id_is_a_problem(self, stored: Stored, route: str) -> None:
        body = problem(stored.client.get(route.format("0" * 24)), 404)
        assert body["value"] == "0" * 24

    def test_the_contract_says_csv_and_html(self, stored: Stored) -> None:
        paths = stored.client.get("/openapi.json").get_json()["paths"]
        for route, kind in zip(ROUTES, ("text/csv", "text/html"), strict=True):
            responses = paths[route.format("{rec_id}")]["get"]["responses"]
            assert list(responses["200"]["content"]) == [kind]
            assert responses["200"]["description"]
            assert "application/problem+json" in responses["404"]["content"]

    def test_text_from_the_answer_is_escaped(self) -> None:
        evil = "<script>alert(1)</script>"
        request = {**LIGHT, "model": {"name": evil}}
        page = quote_html(answer(candidate(gpu_name=evil), request=request, why_first=evil), None)
        well_formed(page)
        assert "<script" not in page
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


class TestBill:
    def test_lines_sum_to_the_engines_capital_with_a_fabric_beyond_one_server(
        self, stored: Stored, knowledge: Knowledge
    ) -> None:
        owned = copy.deepcopy(stored.owned)
        first = owned["recommendations"][0]
        first.update(gpu="h100-sxm-80gb", count=16)
        first["deployment"].update(server_design="hgx_8gpu", instances=2)
        bill = bill_of_materials(knowledge, owned, UsageAsked(**USAGE))
        assert bill is not None
        assert [x.item for x in bill.lines] == ["GPUs", "Servers", "Networking"]
        assert [x.quantity for x in bill.lines] == [16, 16, 16]
        capital = bill.tco["on_premise"]["capital_usd"]
        assert sum(x.total_usd for x in bill.lines) == pytest.approx(capital, rel=1e-12)
        assert bill.servers == 2
        assert bill.count == 16
        page = quote_html(owned, bill)
        well_formed(page)
        assert "<td>Networking</td>" in page

    def test_a_usage_beyond_the_count_is_not_priced(
        self, stored: Stored, knowledge: Knowledge
    ) -> None:
        asked = UsageAsked(gpu_hours_per_month=5000.0)  # more than 1 GPU gives in a month
        assert bill_of_materials(knowledge, stored.owned, asked) is None
        page = quote_html(stored.owned, None)
        well_formed(page)
        assert "cannot price" in page

    def test_an_answer_without_an_owned_candidate_has_none(self, knowledge: Knowledge) -> None:
        assert bill_of_materials(knowledge, answer(candidate()), UsageAsked()) is None
