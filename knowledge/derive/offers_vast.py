"""Vast.ai marketplace offers from SkyPilot's ``vast_vms_gpu.csv`` (a volatile snapshot).

Instance names read ``{count}x-{GPU}-{vCPUs}-{MiB}``; the GPU token is more exact than
AcceleratorName (``H100_NVL`` vs ``H100_SXM`` are both "H100"; ``RTX_4060_Ti`` is "RTX4060").
GpuInfo's SizeInMiB is the instance's total GPU memory: divided by the count it decides the
A100 and V100 variants (SkyPilot's fetch_vast writes the offer's ``gpu_total_ram`` there).
Such instance names get the GPU id appended (``+a100-sxm4-80gb``), since Vast lists 40 GB
and 80 GB cards under one name. A marketplace host's GPU topology is
unknown, so a multi-GPU offer's interconnect is the PCIe generation of its GPU. Spot 0.00
means no spot price.
"""

from __future__ import annotations

import re
from pathlib import Path

from knowledge.derive.offers_common import (
    SKYPILOT_DIR,
    SKYPILOT_SOURCE,
    Book,
    Family,
    Price,
    Spec,
    csv_rows,
    gpu_info_mib,
    resolve,
    usd,
    whole,
)

FILE = "vast_vms_gpu.csv"
CATALOG_DATE = "2026-04-29"

NAME = re.compile(r"(\d+)x-(.+)-(\d+)-(\d+)")
FORM_UNKNOWN = "form factor not in the source"
FAMILIES = (
    Family("RTX_5090", "RTX5090", "rtx-5090", memory_gb=32),
    Family("RTX_5070", "RTX5070", "rtx-5070", memory_gb=12),
    Family("RTX_4090", "RTX4090", "rtx-4090", memory_gb=24),
    Family("RTX_3090", "RTX3090", "rtx-3090", memory_gb=24),
    Family("RTX_3060", "RTX3060", "rtx-3060", memory_gb=12),
    Family("RTX_A5000", "RTXA5000", "rtx-a5000", memory_gb=24),
    Family("RTX_A6000", "RTXA6000", "rtx-a6000", memory_gb=48),
    Family("RTX_5880Ada", "RTX5880-Ada", "rtx-5880-ada", memory_gb=48),
    Family("RTX_6000Ada", "RTX6000-Ada", "rtx-6000-ada", memory_gb=48),
    Family(
        "RTX_PRO_6000_WS",
        "RTXPRO6000WS",
        "rtx-pro-6000-blackwell",
        note="RTX PRO 6000 Blackwell Workstation Edition",
        memory_gb=96,
    ),
    Family("L40S", "L40S", "l40s", memory_gb=48),
    Family("A100_SXM4", "A100", "a100-sxm4-40gb", memory_gb=40),
    Family("A100_SXM4", "A100", "a100-sxm4-80gb", memory_gb=80),
    Family("A100_PCIE", "A100", "a100-pcie-40gb", memory_gb=40),
    Family("A100_PCIE", "A100", "a100-pcie-80gb", memory_gb=80),
    Family("H100_SXM", "H100", "h100-sxm-80gb", memory_gb=80),
    Family("H100_NVL", "H100", "h100-nvl-94gb", memory_gb=94),
    Family("H200", "H200", "h200-sxm-141gb", note="SXM assumed; " + FORM_UNKNOWN, memory_gb=141),
    Family(
        "Tesla_V100", "V100", "v100-sxm2-16gb", note="SXM2 assumed; " + FORM_UNKNOWN, memory_gb=16
    ),
    Family(
        "Tesla_V100", "V100", "v100-sxm2-32gb", note="SXM2 assumed; " + FORM_UNKNOWN, memory_gb=32
    ),
)
BY_MEMORY = {"A100_SXM4", "A100_PCIE", "Tesla_V100"}  # tokens whose names get the GPU id
NOT_IN_CATALOG = {
    "RTX_3060_Ti": "RTX 3060 Ti (8 GB) is not in the GPU catalog (the source's 'RTX3060' is "
    "another GPU)",
    "RTX_4060_Ti": "RTX 4060 Ti 16 GB is not in the GPU catalog (the source's 'RTX4060' is "
    "another GPU)",
    "RTX_4070S_Ti": "RTX 4070 Ti SUPER (16 GB) is not in the GPU catalog (the source's "
    "'RTX4070' is another GPU)",
}
SXM = ("sxm", "h200")
TOPOLOGY = "marketplace host: GPU topology unknown, the PCIe generation is given"
SXM_TOPOLOGY = "SXM modules are likely NVLink-connected, not assumed"


def collect(shared: Path) -> Book:
    """Every priced Vast offer (instance name, location) of the snapshot."""
    book = Book("vast", FILE, CATALOG_DATE, SKYPILOT_SOURCE.format(file=FILE))
    for row in csv_rows(shared / SKYPILOT_DIR / FILE):
        name = row["InstanceType"]
        parts = NAME.fullmatch(name)
        token = parts.group(2) if parts else name
        if token in NOT_IN_CATALOG:
            book.leave_out(name, NOT_IN_CATALOG[token])
            continue
        count = whole(row["AcceleratorCount"])
        total = gpu_info_mib(row["GpuInfo"])
        family = resolve(FAMILIES, token, row["AcceleratorName"], total and total / count)
        if isinstance(family, str):
            book.leave_out(name, family)
            continue
        price = Price(region(row["Region"]), usd(row["Price"]), usd(row["SpotPrice"]))
        book.add(spec(row, family, token), price, name)
    return book


def spec(row: dict[str, str], family: Family, token: str) -> Spec:
    count = whole(row["AcceleratorCount"])
    name = row["InstanceType"]
    notes = list(family.notes(count))
    if token in BY_MEMORY:
        name = f"{name}+{family.gpu_id}"
        notes.append("GPU variant by GpuInfo memory; Vast's name is before the '+'")
    if count > 1:
        notes.append(TOPOLOGY)
        if any(s in family.gpu_id for s in SXM):
            notes.append(SXM_TOPOLOGY)
    notes.append("vCPUs and memory as the snapshot lists them; marketplace hosts vary")
    return Spec(
        name,
        family.gpu_id,
        count,
        whole(row["vCPUs"]),
        float(row["MemoryGiB"]),
        family.interconnect(count),
        tuple(notes),
    )


def region(text: str) -> str:
    """``", CA, NA"`` (no state or city) as ``"CA, NA"``; others unchanged."""
    return ", ".join(part.strip() for part in text.split(",") if part.strip())
