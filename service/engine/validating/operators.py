"""One decoder layer's operators timed one by one: vidur's Llama-2-7B profile as the truth.

Each operator of a Llama layer at ``tokens`` tokens and tensor-parallel degree ``t`` does
known work: the four projections are GEMMs (``tokens`` rows; QKV and gate-and-up split
their columns over ``t``, the output and down projections their inner dimension), the
rest stream their inputs and outputs once (embedding gather, RMSNorm, RoPE, SiLU-and-
multiply, residual add). An operator's time is a fixed cost per kernel plus the larger of
its GEMM time (the dense 16-bit tensor peak x an efficiency x the share of SMs its output
tiles keep busy, see :func:`~service.engine.planning.work.busy_share`) and its bytes at a
share of the DRAM bandwidth. The constants (one set for the GEMMs, one for each memory-
bound kernel) are fitted on measured GPUs (:func:`fit`); :func:`held_out_gpu` predicts
each GPU from the others (scikit-learn's ``LeaveOneGroupOut`` over the GPUs, the fit
wrapped as an estimator, :class:`OperatorFit`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from knowledge import Knowledge
from knowledge.records import Benchmark, Gpu
from service.engine.estimating.roofline import math_mode
from service.engine.planning.work import busy_share, layer_gemms
from service.engine.validating.selection import (
    CaseEstimator,
    error_summary,
    indices,
    leave_one_group_out,
)

# vidur's GEMM operators -> the layer's GEMMs (service.engine.planning.work.layer_gemms)
VIDUR_GEMMS = {
    "attn_pre_proj": "qkv",
    "attn_post_proj": "attention_output",
    "mlp_up_proj": "mlp_up",
    "mlp_down_proj": "mlp_down",
}
GEMMS = frozenset(VIDUR_GEMMS)
STREAMING = ("emb", "input_layernorm", "post_attention_layernorm", "attn_rope", "mlp_act", "add")
# the GEMMs share one set of constants (cuBLAS); each memory-bound kernel has its own (an
# embedding gather or an unfused RMSNorm reaches a far smaller share of the bandwidth than
# a residual add)
KINDS = ("gemm", *STREAMING)
SM_BYTES_SCALE = 100.0  # a streaming kernel's efficiency x this = its bytes per SM cycle
# the share of the DRAM bandwidth a streaming kernel reaches when its SMs keep enough bytes in
# flight (STREAM-like copies reach 80-90% on HBM and GDDR parts alike); on the HBM parts the
# SMs' issue rate binds first, so their rows cannot tell this share
STREAM_SHARE = 0.85


def kind_of(op: str) -> str:
    return "gemm" if op in GEMMS else op


@dataclass(frozen=True, slots=True)
class LayerShape:
    """What the operators' work follows from (Llama-2-7B unless told)."""

    hidden: int = 4096
    heads: int = 32
    kv_heads: int = 32
    ffn: int = 11008
    gated: bool = True  # gate and up projections in one GEMM (vidur's mlp_up_proj)
    bytes_per_value: int = 2


@dataclass(frozen=True, slots=True)
class OpWork:
    flops: float
    bytes: float
    rows: float  # GEMM rows (tokens)
    columns: float  # GEMM output columns on one rank
    gemm: bool


def op_work(op: str, tokens: int, t: int, shape: LayerShape = LayerShape()) -> OpWork:
    """The FLOPs and DRAM bytes of ``op`` on one tensor-parallel rank."""
    h, f, v = shape.hidden, shape.ffn, shape.bytes_per_value
    kv = shape.kv_heads * h // shape.heads
    if op in VIDUR_GEMMS:
        gemms = layer_gemms(h, shape.heads, shape.kv_heads, f, shape.gated, t)
        n, k = gemms[VIDUR_GEMMS[op]]
        moved = (k * n + tokens * k + tokens * n) * v
        return OpWork(2 * tokens * n * k, moved, tokens, n, True)
    streamed = {  # values read and written
        "emb": 2 * tokens * h,
        "input_layernorm": 2 * tokens * h + h,
        "post_attention_layernorm": 2 * tokens * h + h,
        "attn_rope": 2 * tokens * (h + kv) / t,
        "mlp_act": 3 * tokens * f / t,
        "add": 3 * tokens * h,
    }
    if op not in streamed:
        raise KeyError(op)
    return OpWork(0.0, streamed[op] * v, tokens, 0.0, False)


@dataclass(frozen=True, slots=True)
class KindFit:
    """One kind of operator's constants: fixed time per kernel, and what bounds its
    throughput: for GEMMs the share of the tensor peak; for streaming kernels the bytes each
    SM moves per cycle (a gather or a reduction per row issues its loads no faster); and
    the share of the DRAM bandwidth."""

    fixed_us: float
    efficiency: float  # GEMMs: share of the tensor peak; else bytes per SM cycle (/100)
    bandwidth_share: float


