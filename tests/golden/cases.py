"""A fixed set of requests covering every endpoint, and how to send them and compare.

The answers were recorded before the engine was moved into sub-packages (issue 38); after
any restructuring they must be the same. ``python -m tests.golden.record`` writes
``answers.json`` again, which is only right when an answer is meant to change (say so in
the commit).
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from flask.testing import FlaskClient

ROOT = Path(__file__).resolve().parents[2]
ANSWERS = Path(__file__).with_name("answers.json")
VALIDATE = Path(__file__).with_name("validate.json")
TRACE = ROOT / "tests/profiles/fixtures/traces/h200-resnet50-fp16-b256.json.gz"
HF = ROOT / "tests/profiles/fixtures/hf"
# values that differ from run to run, not from code to code
VOLATILE_KEYS = {"created_at", "updated_at", "generated_at", "finished_at", "started_at",
                 "elapsed_s", "took_s", "processes", "uptime_s", "expires_at", "submitted_at",
                 "submitted_by", "seconds", "made_at", "built_s", "parse_seconds",
                 "trace_id", "trace_url"}  # fmt: skip
# a trace's id is a digest of its bytes and its owner: the key, new in every test session
# ids made by the store (a uuid or a counter), not digests of the request
MOMENT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")
DAY_OF_MOMENT = re.compile(r"\d{4}-\d\d-\d\d \(<moment>\)")
NONCE = re.compile(r"\b(j-|b-|t-|key |)([0-9a-f]{8}|(?<![-0-9a-f])[0-9a-f]{12}(?![0-9a-f]))\b")


@dataclass
class Case:
    """One request: ``path`` may name an earlier answer's field as ``{case.field}``."""

    name: str
    method: str
    path: str
    body: Any = None
    raw: bytes | None = None
    content_type: str | None = None


def _scenarios() -> list[Case]:
    data = yaml.safe_load((ROOT / "tests/engine/scenarios.yaml").read_text(encoding="utf-8"))
    return [Case(f"scenario {s['id']}", "POST", "/v1/recommendations", s["request"])
            for s in data["scenarios"]]  # fmt: skip


BERT = {"task": "fine-tuning", "batch_size": 32, "seq_len": 384, "precision": "bf16",
        "dataset_samples": 88000, "epochs": 2}  # fmt: skip
QLORA = {"task": "fine-tuning", "method": "qlora", "batch_size": 4, "seq_len": 2048,
         "precision": "bf16", "dataset_tokens": 20000000}  # fmt: skip
SERVE = {"task": "inference", "batch_size": 16, "prompt_tokens": 2048, "output_tokens": 256,
         "precision": "bf16"}  # fmt: skip


