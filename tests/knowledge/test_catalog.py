"""The shipped knowledge base: it loads, its figures match the datasheets, and it is complete."""

from __future__ import annotations

import pytest

from knowledge import Knowledge, load_knowledge
from knowledge.aliases import normalise_name

# Golden figures, each from the vendor datasheet named in the id (dense, no sparsity).
# Tolerance 1% unless stated: datasheets round differently (e.g. 989 vs 989.4).
DATASHEET = [
    pytest.param(
        "h100-sxm-80gb", "bf16_tflops", 989.4, id="H100 SXM bf16 989 TFLOPS (H100 datasheet)"
    ),
    pytest.param("h100-sxm-80gb", "memory_bandwidth_gb_per_s", 3350, id="H100 SXM 3.35 TB/s"),
    pytest.param("h100-sxm-80gb", "fp8_tflops", 1978.9, id="H100 SXM fp8 1979"),
    pytest.param("h100-sxm-80gb", "memory_gb", 80, id="H100 SXM 80 GB"),
    pytest.param(
        "a100-sxm4-80gb", "bf16_tflops", 312, id="A100 SXM 80GB bf16 312 (A100 datasheet)"
    ),
    pytest.param("a100-sxm4-80gb", "memory_bandwidth_gb_per_s", 2039, id="A100 SXM 80GB 2.04 TB/s"),
    pytest.param("a100-sxm4-80gb", "tf32_tflops", 156, id="A100 tf32 156"),
    pytest.param(
        "a100-pcie-40gb", "memory_bandwidth_gb_per_s", 1555, id="A100 PCIe 40GB 1555 GB/s"
    ),
    pytest.param("rtx-4090", "memory_gb", 24, id="RTX 4090 24 GB (Ada whitepaper)"),
    pytest.param("rtx-4090", "memory_bandwidth_gb_per_s", 1008, id="RTX 4090 1008 GB/s"),
    pytest.param("rtx-4090", "fp32_tflops", 82.6, id="RTX 4090 fp32 82.6"),
    pytest.param("rtx-4090", "fp16_tflops", 165.2, id="RTX 4090 fp16 FP32-acc 165.2"),
    pytest.param("v100-sxm2-16gb", "fp16_tflops", 125, id="V100 SXM2 tensor 125"),
    pytest.param("v100-sxm2-16gb", "memory_bandwidth_gb_per_s", 900, id="V100 SXM2 900 GB/s"),
    pytest.param("t4", "fp16_tflops", 65, id="T4 fp16 65"),
    pytest.param("t4", "tdp_w", 70, id="T4 70 W"),
    pytest.param("l4", "fp8_tflops", 242.5, id="L4 fp8 242.5 dense (L4 datasheet 485 sparse)"),
    pytest.param("l40s", "bf16_tflops", 366.5, id="L40S bf16 366.5 dense (datasheet 733 sparse)"),
    pytest.param("h200-sxm-141gb", "memory_bandwidth_gb_per_s", 4800, id="H200 4.8 TB/s"),
    pytest.param("h200-sxm-141gb", "memory_gb", 141, id="H200 141 GB"),
    pytest.param("mi300x", "bf16_tflops", 1307.4, id="MI300X bf16 1307.4 (AMD datasheet)"),
    pytest.param("mi300x", "memory_gb", 192, id="MI300X 192 GB"),
    pytest.param("mi250x", "fp16_tflops", 383, id="MI250X fp16 383"),
    pytest.param("rtx-a6000", "memory_bandwidth_gb_per_s", 768, id="RTX A6000 768 GB/s"),
    pytest.param("rtx-3090", "memory_bandwidth_gb_per_s", 936, id="RTX 3090 936 GB/s"),
]

REQUIRED_IDS = [
    "v100-sxm2-16gb",
    "t4",
    "a10",
    "a10g",
    "a30",
    "a40",
    "a100-pcie-40gb",
    "a100-pcie-80gb",
    "a100-sxm4-40gb",
    "a100-sxm4-80gb",
    "l4",
    "l40",
    "l40s",
    "h100-pcie-80gb",
    "h100-sxm-80gb",
    "h100-nvl-94gb",
    "h200-sxm-141gb",
    "gh200-96gb",
    "b200-sxm-180gb",
    "rtx-a4000",
    "rtx-a5000",
    "rtx-a6000",
    "rtx-6000-ada",
    "rtx-2080-ti",
    "rtx-3090",
    "rtx-4090",
    "rtx-5090",
    "mi250x",
    "mi300x",
]


