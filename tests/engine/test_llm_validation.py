"""LLM truth: the layout model's optimized stack on MLPerf Training's LLM rows (GPU held
out) and against the published Megatron-LM, Llama 3 and llm-foundry tables."""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

import pytest

from knowledge import Knowledge
from profiles.description import resolve
from profiles.model_catalog import Catalog
from profiles.profile import profile
from profiles.workload import WorkloadSchema
from service.engine.estimating.estimate import USABLE_MEMORY_SHARE
from service.engine.estimating.layout import Layout
from service.engine.estimating.layout_memory import memory_per_gpu
from service.engine.estimating.model import PerformanceModel
from service.engine.estimating.software import OPTIMIZED
from service.engine.validating import llm_validation as lv

pytestmark = pytest.mark.slow  # refits: the LLM rows


@pytest.fixture(scope="module")
def described(catalog: Catalog) -> Any:
    def source(model: Any, request: dict[str, Any]) -> dict[str, Any]:
        if isinstance(model, str):
            model = {"name": model}
        return profile(resolve(model, catalog), WorkloadSchema().load(request), 300.0).to_dict()

    return source


@pytest.fixture(scope="module")
def mlperf(knowledge: Knowledge, described: Any) -> list[lv.LlmCase]:
    return lv.cases(knowledge, described)


@pytest.fixture(scope="module")
def published(knowledge: Knowledge, described: Any) -> list[lv.PublishedCase]:
    return lv.published_cases(knowledge, described)


def test_mlperf_llm_rows_held_out_gpu_median_within_15_percent(
    mlperf: list[lv.LlmCase], model: PerformanceModel, knowledge: Knowledge
) -> None:
    """GPT-3 175B and Llama 2 70B LoRA on H100, H200, B200 and L40S (NeMo submissions):
    each GPU's rows predicted by the stack fitted without them. Issue 11's target: 15%."""
    gpus = {c.gpu.id for c in mlperf}
    assert {"h100-sxm-80gb", "h200-sxm-141gb", "b200-sxm-180gb", "l40s"} <= gpus
    assert all("nemo" in str(c.row.details.get("framework")).lower() for c in mlperf)
    report = lv.held_out_gpu(mlperf, lv.Predictor(model.step_model, knowledge))
    assert all(r["predicted_tokens_per_s"] for r in report["rows"])
    assert report["median_ape"] <= 0.15


def test_the_shipped_optimized_stack_is_what_the_fit_finds(
    mlperf: list[lv.LlmCase],
    published: list[lv.PublishedCase],
    model: PerformanceModel,
    knowledge: Knowledge,
) -> None:
    foundry = [c for c in published if c.table == "llm-foundry-mpt-h100"]
    found = lv.fit_stack(foundry, mlperf, lv.Predictor(model.step_model, knowledge))
    assert found.efficiency_8bit == pytest.approx(OPTIMIZED.efficiency_8bit, abs=0.011)
    assert found.efficiency_16bit == pytest.approx(OPTIMIZED.efficiency_16bit, abs=0.011)
    assert found.attention_share == pytest.approx(OPTIMIZED.attention_share, abs=0.01)
    assert found.host_s == pytest.approx(OPTIMIZED.host_s, abs=0.01)


def _gaps(report: list[dict[str, Any]], table: str) -> list[float]:
    return [r["gap_points"] for r in report if r["table"] == table]


def test_golden_mfu_of_the_published_tables(
    published: list[lv.PublishedCase], model: PerformanceModel, knowledge: Knowledge
) -> None:
    """Each published row's printed layout, predicted on the optimized stack and turned
    into the figure the source prints with the source's own FLOP count.

    - llm-foundry MPT 7B-70B on H100, bf16, FSDP (the 16-bit efficiency, the host time per
      step and attention's share are fitted here): every row within 5 points of MFU but
      one, 30B at 8k tokens on 8 GPUs, 10 points high (its 4k run on the same layout is
      within 1; no other model loses as much from 4k to 8k; 9 before the refit that
      context parallelism's overlap on MLPerf's rows brought: attention's share 0.3 -> 0.35).
    - Megatron-LM Table 1 (A100, not fitted; 2021 attention materialised its scores): every
      row within 5 points of the A100's peak.
    - Llama 3 405B Table 4 (H100, not fitted): the 8k rows within 5 points, with the
      interleaved schedule's V taken as 8 (the paper does not print it; see
      llm_published.yaml), Hopper's own attention kernels (at FlashAttention-2's rate the
      131k-token row, context parallel 16, was 7 low) and the paper's all-gathered keys and
      values (section 3.3.2). The 131k row is 6 points high: attention is 40% of its work,
      and the refit above raised attention's share (it was 3.4 high at 0.3); within 7.
    """
    report = lv.published_report(published, model.step_model, knowledge)
    assert len(report) == 67
    assert sum(r["held"] for r in report) == 47
    foundry = _gaps(report, "llm-foundry-mpt-h100")
    assert sum(abs(g) > lv.GOLDEN_POINTS for g in foundry) <= 1
    assert statistics.median(abs(g) for g in foundry) <= 2
    assert max(abs(g) for g in foundry) <= 11
    megatron = _gaps(report, "megatron-2021-table-1")
    assert all(abs(g) <= lv.GOLDEN_POINTS for g in megatron)
    llama = _gaps(report, "llama3-2024-table-4")
    assert len(llama) == 3
    assert all(abs(g) <= lv.GOLDEN_POINTS for g in llama[:2])
    assert abs(llama[2]) <= 7


