"""AWS EC2 GPU offers from ``cloud-prices-aws-vantage/aws_gpu_instances_by_region.csv``.

One source row is one (instance type, region) with Linux on-demand and an effective reserved
rate (term unstated); the source has no spot prices. The GPU comes from the instance family
(``p4d`` vs ``p4de`` share the name "NVIDIA A100"), checked against the source's GPU name.
Two families are listed with the wrong GPU and are corrected (see ``FAMILIES``). Inferentia,
Trainium, Qualcomm and Gaudi accelerators are not GPUs and are left out.
"""

from __future__ import annotations

import re
from pathlib import Path

from knowledge.derive.offers_common import (
    Book,
    Family,
    Price,
    Spec,
    csv_rows,
    resolve,
    usd,
)

FILE = "aws_gpu_instances_by_region.csv"
SOURCE = f"aws-vantage:cloud-prices-aws-vantage/{FILE} (tsaol/aws-gpu@7412fd2)"
CATALOG_DATE = "2026-01-21"  # the commit that last changed the source file

CUBE_MESH = "NVLink 2 hybrid cube mesh (not every GPU pair is directly linked)"
FAMILIES = (
    Family(r"p2\..+", "NVIDIA K80", "k80"),
    Family(r"p3\..+", "NVIDIA V100", "v100-sxm2-16gb", "nvlink-2", link_note=CUBE_MESH),
    Family(r"p3dn\..+", "NVIDIA V100", "v100-sxm2-32gb", "nvlink-2", link_note=CUBE_MESH),
    Family(r"p4d\..+", "NVIDIA A100", "a100-sxm4-40gb", "nvswitch-nvlink3"),
    Family(r"p4de\..+", "NVIDIA A100", "a100-sxm4-80gb", "nvswitch-nvlink3"),
    Family(r"p5\..+", "NVIDIA H100", "h100-sxm-80gb", "nvswitch-nvlink4"),
    Family(r"p5en?\..+", "NVIDIA H200", "h200-sxm-141gb", "nvswitch-nvlink4"),
    Family(r"p6-b200\..+", "NVIDIA B200 Blackwell", "b200-sxm-180gb", "nvswitch-nvlink5"),
    Family(r"p6-b300\..+", "NVIDIA B300 Blackwell", "b300-sxm-288gb", "nvswitch-nvlink5"),
    Family(
        r"(u-)?p6e-gb200.+",
        "NVIDIA GB200 Grace Blackwell",
        "gb200-186gb",
        "nvswitch-nvlink5",
        link_note="GPUs of a GB200 NVL72 NVLink domain",
    ),
    Family(r"g2\..+", "NVIDIA GRID K520", "grid-k520"),
    Family(r"g3s?\..+", "NVIDIA M60", "m60"),
    Family(r"g4dn\..+", "NVIDIA T4", "t4"),
    Family(r"g4ad\..+", "AMD Radeon Pro V520", "radeon-pro-v520"),
    Family(r"g5\..+", "NVIDIA A10G", "a10g"),
    Family(
        r"g5g\..+",
        "ARM Mali-G78MP12",
        "t4",
        note="corrected: the source lists 'ARM Mali-G78MP12', but AWS G5g instances carry "
        "NVIDIA T4G Tensor Core GPUs (the T4's TU104 for Graviton hosts), mapped to t4",
    ),
    Family(r"gr?6\..+", "NVIDIA L4", "l4"),
    Family(r"g6e\..+", "NVIDIA L40S", "l40s"),
    Family(
        r"gr?6f\..+",
        "NVIDIA L40",
        "l4",
        note="corrected: the source lists 'NVIDIA L40, 48 GB', but AWS G6f/Gr6f are fractional "
        "NVIDIA L4 GPUs, mapped to l4 with the source's fractional gpu_count",
    ),
    Family(r"g7e\..+", "NVIDIA RTX PRO 6000 Blackwell", "rtx-pro-6000-blackwell-server"),
)
NOT_GPUS = (
    (r"inf[12]\..+", "AWS Inferentia accelerator, not a GPU"),
    (r"trn[12]n?\..+", "AWS Trainium accelerator, not a GPU"),
    (r"dl2q\..+", "Qualcomm Cloud AI 100 accelerator, not a GPU"),
    (r"dl1\..+", "Intel Gaudi accelerator, not a GPU"),
)
GB_NOTE = "memory given as '{0}' in the source; AWS states instance memory in GiB, kept as {1} GiB"


def collect(shared: Path) -> Book:
    """Every priced AWS GPU (instance type, region) of the source."""
    book = Book("aws", FILE, CATALOG_DATE, SOURCE)
    for row in csv_rows(shared / "cloud-prices-aws-vantage" / FILE):
        name = row["name"]
        not_gpu = next((why for pattern, why in NOT_GPUS if re.fullmatch(pattern, name)), None)
        if not_gpu:
            book.leave_out(name, not_gpu)
            continue
        family = resolve(FAMILIES, name, row["gpu"])
        if isinstance(family, str):
            book.leave_out(name, family)
            continue
        price = Price(row["region"], usd(row["onDemand"]), None, usd(row["reserved"]))
        book.add(spec(row, family), price, name)
    return book


def spec(row: dict[str, str], family: Family) -> Spec:
    count = float(row["gpuCount"])
    memory, gb_note = memory_gib(row["memory"])
    notes = family.notes(count) + ((gb_note,) if gb_note else ())
    return Spec(
        row["name"],
        family.gpu_id,
        count,
        int(row["vcpu"]),
        memory,
        family.interconnect(count),
        notes,
    )


def memory_gib(text: str) -> tuple[float, str | None]:
    """``"488 GB"`` or ``"1152 GiB"`` as GiB, and a note where the source wrote GB."""
    found = re.fullmatch(r"([0-9.]+) (GB|GiB)", text.strip())
    if not found:
        raise ValueError(f"unreadable AWS memory {text!r}")
    value = float(found.group(1))
    return value, (GB_NOTE.format(text, f"{value:g}") if found.group(2) == "GB" else None)