@dataclass(frozen=True, slots=True)
class OpModel:
    kinds: Mapping[str, KindFit]

    def predict_ms(self, gpu: Gpu, op: str, tokens: int, t: int) -> float:
        w = op_work(op, tokens, t)
        fit = self.kinds[kind_of(op)]
        peak = math_mode(gpu, "fp16").tensor_flops
        bandwidth = gpu.memory_bandwidth_gb_per_s * 1e9
        if w.gemm:
            busy = busy_share(w.rows, w.columns, gpu.sm_count)
            compute = w.flops / (peak * fit.efficiency * busy)
        else:  # the SMs' issue rate
            compute = w.bytes / (gpu.sm_cycles_per_s * fit.efficiency * SM_BYTES_SCALE)
        moved = w.bytes / (bandwidth * fit.bandwidth_share)
        return (fit.fixed_us * 1e-6 + max(compute, moved)) * 1e3


def rows(knowledge: Knowledge) -> list[Benchmark]:
    return [b for b in knowledge.benchmarks if b.kind == "operator-timing" and b.gpu_id]


def _predicted_ms(model: OpModel, b: Benchmark, knowledge: Knowledge) -> float:
    gpu = knowledge.gpus[b.gpu_id]  # type: ignore[index]
    d = b.details
    return model.predict_ms(gpu, d["op"], int(d["num_tokens"]), int(d["tensor_parallel"]))


def _log_errors(model: OpModel, data: Sequence[Benchmark], knowledge: Knowledge) -> list[float]:
    return [math.log(_predicted_ms(model, b, knowledge) / b.value) for b in data]


def fit(data: Sequence[Benchmark], knowledge: Knowledge) -> OpModel:
    """Each kind's constants by robust least squares on the log error of its rows."""
    from scipy.optimize import least_squares

    kinds: dict[str, KindFit] = {}
    for kind in KINDS:
        mine = [b for b in data if kind_of(b.details["op"]) == kind]

        gemm = kind == "gemm"

        def constants(x: Sequence[float], gemm: bool = gemm) -> KindFit:
            return KindFit(x[0], x[1], x[2] if gemm else STREAM_SHARE)

        def residuals(x: Sequence[float], mine: Sequence[Benchmark] = mine) -> list[float]:
            trial = OpModel({k: constants(x) for k in KINDS})
            return _log_errors(trial, mine, knowledge)

        start, low, high = ([5.0, 0.7, 0.7], [0.0, 0.05, 0.05], [100.0, 1.0, 1.0]) if gemm \
            else ([3.0, 0.05], [0.0, 0.005], [100.0, 1.0])  # fmt: skip
        result = least_squares(residuals, start, bounds=(low, high), loss="soft_l1",
                               f_scale=0.1)  # fmt: skip
        kinds[kind] = constants([float(v) for v in result.x])
    return OpModel(kinds)


def _summary(errors: Sequence[float]) -> dict[str, Any]:
    """Log errors' count, median and mean absolute percentage error
    (:func:`service.engine.validating.selection.error_summary`)."""
    return error_summary([abs(math.exp(e) - 1) for e in errors])


class OperatorFit(CaseEstimator):
    """scikit-learn's view of the operator fit: ``X`` holds indices into ``cases`` (operator
    timings), ``y`` their measured milliseconds; ``fit`` fits each kind's constants on the
    rows given (:func:`fit`), ``predict`` gives each row's milliseconds under them."""

    def __init__(self, cases: Sequence[Benchmark], knowledge: Knowledge) -> None:
        self.cases = cases
        self.knowledge = knowledge

    def fit(self, X: np.ndarray, y: np.ndarray | None = None) -> OperatorFit:
        self.model_ = fit([self.cases[i] for i in indices(X)], self.knowledge)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        return np.array(
            [_predicted_ms(self.model_, self.cases[i], self.knowledge) for i in indices(X)],
            dtype=float,
        )


def held_out_gpu(knowledge: Knowledge) -> dict[str, Any]:
    """Each GPU's operators predicted by the constants fitted on the other GPUs, and the
    fit on all of them; per GPU and per operator."""
    data = rows(knowledge)
    gpus = [str(b.gpu_id) for b in data]
    predicted = leave_one_group_out(OperatorFit(data, knowledge), [b.value for b in data], gpus)
    errors = [math.log(float(p) / b.value) for p, b in zip(predicted, data, strict=True)]
    by_gpu: dict[str, list[float]] = {}
    by_op: dict[str, list[float]] = {}
    for b, gid, e in zip(data, gpus, errors, strict=True):
        by_gpu.setdefault(gid, []).append(e)
        by_op.setdefault(b.details["op"], []).append(e)
    whole = fit(data, knowledge)
    return {
        "held_out": _summary(errors),
        "by_gpu": {gid: _summary(v) for gid, v in sorted(by_gpu.items())},
        "by_op": {op: _summary(v) for op, v in sorted(by_op.items())},
        "fitted_on_all": _summary(_log_errors(whole, data, knowledge)),
        "constants": {k: vars_of(v) for k, v in whole.kinds.items()},
    }


def vars_of(fit: KindFit) -> dict[str, float]:
    return {"fixed_us": fit.fixed_us, "efficiency": fit.efficiency,
            "bandwidth_share": fit.bandwidth_share}  # fmt: skip
