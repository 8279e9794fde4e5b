"""MLPerf Training's rows, every workload, against the optimized stack, each GPU held out.

Each closed-division time-to-train row is a throughput per GPU: the samples (or the
workload's own unit: epochs, images) to converge over the time to train and the GPUs. A
row's step is one optimizer step of its global batch split evenly over its GPUs, each
GPU's share profiled affinely in the batch (from the workload's profiles at 1 and 2
samples, :meth:`StepProfile.between`), in 16 bits: its matmul-like work at the dense
16-bit peak over an efficiency, a share of its eager bytes at the bandwidth, its other
arithmetic at the vector rate, and a fixed time per step (synchronisation, the gradient
reduction no batch hides, the host). The three constants of each workload are fitted on
the other GPUs' rows (:func:`held_out_gpu`: scikit-learn's ``LeaveOneGroupOut`` over the
GPUs, workload by workload, the fit wrapped as an estimator, :class:`TrainingFit`); what a
workload counts as a sample and how many it takes to converge cancel out, and what is
tested is how its step moves with the GPU and with the batch each GPU gets. The LLM rows
(GPT-3, Llama 2 LoRA) are predicted layout by layout in
:mod:`service.engine.validating.llm_validation`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowledge import Knowledge
from knowledge.records import Benchmark, Gpu
from service.engine.estimating.roofline import math_mode, resource_times
from service.engine.estimating.step_profile import StepProfile
from service.engine.validating.inference_validation import ProfileSource, summary
from service.engine.validating.selection import CaseEstimator, indices, leave_one_group_out

# workload -> (catalog model, workload request but the batch)
TRAINING: dict[str, tuple[str, dict[str, Any]]] = {
    "resnet50-imagenet-time-to-train": ("resnet-50", {}),
    "bert-large-wikipedia": ("bert-large", {"seq_len": 512}),
    "retinanet-openimages": ("retinanet", {}),
    "unet3d-kits19": ("unet3d", {}),
    "rnnt-librispeech": ("rnnt", {}),
    "dlrm-dcnv2-criteo": ("dlrm-dcnv2", {}),
    "mask-rcnn-coco-time-to-train": ("mask-rcnn", {}),
    "stable-diffusion-laion": ("stable-diffusion-2-base", {}),
    "rgat-igbh": ("rgat", {}),
}
PRECISION = "bf16"  # fp16 where the GPU has no bf16 (the 16-bit peak is the same)


@dataclass(frozen=True, slots=True)
class TrainingCase:
    row: Benchmark
    gpu: Gpu
    precision: str
    step: StepProfile  # one GPU's share of the global batch
    measured_per_gpu: float  # the row's units per second per GPU


def cases(knowledge: Knowledge, source: ProfileSource) -> list[TrainingCase]:
    pairs: dict[tuple[str, str], tuple[StepProfile, StepProfile]] = {}
    out = []
    for row in knowledge.benchmarks:
        if row.kind != "time-to-train" or row.workload not in TRAINING or row.gpu_id is None:
            continue
        d = row.details
        if d.get("division") != "closed" or not d.get("samples_to_converge"):
            continue
        if not d.get("global_batch_size") or not row.value:
            continue
        if "tinygrad" in str(d.get("framework") or "").lower():
            continue  # another stack (tinycorp's), not the vendor-tuned one
        gpu = knowledge.gpus[row.gpu_id]
        precision = PRECISION if gpu.bf16_tflops else "fp16"
        key = (row.workload, precision)
        if key not in pairs:
            name, request = TRAINING[row.workload]
            base = {"task": "training", "precision": precision, "optimizer": "adamw", **request}
            one, two = (StepProfile.from_profile(source(name, {**base, "batch_size": b}))
                        for b in (1, 2))  # fmt: skip
            pairs[key] = (one, two)
        batch = float(d["global_batch_size"]) / row.gpu_count
        step = StepProfile.between(*pairs[key], batch)
        rate = float(d["samples_to_converge"]) / (row.value * 60.0) / row.gpu_count
        out.append(TrainingCase(row, gpu, precision, step, rate))
    return out


@dataclass(frozen=True, slots=True)
class Constants:
    matmul: float  # the 16-bit peak's share its kernels reach (x the work as counted)
    memory: float  # share of the eager bytes left after fusion
    fixed_ms: float  # per step, whatever the GPU


@dataclass(frozen=True, slots=True)
class Times:
    tensor_s: float
    vector_s: float
    memory_s: float
    batch: float

    def rate(self, c: Constants) -> float:
        """Samples of the step's batch per second."""
        step = self.tensor_s / c.matmul + self.vector_s + self.memory_s * c.memory
        return self.batch / (step + c.fixed_ms * 1e-3)


