"""LLM truth: MLPerf Training's LLM rows against the layout planner's optimized stack.

Each MLPerf Training row of GPT-3 175B pretraining or Llama 2 70B LoRA fine-tuning (closed
division) is a throughput: tokens to converge (GPT-3 logs them as tokens; LoRA as
sequences of 8,192 tokens) over the time to train. It is predicted as the fastest layout the
planner finds for the row's GPUs (servers of ``count / nodes`` GPUs), its global batch and a
micro-batch of one, in FP8 where the GPU has it (the submissions ran NVIDIA's Transformer
Engine in FP8) and bf16 elsewhere, on the ``optimized`` stack. The stack's two constants are
fitted on the rows (:func:`fit_optimized`); :func:`held_out_gpu` refits without each GPU in
turn and predicts that GPU's rows (scikit-learn's ``LeaveOneGroupOut`` over the GPUs, the fit
wrapped as an estimator, :class:`OptimizedFit`).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from knowledge import Knowledge
from knowledge.records import Benchmark, Gpu
from profiles.description import resolve
from profiles.model_catalog import Catalog
from profiles.profile import profile
from profiles.workload import WorkloadSchema
from service.engine.estimating import software as stacks
from service.engine.estimating.estimate import USABLE_MEMORY_SHARE
from service.engine.estimating.layout import Layout, ModelShape
from service.engine.estimating.roofline import MathMode, math_mode, usable_precisions
from service.engine.estimating.software import EIGHT_BIT, OPTIMIZED
from service.engine.estimating.step_model import StepModel
from service.engine.estimating.step_profile import StepProfile
from service.engine.planning.network import Network, network
from service.engine.planning.search import Planned, planned_at
from service.engine.planning.step_time import LayoutStep, layout_step
from service.engine.planning.work import OptimizedStack, model_flops, stacked, work
from service.engine.validating import inference_validation, operators, training_validation
from service.engine.validating.selection import (
    CaseEstimator,
    error_summary,
    group_folds,
    indices,
    objects,
)

# workload -> (catalog model, workload request at micro-batch 1, tokens per logged sample)
MLPERF_LLM: dict[str, tuple[str, dict[str, Any], int]] = {
    "gpt3-175b-c4": (
        "gpt3-175b",
        {"task": "training", "batch_size": 1, "seq_len": 2048, "optimizer": "adamw"},
        1,
    ),
    "llama2-70b-lora-govreport": (
        "llama-2-70b",
        {
            "task": "fine-tuning",
            "method": "lora",
            "batch_size": 1,
            "seq_len": 8192,
            "optimizer": "adamw",
        },
        8192,
    ),
}

# (a catalog name or a model description, a workload request) -> the profile
ProfileSource = Callable[[Any, dict[str, Any]], dict[str, Any]]
DescribedSource = ProfileSource
PUBLISHED = Path(__file__).resolve().parents[3] / "knowledge" / "data" / "llm_published.yaml"


@dataclass(frozen=True, slots=True)
class LlmCase:
    row: Benchmark
    gpu: Gpu
    precision: str
    profile: StepProfile
    shape: ModelShape | None
    measured_tokens_per_s: float
    global_batch: int
    gpus_per_node: int


def cases(knowledge: Knowledge, source: ProfileSource) -> list[LlmCase]:
    """Every closed-division MLPerf LLM row on a known GPU as a case (``source`` profiles a
    catalog model for a workload request)."""
    profiles: dict[tuple[str, str], dict[str, Any]] = {}
    optimized = stacks.named(knowledge, "optimized")
    out = []
    for row in knowledge.benchmarks:
        if row.workload not in MLPERF_LLM or row.gpu_id is None:
            continue
        if row.details.get("division") != "closed" or not row.details.get("samples_to_converge"):
            continue
        if not _vendor_tuned(row):
            continue
        name, request, tokens_per_sample = MLPERF_LLM[row.workload]
        gpu = knowledge.gpus[row.gpu_id]
        precision = "fp8" if "fp8" in usable_precisions(gpu) else "bf16"
        key = (row.workload, precision)
        if key not in profiles:
            profiles[key] = source(name, {**request, "precision": precision})
        found = profiles[key]
        tokens = float(row.details["samples_to_converge"]) * tokens_per_sample
        nodes = int(row.details.get("nodes") or 1)
        shape = ModelShape.from_profile(found)
        out.append(
            LlmCase(
                row=row,
                gpu=gpu,
                precision=precision,
                profile=stacked(StepProfile.from_profile(found), shape, optimized),
                shape=shape,
                measured_tokens_per_s=tokens / (row.value * 60.0),
                global_batch=int(row.details.get("global_batch_size") or row.gpu_count),
                gpus_per_node=max(1, row.gpu_count // nodes),
            )
        )
    return out


def _vendor_tuned(row: Benchmark) -> bool:
    """Submissions on NVIDIA's NeMo / Megatron stack (the others, e.g. DeepSpeed on stock
    PyTorch, ran another stack and are not the optimized stack's data)."""
    framework = str(row.details.get("framework") or "").lower()
    return "nemo" in framework or "megatron" in framework


