"""Clocks and tensor rates agree with each other and with the per-clock widths of the cores.

FP32: fp32_tflops = 2 x sm_count x FP32 lanes per SM x boost_clock_mhz, lanes by compute
capability from the CUDA C++ Programming Guide's arithmetic-throughput table (AMD: per CU,
as AMD's own FP32 figure counts them). Tolerance 2%: datasheets round (P4: 5.44 computed,
5.5 printed, the widest gap in the catalog at 1.0%).

FP16 tensor with FP16 accumulate: sm_count x dense FLOPs per SM per clock (Volta, Turing,
Ampere GA100/GA102, Ada, Hopper and Blackwell whitepapers) x boost clock, tolerance 2%, except
for the records named in TENSOR_CLOCK_NOT_BOOST, whose vendor figures imply another clock.
"""

from __future__ import annotations

import pytest

from knowledge import Knowledge
from knowledge.throughput import fp16_tensor_tflops_at_boost, fp32_tflops_at_boost

# Records whose vendor tensor figures are not at the boost clock, each with the clock (MHz)
# those figures imply and the reason. The notes of each record say the same.
TENSOR_CLOCK_NOT_BOOST = {
    "h100-pcie-80gb": (1620, "Hopper whitepaper Table 3: tensor boost 1,620 vs 1,755 MHz"),
    "h100-sxm-80gb": (1830, "Hopper whitepaper Table 3: tensor boost 1,830 vs 1,980 MHz"),
    "h100-sxm-96gb": (1830, "as H100 SXM5"),
    "h100-sxm-96gb-hbm2e": (1687, "as H100 SXM5, every rate 0.922 of it (assumed, 500 W)"),
    "h200-sxm-141gb": (1830, "as H100 SXM5"),
    "gh200-96gb": (1830, "as H100 SXM5"),
    "gh200-144gb": (1830, "as H100 SXM5"),
    "h100-nvl-94gb": (1545, "datasheet 835.5 dense vs FP32 at 1,785 MHz"),
    "h200-nvl-141gb": (1545, "as H100 NVL"),
    "b200-sxm-180gb": (1856, "HGX B200 2.25 PFLOPS dense vs FP32 75 at ~1,980 MHz"),
    "b300-sxm-288gb": (1856, "as B200"),
    "gb200-186gb": (2062, "GB200 NVL72 2.5 PFLOPS dense vs FP32 80 at ~2,110 MHz"),
    "rtx-4000-ada": (1666, "datasheet tensor figure inconsistent with its own FP32 and clock"),
    "rtx-pro-6000-blackwell-server": (2597, "page's FP16 figure is the Workstation Edition's"),
}


class TestBoostClock:
    def test_every_gpu_has_a_plausible_boost_clock(self, knowledge: Knowledge) -> None:
        for gpu in knowledge.gpus.values():
            assert 500 <= gpu.boost_clock_mhz <= 3200, gpu.id

    def test_fp32_rate_follows_from_sms_lanes_and_clock(self, knowledge: Knowledge) -> None:
        disagree = {
            gpu.id: f"{gpu.fp32_tflops} listed, {fp32_tflops_at_boost(gpu):.2f} from the clock"
            for gpu in knowledge.gpus.values()
            if fp32_tflops_at_boost(gpu) != pytest.approx(gpu.fp32_tflops, rel=0.02)
        }
        assert disagree == {}

    @pytest.mark.parametrize(
        ("gpu_id", "sm_cycles_per_s"),
        [
            pytest.param("h100-sxm-80gb", 132 * 1980e6, id="H100 SXM 132 SMs x 1980 MHz"),
            pytest.param("rtx-4090", 128 * 2520e6, id="RTX 4090 128 SMs x 2520 MHz"),
            pytest.param("mi300x", 304 * 2100e6, id="MI300X 304 CUs x 2100 MHz"),
        ],
    )
    def test_sm_cycles_per_second(
        self, knowledge: Knowledge, gpu_id: str, sm_cycles_per_s: float
    ) -> None:
        assert knowledge.gpus[gpu_id].sm_cycles_per_s == pytest.approx(sm_cycles_per_s)


