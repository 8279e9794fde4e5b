"""What a GPU count costs: owned (total cost of ownership) against rented (cloud offers),
the use at which owning breaks even, and a hybrid that owns the baseline and rents the rest.

Every on-premise figure comes from ``knowledge/data/onprem.yaml`` or the GPU's catalog
price, each with its source and date, and a request may override any of them. All costs
are in USD; a month is :data:`HOURS_PER_MONTH` hours.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterator, Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from knowledge import Knowledge
from knowledge.records import Gpu, Offer, OfferPrice
from service.engine.errors import InvalidRequest
from service.engine.requests import UsageAsked

HOURS_PER_MONTH = 730.0
GPUS_PER_SERVER = 8
PATTERNS = ("steady", "bursty")
# Each on-premise parameter's short name and the onprem.yaml id it defaults to; {server}
# and {power} are chosen by onprem_parameters. A request may override any of them, and
# the GPU's price.
DEFAULT_IDS = {
    "server_cost_usd_per_gpu_slot": "server_cost_usd_per_gpu_slot.{server}",
    "network_usd_per_gpu": "network_usd_per_gpu.multi_node",
    "power_price_usd_per_kwh": "power_price_usd_per_kwh.{power}",
    "pue": "pue.average",
    "colocation_usd_per_kw_month": "colocation_usd_per_kw_month",
    "staff_cost_usd_per_year": "staff_cost_usd_per_year",
    "staff_fte_per_gpu_server": "staff_fte_per_gpu_server",
    "depreciation_years": "depreciation_years",
    "server_power_overhead_w_per_gpu_slot": "server_power_overhead_w_per_gpu_slot",
    "utilisation": "utilisation.default",
}
OVERRIDABLE = ("gpu_price_usd", *DEFAULT_IDS)


@dataclass(frozen=True, slots=True)
class Bounds:
    """What an override may be: from ``least`` to ``most``."""

    least: float
    most: float

    def error(self, value: float) -> str | None:
        if self.least <= value <= self.most:
            return None
        return f"must be between {self.least:g} and {self.most:g}"


# a PUE is 1 or more (the IT load itself); costs divide by the depreciation years and the
# utilisation, so neither comes near 0
OVERRIDE_BOUNDS = {name: Bounds(0, 1e9) for name in OVERRIDABLE} | {
    "pue": Bounds(1, 10),
    "depreciation_years": Bounds(0.1, 50),
    "utilisation": Bounds(0.01, 1),
}
ASSUMPTIONS = (
    "On-premise, the GPUs are bought for the peak: capital (GPUs, server slots and, beyond "
    "one 8-GPU server, the inter-node fabric) is depreciated straight-line over "
    "depreciation_years and charged for the months of the horizon.",
    "Colocation is paid per provisioned IT kW (GPU TDP plus host overhead per slot, PUE not "
    "applied), whether or not the GPUs are busy.",
    "Staff cost is a share of an administrator per server (servers of up to 8 GPUs).",
    "Energy is drawn at TDP plus host overhead, times PUE, only for the GPU-hours used.",
    "Cloud instances are billed per GPU-hour used, whole instances rounded up, except "
    "committed (reserved) prices, billed for every hour of the horizon; spot prices only "
    "for interruptible work.",
    "The hybrid owns enough GPUs for the steady baseline at the utilisation parameter and "
    "rents the remaining hours from the cheapest cloud offer.",
)


@dataclass(frozen=True, slots=True)
class Usage:
    """How much the GPUs are used: the average GPU-hours a month over a horizon."""

    gpu_hours_per_month: float
    horizon_months: int = 36
    pattern: str = "steady"
    peak_to_average: float = 1.0
    interruptible: bool = False
    baseline_share: float | None = None  # None: steady 1.0, bursty 1 / peak_to_average

    def __post_init__(self) -> None:
        share = self.baseline_share
        checks = (
            ("gpu_hours_per_month", self.gpu_hours_per_month > 0, "must be above 0"),
            ("horizon_months", self.horizon_months >= 1, "must be 1 or more"),
            ("pattern", self.pattern in PATTERNS, f"one of {', '.join(PATTERNS)}"),
            ("peak_to_average", self.peak_to_average >= 1, "must be 1 or more"),
            ("baseline_share", share is None or 0 <= share <= 1, "must be between 0 and 1"),
        )
        for name, ok, expected in checks:
            if not ok:
                raise InvalidRequest(f"usage.{name}", expected, getattr(self, name))

    @property
    def baseline_gpu_hours_per_month(self) -> float:
        """The GPU-hours a month that are a steady baseline (what a hybrid owns)."""
        share = self.baseline_share
        if share is None:
            share = 1.0 if self.pattern == "steady" else 1.0 / self.peak_to_average
        return self.gpu_hours_per_month * share


def usage_from(asked: UsageAsked, job_gpu_hours: float | None) -> Usage:
    """The usage a request states: GPU-hours a month, or runs a month of a job of
    ``job_gpu_hours``; with neither, one run a month (the job must then be known)."""
    hours = asked.gpu_hours_per_month
    if hours is None:
        if job_gpu_hours is None:
            what = "runs_per_month needs a job of known length" if asked.runs_per_month else ""
            raise InvalidRequest(
                "usage.gpu_hours_per_month",
                "give gpu_hours_per_month or runs_per_month" + (f" ({what})" if what else ""),
            )
        runs = asked.runs_per_month
        hours = (1.0 if runs is None else float(runs)) * job_gpu_hours
    return Usage(
        gpu_hours_per_month=float(hours),
        horizon_months=int(asked.horizon_months or 36),
        pattern=asked.pattern or "steady",
        peak_to_average=float(asked.peak_to_average or 1.0),
        interruptible=bool(asked.interruptible),
        baseline_share=asked.baseline_share,
    )


@dataclass(frozen=True, slots=True)
class Parameter:
    """One cost parameter as used: its value, unit, and where it came from."""

    id: str  # the onprem.yaml id (or gpus.<id>.price_usd) it defaults to
    value: float
    unit: str
    source: str
    as_of: str  # ISO date, or "request" where the request overrode it

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def onprem_parameters(
    knowledge: Knowledge,
    overrides: Mapping[str, float] | None,
    gpu: Gpu,
    count: int,
    region: str | None = None,
) -> dict[str, Parameter]:
    """The on-premise parameters for ``count`` x ``gpu``, by short name: the server kind
    its form factor and count call for, the power price of the region (US unless it
    starts with 'eu'), the rest as stored; then ``overrides``."""
    server = server_kind(gpu, count)
    if region and region.lower().startswith("eu"):
        power = "eu_nonhousehold"
    else:  # a workstation sits in an office, a server in a data centre
        power = "us_commercial" if server == "workstation" else "us_industrial"
    stored = {}
    for name, template in DEFAULT_IDS.items():
        p = knowledge.onprem[template.format(server=server, power=power)]
        stored[name] = Parameter(p.id, p.value, p.unit, p.source, p.as_of.isoformat())
    gpu_price_id = f"gpus.{gpu.id}.price_usd"
    if gpu.price_usd is not None:
        as_of = gpu.price_as_of or gpu.as_of
        source = gpu.sources[0] if gpu.sources else "knowledge/data/gpus"
        stored["gpu_price_usd"] = Parameter(
            gpu_price_id,
            gpu.price_usd,
            "usd",
            f"{gpu.price_kind or 'price'}: {source}",
            as_of.isoformat(),
        )
    # A single server needs no fabric between servers.
    out = {k: p for k, p in stored.items() if k != "network_usd_per_gpu" or count > GPUS_PER_SERVER}
    for name, value in (overrides or {}).items():
        if name not in OVERRIDABLE:
            raise InvalidRequest(f"onprem.{name}", f"one of {', '.join(OVERRIDABLE)}", name)
        problem = OVERRIDE_BOUNDS[name].error(value)
        if problem is not None:
            raise InvalidRequest(f"onprem.{name}", problem, value)
        default = stored.get(name, Parameter(gpu_price_id, 0.0, "usd", "", ""))
        out[name] = Parameter(default.id, float(value), default.unit, "request", "request")
    if "gpu_price_usd" not in out:
        raise InvalidRequest(
            "onprem.gpu_price_usd",
            f"the catalog has no price for {gpu.id}: give onprem.gpu_price_usd",
        )
    return out


@dataclass(frozen=True, slots=True)
class OnPremCost:
    """What owning ``count`` GPUs costs at a usage."""

    count: int
    capital_usd: float  # GPUs, server slots and fabric
    monthly_fixed_usd: float  # depreciation, staff and colocation: paid busy or idle
    energy_usd_per_gpu_hour: float  # per GPU-hour used
    monthly_usd: float
    horizon_usd: float
    cost_per_gpu_hour_usd: float  # per GPU-hour used
    utilisation: float  # GPU-hours used / GPU-hours owned; above 1, the count is too small
    parameters: dict[str, Parameter]

    def to_dict(self) -> dict[str, Any]:
        """The figures; the parameters are listed apart, with their sources."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "parameters"}