class TestGpuFigures:
    @pytest.mark.parametrize(("gpu_id", "field", "expected"), DATASHEET)
    def test_matches_datasheet(
        self, knowledge: Knowledge, gpu_id: str, field: str, expected: float
    ) -> None:
        value = getattr(knowledge.gpus[gpu_id], field)
        assert value == pytest.approx(expected, rel=0.01)

    def test_catalog_spans_volta_to_blackwell_and_amd(self, knowledge: Knowledge) -> None:
        assert len(knowledge.gpus) >= 35
        assert set(REQUIRED_IDS) <= set(knowledge.gpus)
        archs = {g.architecture for g in knowledge.gpus.values()}
        assert {
            "volta",
            "turing",
            "ampere",
            "ada",
            "hopper",
            "blackwell",
            "cdna2",
            "cdna3",
        } <= archs
        segments = {g.segment for g in knowledge.gpus.values()}
        assert segments == {"datacenter", "workstation", "consumer"}

    def test_precision_support_follows_the_architecture(self, knowledge: Knowledge) -> None:
        for gpu in knowledge.gpus.values():
            if gpu.vendor == "nvidia" and gpu.architecture in ("volta", "turing", "pascal"):
                assert gpu.bf16_tflops is None, gpu.id
            if gpu.vendor == "nvidia" and gpu.architecture in ("ada", "hopper", "blackwell"):
                assert gpu.fp8_tflops is not None, gpu.id
            if gpu.vendor == "nvidia" and gpu.architecture == "ampere":
                assert gpu.fp8_tflops is None, gpu.id
                assert gpu.bf16_tflops is not None, gpu.id

    def test_consumer_cards_carry_licence_and_p2p_facts(self, knowledge: Knowledge) -> None:
        rtx4090 = knowledge.gpus["rtx-4090"]
        assert rtx4090.datacenter_use_allowed is False
        assert rtx4090.p2p_supported is False
        assert knowledge.gpus["h100-sxm-80gb"].datacenter_use_allowed is True

    def test_every_record_is_sourced_and_dated(self, knowledge: Knowledge) -> None:
        for gpu in knowledge.gpus.values():
            assert gpu.sources, gpu.id
            assert all(s.startswith("http") for s in gpu.sources), gpu.id
            assert gpu.as_of.year >= 2024
        for link in knowledge.interconnects.values():
            assert link.sources, link.id
        for param in knowledge.onprem.values():
            assert param.source, param.id
            assert param.as_of, param.id


class TestAliases:
    @pytest.mark.parametrize(
        ("name", "gpu_id"),
        [
            pytest.param("NVIDIA A100-PG509-200", "a100-sxm4-40gb", id="trace-variant"),
            pytest.param("Tesla V100-SXM2-16GB", "v100-sxm2-16gb", id="trace-v100"),
            pytest.param("NVIDIA A100-SXM4-80GB", "a100-sxm4-80gb", id="trace-a100-80"),
            pytest.param("NVIDIA H100-SXM5-80GB", "h100-sxm-80gb", id="mlperf-h100"),
            pytest.param("NVIDIA A100 - PCIe - 80 GB", "a100-pcie-80gb", id="mlperf-spaced"),
            pytest.param("RTX 6000", "quadro-rtx-6000", id="turing-rtx-6000"),
            pytest.param("RTX6000-Ada", "rtx-6000-ada", id="ada-rtx-6000"),
            pytest.param("NVIDIA GeForce RTX 4090", "rtx-4090", id="geforce"),
        ],
    )
    def test_source_names_resolve(self, knowledge: Knowledge, name: str, gpu_id: str) -> None:
        assert knowledge.resolve_gpu(name) == gpu_id

    def test_no_two_gpus_share_a_name(self, knowledge: Knowledge) -> None:
        owners: dict[str, str] = {}
        for gpu in knowledge.gpus.values():
            for name in (gpu.id, gpu.name, *gpu.aliases):
                assert owners.setdefault(normalise_name(name), gpu.id) == gpu.id, name


class TestReferences:
    def test_offers_reference_known_gpus_and_links(self, knowledge: Knowledge) -> None:
        providers = {o.provider for o in knowledge.offers}
        assert {"aws", "gcp", "azure", "lambda"} <= providers
        for offer in knowledge.offers:
            assert offer.gpu_id in knowledge.gpus
            assert offer.interconnect is None or offer.interconnect in knowledge.interconnects
            assert offer.prices

    def test_every_benchmark_row_resolves(
        self, knowledge: Knowledge, capsys: pytest.CaptureFixture[str]
    ) -> None:
        assert knowledge.unresolved == []
        assert all(b.gpu_id in knowledge.gpus for b in knowledge.benchmarks)
        by_kind: dict[str, int] = {}
        for b in knowledge.benchmarks:
            by_kind[b.kind] = by_kind.get(b.kind, 0) + 1
        with capsys.disabled():
            print(f"\n  stored benchmark rows loaded: {len(knowledge.benchmarks)} {by_kind}")
        assert by_kind["training-throughput"] > 1000
        assert by_kind["time-to-train"] > 100

    def test_lambda_generations_are_kept_apart(self, knowledge: Knowledge) -> None:
        suites = {b.suite for b in knowledge.benchmarks if b.kind == "training-throughput"}
        assert {"lambda-v0", "lambda-v1", "lambda-v2"} <= suites


class TestLoading:
    def test_second_load_is_served_from_memory(self, knowledge: Knowledge) -> None:
        assert load_knowledge() is knowledge

    def test_version_is_a_content_hash(self, knowledge: Knowledge) -> None:
        assert len(knowledge.version) == 16
        int(knowledge.version, 16)