@dataclass(frozen=True, slots=True)
class _Candidates:
    """What predicting a case reuses under any constants: its math mode, network, FLOPs and
    fitting layouts (fastest first under the shipped constants: the fits try only the first
    few, since constants that move every layout alike do not reorder them much)."""

    mode: MathMode
    net: Network
    flops: float
    layouts: list[Planned]


def _candidates(case: LlmCase, step_model: StepModel, knowledge: Knowledge) -> _Candidates:
    mode = math_mode(case.gpu, case.precision)
    done = work(case.profile, case.gpu, mode, stacks.named(knowledge, "optimized"), step_model)
    net = network(knowledge, case.gpu, case.gpus_per_node)
    usable = case.gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE
    found = planned_at(
        case.row.gpu_count, case.profile, case.shape, done, net, mode, usable, case.global_batch
    )
    fitting = [x for x in found if x.fits][:CANDIDATES]
    return _Candidates(mode, net, model_flops(case.profile), fitting)


CANDIDATES = 8


@dataclass
class Predictor:
    """Predicts cases under any constants of the optimized stack, reusing each case's
    candidate layouts and network."""

    step_model: StepModel
    knowledge: Knowledge
    _found: dict[int, _Candidates] = field(default_factory=dict)

    def best(self, case: LlmCase, stack: OptimizedStack = OPTIMIZED) -> LayoutStep | None:
        key = id(case)
        if key not in self._found:
            self._found[key] = _candidates(case, self.step_model, self.knowledge)
        c = self._found[key]
        if not c.layouts:
            return None
        optimized = stacks.named(self.knowledge, "optimized")
        done = work(case.profile, case.gpu, c.mode, optimized, self.step_model, optimized=stack)
        steps = [
            layout_step(x.layout, case.profile, case.shape, done, c.net, c.mode.tensor_flops,
                        c.flops)
            for x in c.layouts
        ]  # fmt: skip
        return min(steps, key=lambda s: s.step_s)

    def log_errors(self, data: Sequence[LlmCase], stack: OptimizedStack) -> list[float]:
        out = []
        for case in data:
            best = self.best(case, stack)
            predicted = best.tokens_per_s if best is not None else 1e-3
            out.append(math.log(predicted / case.measured_tokens_per_s))
        return out


EFFICIENCIES = [0.20 + 0.01 * i for i in range(61)]


def fit_optimized(data: Sequence[LlmCase], predictor: Predictor,
                  start: OptimizedStack = OPTIMIZED) -> OptimizedStack:  # fmt: skip
    """The FP8 efficiency with the least absolute log error over ``data``'s FP8 cases, on a
    grid (every prediction picks its own fastest layout, so the error is not smooth in it);
    the 16-bit one is llm-foundry's (:func:`fit_16bit`)."""
    group = [c for c in data if c.precision in EIGHT_BIT]
    if not group:
        return start

    def loss(e: float) -> float:
        return sum(abs(x) for x in predictor.log_errors(group, replace(start, efficiency_8bit=e)))

    return replace(start, efficiency_8bit=min(EFFICIENCIES, key=loss))