def on_premise(gpu: Gpu, count: int, usage: Usage, params: Mapping[str, Parameter]) -> OnPremCost:
    """``count`` GPUs bought for the peak and used ``usage.gpu_hours_per_month``: capital
    straight-line over the depreciation years, staff per server, colocation per provisioned
    IT kW, energy at TDP and host power times PUE for the hours used."""
    v = {k: p.value for k, p in params.items()}
    network = v.get("network_usd_per_gpu", 0.0) if count > GPUS_PER_SERVER else 0.0
    capital = count * (v["gpu_price_usd"] + v["server_cost_usd_per_gpu_slot"] + network)
    kw_per_gpu = (gpu.tdp_w + v["server_power_overhead_w_per_gpu_slot"]) / 1000
    servers = math.ceil(count / GPUS_PER_SERVER)
    fixed = (
        capital / (12 * v["depreciation_years"])
        + v["staff_cost_usd_per_year"] * v["staff_fte_per_gpu_server"] * servers / 12
        + count * kw_per_gpu * v["colocation_usd_per_kw_month"]
    )
    energy = kw_per_gpu * v["pue"] * v["power_price_usd_per_kwh"]
    hours = usage.gpu_hours_per_month
    monthly = fixed + energy * hours
    return OnPremCost(
        count=count,
        capital_usd=capital,
        monthly_fixed_usd=fixed,
        energy_usd_per_gpu_hour=energy,
        monthly_usd=monthly,
        horizon_usd=monthly * usage.horizon_months,
        cost_per_gpu_hour_usd=monthly / hours,
        utilisation=hours / (count * HOURS_PER_MONTH),
        parameters=dict(params),
    )


