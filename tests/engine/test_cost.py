"""Owning against renting: the on-premise sum, cloud offers, break-even, the hybrid."""

from __future__ import annotations

import pytest

from knowledge import Knowledge
from service.engine.deciding import cost
from service.engine.deciding.cost import Usage
from service.engine.errors import InvalidRequest
from service.engine.requests import UsageAsked

H100 = "h100-sxm-80gb"  # SXM: an HGX server slot; offers on many providers, some with spot

# A hand-checkable 8 x H100 SXM server: every parameter given by the request.
OVERRIDES = {
    "gpu_price_usd": 25_000,
    "server_cost_usd_per_gpu_slot": 8_000,
    "power_price_usd_per_kwh": 0.10,
    "pue": 1.5,
    "colocation_usd_per_kw_month": 200,
    "staff_cost_usd_per_year": 120_000,
    "staff_fte_per_gpu_server": 0.05,
    "depreciation_years": 4,
    "server_power_overhead_w_per_gpu_slot": 500,
    "utilisation": 0.8,
}


class TestOnPremise:
    def test_figures_recomputed_by_hand(self, knowledge: Knowledge) -> None:
        gpu = knowledge.gpus[H100]  # 700 W TDP
        params = cost.onprem_parameters(knowledge, OVERRIDES, gpu, 8)
        own = cost.on_premise(gpu, 8, Usage(4000, horizon_months=48), params)
        assert own.capital_usd == pytest.approx(8 * (25_000 + 8_000))  # 264,000; no fabric
        # (700 + 500) W = 1.2 kW a GPU; x PUE 1.5 x USD 0.10 / kWh
        assert own.energy_usd_per_gpu_hour == pytest.approx(0.18)
        # 264,000 / 48 months + 120,000 x 0.05 x 1 server / 12 + 8 x 1.2 kW x 200
        assert own.monthly_fixed_usd == pytest.approx(5_500 + 500 + 1_920)
        assert own.monthly_usd == pytest.approx(7_920 + 0.18 * 4000)  # 8,640
        assert own.cost_per_gpu_hour_usd == pytest.approx(8_640 / 4000)  # 2.16
        assert own.horizon_usd == pytest.approx(8_640 * 48)
        assert own.utilisation == pytest.approx(4000 / (8 * 730))

    def test_overridden_parameters_say_so(self, knowledge: Knowledge) -> None:
        params = cost.onprem_parameters(knowledge, {"pue": 1.2}, knowledge.gpus[H100], 8)
        assert params["pue"].value == 1.2
        assert (params["pue"].source, params["pue"].as_of) == ("request", "request")
        assert params["depreciation_years"].source != "request"
        assert params["server_cost_usd_per_gpu_slot"].id.endswith(".hgx_8gpu")

    def test_fabric_only_beyond_one_server(self, knowledge: Knowledge) -> None:
        gpu = knowledge.gpus[H100]
        one = cost.onprem_parameters(knowledge, None, gpu, 8)
        two = cost.onprem_parameters(knowledge, None, gpu, 16)
        assert "network_usd_per_gpu" not in one
        eight = cost.on_premise(gpu, 8, Usage(1000), one).capital_usd
        sixteen = cost.on_premise(gpu, 16, Usage(1000), two).capital_usd
        assert sixteen / 16 == pytest.approx(eight / 8 + two["network_usd_per_gpu"].value)

    @pytest.mark.parametrize(
        ("gpu", "count", "server", "power"),
        [
            pytest.param("rtx-4090", 1, "workstation", "us_commercial", id="consumer-tower"),
            pytest.param("l40s", 4, "pcie_4gpu", "us_industrial", id="pcie-4"),
            pytest.param("l40s", 8, "pcie_8gpu", "us_industrial", id="pcie-8"),
            pytest.param(H100, 1, "hgx_8gpu", "us_industrial", id="sxm"),
        ],
    )
    def test_server_kind_and_power_price(
        self, knowledge: Knowledge, gpu: str, count: int, server: str, power: str
    ) -> None:
        params = cost.onprem_parameters(knowledge, None, knowledge.gpus[gpu], count)
        assert params["server_cost_usd_per_gpu_slot"].id == f"server_cost_usd_per_gpu_slot.{server}"
        assert params["power_price_usd_per_kwh"].id == f"power_price_usd_per_kwh.{power}"

    def test_eu_region_prices_eu_power(self, knowledge: Knowledge) -> None:
        params = cost.onprem_parameters(knowledge, None, knowledge.gpus[H100], 8, "eu-west-1")
        assert params["power_price_usd_per_kwh"].id == "power_price_usd_per_kwh.eu_nonhousehold"