class OptimizedFit(CaseEstimator):
    """scikit-learn's view of the optimized stack's fit: ``X`` holds indices into ``cases``,
    ``y`` their measured tokens a second; ``fit`` fits the stack on the rows given
    (:func:`fit_optimized`), ``predict`` gives the tokens a second of each row's fastest
    layout under it (NaN where no layout fits), ``predict_rows`` each row as the report
    shows it."""

    def __init__(self, cases: Sequence[LlmCase], predictor: Predictor) -> None:
        self.cases = cases
        self.predictor = predictor

    def fit(self, X: np.ndarray, y: np.ndarray | None = None) -> OptimizedFit:
        self.stack_ = fit_optimized([self.cases[i] for i in indices(X)], self.predictor)
        return self

    def predict_rows(self, X: np.ndarray) -> np.ndarray:
        found = [self.cases[i] for i in indices(X)]
        return objects([_row(c, self.predictor.best(c, self.stack_), self.stack_) for c in found])

    def predict(self, X: np.ndarray) -> np.ndarray:
        predicted = [r["predicted_tokens_per_s"] for r in self.predict_rows(X)]
        return np.array([math.nan if p is None else p for p in predicted], dtype=float)


def held_out_gpu(data: Sequence[LlmCase], predictor: Predictor) -> dict[str, Any]:
    """Each GPU's rows predicted by the stack fitted on the other GPUs' rows (a precision
    with no row left keeps the shipped constant), GPU by GPU (``LeaveOneGroupOut``'s
    splits: :func:`service.engine.validating.selection.group_folds`, as each row shows its
    layout)."""
    folds = group_folds(
        OptimizedFit(data, predictor),
        [c.measured_tokens_per_s for c in data],
        [c.gpu.id for c in data],
    )
    rows = [row for fold in folds for row in fold.rows()]
    errors = error_summary([abs(r["error"]) for r in rows if r["error"] is not None])
    return {"rows": rows, "median_ape": errors["median_ape"], "mean_ape": errors["mean_ape"]}


def _row(case: LlmCase, best: LayoutStep | None, stack: OptimizedStack) -> dict[str, Any]:
    predicted = best.tokens_per_s if best is not None else None
    return {
        "workload": case.row.workload,
        "suite": case.row.suite,
        "submitter": case.row.details.get("submitter"),
        "gpu_id": case.gpu.id,
        "count": case.row.gpu_count,
        "precision": case.precision,
        "global_batch": case.global_batch,
        "measured_tokens_per_s": case.measured_tokens_per_s,
        "predicted_tokens_per_s": predicted,
        "error": predicted / case.measured_tokens_per_s - 1 if predicted else None,
        "layout": best.layout.to_dict() if best is not None else None,
        "mfu": best.mfu if best is not None else None,
        "efficiency": stack.efficiency(case.precision),
    }


# --- published tables: Megatron-LM, Llama 3, llm-foundry (knowledge/data/llm_published.yaml)

H100_BF16_PEAK = 989.5e12  # llm-foundry's denominator (composer's GPU_AVAILABLE_FLOPS)


@dataclass(frozen=True, slots=True)
class PublishedCase:
    table: str
    row: Mapping[str, Any]
    gpu: Gpu
    precision: str
    profile: StepProfile
    shape: ModelShape
    layout: Layout
    gpus_per_node: int
    network: str
    figure: str  # mfu or tflops_per_gpu
    printed: float
    # the kernel the source ran: "native" (the GPU's fastest), or one written for synchronous
    # MMA even where faster ones exist ("flash2": FlashAttention-2; "triton": Triton's
    # FlashAttention)
    attention_kernel: str = "native"
    peak_flops: float = H100_BF16_PEAK  # the MFU's denominator, as the source takes it
    held: bool = True  # held to GOLDEN_POINTS (else reported only)