@dataclass(frozen=True, slots=True)
class CloudCost:
    """What renting ``count`` GPUs as one offer, in one region, at one pricing costs."""

    offer_id: str
    provider: str
    instance_type: str
    region: str
    catalog_date: str
    source: str
    pricing: str  # "on_demand" | "spot" | "reserved"
    gpus_per_instance: float
    instances: int
    usd_per_gpu_hour: float  # per GPU-hour used, whole instances paid
    monthly_usd: float
    horizon_usd: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


_Priced = tuple[Offer, OfferPrice, str, int, float, float]


def admitted_rates(price: OfferPrice, interruptible: bool, steady: bool) -> list[tuple[str, float]]:
    """The hourly rates of ``price`` a usage admits, by pricing: on demand; spot for
    interruptible work; committed (reserved) for steady use."""
    rates = [("on_demand", price.on_demand_usd_per_hour)]
    if interruptible and price.spot_usd_per_hour is not None:
        rates.append(("spot", price.spot_usd_per_hour))
    if steady and price.reserved_usd_per_hour is not None:
        rates.append(("reserved", price.reserved_usd_per_hour))
    return rates


def server_kind(gpu: Gpu, count: int) -> str:
    """The server design ``count`` x ``gpu`` are bought in (an onprem.yaml
    ``server_cost_usd_per_gpu_slot.<id>``): an 8-GPU baseboard for SXM and OAM parts, a
    workstation for one or two consumer cards, else a 4- or 8-GPU PCIe server."""
    if gpu.form_factor in ("sxm", "oam"):
        return "hgx_8gpu"
    if count <= 2 and gpu.segment != "datacenter":
        return "workstation"
    return "pcie_4gpu" if count <= 4 else "pcie_8gpu"