def test_the_a100_table_is_reported_with_what_the_h100_fit_misses_there(
    published: list[lv.PublishedCase], model: PerformanceModel, knowledge: Knowledge
) -> None:
    """llm-foundry's A100 table (the same runs on A100 80GB, MFU of 312 TFLOP/s) is not held
    to the golden tolerance: the stack's constants are the H100's. It is predicted low
    (median 14 points: the runs reach a larger share of the A100's lower peak, though its
    isolated GEMMs do not), no row below 60% of its printed MFU; 30B at 8k tokens, the H100 table's
    outlier, runs as slowly on the A100 (39% MFU against 55% at 2k tokens)."""
    rows = [r for r in lv.published_report(published, model.step_model, knowledge)
            if r["table"] == "llm-foundry-mpt-a100"]  # fmt: skip
    assert len(rows) == 20
    assert not any(r["held"] for r in rows)
    assert all(0.6 <= r["predicted"] / r["printed"] <= 1.05 for r in rows)
    assert -20 < statistics.median(r["gap_points"] for r in rows) < -5
    by = {(r["model"], r["seq"]): r["printed"] for r in rows if r["model"] == "mpt-30b"}
    assert by[("mpt-30b", 8192)] < by[("mpt-30b", 2048)] - 0.1


def test_published_flops_follow_the_sources(published: list[lv.PublishedCase]) -> None:
    """Megatron's eq. 3 reproduces Table 1's aggregate: 1T at 163 TFLOP/s on 3,072 GPUs is
    502 PFLOP/s; llm-foundry's 6N + 12lhs per token reproduces its printed MFU."""
    one_t = next(c for c in published if c.row.get("params_b") == 1008.0)
    flops = lv.published_flops(one_t)
    seconds = flops / (163e12 * 3072)
    assert flops / seconds / 1e15 == pytest.approx(500.7, rel=0.01)
    mpt7 = next(c for c in published if c.row.get("model") == "mpt-7b" and c.row["gpus"] == 128)
    tokens_per_s = 1340830  # the README's T/s for this row
    per_token = lv.published_flops(mpt7) / (mpt7.layout.global_batch * 2048)
    assert per_token * tokens_per_s / (128 * lv.H100_BF16_PEAK) == pytest.approx(0.4571, abs=0.003)
    assert isinstance(mpt7.layout, Layout)
    assert mpt7.layout.zero_stage == 3


def test_the_published_layouts_fit_the_gpus_they_ran_on(
    published: list[lv.PublishedCase],
) -> None:
    """Every published row ran on its GPU, so its printed layout fits the usable memory on
    the stack it ran (llm-foundry's 7B at 64k tokens was over 80 GB while the fragmentation
    was counted on the whole model's activations rather than each GPU's). Llama 3 405B's
    16-stage pipeline without recomputation needs eager PyTorch's saved tensors (~39 sbh per
    layer) to be the fused stack's 31.75, its first stage a layer short and, with as many
    micro-batches as stages, no interleaving surplus, to fit: 76 GiB at 8,192 GPUs."""
    for case in published:
        held = memory_per_gpu(case.profile.memory, case.layout, case.shape, True)
        assert held.total_bytes <= case.gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE, case.row
    assert sum(c.table.startswith("llama3") for c in published) == 3


def test_hopper_attention_kernels_speed_up_long_sequences_only_where_the_source_ran_them(
    published: list[lv.PublishedCase], model: PerformanceModel, knowledge: Knowledge
) -> None:
    """Llama 3's 131k-token row gains from Hopper's attention kernels far more than its 8k
    rows (attention is 40% of its work, not 4%); llm-foundry's rows, which ran kernels for
    synchronous MMA on the same H100s (Triton's FlashAttention at 64k tokens, as on all its
    8-GPU rows; FlashAttention-2 on the 7B and 70B rows of 128 GPUs and more), are predicted
    with the fitted rate alone."""
    flash2 = replace(OPTIMIZED, native_attention_speedup=1.0)
    llama = [c for c in published if c.table.startswith("llama3")]
    gains = {
        c.profile.seq_len: lv.published_step(c, model.step_model, knowledge, flash2).step_s
        / lv.published_step(c, model.step_model, knowledge).step_s
        for c in llama
    }
    assert gains[131072] > 1.25
    assert 1.0 < gains[8192] < 1.06
    foundry = [c for c in published if c.table == "llm-foundry-mpt-h100"]
    kernels = {(c.attention_kernel, c.layout.gpus >= 128) for c in foundry}
    assert kernels == {("triton", False), ("triton", True), ("flash2", True)}
    long = next(c for c in foundry if c.profile.seq_len == 65536)
    assert long.attention_kernel == "triton"
    for mpt in (long, next(c for c in foundry if c.attention_kernel == "flash2")):
        same = [lv.published_step(mpt, model.step_model, knowledge, s).step_s
                for s in (OPTIMIZED, flash2)]  # fmt: skip
        assert same[0] == pytest.approx(same[1])