def published_tables() -> list[dict[str, Any]]:
    with PUBLISHED.open(encoding="utf-8") as handle:
        return list(yaml.safe_load(handle))


def _description(table: Mapping[str, Any], row: Mapping[str, Any]) -> dict[str, Any]:
    if "model" in table:
        return dict(table["model"])
    seq = int(row.get("seq") or table["seq"])
    return {
        "family": "transformer",
        "arch": "decoder",
        "layers": row["layers"],
        "hidden": row["hidden"],
        "heads": row["heads"],
        "ffn": 4 * row["hidden"],
        "vocab": table["vocab"],
        "norm": "layernorm",
        "activation": "gelu",
        "gated": False,
        "position": "learned",
        "max_positions": seq,
        "tie_embeddings": True,  # MPT and Megatron's GPT share the input and output embedding
    }


def published_cases(knowledge: Knowledge, source: DescribedSource) -> list[PublishedCase]:
    """Every row of the published tables as a case with its printed layout (``source``
    profiles a model description for a workload request)."""
    out = []
    for table in published_tables():
        gpu = knowledge.gpu(table["gpu"])
        # the optimized stack, with what the source says its own stack did differently
        stack = stacks.resolve(knowledge, "optimized", table.get("stack_options"))
        for row in table["rows"]:
            seq = int(row.get("seq") or table["seq"])
            micro = int(row["micro"])
            request = {"task": "training", "batch_size": micro, "seq_len": seq,
                       "precision": table["precision"], "optimizer": "adamw",
                       "attention": table.get("attention", "flash")}  # fmt: skip
            found = source(_description(table, row), request)
            shape = ModelShape.from_profile(found)
            if shape is None:
                raise ValueError(f"{table['id']}: not a transformer")
            t, p, c = int(row.get("tp", 1)), int(row.get("pp", 1)), int(row.get("cp", 1))
            d = int(row.get("dp") or row["gpus"] // (t * p * c))
            stage = {"megatron": 0, "model": 3 if t * p == 1 else 1}[table["flops"]]
            layout = Layout(
                data_parallel=d,
                tensor_parallel=t,
                pipeline_parallel=p,
                context_parallel=c,
                zero_stage=stage,
                sequence_parallel=t > 1 and table["flops"] == "model",
                activation_checkpointing=row.get("checkpointing", table.get("checkpointing")),
                micro_batch_size=micro,
                gradient_accumulation=max(1, math.ceil(row["global"] / (micro * d))),
                virtual_stages=int(row.get("virtual", table.get("virtual", 1))),
                ends_as_layers=bool(table.get("ends_as_layers", False)),
            )
            out.append(
                PublishedCase(
                    table=table["id"],
                    row=row,
                    gpu=gpu,
                    precision=table["precision"],
                    profile=stacked(StepProfile.from_profile(found), shape, stack),
                    shape=shape,
                    layout=layout,
                    gpus_per_node=int(table["gpus_per_node"]),
                    network=table["network"],
                    figure=table["figure"],
                    printed=float(row[table["figure"]]),
                    attention_kernel=row.get("attention_kernel")
                    or table.get("attention_kernel", "native"),
                    peak_flops=float(table.get("peak_tflops", H100_BF16_PEAK / 1e12)) * 1e12,
                    held=bool(table.get("held", True)),
                )
            )
    return out


def published_flops(case: PublishedCase) -> float:
    """FLOPs of one step as the source counts them for its figure: Megatron's eq. 3 (GEMMs,
    recomputation included), else 6 N + 12 l h s per token (llm-foundry; PaLM's MFU)."""
    s, shape = case.profile.seq_len or 0, case.shape
    sequences = case.layout.global_batch
    if case.table.startswith("megatron"):
        n, h, v = shape.layers, shape.hidden, shape.vocab
        return 96 * sequences * s * n * h * h * (1 + s / (6 * h) + v / (16 * n * h))
    per_token = 6 * shape.parameters + 12 * shape.layers * shape.hidden * s
    return per_token * sequences * s


def published_step(
    case: PublishedCase, step_model: StepModel, knowledge: Knowledge,
    stack: OptimizedStack = OPTIMIZED,
) -> LayoutStep:  # fmt: skip
    """The printed layout's step on the optimized stack (with the attention kernel the
    source ran)."""
    if case.attention_kernel != "native":
        stack = replace(stack, native_attention_speedup=1.0)
    mode = math_mode(case.gpu, case.precision)
    optimized = stacks.named(knowledge, "optimized")
    done = work(case.profile, case.gpu, mode, optimized, step_model, optimized=stack)
    net = network(knowledge, case.gpu, case.gpus_per_node, inter=case.network)
    flops = model_flops(case.profile)
    return layout_step(case.layout, case.profile, case.shape, done, net, mode.tensor_flops, flops)


def published_figure(case: PublishedCase, step: LayoutStep) -> float:
    """The figure the source prints, from a step time: MFU (0-1) or TFLOP/s per GPU."""
    per_gpu = published_flops(case) / (step.step_s * case.layout.gpus)
    if case.figure == "tflops_per_gpu":
        return per_gpu / 1e12
    return per_gpu / case.peak_flops


def published_report(
    data: Sequence[PublishedCase], step_model: StepModel, knowledge: Knowledge,
    stack: OptimizedStack = OPTIMIZED,
) -> list[dict[str, Any]]:  # fmt: skip
    """Each published row: the printed figure, the predicted one and the gap in points of
    peak (MFU points; Megatron's TFLOP/s as a share of the A100's 312)."""
    out = []
    for case in data:
        step = published_step(case, step_model, knowledge, stack)
        predicted = published_figure(case, step)
        scale = 312.0 if case.figure == "tflops_per_gpu" else 1.0
        out.append(
            {
                "table": case.table,
                "model": case.row.get("model") or case.row.get("params_b"),
                "gpus": case.layout.gpus,
                "seq": case.profile.seq_len,
                "layout": case.layout.to_dict(),
                "figure": case.figure,
                "printed": case.printed,
                "predicted": predicted,
                "gap_points": 100 * (predicted - case.printed) / scale,
                "bound": step.bound,
                "held": case.held,
            }
        )
    return out


ATTENTION_SHARES = (0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6)
HOST_TIMES = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3)  # seconds per optimizer step