class TestFp16Accumulate:
    def test_geforce_runs_fp32_accumulate_at_half_rate(self, knowledge: Knowledge) -> None:
        geforce = [
            g
            for g in knowledge.gpus.values()
            if g.vendor == "nvidia" and g.segment == "consumer" and g.tensor_cores
        ]
        assert len(geforce) >= 15
        for gpu in geforce:
            assert gpu.fp16_fp16acc_tflops is not None, gpu.id
            ratio = gpu.fp16_fp16acc_tflops / gpu.fp16_tflops
            # Titan RTX is the GeForce-family exception: full-rate FP32 accumulate.
            expected = 1.0 if gpu.id == "titan-rtx" else 2.0
            assert ratio == pytest.approx(expected, rel=0.01), gpu.id

    def test_professional_and_datacenter_nvidia_run_both_at_one_rate(
        self, knowledge: Knowledge
    ) -> None:
        for gpu in knowledge.gpus.values():
            if gpu.vendor != "nvidia" or gpu.segment == "consumer" or not gpu.tensor_cores:
                continue
            if gpu.fp16_fp16acc_tflops is None:
                # Rated at half rate in every precision, FP16 accumulate unpublished.
                assert gpu.id in {"l40", "a10g"}, gpu.id
                continue
            assert gpu.fp16_fp16acc_tflops == pytest.approx(gpu.fp16_tflops, rel=0.01), gpu.id

    def test_null_without_tensor_cores(self, knowledge: Knowledge) -> None:
        for gpu in knowledge.gpus.values():
            if not gpu.tensor_cores:
                assert gpu.fp16_fp16acc_tflops is None, gpu.id

    @pytest.mark.parametrize(
        ("gpu_id", "fp32_acc", "fp16_acc"),
        [
            pytest.param("rtx-3090", 71.2, 142.3, id="RTX 3090 71/142 (GA102 whitepaper)"),
            pytest.param("rtx-4090", 165.2, 330.3, id="RTX 4090 165.2/330.3 (Ada whitepaper)"),
            pytest.param("rtx-5090", 209.5, 419.0, id="RTX 5090 209.5/419 (RTX Blackwell WP)"),
            pytest.param("rtx-2080-ti", 53.8, 107.6, id="RTX 2080 Ti 53.8/107.6 (Turing WP)"),
            pytest.param("rtx-a6000", 154.8, 154.8, id="RTX A6000 154.8 both (GA102 WP)"),
            pytest.param("a100-sxm4-80gb", 312, 312, id="A100 312 both (A100 datasheet)"),
        ],
    )
    def test_matches_the_whitepapers(
        self, knowledge: Knowledge, gpu_id: str, fp32_acc: float, fp16_acc: float
    ) -> None:
        gpu = knowledge.gpus[gpu_id]
        assert gpu.fp16_tflops == pytest.approx(fp32_acc, rel=0.01)
        assert gpu.fp16_fp16acc_tflops == pytest.approx(fp16_acc, rel=0.01)


class TestTensorRate:
    def test_fp16_accumulate_rate_follows_from_sms_and_clock(self, knowledge: Knowledge) -> None:
        disagree = {}
        for gpu in knowledge.gpus.values():
            if gpu.vendor != "nvidia" or gpu.fp16_fp16acc_tflops is None:
                continue
            at_boost = fp16_tensor_tflops_at_boost(gpu)
            clock, _why = TENSOR_CLOCK_NOT_BOOST.get(gpu.id, (gpu.boost_clock_mhz, ""))
            expected = at_boost * clock / gpu.boost_clock_mhz
            if gpu.fp16_fp16acc_tflops != pytest.approx(expected, rel=0.02):
                disagree[gpu.id] = f"{gpu.fp16_fp16acc_tflops} listed, {expected:.1f} expected"
        assert disagree == {}

    def test_exceptions_are_real(self, knowledge: Knowledge) -> None:
        """An exception whose clock is within 2% of the boost clock is no exception: drop it."""
        for gpu_id, (clock, _why) in TENSOR_CLOCK_NOT_BOOST.items():
            assert clock != pytest.approx(knowledge.gpus[gpu_id].boost_clock_mhz, rel=0.02)