class TestErrors:
    def test_unknown_override_names_the_field(self, knowledge: Knowledge) -> None:
        with pytest.raises(InvalidRequest) as caught:
            cost.onprem_parameters(knowledge, {"gpu_prise_usd": 1.0}, knowledge.gpus[H100], 8)
        assert caught.value.field == "onprem.gpu_prise_usd"
        assert "gpu_price_usd" in caught.value.message  # the known names are listed

    def test_gpu_without_a_price(self, knowledge: Knowledge) -> None:
        gpu = knowledge.gpus["h100-sxm-96gb"]
        assert gpu.price_usd is None
        with pytest.raises(InvalidRequest) as caught:
            cost.onprem_parameters(knowledge, None, gpu, 8)
        assert caught.value.field == "onprem.gpu_price_usd"
        given = cost.onprem_parameters(knowledge, {"gpu_price_usd": 30_000}, gpu, 8)
        assert given["gpu_price_usd"].value == 30_000

    def test_more_hours_than_the_count_gives(self, knowledge: Knowledge) -> None:
        with pytest.raises(InvalidRequest) as caught:
            cost.tco(knowledge, knowledge.gpus[H100], 1, Usage(800))
        assert caught.value.field == "usage.gpu_hours_per_month"

    @pytest.mark.parametrize(
        ("usage", "field"),
        [
            pytest.param({"gpu_hours_per_month": 0}, "usage.gpu_hours_per_month", id="no-hours"),
            pytest.param({"gpu_hours_per_month": 9, "pattern": "spiky"}, "usage.pattern", id="pat"),
            pytest.param({"runs_per_month": 3}, "usage.gpu_hours_per_month", id="no-job-length"),
        ],
    )
    def test_bad_usage(self, usage: dict[str, object], field: str) -> None:
        with pytest.raises(InvalidRequest) as caught:
            cost.usage_from(UsageAsked(**usage), None)
        assert caught.value.field == field


class TestUsage:
    def test_runs_of_a_job(self) -> None:
        assert cost.usage_from(UsageAsked(runs_per_month=3), 40.0).gpu_hours_per_month == 120
        assert cost.usage_from(UsageAsked(), 40.0).gpu_hours_per_month == 40  # one run a month
        assert cost.usage_from(UsageAsked(gpu_hours_per_month=7), 40.0).gpu_hours_per_month == 7

    def test_baseline_defaults(self) -> None:
        assert Usage(100).baseline_gpu_hours_per_month == 100
        assert Usage(100, pattern="bursty", peak_to_average=4).baseline_gpu_hours_per_month == 25
        assert Usage(100, baseline_share=0.3).baseline_gpu_hours_per_month == pytest.approx(30)


