"""Lambda Cloud GPU offers from SkyPilot's ``lambda_vms_gpu.csv``.

Lambda's instance names carry the GPU (``gpu_8x_h100_sxm5``); where they do not say the form
factor, Lambda's own descriptions decide: ``gpu_1x_a100``, ``gpu_2x_a100`` and ``gpu_4x_a100``
are "A100 (40 GB PCIe)" (also named ``gpu_Nx_a100_pcie``), ``gpu_1x_a100_sxm4`` and
``gpu_8x_a100`` are "A100 (40 GB SXM4)". GpuInfo's per-GPU memory is checked against the
mapping. The source has no spot prices.
"""

from __future__ import annotations

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

FILE = "lambda_vms_gpu.csv"
CATALOG_DATE = "2026-05-07"

HGX_SLICE = "fewer than 8 GPUs of an 8-GPU HGX board; NVSwitch assumed"
NO_BRIDGE = "PCIe cards; no NVLink bridge assumed"
FAMILIES = (
    Family(
        r"gpu_[124]x_a100",
        "A100",
        "a100-pcie-40gb",
        link_note=NO_BRIDGE,
        memory_gb=40,
        note="Lambda sells it as 'A100 (40 GB PCIe)' (also named gpu_Nx_a100_pcie)",
    ),
    Family(
        r"gpu_8x_a100",
        "A100",
        "a100-sxm4-40gb",
        "nvswitch-nvlink3",
        memory_gb=40,
        note="Lambda sells it as '8x A100 (40 GB SXM4)'; the name has no form factor",
    ),
    Family(r"gpu_1x_a100_sxm4", "A100", "a100-sxm4-40gb", memory_gb=40),
    Family(
        r"gpu_8x_a100_80gb_sxm4", "A100-80GB", "a100-sxm4-80gb", "nvswitch-nvlink3", memory_gb=80
    ),
    Family(r"gpu_\d+x_a10", "A10", "a10", link_note=NO_BRIDGE, memory_gb=24),
    Family(r"gpu_\d+x_a6000", "A6000", "rtx-a6000", link_note=NO_BRIDGE, memory_gb=48),
    Family(r"gpu_8x_b200_sxm6", "B200", "b200-sxm-180gb", "nvswitch-nvlink5", memory_gb=180),
    Family(
        r"gpu_[124]x_b200_sxm6",
        "B200",
        "b200-sxm-180gb",
        "nvswitch-nvlink5",
        link_note=HGX_SLICE,
        memory_gb=180,
    ),
    Family(r"gpu_1x_gh200", "GH200", "gh200-96gb", memory_gb=96),
    Family(r"gpu_1x_h100_pcie", "H100", "h100-pcie-80gb", memory_gb=80),
    Family(r"gpu_8x_h100_sxm5", "H100", "h100-sxm-80gb", "nvswitch-nvlink4", memory_gb=80),
    Family(
        r"gpu_[124]x_h100_sxm5",
        "H100",
        "h100-sxm-80gb",
        "nvswitch-nvlink4",
        link_note=HGX_SLICE,
        memory_gb=80,
    ),
    Family(r"gpu_1x_rtx6000", "RTX6000", "quadro-rtx-6000", memory_gb=24),
    Family(
        r"gpu_8x_v100(_n)?",
        "V100",
        "v100-sxm2-16gb",
        "nvlink-2",
        memory_gb=16,
        note="Lambda: 8x Tesla V100 16 GB; SXM2 with the NVLink 2 hybrid cube mesh assumed",
    ),
)


def collect(shared: Path) -> Book:
    """Every priced Lambda (instance type, region) of the source."""
    book = Book("lambda", FILE, CATALOG_DATE, SKYPILOT_SOURCE.format(file=FILE))
    for row in csv_rows(shared / SKYPILOT_DIR / FILE):
        name = row["InstanceType"]
        family = resolve(FAMILIES, name, row["AcceleratorName"], gpu_info_mib(row["GpuInfo"]))
        if isinstance(family, str):
            book.leave_out(name, family)
            continue
        price = Price(row["Region"], usd(row["Price"]), usd(row["SpotPrice"]))
        book.add(spec(row, family), price, name)
    return book


def spec(row: dict[str, str], family: Family) -> Spec:
    count = whole(row["AcceleratorCount"])
    return Spec(
        row["InstanceType"],
        family.gpu_id,
        count,
        whole(row["vCPUs"]),
        float(row["MemoryGiB"]),
        family.interconnect(count),
        family.notes(count),
    )
