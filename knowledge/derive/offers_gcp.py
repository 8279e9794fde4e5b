"""GCP GPU offers from SkyPilot's ``gcp_vms_gpu_and_gpu_hosts.csv``: host rows plus GPU rows.

SkyPilot's GCP catalog prices the GPUs apart from the VM: a GPU row has an empty
InstanceType and is the price of *all* ``AcceleratorCount`` GPUs (SkyPilot's fetch_gcp
multiplies the per-GPU SKU by the count; the rows scale linearly: H100×8 = 8 × H100×1).
An offer's price is therefore host row + GPU row for that count, in the same zone; zones
are then folded into regions by taking the lowest price.

Accelerator-optimized hosts (a2, a3, a4, g2) carry a fixed GPU count; n1 hosts take T4, V100,
P100 or P4 in counts of 1, 2, 4 (8 for V100) up to GCP's vCPU limit for that count, and are
written ``n1-standard-8+2xT4``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, replace
from pathlib import Path

from knowledge.derive.offers_common import (
    PCIE_LINK,
    SKYPILOT_DIR,
    SKYPILOT_SOURCE,
    Book,
    Price,
    Spec,
    csv_rows,
    usd,
    whole,
)

FILE = "gcp_vms_gpu_and_gpu_hosts.csv"
Row = dict[str, str]
GpuKey = tuple[str, int, str]  # GPU row name, count, zone
CATALOG_DATE = "2026-05-20"

GPUS = {
    "A100": "a100-sxm4-40gb",
    "A100-80GB": "a100-sxm4-80gb",
    "H100": "h100-sxm-80gb",
    "H100-MEGA": "h100-sxm-80gb",
    "H200": "h200-sxm-141gb",
    "B200": "b200-sxm-180gb",
    "L4": "l4",
    "T4": "t4",
    "V100": "v100-sxm2-16gb",
    "P100": "p100-pcie-16gb",
    "P4": "p4",
}
LINKS = {
    "A100": "nvswitch-nvlink3",
    "A100-80GB": "nvswitch-nvlink3",
    "H100": "nvswitch-nvlink4",
    "H100-MEGA": "nvswitch-nvlink4",
    "H200": "nvswitch-nvlink4",
    "B200": "nvswitch-nvlink5",
    "V100": "nvlink-2",
}
NOTES = {
    "H100-MEGA": "GCP prices the A3 Mega GPUs as 'H100-MEGA' rows: the same H100 SXM 80GB",
    "V100": "GCP's V100 are SXM2 16 GB modules; NVLink between attached V100s assumed",
}
# Accelerator-optimized machine types: name pattern (GPU count in group 1) -> GPU row name.
FIXED_HOSTS = (
    (r"a2-(?:high|mega)gpu-(\d+)g", "A100"),
    (r"a2-ultragpu-(\d+)g", "A100-80GB"),
    (r"a3-(?:high|edge)gpu-(\d+)g(?:-nolssd)?", "H100"),
    (r"a3-megagpu-(\d+)g", "H100-MEGA"),
    (r"a3-ultragpu-(\d+)g(?:-nolssd)?", "H200"),
    (r"a4-highgpu-(\d+)g", "B200"),
)
G2_L4 = {4: 1, 8: 1, 12: 1, 16: 1, 24: 2, 32: 1, 48: 4, 96: 8}  # g2-standard-N -> L4 count
# GCP "GPU machine types": the most vCPUs an n1 host may have for each count of a GPU.
N1_MAX_VCPUS = {
    "T4": {1: 48, 2: 48, 4: 96},
    "V100": {1: 12, 2: 24, 4: 48, 8: 96},
    "P100": {1: 16, 2: 32, 4: 96},
    "P4": {1: 24, 2: 48, 4: 96},
}
# Host rows priced $0.00 whose GPU row carries the whole VM: SkyPilot prices B200 from GCP's
# "Nvidia B200 (1 gpu slice)" SKU, and the A4 host has no SKU of its own.
BUNDLED_HOSTS = {
    "a4-highgpu-8g": "host row is $0.00 in the source; taken as bundled into GCP's B200 "
    "'GPU slice' price (price = B200 row alone), so it may be understated if not",
}


@dataclass(frozen=True)
class Attach:
    """GPUs on a host: the GPU row's name and count, and the instance type written for it."""

    accelerator: str
    count: int
    instance_type: str


def collect(shared: Path) -> Book:
    """Every (host + GPUs) combination priced in some zone, folded to regions."""
    book = Book("gcp", FILE, CATALOG_DATE, SKYPILOT_SOURCE.format(file=FILE))
    hosts, gpus = _split(csv_rows(shared / SKYPILOT_DIR / FILE), book)
    used: set[GpuKey] = set()
    by_region: dict[str, dict[str, list[Price]]] = defaultdict(lambda: defaultdict(list))
    specs: dict[str, Spec] = {}
    for (host, zone), row in sorted(hosts.items()):
        combos = attachments(host, whole(row["vCPUs"]))
        if not combos:
            book.leave_out(_host_group(host), "no GPU can be attached to this machine type")
        found = False
        for attach in combos:
            gpu_row = gpus.get((attach.accelerator, attach.count, zone))
            if gpu_row is None:
                continue
            found = True
            used.add((attach.accelerator, attach.count, zone))
            specs[attach.instance_type] = spec(host, row, attach)
            by_region[attach.instance_type][row["Region"]].append(
                combined(host, row, gpu_row, zone)
            )
        if combos and not found:
            book.leave_out(_host_group(host), "no GPU row for it in the same zone")
    for name, count, _zone in sorted(gpus.keys() - used):
        book.leave_out(f"GPU row {name}x{count}", "no host it attaches to in the same zone")
    _fold(book, specs, by_region)
    return book


