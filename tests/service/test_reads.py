"""The read API: GPUs, interconnects, offers, benchmarks; filters, sorting, pagination."""

from __future__ import annotations

import itertools

import pytest
from flask.testing import FlaskClient

from knowledge import Knowledge
from tests.service.helpers import fields_in, get_json, problem


class TestPagination:
    def test_envelope_counts_everything(self, client: FlaskClient, knowledge: Knowledge) -> None:
        body = get_json(client, "/v1/gpus?page_size=10&page=2")
        assert body["total"] == len(knowledge.gpus)
        assert body["page"] == 2
        assert body["page_size"] == 10
        assert body["pages"] == -(-len(knowledge.gpus) // 10)
        assert len(body["items"]) == 10
        assert body["knowledge_version"] == knowledge.version

    def test_page_size_500_is_allowed(self, client: FlaskClient, knowledge: Knowledge) -> None:
        body = get_json(client, "/v1/offers?page_size=500")
        assert len(body["items"]) == min(500, body["total"])

    @pytest.mark.parametrize(
        ("query", "field"),
        [
            pytest.param("page_size=501", "page_size", id="page-size-over-500"),
            pytest.param("page=0", "page", id="page-zero"),
            pytest.param("page=two", "page", id="page-not-a-number"),
            pytest.param("vendr=amd", "vendr", id="unknown-argument"),
            pytest.param("sort=colour", "sort", id="unknown-sort-key"),
            pytest.param("min_memory_gb=-1", "min_memory_gb", id="negative-memory"),
        ],
    )
    def test_bad_arguments_are_422_naming_the_field(
        self, client: FlaskClient, query: str, field: str
    ) -> None:
        body = problem(client.get(f"/v1/gpus?{query}"), 422)
        assert field in fields_in(body)
        assert all(e["location"] == "query" for e in body["errors"])

    def test_page_past_the_end_is_empty(self, client: FlaskClient) -> None:
        body = get_json(client, "/v1/gpus?page=999")
        assert body["items"] == []
        assert body["total"] > 0


class TestGpus:
    def test_filters_combine(self, client: FlaskClient) -> None:
        items = get_json(client, "/v1/gpus?vendor=nvidia&min_memory_gb=80&page_size=500")["items"]
        assert items
        assert all(g["vendor"] == "nvidia" and g["memory_gb"] >= 80 for g in items)
        assert "h100-sxm-80gb" in {g["id"] for g in items}

    def test_precision_filter(self, client: FlaskClient) -> None:
        items = get_json(client, "/v1/gpus?precision=fp8&page_size=500")["items"]
        ids = {g["id"] for g in items}
        assert {"h100-sxm-80gb", "l4", "rtx-4090"} <= ids
        assert "a100-sxm4-80gb" not in ids
        assert all("fp8" in g["precisions"] for g in items)

    def test_architecture_and_form_factor(self, client: FlaskClient) -> None:
        items = get_json(client, "/v1/gpus?architecture=hopper&form_factor=sxm")["items"]
        assert items
        assert all(g["architecture"] == "hopper" and g["form_factor"] == "sxm" for g in items)

    def test_sorting_is_stable_with_nulls_last(self, client: FlaskClient) -> None:
        items = get_json(client, "/v1/gpus?sort=-bf16_tflops&page_size=500")["items"]
        rates = [g["bf16_tflops"] for g in items]
        present = [r for r in rates if r is not None]
        assert present == sorted(present, reverse=True)
        assert rates[len(present) :] == [None] * (len(rates) - len(present))
        again = get_json(client, "/v1/gpus?sort=-bf16_tflops&page_size=500")["items"]
        assert [g["id"] for g in again] == [g["id"] for g in items]
        by_year = get_json(client, "/v1/gpus?sort=release_year&page_size=500")["items"]
        for a, b in itertools.pairwise(by_year):
            assert (a["release_year"], a["id"]) <= (b["release_year"], b["id"])

    def test_by_id(self, client: FlaskClient, knowledge: Knowledge) -> None:
        gpu = get_json(client, "/v1/gpus/h100-sxm-80gb")
        assert gpu["bf16_tflops"] == pytest.approx(989.4, rel=0.01)
        assert gpu["knowledge_version"] == knowledge.version

    def test_by_alias_returns_the_canonical_record(self, client: FlaskClient) -> None:
        assert get_json(client, "/v1/gpus/H100 80GB SXM5")["id"] == "h100-sxm-80gb"

    def test_unknown_id_is_404_with_close_matches(self, client: FlaskClient) -> None:
        body = problem(client.get("/v1/gpus/h100-sxm7"), 404)
        assert "h100-sxm-80gb" in body["suggestions"]
        assert "h100-sxm7" in body["detail"]


class TestInterconnects:
    def test_lists_and_filters(self, client: FlaskClient) -> None:
        body = get_json(client, "/v1/interconnects?kind=infiniband")
        assert body["total"] >= 3
        ndr = next(i for i in body["items"] if i["id"] == "infiniband-ndr")
        assert ndr["bandwidth_gb_per_s_per_direction"] == pytest.approx(50)
        hdr = next(i for i in body["items"] if i["id"] == "infiniband-hdr")
        assert (ndr["servers_of"], hdr["servers_of"]) == (["hopper", "blackwell"], ["ampere"])

    def test_nvlink4_per_direction(self, client: FlaskClient) -> None:
        items = get_json(client, "/v1/interconnects?page_size=500")["items"]
        nvlink4 = next(i for i in items if i["id"] == "nvlink-4")
        assert nvlink4["bandwidth_gb_per_s_per_direction"] == pytest.approx(450)


class TestOffers:
    def test_filter_by_provider_gpu_and_count(self, client: FlaskClient) -> None:
        items = get_json(client, "/v1/offers?provider=aws&gpu=H100&count=8")["items"]
        ids = {o["id"] for o in items}
        assert "aws:p5.48xlarge" in ids
        assert all(o["gpu_id"] == "h100-sxm-80gb" and o["gpu_count"] == 8 for o in items)

    def test_region_price_and_sort(self, client: FlaskClient) -> None:
        body = get_json(
            client, "/v1/offers?provider=aws&gpu=h100-sxm-80gb&count=8&region=us-east-1"
        )
        p5 = next(o for o in body["items"] if o["instance_type"] == "p5.48xlarge")
        assert p5["on_demand_usd_per_hour"] == pytest.approx(55.04, abs=0.01)
        assert p5["on_demand_usd_per_gpu_hour"] == pytest.approx(55.04 / 8, abs=0.01)
        assert p5["regions"] == ["us-east-1"]
        assert p5["interconnect"] == "nvswitch-nvlink4"

    def test_max_price_and_default_sort(self, client: FlaskClient) -> None:
        items = get_json(client, "/v1/offers?max_price_usd_per_hour=1&page_size=500")["items"]
        prices = [o["on_demand_usd_per_hour"] for o in items]
        assert items
        assert max(prices) <= 1
        assert prices == sorted(prices)

    def test_spot_only(self, client: FlaskClient) -> None:
        items = get_json(client, "/v1/offers?spot=true&provider=gcp")["items"]
        assert items
        assert all(o["spot_usd_per_hour"] for o in items)

    def test_unknown_gpu_filter_is_422_with_matches(self, client: FlaskClient) -> None:
        body = problem(client.get("/v1/offers?gpu=h1000"), 422)
        assert fields_in(body) == {"gpu"}


class TestBenchmarks:
    def test_filter_by_model_gpu_precision(self, client: FlaskClient) -> None:
        url = "/v1/benchmarks?model=resnet50&gpu=A100 80GB SXM4&precision=fp16&page_size=500"
        items = get_json(client, url)["items"]
        assert items
        assert {b["workload"] for b in items} <= {"resnet50-imagenet"}
        assert all(b["gpu_id"] == "a100-sxm4-80gb" and b["precision"] == "fp16" for b in items)
        assert all(b["model"] == "resnet-50" for b in items)

    def test_kind_filter(self, client: FlaskClient) -> None:
        items = get_json(client, "/v1/benchmarks?kind=time-to-train&page_size=50")["items"]
        assert items
        assert all(b["unit"] == "minutes" for b in items)

    def test_unknown_model_is_422(self, client: FlaskClient) -> None:
        body = problem(client.get("/v1/benchmarks?model=resnet5000"), 422)
        assert fields_in(body) == {"model"}
