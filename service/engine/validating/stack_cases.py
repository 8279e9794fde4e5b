"""The runs the stacks' maintainers published, read into cases: each run's model, workload,
layout and the throughput or memory it printed."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from knowledge import Knowledge
from service.engine.errors import InvalidRequest
from service.engine.estimating import scaling
from service.engine.estimating import software as stacks
from service.engine.estimating.estimate import USABLE_MEMORY_SHARE
from service.engine.estimating.layout import Layout, LayoutError, ModelShape, check
from service.engine.estimating.layout_memory import as_reported
from service.engine.estimating.roofline import math_mode, usable_precisions
from service.engine.estimating.step_model import StepModel
from service.engine.estimating.step_profile import StepProfile
from service.engine.planning.network import network
from service.engine.planning.search import layout_memory
from service.engine.planning.serving import layout_inference
from service.engine.planning.step_time import layout_step
from service.engine.planning.work import model_flops, stacked, work

RUNS = Path(__file__).resolve().parents[3] / "knowledge" / "data" / "stack_runs"

# the fit's grid: a scale on the GEMM efficiency (training) or on the decode bandwidth share
# and the prefill efficiency (serving), with the training loop's host time per step
SCALES = tuple(round(0.5 + 0.05 * i, 2) for i in range(21))  # 0.50 .. 1.50

ATTENTION = (0.3, 0.45, 0.6, 0.75)  # attention kernels' rate over the GEMMs'

HOSTS = (0.0, 0.01, 0.03, 0.1, 0.2)

GRID = tuple((g, a, h) for g in SCALES for a in ATTENTION for h in HOSTS)

# serving reads the grid's second axis as a scale on the prefill's and the decode GEMMs'
# efficiency (the first scales the decode's bandwidth share), one per attention rate
SERVING_COMPUTE = dict(zip(ATTENTION, (1.0, 0.85, 0.7, 0.55), strict=True))

# the constants before any stack's fit (parallel.OPTIMIZED's)
UNFITTED = GRID.index((1.0, 0.3, 0.2))

KINDS = ("training_throughput", "peak_memory", "serving_throughput", "serving_latency")

TARGETS = {"training_throughput": 0.10, "peak_memory": 0.08, "serving_throughput": 0.15,
           "serving_latency": 0.15}  # fmt: skip

PRECISIONS = {"bf16": "bf16", "fp16": "fp16", "fp32": "fp32", "fp8": "fp8", "mxfp8": "fp8"}

Source = Callable[[Any, dict[str, Any]], dict[str, Any]]


@dataclass(slots=True)
class Case:
    """One printed figure and its prediction at each scale of :data:`GRID`."""

    table: str
    publication: str
    stack: str
    kind: str
    label: str
    measured: float
    predicted: np.ndarray  # by grid scale (memory: the same at every scale)
    detail: dict[str, Any] = field(default_factory=dict)

    @property
    def fitted(self) -> bool:
        return self.kind != "peak_memory"


def tables(root: Path = RUNS) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted(root.glob("*.yaml")):
        for table in yaml.safe_load(path.read_text()) or []:
            out.append({**table, "file": path.name})
    return out


def publication(table: dict[str, Any]) -> str:
    """The publication a table comes from: its source's repository@commit and file (or
    the paper), so that tables of one document are left out together."""
    words = str(table["source"]).replace(",", " ").split()
    return " ".join(words[:2])


def _description(model: Any) -> Any:
    if isinstance(model, str):
        return model
    if model.get("moe_experts"):
        raise ValueError("mixture of experts: not in the families the profiler builds")
    spec = {
        "family": "transformer", "arch": "decoder", "layers": int(model["layers"]),
        "hidden": int(model["hidden"]), "heads": int(model["heads"]),
        "kv_heads": int(model.get("kv_heads") or model["heads"]),
        "ffn": int(model.get("ffn") or 4 * int(model["hidden"])),
        "vocab": int(model.get("vocab") or 32000), "gated": bool(model.get("gated", True)),
        "norm": "rmsnorm", "activation": "silu" if model.get("gated", True) else "gelu",
        "position": "rope", "bias": False,
    }  # fmt: skip
    return spec


def _optimizer(row: dict[str, Any]) -> str | None:
    name = str(row.get("optimizer") or "").lower()
    if "8" in name and "bit" in name:
        return "8-bit adam"
    return None


def _options(row: dict[str, Any]) -> dict[str, Any]:
    """The stack properties a row says it changed."""
    out: dict[str, Any] = {}
    if "paged" in str(row.get("optimizer") or "").lower():
        out["paged_optimizer"] = True
    if row.get("optimizer_in_bwd"):
        out["optimizer_in_backward"] = True
    if row.get("compile") is True:
        out["kernels"] = "compiled"
    if "activation_offload" in row:
        out["activation_offload"] = bool(row["activation_offload"])
    if "chunked_loss" in row:
        out["loss"] = "chunked" if row["chunked_loss"] else "full-fp32"
    for name in ("master_weights", "optimizer_states"):  # pure 16-bit training, as stated
        if name in row:
            out[name] = row[name]
    return out


def _tokens_per_s_per_gpu(row: dict[str, Any], shape: ModelShape, seq: int, peak: float) -> float:
    gpus = int(row["gpus"])
    if row.get("tokens_per_s_per_gpu"):
        return float(row["tokens_per_s_per_gpu"])
    if row.get("tokens_per_s"):
        return float(row["tokens_per_s"]) / gpus
    per_token = 6 * shape.parameters + 12 * shape.layers * shape.hidden * seq
    if row.get("tflops_per_gpu"):
        return float(row["tflops_per_gpu"]) * 1e12 / per_token
    if row.get("mfu"):
        return float(row["mfu"]) * peak / per_token
    raise ValueError("no throughput printed")


def _printed_memory(layout_memory: Any, kind: str) -> float:
    """The layout's memory as a printed figure of ``kind`` counts it."""
    reported = as_reported(layout_memory)
    if kind in ("allocated", "active"):
        return reported["allocated_peak_bytes"]
    if kind == "reserved":
        return reported["reserved_bytes"]
    return reported["nvidia_smi_bytes"]


