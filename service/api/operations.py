"""What every operation of the API is called and how to call it, for people and for
tool-calling agents: an ``operationId``, a description and an example, laid over the
summary (the view's docstring) and the schemas that flask-smorest documents.

Each example is a request that works: the tests send the JSON ones and check that the API
accepts them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from apispec import APISpec

BERT_SQUAD = {
    "model": {"name": "bert-base"},
    "workload": {
        "task": "fine-tuning",
        "batch_size": 32,
        "seq_len": 384,
        "precision": "bf16",
        "dataset_samples": 88000,
        "epochs": 2,
    },
}
LLAMA_QLORA = {
    "model": {"name": "llama-3-8b"},
    "workload": {
        "task": "fine-tuning",
        "method": "qlora",
        "batch_size": 4,
        "seq_len": 2048,
        "precision": "bf16",
        "dataset_tokens": 20_000_000,
    },
}
PRICES_CSV = (
    "provider,instance_type,region,on_demand_usd_per_hour,spot_usd_per_hour,"
    "reserved_usd_per_hour,catalog_date,source\n"
    "aws,p5.48xlarge,us-east-1,55.04,,,2026-01-21,AWS price list\n"
)


@dataclass(frozen=True)
class Operation:
    """One operation's id, description and example. ``body``: a request body example (its
    media type ``media``); ``params``: an example value per parameter (path or query);
    ``answer``: an example answer, for operations that take neither."""

    operation_id: str
    description: str
    body: Any = None
    media: str = "application/json"
    params: Mapping[str, Any] = field(default_factory=dict)
    answer: Any = None


OPERATIONS: dict[tuple[str, str], Operation] = {
    ("get", "/healthz"): Operation(
        "getHealth",
        "Liveness for a load balancer: 200 while the process serves, whatever Redis does.",
        answer={"status": "ok"},
    ),
    ("get", "/readyz"): Operation(
        "getReadiness",
        "Readiness: 200 with the knowledge version and the cache in use (Redis, or the "
        "in-process fallback while Redis is away: degraded but serving); 503 before the "
        "knowledge is loaded.",
        answer={
            "status": "ready",
            "cache": {"backend": "memory", "ok": True, "fallback": True},
            "knowledge": {"loaded": True, "version": "40dbd5c840a3a780"},
        },
    ),
    ("get", "/v1/gpus"): Operation(
        "listGpus",
        "The GPUs rightsize knows (datasheet figures with sources): filter by vendor, "
        "architecture, segment, form factor, memory or a precision they run; sort by any "
        "figure ('-' for descending). Use the ids in other requests.",
        params={"vendor": "nvidia", "min_memory_gb": 80, "sort": "-bf16_tflops"},
    ),
    ("get", "/v1/gpus/{gpu_id}"): Operation(
        "getGpu",
        "One GPU by id or any of its names (case and separators ignored); a 404 lists "
        "close matches.",
        params={"gpu_id": "h100-sxm-80gb"},
    ),
    ("get", "/v1/interconnects"): Operation(
        "listInterconnects",
        "The links between GPUs and between servers, with bandwidth and source.",
        params={"kind": "nvlink"},
    ),
    ("get", "/v1/stacks"): Operation(
        "listStacks",
        "The software stacks estimates are made for (Transformers, TRL with PEFT, "
        "torchtitan, torchtune, DeepSpeed, Megatron with Transformer Engine, vLLM, "
        "TensorRT-LLM, SGLang...): what each does by default (kernels, attention, loss, "
        "weight and optimizer-state precision, offloading, batching), with sources. Name "
        "one in a request's stack and override its properties in stack_options.",
        params={"task": "fine-tuning"},
    ),
    ("get", "/v1/stacks/{stack_id}"): Operation(
        "getStack",
        "One software stack by id or alias (e.g. nemo, fsdp2, trt-llm); a 404 lists close matches.",
        params={"stack_id": "torchtune"},
    ),
    ("get", "/v1/offers"): Operation(
        "listOffers",
        "Cloud offers (provider, instance type, GPUs, region, on-demand and spot prices), "
        "cheapest first unless sorted otherwise.",
        params={"gpu": "h100-sxm-80gb", "provider": "aws"},
    ),
    ("put", "/v1/offers/prices"): Operation(
        "refreshPrices",
        "An administrator replaces cloud prices from a CSV catalog: every row checked, all "
        "kept or none; answers what changed.",
        body=PRICES_CSV,
        media="text/csv",
    ),
    ("get", "/v1/benchmarks"): Operation(
        "listBenchmarks",
        "The stored benchmark rows the model is fitted on, filtered: the curated ones and, of "
        "the submitted, the caller's own and those shared.",
        params={"gpu": "a100-sxm4-80gb", "kind": "training"},
    ),
    ("post", "/v1/benchmarks"): Operation(
        "submitBenchmarks",
        "Submit measured training throughputs (a write key): each row is checked against "
        "the knowledge (GPU, workload, a source and a date); all stored, or none. The rows "
        "are the key's (and the administrators') unless `share` lists them for everyone; "
        "the next retrain fits them either way.",
        body={
            "rows": [
                {
                    "gpu": "NVIDIA L4",
                    "gpu_count": 1,
                    "workload": "resnet50-imagenet",
                    "precision": "fp16",
                    "batch_size_per_gpu": 128,
                    "throughput": 950.0,
                    "source": "our lab: PyTorch 2.5 in NGC 24.10, torchvision ResNet-50",
                    "as_of": "2026-11-30",
                }
            ],
            "share": False,
        },
    ),
    ("get", "/v1/benchmarks/batches/{batch_id}"): Operation(
        "getBenchmarkBatch",
        "A submitted batch as stored: its rows, the key that sent them and when (to that "
        "key and the administrators; a shared batch to anyone, without the key; 404 else).",
        params={"batch_id": "b-3f2a9c1e"},
    ),
    ("post", "/v1/benchmarks/retrain"): Operation(
        "retrainModel",
        "Queue a refit of the performance model on the curated rows and every submitted one, "
        "shared or not (an administrator; a worker runs it); follow the job at its URL.",
        body={"validate_after": False},
    ),
    ("get", "/v1/models"): Operation(
        "listModels",
        "The model catalog (name, aliases, family, published parameter count and source); "
        '`q` searches names and aliases. Use a name as {"name": ...} in a request\'s model.',
        params={"q": "llama 3"},
    ),
    ("get", "/v1/models/{name}"): Operation(
        "getModel",
        "One catalog model by name or alias, with the description it resolves to.",
        params={"name": "llama-3-8b"},
    ),
    ("post", "/v1/profiles"): Operation(
        "createProfile",
        "What a workload needs before any hardware: FLOPs, bytes moved and memory of one "
        "step, by phase and kind of operation. The model is a catalog name, a Hugging Face "
        "config.json (as is), a family description or a layer list.",
        body=BERT_SQUAD,
    ),
    ("get", "/v1/profiles/{profile_id}"): Operation(
        "getProfile",
        "A profile made earlier, by its id (kept for the cache's lifetime).",
        params={"profile_id": "2f43e59798c0d9f1225c11c3"},
    ),
    ("post", "/v1/traces"): Operation(
        "uploadTrace",
        "Upload a torch.profiler trace of a few steps (a write key): analysed at once when "
        "small (201), in the background when large (202, a job to follow). The trace is "
        "the key's: its id then stands for the workload in that key's estimates and "
        "recommendations (another key, or another option, makes another trace).",
        params={"reference_gpu": "a100-sxm4-80gb", "batch_size": 32},
    ),
    ("get", "/v1/traces/{trace_id}"): Operation(
        "getTrace",
        "A trace's analysis: steps, GPU time by kind, idle time by cause, achieved FLOPs, "
        "and the software fixes worth doing first (to the key that uploaded it and the "
        "administrators; 404 to anyone else).",
        params={"trace_id": "t-9b1c2d3e4f"},
    ),
    ("post", "/v1/traces/{trace_id}/projections"): Operation(
        "projectTrace",
        "The traced step projected onto other GPUs, each part scaled by what bounds it.",
        body={"gpus": ["h100-sxm-80gb", "l40s"], "count": 1},
        params={"trace_id": "t-9b1c2d3e4f"},
    ),
    ("post", "/v1/estimates"): Operation(
        "createEstimate",
        "How fast one workload runs on a GPU type (and n of them): step time with an 80% "
        "interval, throughput, memory per GPU against the usable memory, and the bound; "
        "time to train when the dataset is given; serving latency for inference.",
        body={**BERT_SQUAD, "gpu": "a100-sxm4-80gb", "count": 1},
    ),
    ("get", "/v1/validation"): Operation(
        "getValidation",
        "How right the estimates are: the last validation report (held-out GPUs, forward in "
        "time, architectures, memory fit, published runs).",
        answer={
            "knowledge_version": "40dbd5c840a3a780",
            "made_at": "2026-12-06T12:00:00+00:00",
            "submitted_rows": 0,
            "submitted_rows_in_use": 0,
        },
    ),
    ("post", "/v1/validation"): Operation(
        "runValidation",
        "Queue a validation of the model in use (an administrator; minutes of work).",
        answer={"job_id": "j-5e6f7a8b", "job_url": "/v1/jobs/j-5e6f7a8b", "status": "queued"},
    ),
    ("post", "/v1/plans"): Operation(
        "createPlan",
        "Every valid parallel layout (data, tensor, pipeline, context parallel, ZeRO, "
        "recomputation, offload) of a workload on count x GPU, ranked by throughput, each "
        "with its memory and step broken down.",
        body={
            "model": {"name": "llama-3-8b"},
            "gpu": "h100-sxm-80gb",
            "count": 8,
            "workload": {"task": "training", "batch_size": 8, "seq_len": 2048, "precision": "bf16"},
        },
    ),
    ("post", "/v1/recommendations"): Operation(
        "createRecommendation",
        "The main question: which GPUs, how many, in which deployment (a cloud instance "
        "type and region, or servers bought), for a model and workload (or a trace), ranked "
        "by an objective (best_value: the job's cost; fastest; cheapest over the usage's "
        "horizon) under constraints (budgets, deadline, providers, regions, cloud or "
        "on-premise, emissions). Each candidate comes with its layout, job time, cost, "
        "energy and the reasons (rule ids and sources); the answer adds the excluded GPUs, "
        "software advice and a markdown summary, under a stable id.",
        body={**LLAMA_QLORA, "constraints": {"deployment": "cloud"}},
    ),
    ("get", "/v1/recommendations/{rec_id}"): Operation(
        "getRecommendation",
        "A recommendation as it was given, by its id: the request, the date and the answer.",
        params={"rec_id": "ea89fbb70669acb0255b1bdc"},
    ),
    ("get", "/v1/recommendations/{rec_id}/export.csv"): Operation(
        "exportRecommendationCsv",
        "A stored recommendation as CSV, one row per candidate, for a spreadsheet.",
        params={"rec_id": "ea89fbb70669acb0255b1bdc"},
    ),
    ("get", "/v1/recommendations/{rec_id}/quote"): Operation(
        "getRecommendationQuote",
        "A stored recommendation as a printable quote page (HTML; print to PDF).",
        params={"rec_id": "ea89fbb70669acb0255b1bdc"},
    ),
    ("post", "/v1/ask"): Operation(
        "askQuestion",
        "A one-line question in words, read deterministically into a recommendation request "
        "and answered: the recommendation, what was understood and the words not used. For "
        "clients without tool calling; a question naming no model is a 422.",
        body={"question": "QLoRA llama 3 8b on 20M tokens under $50, cloud only"},
    ),
    ("post", "/v1/tco"): Operation(
        "compareOwnAndRent",
        "Owning against renting count x GPU at a usage over a horizon: monthly and horizon "
        "costs of each, the cheapest matching cloud offers, a hybrid, energy, and the "
        "break-even GPU-hours a month, with every cost parameter's source.",
        body={
            "gpu": "h100-sxm-80gb",
            "count": 8,
            "usage": {"gpu_hours_per_month": 700, "horizon_months": 36},
        },
    ),
    ("get", "/v1/rules"): Operation(
        "listRules",
        "Every rule behind a recommendation's reasons: id, condition, effect, message and "
        "source, and the symbols conditions may use.",
        answer={
            "rules": [{"id": "bf16-needs-ampere", "effect": "exclude", "scope": "gpu"}],
            "symbols": [{"name": "gpu_memory_gib", "type": "FLOAT"}],
        },
    ),
    ("get", "/v1/jobs/{job_id}"): Operation(
        "getJob",
        "A background job's state (queued, started, finished, failed) and, when finished, "
        "where its result is.",
        params={"job_id": "j-5e6f7a8b"},
    ),
}
METHODS = ("get", "put", "post", "delete", "patch")


def document(spec: APISpec) -> None:
    """Lay :data:`OPERATIONS` over the operations registered in ``spec``. An operation
    missing from the table is an error: every operation is documented."""
    paths: dict[str, dict[str, Any]] = spec._paths
    for path, item in paths.items():
        for method in METHODS:
            if method in item:
                _document(item, item[method], _operation(method, path))


def _operation(method: str, path: str) -> Operation:
    found = OPERATIONS.get((method, path))
    if found is None:
        raise LookupError(f"{method.upper()} {path} is not in service.api.operations")
    return found


def _document(item: dict[str, Any], doc: dict[str, Any], op: Operation) -> None:
    doc["operationId"] = op.operation_id
    doc["description"] = (
        f"{doc['description']}\n\n{op.description}" if doc.get("description") else op.description
    )
    if op.body is not None:
        content = doc.setdefault("requestBody", {}).setdefault("content", {})
        content.setdefault(op.media, {})["example"] = op.body
    for parameter in [*item.get("parameters", []), *doc.get("parameters", [])]:
        if isinstance(parameter, dict) and parameter.get("name") in op.params:
            parameter["example"] = op.params[parameter["name"]]
    if op.answer is not None:
        for status in ("200", "202"):
            response = doc.get("responses", {}).get(status)
            if isinstance(response, dict):
                response.setdefault("content", {}).setdefault("application/json", {})["example"] = (
                    op.answer
                )
                break