def cases() -> list[Case]:
    """Every endpoint at least once; the README's and openapi.yaml's examples; bad input."""
    hf_llama = json.loads((HF / "llama-3-8b.json").read_text(encoding="utf-8"))
    hf_vit = json.loads((HF / "vit-b-16.json").read_text(encoding="utf-8"))
    return [
        Case("healthz", "GET", "/healthz"),
        Case("gpus", "GET", "/v1/gpus?page_size=500"),
        Case("gpus filtered", "GET", "/v1/gpus?vendor=nvidia&min_memory_gb=80&sort=-bf16_tflops"),
        Case("gpu by alias", "GET", "/v1/gpus/H100 SXM5 80GB"),
        Case("gpu unknown", "GET", "/v1/gpus/h900"),
        Case("interconnects", "GET", "/v1/interconnects?page_size=500"),
        Case("interconnects nvlink", "GET", "/v1/interconnects?kind=nvlink"),
        Case("offers h100", "GET", "/v1/offers?gpu=h100-sxm-80gb&page_size=500"),
        Case("offers aws", "GET", "/v1/offers?provider=aws&page_size=100&sort=on_demand_usd_per_hour"),
        Case("benchmarks a100", "GET", "/v1/benchmarks?gpu=a100-sxm4-80gb&kind=training-throughput&page_size=200"),
        Case("benchmarks bad filter", "GET", "/v1/benchmarks?gpu_count=zero"),
        Case("models", "GET", "/v1/models?page_size=500"),
        Case("models search", "GET", "/v1/models?q=llama 3.2"),
        Case("model", "GET", "/v1/models/llama-3-8b"),
        Case("model unknown", "GET", "/v1/models/llama-9-8b"),
        Case("stacks", "GET", "/v1/stacks"),
        Case("stacks fine-tuning", "GET", "/v1/stacks?task=fine-tuning"),
        Case("stack", "GET", "/v1/stacks/torchtune"),
        Case("rules", "GET", "/v1/rules?page_size=500"),
        Case("validation before any", "GET", "/v1/validation"),
        Case("profile catalog", "POST", "/v1/profiles", {"model": {"name": "bert-base"}, "workload": BERT}),
        Case("profile readme moe qlora", "POST", "/v1/profiles",
             {"model": {"name": "mixtral-8x7b"},
              "workload": {"task": "fine-tuning", "method": "qlora", "batch_size": 4, "seq_len": 2048}}),
        Case("profile hf config", "POST", "/v1/profiles",
             {"model": {"hf_config": hf_llama},
              "workload": {"task": "training", "batch_size": 8, "seq_len": 4096, "precision": "bf16"}}),
        Case("profile hf vision", "POST", "/v1/profiles",
             {"model": {"hf_config": hf_vit}, "workload": {"task": "training", "batch_size": 128, "precision": "bf16"}}),
        Case("profile family", "POST", "/v1/profiles",
             {"model": {"family": "transformer", "layers": 24, "hidden": 2048, "heads": 16, "ffn": 8192, "vocab": 32000},
              "workload": {"task": "training", "batch_size": 8, "seq_len": 2048, "precision": "bf16"}}),
        Case("profile layers", "POST", "/v1/profiles",
             {"model": {"input_shape": [3, 32, 32],
                        "layers": [{"type": "conv2d", "out_channels": 16, "kernel": 3}, {"type": "batchnorm"},
                                   {"type": "relu"}, {"type": "maxpool", "kernel": 2},
                                   {"type": "flatten"}, {"type": "linear", "out_features": 10}]},
              "workload": {"task": "training", "batch_size": 64, "precision": "fp32"}}),
        Case("profile serving", "POST", "/v1/profiles", {"model": {"name": "llama-3-8b"}, "workload": SERVE}),
        Case("profile read back", "GET", "/v1/profiles/{profile catalog.profile_id}"),
        Case("profile bad workload", "POST", "/v1/profiles",
             {"model": {"name": "bert-base"}, "workload": {"task": "fine-tuning", "batch_size": -1}}),
        Case("estimate bert a100", "POST", "/v1/estimates",
             {"model": {"name": "bert-base"}, "workload": BERT, "gpu": "a100-sxm4-80gb", "count": 1}),
        Case("estimate readme torchtune", "POST", "/v1/estimates",
             {"model": {"name": "llama-3.2-3b"},
              "workload": {"task": "fine-tuning", "method": "full", "batch_size": 2, "seq_len": 4096, "precision": "bf16"},
              "gpu": "a100-sxm4-80gb", "stack": "torchtune", "stack_options": {"activation_offload": True}}),
        Case("estimate readme resnet x8", "POST", "/v1/estimates",
             {"model": {"name": "resnet-50"}, "workload": {"task": "training", "batch_size": 256, "precision": "fp16"},
              "gpu": "a100-sxm4-80gb", "count": 8}),
        Case("estimate l4 bert", "POST", "/v1/estimates", {"model": {"name": "bert-base"}, "workload": BERT, "gpu": "l4"}),
        Case("estimate serving vllm", "POST", "/v1/estimates",
             {"model": {"name": "llama-3-8b"}, "workload": SERVE, "gpu": "h100-sxm-80gb", "stack": "vllm"}),
        Case("estimate decode batch 1", "POST", "/v1/estimates",
             {"model": {"name": "llama-3-8b"}, "workload": {**SERVE, "batch_size": 1}, "gpu": "rtx-4090"}),
        Case("estimate layout", "POST", "/v1/estimates",
             {"model": {"name": "llama-3-8b"}, "gpu": "h100-sxm-80gb", "count": 8,
              "workload": {"task": "training", "batch_size": 8, "seq_len": 2048, "precision": "bf16"},
              "layout": {"tensor_parallel": 2, "data_parallel": 4, "zero_stage": 1}}),
        Case("estimate long context serving", "POST", "/v1/estimates",
             {"model": {"name": "llama-3-70b"}, "workload": {**SERVE, "prompt_tokens": 32000}, "gpu": "h200-sxm-141gb",
              "count": 4, "stack": "vllm"}),
        Case("estimate unknown gpu", "POST", "/v1/estimates", {"model": {"name": "bert-base"}, "workload": BERT, "gpu": "h900"}),
        Case("plan example", "POST", "/v1/plans",
             {"model": {"name": "llama-3-8b"}, "gpu": "h100-sxm-80gb", "count": 8,
              "workload": {"task": "training", "batch_size": 8, "seq_len": 2048, "precision": "bf16"}}),
        Case("plan readme 70b", "POST", "/v1/plans",
             {"model": {"name": "llama-3-70b"},
              "workload": {"task": "training", "batch_size": 1, "seq_len": 4096, "precision": "bf16", "optimizer": "adamw"},
              "gpu": "H100 SXM5 80GB", "global_batch_size": 512}),
        Case("plan serving", "POST", "/v1/plans",
             {"model": {"name": "llama-3-70b"}, "workload": SERVE, "gpu": "a100-sxm4-80gb"}),
        Case("plan no gpu", "POST", "/v1/plans", {"model": {"name": "llama-3-8b"}, "workload": SERVE}),
        Case("plan slow links", "POST", "/v1/plans",
             {"model": {"name": "llama-3-8b"}, "gpu": "l40s", "count": 16,
              "workload": {"task": "training", "batch_size": 4, "seq_len": 4096, "precision": "bf16"}}),
        *_scenarios(),
        Case("recommend example", "POST", "/v1/recommendations",
             {"model": {"name": "llama-3-8b"}, "workload": QLORA, "constraints": {"deployment": "cloud"}}),
        Case("recommend readme pretrain", "POST", "/v1/recommendations",
             {"model": {"name": "llama-3-8b"},
              "workload": {"task": "training", "batch_size": 1, "seq_len": 4096, "precision": "bf16",
                           "optimizer": "adamw", "dataset_tokens": 10000000000, "epochs": 1},
              "constraints": {"max_gpus": 64}}),
        Case("recommend hf config", "POST", "/v1/recommendations",
             {"model": {"hf_config": hf_llama},
              "workload": {"task": "training", "batch_size": 8, "seq_len": 4096, "precision": "bf16",
                           "dataset_tokens": 1000000000}}),
        Case("recommend on-premise", "POST", "/v1/recommendations",
             {"model": {"name": "llama-3-8b"}, "workload": QLORA, "constraints": {"deployment": "on-premise"}}),
        Case("recommend bad constraint", "POST", "/v1/recommendations",
             {"model": {"name": "llama-3-8b"}, "workload": QLORA, "constraints": {"max_gpus": 0}}),
        Case("recommendation read back", "GET", "/v1/recommendations/{recommend example.id}"),
        Case("recommendation csv", "GET", "/v1/recommendations/{recommend example.id}/export.csv"),
        Case("recommendation quote", "GET", "/v1/recommendations/{recommend example.id}/quote"),
        Case("recommendation unknown", "GET", "/v1/recommendations/000000000000000000000000"),
        Case("ask example", "POST", "/v1/ask", {"question": "QLoRA llama 3 8b on 20M tokens under $50, cloud only"}),
        Case("ask serving", "POST", "/v1/ask", {"question": "serve llama 3 8b chat at 50 requests a second around the clock"}),
        Case("ask buy or rent", "POST", "/v1/ask", {"question": "LoRA llama 3 8b 15 times a month for a year: buy or rent?"}),
        Case("ask nothing", "POST", "/v1/ask", {"question": "hello"}),
        Case("tco example", "POST", "/v1/tco",
             {"gpu": "h100-sxm-80gb", "count": 8, "usage": {"gpu_hours_per_month": 700, "horizon_months": 36}}),
        Case("tco l40s", "POST", "/v1/tco",
             {"gpu": "l40s", "count": 4, "usage": {"gpu_hours_per_month": 2000, "horizon_months": 24}}),
        # the body itself: werkzeug's test client leaves the file it spools a large
        # multipart body to unclosed (the service reads both alike: test_traces_api)
        Case("trace upload", "POST", "/v1/traces?reference_gpu=h200&batch_size=256",
             raw=TRACE.read_bytes(), content_type="application/gzip"),
        Case("trace read back", "GET", "/v1/traces/{trace upload.trace_id}"),
        Case("trace projections", "POST", "/v1/traces/{trace upload.trace_id}/projections",
             {"gpus": ["h100-sxm-80gb", "l40s"], "count": 1}),
        Case("trace not json", "POST", "/v1/traces", raw=b"not a trace", content_type="application/octet-stream"),
        Case("benchmarks submit", "POST", "/v1/benchmarks",
             {"rows": [{"gpu": "NVIDIA L4", "gpu_count": 1, "workload": "resnet50-imagenet", "precision": "fp16",
                        "batch_size_per_gpu": 128, "throughput": 950.0,
                        "source": "our lab: PyTorch 2.5 in NGC 24.10, torchvision ResNet-50", "as_of": "2026-11-30"}],
              "share": False}),
        Case("benchmarks batch read back", "GET", "/v1/benchmarks/batches/{benchmarks submit.batch_id}"),
        Case("benchmarks bad row", "POST", "/v1/benchmarks",
             {"rows": [{"gpu": "NVIDIA L4", "gpu_count": 0, "workload": "resnet50-imagenet", "throughput": -1}]}),
        Case("retrain without redis", "POST", "/v1/benchmarks/retrain", {"validate_after": False}),
        Case("validation without redis", "POST", "/v1/validation", {}),
        Case("job unknown", "GET", "/v1/jobs/j-00000000"),
    ]  # fmt: skip


