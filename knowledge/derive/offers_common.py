"""Shared pieces of the offer derivation: the row types, the per-source ``Book``, GPU tables.

A ``Book`` collects what one raw catalog yields: one ``Spec`` per instance type (a row of
``offers.csv``) and one ``Price`` per (instance type, region) (a row of ``offer_prices.csv``).
It refuses rows without an on-demand price, keeps one of any duplicate (the lower price) and
counts every row it, or the provider module, leaves out, so that the report names each group.
"""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from knowledge.derive import Derived

OFFER_COLUMNS = [
    "provider",
    "instance_type",
    "gpu_id",
    "gpu_count",
    "vcpus",
    "memory_gib",
    "interconnect",
    "catalog_date",
    "source",
    "notes",
]
PRICE_COLUMNS = [
    "provider",
    "instance_type",
    "region",
    "on_demand_usd_per_hour",
    "spot_usd_per_hour",
    "reserved_usd_per_hour",
    "catalog_date",
    "source",
]

SKYPILOT_DIR = "cloud-prices-anycloud-skypilot-format"
SKYPILOT_SOURCE = "skypilot:anycloud-sh/catalog@62ff0a9 {file}"

PCIE = "pcie"  # a family's multi-GPU link is the PCIe generation of its GPU
# Host link of each GPU the offers use, by the PCIe generation of its datasheet. SXM parts
# are listed too: a marketplace host's topology is unknown, PCIe is the floor.
PCIE_LINK = {
    **dict.fromkeys(
        (
            "grid-k520",
            "k80",
            "m60",
            "p4",
            "p100-pcie-16gb",
            "mi25",
            "t4",
            "quadro-rtx-6000",
            "v100-pcie-16gb",
            "v100-sxm2-16gb",
            "v100-sxm2-32gb",
        ),
        "pcie-3-x16",
    ),
    **dict.fromkeys(
        (
            "a10",
            "a10g",
            "l4",
            "l40s",
            "a100-pcie-40gb",
            "a100-pcie-80gb",
            "a100-sxm4-40gb",
            "a100-sxm4-80gb",
            "radeon-pro-v520",
            "rtx-3060",
            "rtx-3090",
            "rtx-4090",
            "rtx-a5000",
            "rtx-a6000",
            "rtx-5880-ada",
            "rtx-6000-ada",
        ),
        "pcie-4-x16",
    ),
    **dict.fromkeys(
        (
            "h100-nvl-94gb",
            "h100-pcie-80gb",
            "h100-sxm-80gb",
            "h200-sxm-141gb",
            "rtx-5070",
            "rtx-5090",
            "rtx-pro-6000-blackwell",
            "rtx-pro-6000-blackwell-server",
        ),
        "pcie-5-x16",
    ),
}
FRACTION_NOTE = "a share of one GPU (gpu_count < 1)"


@dataclass(frozen=True)
class Family:
    """Instance types whose names match ``pattern`` carry ``gpu_id``.

    ``accelerator`` is the name the source must give for them (a mismatch is reported, not
    guessed); ``link`` is the GPU-GPU interconnect when there is more than one GPU, and
    ``link_note`` what to know about it; ``memory_gb``, where set, must match the per-GPU
    memory the source reports (within 10%).
    """

    pattern: str
    accelerator: str
    gpu_id: str
    link: str = PCIE
    note: str | None = None
    link_note: str | None = None
    memory_gb: float | None = None

    def fits(self, accelerator: str, gpu_mib: float | None) -> bool:
        if accelerator != self.accelerator:
            return False
        if self.memory_gb is None or gpu_mib is None:
            return True
        return abs(gpu_mib / 1024 - self.memory_gb) <= 0.1 * self.memory_gb

    def interconnect(self, gpu_count: float) -> str | None:
        """The GPU-GPU link id, or None for one GPU or a share of one."""
        if gpu_count <= 1:
            return None
        return PCIE_LINK[self.gpu_id] if self.link == PCIE else self.link

    def notes(self, gpu_count: float) -> tuple[str, ...]:
        """The notes an offer of ``gpu_count`` of these GPUs carries."""
        link_note = self.link_note if gpu_count > 1 else None
        share = FRACTION_NOTE if gpu_count < 1 else None
        return tuple(n for n in (self.note, link_note, share) if n)