def _training_request(table: dict[str, Any], row: dict[str, Any], gpu: Any) -> dict[str, Any]:
    """The workload request a training row ran (the profiler's fields)."""
    precision = PRECISIONS.get(str(row.get("precision") or table.get("precision") or "bf16"))
    if precision is None:
        raise ValueError(f"precision {row.get('precision')} is not modelled")
    if precision not in usable_precisions(gpu):
        raise ValueError(f"{gpu.id} does not run {precision}")
    seq = row.get("seq") or table.get("seq")
    if not seq:
        raise ValueError("no sequence length printed")
    method = row.get("method") or "full"
    task = "fine-tuning" if table["kind"] == "fine-tuning" or method != "full" else "training"
    request: dict[str, Any] = {"task": task, "batch_size": int(row.get("micro") or 1),
                               "seq_len": int(seq), "precision": precision}  # fmt: skip
    if task == "fine-tuning":
        request["method"] = method
        if method in ("lora", "qlora") and row.get("lora_rank"):
            request["lora_rank"] = int(row["lora_rank"])
    if _optimizer(row):
        request["optimizer"] = _optimizer(row)
    return request


def _training_layout(row: dict[str, Any], stack: stacks.Stack, micro: int) -> Layout:
    """The layout a training row printed (its sharding as its stack's where not printed)."""
    t, p, c = int(row.get("tp") or 1), int(row.get("pp") or 1), int(row.get("cp") or 1)
    gpus = int(row["gpus"])
    d = int(row.get("dp") or gpus // (t * p * c))
    if d * t * p * c != gpus:
        d = max(1, gpus // (t * p * c))
    if row.get("fsdp"):
        stage = 3
    elif row.get("zero_stage") is not None:
        stage = int(row["zero_stage"])
    else:
        stage = stack.zero_stage if d > 1 else 0
    accumulation = 1
    if row.get("global"):
        accumulation = max(1, math.ceil(int(row["global"]) / (micro * d)))
    offload = "parameters" if row.get("cpu_offload") and stage == 3 else "none"
    return Layout(
        data_parallel=d, tensor_parallel=t, pipeline_parallel=p, context_parallel=c,
        zero_stage=stage if d * c > 1 else 0, sequence_parallel=t > 1,
        activation_checkpointing=row.get("checkpointing") or "none", micro_batch_size=micro,
        gradient_accumulation=accumulation, virtual_stages=int(row.get("vp") or 1),
        offload=offload,
    )  # fmt: skip


def _throughput_grid(
    step_model: StepModel, stack: stacks.Stack, profile: StepProfile, shape: ModelShape,
    gpu: Any, layout: Layout, net: Any,
) -> np.ndarray:  # fmt: skip
    """Tokens a second per GPU at each point of :data:`GRID`."""
    mode = math_mode(gpu, profile.precision)
    flops = model_flops(profile)
    base = stack.compute
    out = []
    for g in SCALES:
        for a in ATTENTION:
            scaled = replace(base, efficiency_16bit=min(0.95, base.efficiency_16bit * g),
                             efficiency_8bit=min(0.95, base.efficiency_8bit * g),
                             attention_share=a)  # fmt: skip
            done = work(profile, gpu, mode, stack, step_model, optimized=scaled)
            for h in HOSTS:
                step = layout_step(layout, profile, shape, replace(done, host_s=h), net,
                                   mode.tensor_flops, flops)  # fmt: skip
                out.append(step.tokens_per_s / layout.gpus)
    return np.array(out)


def _training_cases(
    knowledge: Knowledge, step_model: StepModel, source: Source, table: dict[str, Any],
    row: dict[str, Any], label: str,
) -> list[Case]:  # fmt: skip
    gpu = knowledge.gpu(table["gpu"])
    request = _training_request(table, row, gpu)
    found = source(_description(row["model"]), request)
    profile = StepProfile.from_profile(found)
    shape = ModelShape.from_profile(found)
    if shape is None:
        raise ValueError("not a transformer")
    stack = stacks.for_work(knowledge, table["stack"], _options(row), profile, shape,
                            fitted=False)  # fmt: skip
    profile = stacked(profile, shape, stack)
    layout = _training_layout(row, stack, int(request["batch_size"]))
    # a DGX GB200 is an NVL72 rack: its NVLink domain, where the table prints no node size
    per_node = int(table.get("gpus_per_node") or scaling.domain(gpu))
    check(layout, shape, per_node, profile.seq_len)
    net = network(knowledge, gpu, min(per_node, layout.gpus))
    publ = publication(table)
    detail = {"gpu": gpu.id, "gpus": layout.gpus, "layout": layout.to_dict(),
              "precision": request["precision"], "method": request.get("method", "full"),
              "seq": request["seq_len"], "stack": stack.id, "options": _options(row),
              "architecture": gpu.architecture, "kernels": stack.kernels}  # fmt: skip
    out: list[Case] = []
    if any(row.get(k) for k in ("tokens_per_s_per_gpu", "tokens_per_s", "mfu", "tflops_per_gpu")):
        # MFU and model TFLOP/s of FP8 runs are quoted against the 16-bit peak
        peak = (gpu.bf16_tflops or 0) * 1e12 or math_mode(gpu, profile.precision).tensor_flops
        measured = _tokens_per_s_per_gpu(row, shape, request["seq_len"], peak)
        predicted = _throughput_grid(step_model, stack, profile, shape, gpu, layout, net)
        out.append(Case(table["id"], publ, stack.id, "training_throughput", label, measured,
                        predicted, detail))  # fmt: skip
    if row.get("memory_gib") and not row.get("oom"):
        held = layout_memory(profile, layout, shape)
        kind = str(row.get("memory_kind") or "unknown")
        fits = held.total_bytes <= gpu.memory_gb * 2**30
        out.append(Case(table["id"], publ, stack.id, "peak_memory", label,
                        float(row["memory_gib"]) * 2**30,
                        np.full(len(GRID), _printed_memory(held, kind)),
                        {**detail, "memory_kind": kind, "fits": fits}))  # fmt: skip
    return out


def _concurrency(row: dict[str, Any], output: int) -> float | None:
    """The sequences in flight: as printed, or by Little's law from the printed requests a
    second and each request's time (None: an offline run, as many as the cache holds)."""
    if row.get("concurrency"):
        return float(row["concurrency"])
    if row.get("request_rate") and row.get("requests_per_s"):
        if row.get("e2e_latency_ms"):
            return float(row["requests_per_s"]) * float(row["e2e_latency_ms"]) / 1e3
        if row.get("ttft_ms") and (row.get("itl_ms") or row.get("tpot_ms")):
            per_token = float(row.get("tpot_ms") or row["itl_ms"])
            return float(row["requests_per_s"]) * (float(row["ttft_ms"]) + output * per_token) / 1e3
    return None


# long: one published serving row read into its case, a field a line
def _serving_case(
    knowledge: Knowledge, step_model: StepModel, source: Source, table: dict[str, Any],
    row: dict[str, Any], label: str,
) -> list[Case]:  # fmt: skip
    """Offline throughput (all requests at once) and, where the load is printed, the time
    per output token at the concurrency the load keeps in flight."""
    if not row.get("prompt_tokens") or not row.get("output_tokens"):
        raise ValueError("prompt and output lengths not printed (a dataset's mix)")
    gpu = knowledge.gpu(table["gpu"])
    weights = str(row.get("weight_precision") or "bf16").lower()
    if weights not in ("bf16", "fp16", "fp8", "int8", "int4"):
        raise ValueError(f"weights in {weights} are not modelled")
    if weights == "fp8" and "fp8" not in usable_precisions(gpu):
        raise ValueError(f"{gpu.id} does not run fp8")
    compute = "fp8" if weights == "fp8" else "bf16"
    prompt, output = int(row["prompt_tokens"]), int(row["output_tokens"])
    request = {"task": "inference", "batch_size": 1, "prompt_tokens": prompt,
               "output_tokens": output, "precision": compute}  # fmt: skip
    found = source(_description(row["model"]), request)
    profile = StepProfile.from_profile(found)
    shape = ModelShape.from_profile(found)
    stack = stacks.for_work(knowledge, table["stack"], None, profile, shape, fitted=False)
    t, gpus = int(row.get("tp") or 1), int(row["gpus"])
    mode = math_mode(gpu, compute)
    net = network(knowledge, gpu, max(t, 1))
    usable = gpu.memory_gb * 2**30 * USABLE_MEMORY_SHARE
    kv = row.get("kv_precision")
    load = _concurrency(row, output)
    offline = load is None and not row.get("request_rate")
    per_token = row.get("tpot_ms") or row.get("itl_ms")
    if not offline and (load is None or not per_token):
        raise ValueError("an open-loop load whose concurrency cannot be told from the row")
    base = stack.serving
    rates, latencies = [], []
    for g, a, _ in GRID:
        share = min(1.0, base.decode_bandwidth_share * g)
        gemms = min(0.95, base.prefill_efficiency * SERVING_COMPUTE[a])
        scaled = replace(
            stack, serving=replace(base, decode_bandwidth_share=share, prefill_efficiency=gemms)
        )
        c = max(1, round(load)) if load else None
        x = layout_inference(profile, shape, gpu, mode, step_model, net, t, scaled, usable,
                             weights, kv, c)  # fmt: skip
        if x.max_concurrency < 1:
            raise ValueError("the weights and one sequence do not fit (estimate)")
        # each request's prefill runs alone; its output is decoded with the others'
        rate = 1.0 / (x.time_to_first_token_s + output * x.time_per_output_token_s / x.concurrency)
        rates.append(rate * output * gpus / t)
        latencies.append(x.inter_token_latency_s * 1e3)
    detail = {"gpu": gpu.id, "gpus": gpus, "tp": t, "weights": weights, "prompt": prompt,
              "output": output, "stack": stack.id, "concurrency": load,
              "architecture": gpu.architecture, "kernels": stack.kernels}  # fmt: skip
    publ = publication(table)
    if offline and row.get("output_tokens_per_s"):
        return [Case(table["id"], publ, stack.id, "serving_throughput", label,
                     float(row["output_tokens_per_s"]), np.array(rates), detail)]  # fmt: skip
    if per_token:
        detail["statistic"] = row.get("statistic")
        return [Case(table["id"], publ, stack.id, "serving_latency", label, float(per_token),
                     np.array(latencies), detail)]  # fmt: skip
    raise ValueError("no offline throughput or time per output token printed")


def cases(
    knowledge: Knowledge, step_model: StepModel, source: Source
) -> tuple[list[Case], list[dict[str, str]]]:
    """Every row that can be modelled as cases; the others with the reason."""
    found: list[Case] = []
    skipped: list[dict[str, str]] = []
    for table in tables():
        for i, printed in enumerate(table["rows"]):
            label = f"{table['id']}#{i + 1}"
            # where a row is silent, what the table's source says its configs did
            assumed = (table.get("assumed") or {}).get(printed.get("method") or "full", {})
            row = {**assumed, **printed}
            try:
                if table.get("held") is False:
                    raise ValueError("not scored: the table's conditions are not stated")
                if printed.get("held") is False:
                    raise ValueError("not scored: the row's figure is not possible as stated")
                if knowledge.stack_index.resolve(str(table["stack"])) is None:
                    raise ValueError(f"stack {table['stack']} is not one rightsize models")
                if str(table.get("gpu")) not in knowledge.gpus:
                    raise ValueError(f"GPU {table.get('gpu')} is not in the knowledge")
                if table["kind"] == "serving":
                    found += _serving_case(knowledge, step_model, source, table, row, label)
                else:
                    found += _training_cases(knowledge, step_model, source, table, row, label)
            except (ValueError, KeyError, InvalidRequest, LayoutError) as exc:
                skipped.append({"row": label, "reason": str(exc)[:200]})
    return found, skipped


def family(kind: str) -> str:
    """What a kind's rows fit: a stack's training constants or its serving ones."""
    return "serving" if kind.startswith("serving") else kind
