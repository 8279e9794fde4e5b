"""MLPerf Inference v3.1 Offline rows against the inference estimate, each GPU held out.

Every Offline row (closed division, datacenter) is a throughput per GPU: the system's
samples per second over its GPUs. Each workload is profiled once at an offline batch in
the precision TensorRT submissions ran it in (INT8 for the vision models, BERT-99 and
DLRM; FP16 for BERT-99.9 and RNN-T; FP8 for GPT-J where the GPU has it, else FP16), and a
batch takes its matmul-like work at the GPU's dense peak for that precision over an
efficiency, plus a share of its eager bytes (what the engine's fusion leaves) at the
bandwidth, plus its other arithmetic at the vector rate; a generated sequence (GPT-J) adds
its output tokens' decode passes; and a fixed time per batch that no GPU shortens (an
LSTM's or a generator's step-by-step loop of launches, the engine's host work). The three
constants of each workload are fitted on the other GPUs' rows (:func:`held_out_gpu`:
scikit-learn's ``LeaveOneGroupOut`` over the GPUs, workload by workload, with the fit
wrapped as an estimator, :class:`OfflineFit`): what carries to a new GPU is the workload's
use of its peaks, not the rows. They are factors, not bounded shares: what a sample costs
as the submissions ran it is not always what the profile counts (BERT drops the padding of
SQuAD's shorter questions, 3D U-Net slides a 128-voxel window over each whole scan), and
the fit carries that too.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowledge import Knowledge
from knowledge.records import Benchmark, Gpu
from service.engine.estimating.roofline import math_mode, resource_times, usable_precisions
from service.engine.estimating.step_profile import StepProfile
from service.engine.validating.selection import (
    CaseEstimator,
    error_summary,
    indices,
    leave_one_group_out,
)

ProfileSource = Callable[[Any, dict[str, Any]], dict[str, Any]]  # (name or description, request)

# workload -> (catalog model, request at the offline batch)
OFFLINE: dict[str, tuple[str, dict[str, Any]]] = {
    "resnet50-imagenet-inference": ("resnet-50", {"batch_size": 64}),
    "bert-large-squad-inference": ("bert-large", {"batch_size": 64, "prompt_tokens": 384}),
    "retinanet-openimages-inference": ("retinanet", {"batch_size": 8}),
    "unet3d-kits19-inference": ("unet3d", {"batch_size": 1}),
    "rnnt-librispeech-inference": ("rnnt", {"batch_size": 64}),
    "dlrm-v2-criteo-inference": ("dlrm-v2", {"batch_size": 2048}),
    # CNN/DailyMail articles up to 1,919 tokens, summaries up to 128 (MLPerf's GPT-J rules)
    "gptj-cnndm-inference": (
        "gpt-j-6b",
        {"batch_size": 32, "prompt_tokens": 1024, "output_tokens": 128},
    ),
}


def precision_for(row: Benchmark, gpu: Gpu) -> str:
    """The precision a TensorRT submission ran the row's workload in on ``gpu``."""
    usable = usable_precisions(gpu)
    accuracy = row.details.get("accuracy")
    if row.workload == "gptj-cnndm-inference":
        return "fp8" if "fp8" in usable else "fp16"
    if row.workload == "rnnt-librispeech-inference" or (
        row.workload == "bert-large-squad-inference" and accuracy == "99.9"
    ):
        return "fp16"
    return "int8" if "int8" in usable else "fp16"


@dataclass(frozen=True, slots=True)
class OfflineCase:
    row: Benchmark
    gpu: Gpu
    precision: str
    profile: StepProfile
    measured_per_gpu: float  # samples per second per GPU


def cases(knowledge: Knowledge, source: ProfileSource) -> list[OfflineCase]:
    profiles: dict[tuple[str, str], StepProfile] = {}
    out = []
    for row in knowledge.benchmarks:
        if row.kind != "inference-throughput" or row.details.get("scenario") != "Offline":
            continue
        if row.workload not in OFFLINE or row.gpu_id is None:
            continue
        gpu = knowledge.gpus[row.gpu_id]
        precision = precision_for(row, gpu)
        key = (row.workload, precision)
        if key not in profiles:
            name, request = OFFLINE[row.workload]
            found = source(name, {"task": "inference", "precision": precision, **request})
            profiles[key] = StepProfile.from_profile(found)
        out.append(OfflineCase(row, gpu, precision, profiles[key], row.value / row.gpu_count))
    return out


@dataclass(frozen=True, slots=True)
class Efficiency:
    fixed_ms: float  # per batch, whatever the GPU (launches, the engine's host work)
    matmul: float  # the dense tensor peak's share its kernels reach (x the work as counted)
    memory: float  # share of the eager bytes left after the engine's fusion, at full bandwidth


@dataclass(frozen=True, slots=True)
class Times:
    """A batch's ideal resource times (seconds) on one GPU."""

    tensor_s: float
    vector_s: float
    memory_s: float

    def at(self, e: Efficiency) -> float:
        return (
            e.fixed_ms * 1e-3 + self.tensor_s / e.matmul + self.vector_s + self.memory_s * e.memory
        )