def _fill(path: str, answers: dict[str, Any]) -> str:
    def one(match: re.Match[str]) -> str:
        case, key = match.group(1).rsplit(".", 1)
        return str(answers[case]["body"][key])

    return re.sub(r"\{([^}]+)\}", one, path)


def clean(value: Any) -> Any:
    """Volatile values out, floats to 10 significant digits, nonces replaced."""
    if isinstance(value, dict):
        return {k: ("<volatile>" if k in VOLATILE_KEYS else clean(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [clean(v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.10g}")
    if isinstance(value, str):
        # a moment's day shown beside it (the quote's "of 2026-12-07 (2026-12-07T...)")
        moments = DAY_OF_MOMENT.sub("<day> (<moment>)", MOMENT.sub("<moment>", value))
        return NONCE.sub(lambda m: f"{m.group(1)}<nonce>", moments)
    return value


def send(client: FlaskClient) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each case's name and its answer: status, content type and body (parsed where JSON)."""
    seen: dict[str, Any] = {}
    for case in cases():
        path = _fill(case.path, seen)
        kwargs: dict[str, Any] = {}
        if case.raw is not None:
            kwargs["data"] = case.raw
            kwargs["content_type"] = case.content_type
        elif case.body is not None:
            kwargs["json"] = case.body
        response = client.open(path, method=case.method, **kwargs)
        kind = (response.content_type or "").split(";")[0]
        body: Any
        if kind.endswith("json"):
            body = response.get_json()
        elif kind == "text/html":  # compared by its text and tags, not its indentation
            text = re.sub(r">\s+", ">", re.sub(r"\s+<", "<", response.get_data(as_text=True)))
            body = " ".join(html.unescape(text).split())
        else:
            body = response.get_data(as_text=True)
        response.close()
        seen[case.name] = {"body": body}
        yield case.name, {"status": response.status_code, "type": kind, "body": clean(body)}


def record(client: FlaskClient) -> dict[str, Any]:
    return dict(send(client))


def validate_report(model_dir: Path) -> dict[str, Any]:
    """``rightsize validate --json``'s report, as the command line prints it."""
    from click.testing import CliRunner

    from service.cli import main

    result = CliRunner().invoke(main, ["validate", "--json", "--model-dir", str(model_dir)])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output[result.output.index("{") :])
    return dict(clean(report))