def _priced(
    knowledge: Knowledge, gpu_id: str, count: int, usage: Usage,
    providers: Collection[str] | None, regions: Collection[str] | None,
) -> Iterator[_Priced]:  # fmt: skip
    """Each (offer, regional price, pricing) of whole ``gpu_id`` GPUs, in catalog order, with
    the instances ``count`` GPUs take, the price per GPU-hour used and the monthly cost."""
    for offer in knowledge.offers_by_gpu.get(gpu_id, ()):
        if offer.gpu_count < 1 or (providers and offer.provider not in providers):
            continue
        instances = math.ceil(count / offer.gpu_count)
        for price in offer.prices:
            if regions and price.region not in regions:
                continue
            for pricing, rate in admitted_rates(price, usage.interruptible,
                                                usage.pattern == "steady"):  # fmt: skip
                # A count that does not fill its last instance still pays for all of it.
                per_gpu_hour = rate * instances / count
                monthly = usage.gpu_hours_per_month * per_gpu_hour
                if pricing == "reserved":  # committed: every hour is billed, used or not
                    monthly = instances * rate * HOURS_PER_MONTH
                yield offer, price, pricing, instances, per_gpu_hour, monthly


def _cloud_cost(priced: _Priced, usage: Usage) -> CloudCost:
    offer, price, pricing, instances, per_gpu_hour, monthly = priced
    return CloudCost(
        offer.id,
        offer.provider,
        offer.instance_type,
        price.region,
        price.catalog_date.isoformat(),
        price.source,
        pricing,
        offer.gpu_count,
        instances,
        per_gpu_hour,
        monthly,
        monthly * usage.horizon_months,
    )


def cloud_offers(
    knowledge: Knowledge,
    gpu_id: str,
    count: int,
    usage: Usage,
    providers: Collection[str] | None = None,
    regions: Collection[str] | None = None,
) -> list[CloudCost]:
    """Every regional price of every offer of whole ``gpu_id`` GPUs, cheapest per GPU-hour
    first: on demand; spot for interruptible work; committed (reserved) for steady use."""
    found = _priced(knowledge, gpu_id, count, usage, providers, regions)
    return sorted((_cloud_cost(x, usage) for x in found), key=lambda c: c.usd_per_gpu_hour)


def cheapest_offers(
    knowledge: Knowledge,
    gpu_id: str,
    count: int,
    usage: Usage,
    providers: Collection[str] | None = None,
    regions: Collection[str] | None = None,
) -> list[CloudCost]:
    """Of :func:`cloud_offers`, the cheapest per month of each provider and pricing, cheapest
    first (at equal cost, cheaper per GPU-hour, then in catalog order)."""
    found = []
    for index, x in _group_cheapest(knowledge, gpu_id, count, usage, providers, regions):
        _, _, pricing, _, per_gpu_hour, monthly = x
        if pricing != "reserved":  # reserved: every hour, whatever the usage
            monthly = usage.gpu_hours_per_month * per_gpu_hour
        found.append(((monthly, per_gpu_hour, index), (*x[:5], monthly)))
    return [_cloud_cost(x, usage) for _, x in sorted(found, key=lambda kx: kx[0])]