class TestCloud:
    def test_filters_narrow_the_offers(self, knowledge: Knowledge) -> None:
        every = cost.cloud_offers(knowledge, H100, 8, Usage(1000))
        lambda_ = cost.cloud_offers(knowledge, H100, 8, Usage(1000), providers=["lambda"])
        east = cost.cloud_offers(knowledge, H100, 8, Usage(1000), regions=["us-east-1"])
        assert 0 < len(lambda_) < len(every)
        assert 0 < len(east) < len(every)
        assert {c.provider for c in lambda_} == {"lambda"}
        assert {c.region for c in east} == {"us-east-1"}

    def test_sorted_by_rate_and_whole_gpus_only(self, knowledge: Knowledge) -> None:
        offers = cost.cloud_offers(knowledge, "l4", 1, Usage(100))
        rates = [c.usd_per_gpu_hour for c in offers]
        assert rates == sorted(rates)
        assert min(c.gpus_per_instance for c in offers) >= 1  # the fractional g6f are left out

    def test_spot_only_when_interruptible(self, knowledge: Knowledge) -> None:
        plain = cost.cloud_offers(knowledge, H100, 1, Usage(20, pattern="bursty"))
        spot = cost.cloud_offers(
            knowledge, H100, 1, Usage(20, pattern="bursty", interruptible=True)
        )
        assert "spot" not in {c.pricing for c in plain}
        assert "spot" in {c.pricing for c in spot}

    def test_committed_price_billed_every_hour(self, knowledge: Knowledge) -> None:
        steady = cost.cloud_offers(knowledge, "a100-sxm4-80gb", 8, Usage(1000))
        reserved = [c for c in steady if c.pricing == "reserved"]
        assert reserved  # aws p4de has a committed price
        c = reserved[0]
        rate = c.usd_per_gpu_hour * c.gpus_per_instance  # the instance's hourly price
        assert c.monthly_usd == pytest.approx(c.instances * rate * 730)
        bursty = cost.cloud_offers(knowledge, "a100-sxm4-80gb", 8, Usage(1000, pattern="bursty"))
        assert "reserved" not in {c.pricing for c in bursty}

    def test_a_partly_used_instance_is_paid_whole(self, knowledge: Knowledge) -> None:
        offers = cost.cloud_offers(knowledge, "a100-sxm4-80gb", 1, Usage(100), ["lambda"])
        c = offers[0]  # lambda rents A100 SXM only 8 at a time
        assert (c.gpus_per_instance, c.instances) == (8, 1)
        assert c.usd_per_gpu_hour == pytest.approx(22.32)  # the whole instance's price
        assert c.monthly_usd == pytest.approx(100 * 22.32)


class TestOwningAgainstRenting:
    def test_steady_use_is_cheaper_owned(self, knowledge: Knowledge) -> None:
        # 700 of 730 hours busy for 3 years: ~USD 1,100 a month owned against USD 1.80 an
        # hour (the cheapest H100 offer, a marketplace) x 700. The A100 SXM does not hold
        # here: a USD 0.93/h marketplace offer beats owning it even fully used.
        found = cost.tco(knowledge, knowledge.gpus[H100], 1, Usage(700, horizon_months=36))
        assert found["cheapest"] == "on_premise"
        assert found["on_premise"]["monthly_usd"] < found["cloud"]["monthly_usd"]
        assert found["hybrid"] is None  # all of a steady use is baseline

    def test_rare_bursts_are_cheaper_rented_on_spot(self, knowledge: Knowledge) -> None:
        usage = Usage(20, pattern="bursty", peak_to_average=4, interruptible=True)
        found = cost.tco(knowledge, knowledge.gpus[H100], 1, usage)
        assert found["cheapest"] == "cloud"
        assert found["cloud"]["pricing"] == "spot"
        assert found["cloud"]["monthly_usd"] < found["on_premise"]["monthly_usd"] / 10

    def test_break_even_costs_the_same_both_ways(self, knowledge: Knowledge) -> None:
        gpu = knowledge.gpus[H100]
        params = cost.onprem_parameters(knowledge, None, gpu, 1)
        rate = cost.cloud_offers(knowledge, H100, 1, Usage(1))[0].usd_per_gpu_hour
        hours = cost.break_even_gpu_hours_per_month(cost.on_premise(gpu, 1, Usage(1), params), rate)
        assert hours is not None
        assert 0 < hours < 730
        owned = cost.on_premise(gpu, 1, Usage(hours), params).monthly_usd
        assert owned == pytest.approx(hours * rate)

    def test_no_break_even_when_renting_always_wins(self, knowledge: Knowledge) -> None:
        gpu = knowledge.gpus["a100-sxm4-80gb"]
        own = cost.on_premise(gpu, 1, Usage(1), cost.onprem_parameters(knowledge, None, gpu, 1))
        assert cost.break_even_gpu_hours_per_month(own, 0.93) is None  # above 730 h
        assert cost.break_even_gpu_hours_per_month(own, own.energy_usd_per_gpu_hour) is None

    def test_hybrid_beats_both(self, knowledge: Knowledge) -> None:
        # 8 H100s at the peak, 2,000 GPU-hours a month, 60% of them a steady baseline, on
        # Lambda (USD 3.99 a GPU-hour): 3 owned GPUs carry the 1,200 baseline hours at about
        # USD 2.45 an hour, the other 800 are rented; all 8 owned sit idle 2/3 of the time.
        usage = Usage(2000, pattern="bursty", peak_to_average=3, baseline_share=0.6)
        found = cost.tco(knowledge, knowledge.gpus[H100], 8, usage, providers=["lambda"])
        mix = found["hybrid"]
        assert found["cheapest"] == "hybrid"
        assert mix["monthly_usd"] < found["cloud"]["monthly_usd"]
        assert mix["monthly_usd"] < found["on_premise"]["monthly_usd"]
        assert mix["owned_count"] == 3  # ceil(1,200 / (730 x 0.6))
        assert mix["owned_gpu_hours_per_month"] + mix["rented_gpu_hours_per_month"] == 2000

    def test_tco_reports_its_sources(self, knowledge: Knowledge) -> None:
        found = cost.tco(knowledge, knowledge.gpus[H100], 8, Usage(2000), {"pue": 1.3})
        by_name = {p["name"]: p for p in found["parameters"]}
        assert by_name["pue"]["source"] == "request"
        assert all(p["source"] and p["as_of"] for p in found["parameters"])
        assert found["cloud"]["cost_per_gpu_hour_usd"] == found["cloud"]["usd_per_gpu_hour"]
        assert len(found["cloud_offers"]) <= 10
        assert found["assumptions"]