def _published_loss(
    data: Sequence[PublishedCase], step_model: StepModel, knowledge: Knowledge,
    stack: OptimizedStack,
) -> float:  # fmt: skip
    """Median absolute log error of the printed figures (inversely proportional to the
    step)."""
    return statistics.median(
        abs(math.log(published_figure(c, published_step(c, step_model, knowledge, stack))
                     / c.printed))
        for c in data
    )  # fmt: skip


def fit_16bit(data: Sequence[PublishedCase], step_model: StepModel, knowledge: Knowledge,
              start: OptimizedStack = OPTIMIZED) -> OptimizedStack:  # fmt: skip
    """The 16-bit efficiency and host time per step with the least error over ``data``
    (steps of many micro-batches tell the efficiency, steps of one the host time), the rest
    of ``start`` kept."""
    grid = [replace(start, efficiency_16bit=e, host_s=h)
            for h, e in itertools.product(HOST_TIMES, EFFICIENCIES)]  # fmt: skip
    return min(grid, key=lambda stack: _published_loss(data, step_model, knowledge, stack))


GOLDEN_POINTS = 5.0  # the tolerance the golden tables are held to (MFU points)
MLPERF_TOLERANCE = 0.15  # and MLPerf's rows (relative error)


def fit_stack(
    published: Sequence[PublishedCase], mlperf: Sequence[LlmCase], predictor: Predictor,
    start: OptimizedStack = OPTIMIZED,
) -> OptimizedStack:  # fmt: skip
    """The whole optimized stack: for each attention share on a grid, the 16-bit efficiency
    and host time fitted on ``published`` (llm-foundry) and the FP8 efficiency on
    ``mlperf``; then the share that misses least on both: the share of ``published`` rows
    beyond :data:`GOLDEN_POINTS` plus the share of ``mlperf`` rows beyond
    :data:`MLPERF_TOLERANCE`, the tolerances issue 11 holds each to. The share is that of
    llm-foundry's kernels for synchronous MMA (Triton's FlashAttention on its long-sequence
    rows, FlashAttention-2 on some); NeMo's on Hopper and Blackwell run attention at
    ``native_attention_speedup`` times it (a constant from the FlashAttention-3 paper, not
    fitted)."""
    best, best_loss = start, math.inf
    for share in ATTENTION_SHARES:
        base = replace(start, attention_share=share)
        stack = fit_optimized(
            mlperf, predictor, fit_16bit(published, predictor.step_model, predictor.knowledge, base)
        )
        rows = published_report(published, predictor.step_model, predictor.knowledge, stack)
        loss = statistics.fmean(abs(r["gap_points"]) > GOLDEN_POINTS for r in rows)
        errors = predictor.log_errors(mlperf, stack)
        loss += statistics.fmean(abs(math.exp(e) - 1) > MLPERF_TOLERANCE for e in errors)
        if loss < best_loss:
            best, best_loss = stack, loss
    return best