def _fold(book: Book, specs: dict[str, Spec], by_region: dict[str, dict[str, list[Price]]]) -> None:
    """Add one price per region (its zones' lowest), noting regions whose zones differ."""
    for instance_type, regions in sorted(by_region.items()):
        base = specs[instance_type]
        uneven = [r for r, zones in sorted(regions.items()) if len(_amounts(zones)) > 1]
        if uneven:
            note = f"zone prices differ in {', '.join(uneven)}; the lowest is kept"
            base = replace(base, notes=(*base.notes, note))
        for region, zones in sorted(regions.items()):
            book.add(base, lowest(region, zones), f"{instance_type} in {region}")


def _split(rows: Iterable[Row], book: Book) -> tuple[dict[tuple[str, str], Row], dict[GpuKey, Row]]:
    """Host rows by (machine type, zone); GPU rows by (name, count, zone); first one kept."""
    hosts: dict[tuple[str, str], Row] = {}
    gpus: dict[GpuKey, Row] = {}
    for row in rows:
        zone = row["AvailabilityZone"]
        if row["InstanceType"]:
            kept = hosts.setdefault((row["InstanceType"], zone), row)
            label = f"host {row['InstanceType']} in {zone}"
        else:
            count = whole(row["AcceleratorCount"])
            kept = gpus.setdefault((row["AcceleratorName"], count, zone), row)
            label = f"GPU row {row['AcceleratorName']}x{count} in {zone}"
        if kept is not row:
            same = "same prices" if _prices(kept) == _prices(row) else "prices differ"
            book.leave_out(label, f"duplicate row ({same}); the first is kept")
    return hosts, gpus


def _prices(row: Row) -> tuple[str, str]:
    return (row["Price"], row["SpotPrice"])


def attachments(host: str, vcpus: int) -> list[Attach]:
    """The GPU configurations GCP allows on a machine type."""
    for pattern, accelerator in FIXED_HOSTS:
        found = re.fullmatch(pattern, host)
        if found:
            return [Attach(accelerator, int(found.group(1)), host)]
    g2 = re.fullmatch(r"g2-standard-(\d+)", host)
    if g2 and int(g2.group(1)) in G2_L4:
        return [Attach("L4", G2_L4[int(g2.group(1))], host)]
    if not re.fullmatch(r"n1-(standard|highmem)-\d+", host):
        return []
    return [
        Attach(accelerator, count, f"{host}+{count}x{accelerator}")
        for accelerator, limits in N1_MAX_VCPUS.items()
        for count, most in limits.items()
        if vcpus <= most
    ]


def spec(host: str, row: Row, attach: Attach) -> Spec:
    name = attach.accelerator
    gpu_id = GPUS[name]
    link = None if attach.count == 1 else LINKS.get(name) or PCIE_LINK[gpu_id]
    notes = [n for n in (NOTES.get(name), BUNDLED_HOSTS.get(host)) if n]
    if host.startswith("n1-"):
        notes.append(
            f"n1 host plus {attach.count} attached {name}; GCP allows up to "
            f"{N1_MAX_VCPUS[name][attach.count]} vCPUs for that count"
        )
    return Spec(
        attach.instance_type,
        gpu_id,
        attach.count,
        whole(row["vCPUs"]),
        float(row["MemoryGiB"]),
        link,
        tuple(notes),
    )


def combined(host: str, row: Row, gpu_row: Row, zone: str) -> Price:
    """Host row + GPU row (already the price of all the GPUs) in one zone."""
    bundled = host in BUNDLED_HOSTS
    return Price(
        zone,
        _sum(usd(row["Price"]), usd(gpu_row["Price"]), bundled),
        _sum(usd(row["SpotPrice"]), usd(gpu_row["SpotPrice"]), bundled),
    )


def _sum(host: float | None, gpus: float | None, bundled: bool) -> float | None:
    if gpus is None or (host is None and not bundled):
        return None
    return (host or 0.0) + gpus


def _amounts(zones: list[Price]) -> set[tuple[float | None, float | None]]:
    return {(z.on_demand, z.spot) for z in zones}


def lowest(region: str, zones: list[Price]) -> Price:
    """The region's price: the lowest on-demand and the lowest spot across its zones."""
    on_demand = [p.on_demand for p in zones if p.on_demand is not None]
    spot = [p.spot for p in zones if p.spot is not None]
    return Price(region, min(on_demand, default=None), min(spot, default=None))


def _host_group(host: str) -> str:
    """n1 shapes are reported as one group per series; others by machine type."""
    n1 = re.fullmatch(r"(n1-(?:standard|highmem))-\d+", host)
    return f"host {n1.group(1)}-*" if n1 else f"host {host}"