def _cheapest_by_scanning(
    knowledge: Knowledge, gpu: str, count: int, usage: Usage, providers: list[str] | None
) -> list[cost.CloudCost]:
    """Every priced region scanned for this usage: the cheapest a month of each provider and
    pricing (then per GPU-hour, then the first in the catalog), cheapest first."""
    best: dict[tuple[str, str], tuple[tuple[float, float, int], cost.CloudCost]] = {}
    for index, found in enumerate(cost._priced(knowledge, gpu, count, usage, providers, None)):
        offer, _, pricing, _, per_gpu_hour, monthly = found
        key = (monthly, per_gpu_hour, index)
        if (offer.provider, pricing) not in best or key < best[(offer.provider, pricing)][0]:
            best[(offer.provider, pricing)] = (key, cost._cloud_cost(found, usage))
    return [c for _, c in sorted(best.values(), key=lambda kc: kc[0])]


def test_the_cheapest_offers_kept_per_kind_of_usage_are_those_a_scan_finds(
    knowledge: Knowledge,
) -> None:
    """The cheapest offer of each provider and pricing is kept with the knowledge for a GPU,
    count and kind of pricing, not for the usage's hours (which scale every on-demand and
    spot month alike and leave reserved ones as they are): every GPU with offers, counts,
    hours, steady, bursty and interruptible use give what scanning every region gives."""
    usages = [Usage(1.0), Usage(37.3), Usage(730.0), Usage(5000.0, pattern="bursty",
              peak_to_average=2.0), Usage(20.0, pattern="bursty", interruptible=True,
              peak_to_average=3.0), Usage(700.0, interruptible=True)]  # fmt: skip
    compared = 0
    for gpu in knowledge.offers_by_gpu:
        for count in (1, 3, 8, 64):
            for usage in usages:
                for providers in (None, ["aws", "lambda"]):
                    found = cost.cheapest_offers(knowledge, gpu, count, usage, providers)
                    assert found == _cheapest_by_scanning(knowledge, gpu, count, usage, providers)
                    compared += bool(found)
    assert compared > 500