# --- the LLM section of ``rightsize validate`` -------------------------------------------


def catalog_source(catalog: Catalog) -> DescribedSource:
    """Profiles a catalog name or a model description for a workload request."""

    def source(model: Any, request: dict[str, Any]) -> dict[str, Any]:
        described = {"name": model} if isinstance(model, str) else model
        workload = WorkloadSchema().load(request)
        return profile(resolve(described, catalog), workload, PROFILE_TIMEOUT_S).to_dict()

    return source


PROFILE_TIMEOUT_S = 300.0


def report(step_model: StepModel, knowledge: Knowledge, catalog: Catalog) -> dict[str, Any]:
    """MLPerf Training's LLM rows and MLPerf Inference's Offline rows with each GPU held
    out, vidur's operators with each GPU held out, and the published tables' golden MFU."""
    source = catalog_source(catalog)
    training = held_out_gpu(cases(knowledge, source), Predictor(step_model, knowledge))
    offline = inference_validation.held_out_gpu(inference_validation.cases(knowledge, source))
    others = training_validation.held_out_gpu(training_validation.cases(knowledge, source))
    published = published_report(published_cases(knowledge, source), step_model, knowledge)
    tables: dict[str, Any] = {}
    for row in published:
        tables.setdefault(row["table"], []).append(row)
    return {
        "optimized_stack": {
            "efficiency_16bit": OPTIMIZED.efficiency_16bit,
            "efficiency_8bit": OPTIMIZED.efficiency_8bit,
            "memory_share": OPTIMIZED.memory_share,
            "attention_share": OPTIMIZED.attention_share,
            "native_attention_speedup": OPTIMIZED.native_attention_speedup,
            "host_s": OPTIMIZED.host_s,
            "source": OPTIMIZED.source,
        },
        "mlperf_training": {
            "rows": len(training["rows"]),
            "median_ape": training["median_ape"],
            "mean_ape": training["mean_ape"],
            "predictions": training["rows"],
        },
        "mlperf_inference_offline": offline,
        "mlperf_training_other": others,
        "operators": operators.held_out_gpu(knowledge),
        "golden": {
            table: {
                "held": rows[0]["held"],
                "median_gap_points": statistics.median(abs(r["gap_points"]) for r in rows),
                "median_signed_gap_points": statistics.median(r["gap_points"] for r in rows),
                "max_gap_points": max(abs(r["gap_points"]) for r in rows),
                "rows": rows,
            }
            for table, rows in tables.items()
        },
    }