def resolve(
    families: tuple[Family, ...], name: str, accelerator: str, gpu_mib: float | None = None
) -> Family | str:
    """The first family that names and fits the instance type, or why none does."""
    named = [f for f in families if re.fullmatch(f.pattern, name)]
    if not named:
        return f"no GPU mapping for {name!r} (accelerator {accelerator!r})"
    for family in named:
        if family.fits(accelerator, gpu_mib):
            return family
    memory = "" if gpu_mib is None else f", {gpu_mib:g} MiB per GPU"
    return f"accelerator {accelerator!r}{memory} does not match the mapping table for {name!r}"


@dataclass(frozen=True)
class Spec:
    """What one instance type is: a row of ``offers.csv`` less provider, date and source."""

    instance_type: str
    gpu_id: str
    gpu_count: float
    vcpus: int
    memory_gib: float
    interconnect: str | None
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Price:
    """What one instance type costs in one region, USD per hour (None: not given)."""

    region: str
    on_demand: float | None
    spot: float | None = None
    reserved: float | None = None


class Book:
    """The offers and prices one raw catalog yields, and the rows it leaves out."""

    def __init__(self, provider: str, file: str, catalog_date: str, source: str) -> None:
        self.provider = provider
        self.file = file
        self.catalog_date = catalog_date
        self.source = source
        self.specs: dict[str, Spec] = {}
        self.prices: dict[tuple[str, str], Price] = {}
        self.left_out: Counter[tuple[str, str]] = Counter()

    def leave_out(self, what: str, why: str, rows: int = 1) -> None:
        self.left_out[(what, why)] += rows

    def add(self, spec: Spec, price: Price, what: str) -> None:
        """Record one priced row; refuse it (counted) if unpriced or in conflict."""
        if price.on_demand is None:
            self.leave_out(what, "no on-demand price (empty or zero)")
            return
        known = self.specs.setdefault(spec.instance_type, spec)
        if known != spec:
            self.leave_out(what, f"specification differs from an earlier {spec.instance_type} row")
            return
        key = (spec.instance_type, price.region)
        old = self.prices.get(key)
        if old is None:
            self.prices[key] = price
            return
        kept = min(old, price, key=_price_order)
        self.prices[key] = kept
        same = "same prices" if old == price else "prices differ; kept the lower on-demand"
        self.leave_out(f"{spec.instance_type} in {price.region}", f"duplicate row ({same})")

    def report(self, derived: Derived) -> None:
        for (what, why), rows in sorted(self.left_out.items()):
            plural = "row" if rows == 1 else "rows"
            derived.exclude(f"{self.provider} {self.file} {what} ({rows} {plural})", why)

    def offer_rows(self) -> list[dict[str, object]]:
        return [
            {
                "provider": self.provider,
                "instance_type": s.instance_type,
                "gpu_id": s.gpu_id,
                "gpu_count": float(s.gpu_count),
                "vcpus": s.vcpus,
                "memory_gib": float(s.memory_gib),
                "interconnect": s.interconnect,
                "catalog_date": self.catalog_date,
                "source": self.source,
                "notes": "; ".join(s.notes) or None,
            }
            for s in sorted(self.specs.values(), key=lambda s: s.instance_type)
        ]

    def price_rows(self) -> list[dict[str, object]]:
        return [
            {
                "provider": self.provider,
                "instance_type": instance_type,
                "region": region,
                "on_demand_usd_per_hour": p.on_demand,
                "spot_usd_per_hour": p.spot,
                "reserved_usd_per_hour": p.reserved,
                "catalog_date": self.catalog_date,
                "source": self.source,
            }
            for (instance_type, region), p in sorted(self.prices.items())
        ]


def _price_order(p: Price) -> tuple[float, float, float]:
    return (p.on_demand or math.inf, p.spot or math.inf, p.reserved or math.inf)


def usd(text: str | None) -> float | None:
    """A price cell as a positive float; None where empty or zero (the sources' 'no price')."""
    if text is None or not text.strip():
        return None
    value = float(text)
    return value if value > 0 else None


def whole(text: str) -> int:
    """A count written as ``"30.0"`` or ``"30"``."""
    value = float(text)
    if value != int(value):
        raise ValueError(f"not a whole number: {text!r}")
    return int(value)


def gpu_info_mib(text: str) -> float | None:
    """``MemoryInfo.SizeInMiB`` of a SkyPilot ``GpuInfo`` cell (a Python-dict-like string)."""
    found = re.search(r"'SizeInMiB':\s*([0-9.]+)", text or "")
    return float(found.group(1)) if found else None


def csv_rows(path: Path) -> Iterator[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        yield from csv.DictReader(handle)
