"""Azure GPU offers from SkyPilot's ``azure_vms_gpu.csv``.

The source's last column, Generation, is sometimes the unquoted ``V1,V2``, so those rows have
11 fields: the trailing fields are joined back into one. The GPU comes from the VM series
(``NC…ads_A100_v4`` is A100 80GB PCIe, ``ND96amsr_A100_v4`` is A100 80GB SXM, both
"A100-80GB" in the source), following Azure's size-series documentation. The NVv4 sizes are
fractions of one MI25, which the source lists as whole GPUs; they are corrected.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path

from knowledge.derive.offers_common import (
    SKYPILOT_DIR,
    SKYPILOT_SOURCE,
    Book,
    Family,
    Price,
    Spec,
    resolve,
    usd,
    whole,
)

FILE = "azure_vms_gpu.csv"
CATALOG_DATE = "2026-05-20"
COLUMNS = 10

FAMILIES = (
    Family(
        r"Standard_NC\d+r?s_v3",
        "V100",
        "v100-pcie-16gb",
        note="NCv3: Tesla V100 PCIe 16 GB (the source says only 'V100')",
    ),
    Family(
        r"Standard_ND40rs_v2",
        "V100-32GB",
        "v100-sxm2-32gb",
        "nvlink-2",
        link_note="NDv2: 8 NVLink-connected V100 SXM2 32 GB (hybrid cube mesh)",
    ),
    Family(r"Standard_NC\d+as_T4_v3", "T4", "t4"),
    Family(r"Standard_NC\d+ads_A10_v4", "A10", "a10"),
    Family(r"Standard_NV\d+adm?s_A10_v5", "A10", "a10"),
    Family(
        r"Standard_NC\d+ads_A100_v4",
        "A100-80GB",
        "a100-pcie-80gb",
        note="NC A100 v4: A100 80GB PCIe (Azure docs)",
        link_note="no NVLink bridge assumed",
    ),
    Family(r"Standard_ND96asr_v4", "A100", "a100-sxm4-40gb", "nvswitch-nvlink3"),
    Family(r"Standard_ND96amsr_A100_v4", "A100-80GB", "a100-sxm4-80gb", "nvswitch-nvlink3"),
    Family(
        r"Standard_NCC?\d+adi?s_H100_v5",
        "H100",
        "h100-nvl-94gb",
        note="NC(C)ads H100 v5: H100 NVL 94 GB (Azure docs; the source says 'H100')",
        link_note="no NVLink bridge between the pair assumed",
    ),
    Family(r"Standard_ND96isr_H100_v5", "H100", "h100-sxm-80gb", "nvswitch-nvlink4"),
    Family(r"Standard_ND96isr_H200_v5", "H200", "h200-sxm-141gb", "nvswitch-nvlink4"),
    Family(r"Standard_ND96isr_MI300X_v5", "MI300X", "mi300x", "infinity-fabric-cdna3"),
    Family(
        r"Standard_NV\d+s_v3",
        "M60",
        "m60",
        note="NVv3: gpu_count counts M60 GPUs (a Tesla M60 board has two)",
    ),
    Family(r"Standard_NV\d+as_v4", "MI25", "mi25"),
)
# Azure NVv4: "starting at 1/8th of a GPU with 2 GiB frame buffer to a full GPU".
NVV4_SHARE = {
    "Standard_NV4as_v4": 0.125,
    "Standard_NV8as_v4": 0.25,
    "Standard_NV16as_v4": 0.5,
    "Standard_NV32as_v4": 1.0,
}


def collect(shared: Path) -> Book:
    """Every priced Azure GPU (size, region) of the source."""
    book = Book("azure", FILE, CATALOG_DATE, SKYPILOT_SOURCE.format(file=FILE))
    for line, row in rows(shared / SKYPILOT_DIR / FILE):
        if row is None:
            book.leave_out(f"line {line}", f"fewer than {COLUMNS} fields")
            continue
        name = row["InstanceType"]
        family = resolve(FAMILIES, name, row["AcceleratorName"])
        if isinstance(family, str):
            book.leave_out(name, family)
            continue
        price = Price(row["Region"], usd(row["Price"]), usd(row["SpotPrice"]))
        book.add(spec(row, family), price, name)
    return book


def rows(path: Path) -> Iterator[tuple[int, dict[str, str] | None]]:
    """The rows as dicts, the fields past the tenth joined into Generation (``V1,V2``)."""
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader)
        for line, fields in enumerate(reader, start=2):
            if len(fields) < COLUMNS:
                yield line, None
                continue
            joined = [*fields[: COLUMNS - 1], ",".join(fields[COLUMNS - 1 :])]
            yield line, dict(zip(header, joined, strict=True))


def spec(row: dict[str, str], family: Family) -> Spec:
    name = row["InstanceType"]
    count = float(row["AcceleratorCount"])
    correction: tuple[str, ...] = ()
    share = NVV4_SHARE.get(name)
    if share is not None and share != count:
        correction = (f"corrected: the source gives {count:g} MI25; {name} is {share:g} of one",)
        count = share
    return Spec(
        name,
        family.gpu_id,
        count,
        whole(row["vCPUs"]),
        float(row["MemoryGiB"]),
        family.interconnect(count),
        correction + family.notes(count),
    )