def times(case: TrainingCase) -> Times:
    mode = math_mode(case.gpu, case.precision)
    t = resource_times(case.step.mix, mode, case.gpu.memory_bandwidth_gb_per_s * 1e9)
    return Times(t.tensor_s + t.cuda_core_s, t.vector_s, t.memory_s, case.step.batch_size)


def fit(data: Sequence[TrainingCase]) -> tuple[Constants, dict[str, float]]:
    """The constants with the least soft-L1 log error, each GPU weighing the same; and, per
    round (suite), the scale that turns the model's samples per second into the rows' units
    (a round may count a workload in other units than another: epochs, thousands)."""
    from scipy.optimize import least_squares

    per_gpu: dict[str, int] = {}
    for c in data:
        per_gpu[c.gpu.id] = per_gpu.get(c.gpu.id, 0) + 1
    suites = sorted({c.row.suite for c in data})
    found = [(times(c), c.measured_per_gpu, per_gpu[c.gpu.id] ** -0.5, suites.index(c.row.suite))
             for c in data]  # fmt: skip

    def residuals(x: Sequence[float]) -> list[float]:
        c = Constants(x[0], x[1], x[2])
        return [w * (math.log(t.rate(c) / measured) + x[3 + i]) for t, measured, w, i in found]

    start = [0.5, 0.3, 1.0] + [0.0] * len(suites)
    low = [1e-3, 0.0, 0.0] + [-30.0] * len(suites)
    high = [10.0, 10.0, 1000.0] + [30.0] * len(suites)
    x = least_squares(residuals, start, bounds=(low, high), loss="soft_l1", f_scale=0.1).x
    scales = {suite: float(math.exp(x[3 + i])) for i, suite in enumerate(suites)}
    return Constants(float(x[0]), float(x[1]), float(x[2])), scales


MIN_GPUS = 3  # other GPUs a workload's constants are fitted on


class TrainingFit(CaseEstimator):
    """scikit-learn's view of one workload's fit: ``X`` holds indices into ``cases`` (one
    workload's rows), ``y`` their measured units a second per GPU; ``fit`` fits the
    constants and each round's scale on the rows given (:func:`fit`) where they span
    ``min_gpus`` GPUs or more, ``predict`` gives each row's units a second per GPU (NaN
    where nothing was fitted, or the row's round was not among the rows fitted on)."""

    def __init__(self, cases: Sequence[TrainingCase], min_gpus: int = MIN_GPUS) -> None:
        self.cases = cases
        self.min_gpus = min_gpus

    def fit(self, X: np.ndarray, y: np.ndarray | None = None) -> TrainingFit:
        train = [self.cases[i] for i in indices(X)]
        enough = len({c.gpu.id for c in train}) >= self.min_gpus
        self.constants_ = fit(train) if enough else None
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        out = []
        for i in indices(X):
            case = self.cases[i]
            if self.constants_ is None or case.row.suite not in self.constants_[1]:
                out.append(math.nan)
                continue
            constants, scales = self.constants_
            out.append(times(case).rate(constants) * scales[case.row.suite])
        return np.array(out, dtype=float)


def held_out_gpu(data: Sequence[TrainingCase]) -> dict[str, Any]:
    """Each GPU's rows predicted with the constants fitted, workload by workload, on the
    other GPUs' rows (a workload measured on fewer than three other GPUs is left out, and a
    row whose round no other GPU ran: that round's unit is not known)."""
    predicted = np.full(len(data), math.nan)
    for workload in sorted({c.row.workload for c in data}):
        index = [i for i, c in enumerate(data) if c.row.workload == workload]
        mine = [data[i] for i in index]
        predicted[index] = leave_one_group_out(
            TrainingFit(mine), [c.measured_per_gpu for c in mine], [c.gpu.id for c in mine]
        )
    gpus: dict[str, set[str]] = {}
    for c in data:
        gpus.setdefault(c.row.workload, set()).add(c.gpu.id)
    rows: list[dict[str, Any]] = []
    unknown = 0
    for i in sorted(range(len(data)), key=lambda i: (data[i].gpu.id, data[i].row.workload)):
        case, value = data[i], float(predicted[i])
        if math.isnan(value):
            # fitted on enough other GPUs, yet not predicted: its round's unit is not known
            unknown += len(gpus[case.row.workload] - {case.gpu.id}) >= MIN_GPUS
            continue
        rows.append(
            {
                "workload": case.row.workload,
                "gpu_id": case.gpu.id,
                "count": case.row.gpu_count,
                "batch_per_gpu": case.step.batch_size,
                "submitter": case.row.details.get("submitter"),
                "suite": case.row.suite,
                "error": value / case.measured_per_gpu - 1,
            }
        )
    return {"rows": rows, **summary(rows), "left_out_unit_unknown": unknown}