def _group_cheapest(
    knowledge: Knowledge, gpu_id: str, count: int, usage: Usage,
    providers: Collection[str] | None, regions: Collection[str] | None,
) -> list[tuple[int, _Priced]]:  # fmt: skip
    """The cheapest priced offer of each provider and pricing, with its catalog index; kept
    with the knowledge. On demand or spot, the month's cost is the usage's GPU-hours times
    the price per GPU-hour, so the cheapest per GPU-hour (then the first in the catalog) is
    the cheapest per month whatever the hours; reserved, the month does not depend on them.
    Only the kinds of pricing the usage admits are in the key."""
    key = ("cheapest_offers", gpu_id, count, usage.interruptible, usage.pattern == "steady",
           tuple(sorted(providers or ())), tuple(sorted(regions or ())))  # fmt: skip
    found = knowledge.derived.get(key)
    if found is None:
        best: dict[tuple[str, str], tuple[tuple[float, ...], _Priced]] = {}
        for index, x in enumerate(_priced(knowledge, gpu_id, count, usage, providers, regions)):
            offer, _, pricing, _, per_gpu_hour, monthly = x
            group = (offer.provider, pricing)
            rank: tuple[float, ...] = (per_gpu_hour, index)
            if pricing == "reserved":
                rank = (monthly, *rank)
            if group not in best or rank < best[group][0]:
                best[group] = (rank, x)
        found = [(int(rank[-1]), x) for rank, x in best.values()]
        knowledge.derived[key] = found
    return found


def break_even_gpu_hours_per_month(
    onprem: OnPremCost, cloud_usd_per_gpu_hour: float
) -> float | None:
    """The monthly GPU-hours at which owning ``onprem.count`` GPUs costs what renting them
    does; None when renting is cheaper even with every owned GPU busy all month."""
    margin = cloud_usd_per_gpu_hour - onprem.energy_usd_per_gpu_hour
    if margin <= 0:
        return None
    hours = onprem.monthly_fixed_usd / margin
    return hours if hours <= onprem.count * HOURS_PER_MONTH else None


@dataclass(frozen=True, slots=True)
class Hybrid:
    """Owning the baseline and renting the rest."""

    owned_count: int
    owned_gpu_hours_per_month: float
    rented_gpu_hours_per_month: float
    monthly_usd: float
    horizon_usd: float
    cloud: CloudCost
    onprem: OnPremCost

    def to_dict(self) -> dict[str, Any]:
        return {
            "owned_count": self.owned_count,
            "owned_gpu_hours_per_month": self.owned_gpu_hours_per_month,
            "rented_gpu_hours_per_month": self.rented_gpu_hours_per_month,
            "monthly_usd": self.monthly_usd,
            "horizon_usd": self.horizon_usd,
            "cloud": self.cloud.to_dict(),
            "on_premise": self.onprem.to_dict(),
        }


def hybrid(
    gpu: Gpu, count: int, usage: Usage, params: Mapping[str, Parameter], cloud: CloudCost
) -> Hybrid | None:
    """Own enough GPUs for the baseline at the utilisation parameter, rent the other hours
    at ``cloud``'s hourly rate; None when there is no baseline, nothing left to rent, or the
    baseline needs the whole count."""
    owned_hours = usage.baseline_gpu_hours_per_month
    rented_hours = usage.gpu_hours_per_month - owned_hours
    if owned_hours <= 0 or rented_hours <= 0:
        return None
    owned = max(1, math.ceil(owned_hours / (HOURS_PER_MONTH * params["utilisation"].value)))
    if owned >= count:
        return None
    own = on_premise(gpu, owned, Usage(owned_hours, usage.horizon_months), params)
    monthly = own.monthly_usd + rented_hours * cloud.usd_per_gpu_hour
    return Hybrid(
        owned, owned_hours, rented_hours, monthly, monthly * usage.horizon_months, cloud, own
    )