def batch_times(case: OfflineCase) -> Times:
    """One batch: its passes (prefill and the output tokens' decodes where it generates)."""
    profile, gpu = case.profile, case.gpu
    mode = math_mode(gpu, case.precision)
    bandwidth = gpu.memory_bandwidth_gb_per_s * 1e9
    phases = {phase for phase, _ in profile.mix.work}
    passes: list[tuple[list[str], float]]
    if "prefill" in phases:
        output = float(profile.output_tokens or 0)
        passes = [(["prefill"], 1.0), (["decode-first"], output / 2), (["decode-last"], output / 2)]
    else:
        passes = [(sorted(phases), 1.0)]
    tensor = vector = memory = 0.0
    for names, times in passes:
        t = resource_times(profile.mix, mode, bandwidth, names)
        tensor += (t.tensor_s + t.cuda_core_s) * times
        vector += t.vector_s * times
        memory += t.memory_s * times
    return Times(tensor, vector, memory)


def predict(case: OfflineCase, e: Efficiency) -> float:
    """Samples per second per GPU."""
    return case.profile.batch_size / batch_times(case).at(e)


def fit(data: Sequence[OfflineCase]) -> Efficiency:
    """The fixed time, efficiency and memory share with the least soft-L1 log error over
    ``data`` (one workload)."""
    from scipy.optimize import least_squares

    per_gpu: dict[str, int] = {}
    for c in data:
        per_gpu[c.gpu.id] = per_gpu.get(c.gpu.id, 0) + 1
    # each GPU weighs the same, however many systems submitted on it
    times = [(batch_times(c), c.profile.batch_size, c.measured_per_gpu,
              per_gpu[c.gpu.id] ** -0.5) for c in data]  # fmt: skip

    def residuals(x: Sequence[float]) -> list[float]:
        e = Efficiency(x[0], x[1], x[2])
        return [w * math.log(batch / t.at(e) / measured) for t, batch, measured, w in times]

    result = least_squares(residuals, [1.0, 0.5, 0.5], bounds=([0.0, 1e-3, 0.0],
                           [1000.0, 10.0, 10.0]), loss="soft_l1", f_scale=0.1)  # fmt: skip
    return Efficiency(*(float(v) for v in result.x))


class OfflineFit(CaseEstimator):
    """scikit-learn's view of one workload's fit: ``X`` holds indices into ``cases`` (one
    workload's rows), ``y`` their measured samples a second per GPU; ``fit`` fits the three
    constants on the rows given (:func:`fit`) where they span ``min_gpus`` GPUs or more,
    ``predict`` gives each row's samples a second per GPU under them (NaN where nothing was
    fitted)."""

    def __init__(self, cases: Sequence[OfflineCase], min_gpus: int = 2) -> None:
        self.cases = cases
        self.min_gpus = min_gpus

    def fit(self, X: np.ndarray, y: np.ndarray | None = None) -> OfflineFit:
        train = [self.cases[i] for i in indices(X)]
        enough = len({c.gpu.id for c in train}) >= self.min_gpus
        self.efficiency_ = fit(train) if enough else None
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        e = self.efficiency_
        return np.array(
            [predict(self.cases[i], e) if e is not None else math.nan for i in indices(X)],
            dtype=float,
        )


def held_out_gpu(data: Sequence[OfflineCase]) -> dict[str, Any]:
    """Each GPU's rows predicted with the efficiencies fitted, workload by workload, on the
    other GPUs' rows (a workload that fewer than two other GPUs ran is not predicted on
    it); per workload and per GPU."""
    predicted = np.full(len(data), math.nan)
    for workload in sorted({c.row.workload for c in data}):
        index = [i for i, c in enumerate(data) if c.row.workload == workload]
        mine = [data[i] for i in index]
        predicted[index] = leave_one_group_out(
            OfflineFit(mine), [c.measured_per_gpu for c in mine], [c.gpu.id for c in mine]
        )
    rows: list[dict[str, Any]] = []
    for i in sorted(range(len(data)), key=lambda i: (data[i].gpu.id, data[i].row.workload)):
        case, value = data[i], float(predicted[i])
        if math.isnan(value):
            continue
        rows.append(
            {
                "workload": case.row.workload,
                "accuracy": case.row.details.get("accuracy"),
                "gpu_id": case.gpu.id,
                "count": case.row.gpu_count,
                "precision": case.precision,
                "submitter": case.row.details.get("submitter"),
                "measured_per_gpu": case.measured_per_gpu,
                "predicted_per_gpu": value,
                "error": value / case.measured_per_gpu - 1,
            }
        )
    return {"rows": rows, **summary(rows)}


def summary(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The rows' absolute errors: count, median, mean, per workload and per GPU
    (:func:`service.engine.validating.selection.error_summary`)."""
    return error_summary(
        [abs(r["error"]) for r in rows],
        {"by_workload": [r["workload"] for r in rows], "by_gpu": [r["gpu_id"] for r in rows]},
        count="rows_predicted",
    )