def tco(
    knowledge: Knowledge,
    gpu: Gpu,
    count: int,
    usage: Usage,
    overrides: Mapping[str, float] | None = None,
    providers: Collection[str] | None = None,
    regions: Collection[str] | None = None,
) -> dict[str, Any]:
    """Owning against renting ``count`` x ``gpu`` at ``usage``, as ``POST /v1/tco``
    returns it. One region named prices on-premise power there too."""
    if usage.gpu_hours_per_month > count * HOURS_PER_MONTH:
        raise InvalidRequest(
            "usage.gpu_hours_per_month",
            f"{count} GPUs give at most {count * HOURS_PER_MONTH:g} GPU-hours a month: raise count",
            usage.gpu_hours_per_month,
        )
    region = next(iter(regions)) if regions and len(regions) == 1 else None
    params = onprem_parameters(knowledge, overrides, gpu, count, region)
    own = on_premise(gpu, count, usage, params)
    offers = cloud_offers(knowledge, gpu.id, count, usage, providers, regions)
    cheapest = min(offers, key=lambda c: c.monthly_usd) if offers else None
    mix = hybrid(gpu, count, usage, params, cheapest) if cheapest else None
    monthly = {"on_premise": own.monthly_usd}
    if cheapest is not None:
        monthly["cloud"] = cheapest.monthly_usd
    if mix is not None:
        monthly["hybrid"] = mix.monthly_usd
    energy = {"on_premise": monthly_energy(knowledge, gpu, usage, params, None, None)}
    if cheapest is not None:
        energy["cloud"] = monthly_energy(knowledge, gpu, usage, params, cheapest.provider,
                                         cheapest.region)  # fmt: skip
    return {
        "gpu": gpu.id,
        "count": count,
        "energy": energy,
        "usage": {
            **asdict(usage),
            "baseline_share": usage.baseline_gpu_hours_per_month / usage.gpu_hours_per_month,
        },
        "on_premise": own.to_dict(),
        "cloud": (
            {**cheapest.to_dict(), "cost_per_gpu_hour_usd": cheapest.usd_per_gpu_hour}
            if cheapest
            else None
        ),
        "cloud_offers": [c.to_dict() for c in offers[:10]],
        "break_even_gpu_hours_per_month": (
            break_even_gpu_hours_per_month(own, cheapest.usd_per_gpu_hour) if cheapest else None
        ),
        "cheapest": min(monthly, key=monthly.__getitem__),
        "hybrid": mix.to_dict() if mix else None,
        "parameters": [{"name": name, **p.to_dict()} for name, p in params.items()],
        "assumptions": list(ASSUMPTIONS),
    }


def monthly_energy(
    knowledge: Knowledge, gpu: Gpu, usage: Usage, params: Mapping[str, Parameter],
    provider: str | None, region: str | None,
) -> dict[str, Any]:  # fmt: skip
    """The usage's energy and emissions a month and over the horizon: each GPU-hour at the
    GPU's board power plus its host's share, times the data centre's PUE (the provider's
    published figure in the cloud, ``pue`` on premise), at the region's grid intensity."""
    host = params["server_power_overhead_w_per_gpu_slot"].value
    if provider is None:
        pue, pue_source = params["pue"].value, params["pue"].source
        grid = knowledge.grid_intensity("on-premise", "*")
    else:
        fact = knowledge.providers[provider].pue
        pue, pue_source = float(fact.value), fact.source
        grid = knowledge.grid_intensity(provider, region or "*")
    kwh = usage.gpu_hours_per_month * (gpu.tdp_w + host) / 1000 * pue
    kg = kwh * grid.g_co2e_per_kwh / 1000
    return {
        "kwh_per_month": kwh,
        "kg_co2e_per_month": kg,
        "kg_co2e_horizon": kg * usage.horizon_months,
        "pue": pue,
        "pue_source": pue_source,
        "grid_g_co2e_per_kwh": grid.g_co2e_per_kwh,
        "grid_source": grid.source,
    }
