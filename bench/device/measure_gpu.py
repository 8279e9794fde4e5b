"""Measure real training steps on a CUDA GPU: step time, peak memory, kernel traces.

Run on a machine with a GPU, stock PyTorch (with torchvision and transformers for the
models below); synthetic inputs, no data pipeline, no downloads (models are built from
their configs). Writes ``measurements.json`` (one record per configuration: median step
time over the timed steps, samples/s, peak allocated and reserved bytes) and a few
gzipped Kineto traces into the output folder::

    python bench/device/measure_gpu.py --out /tmp/out            # the full set
    python bench/device/measure_gpu.py --out /tmp/out --smoke    # tiny sizes, any device

``rightsize knowledge derive`` does not read this output; ``knowledge/data/benchmarks/
rightsize-measured.csv`` is transcribed from it (see knowledge/README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[2]
# TinyLlama-1.1B's shape, as a Hugging Face config (bench/device/memory_check.py and
# bench/device_check.py build the same model from it)
TINYLLAMA = {
    "model_type": "llama",
    "hidden_size": 2048,
    "intermediate_size": 5632,
    "num_hidden_layers": 22,
    "num_attention_heads": 32,
    "num_key_value_heads": 4,
    "vocab_size": 32000,
    "max_position_embeddings": 2048,
}
sys.path.insert(0, str(ROOT))


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


class Step:
    """One training step of a model on synthetic data at a precision."""

    def __init__(
        self,
        model: nn.Module,
        make_batch: Callable[[], tuple[Any, ...]],
        loss_fn: Callable[..., torch.Tensor],
        precision: str,
        optimizer: str,
        device: torch.device,
    ) -> None:
        self.model = model.to(device)
        self.batch = make_batch()
        self.loss_fn = loss_fn
        self.precision = precision
        params = [p for p in model.parameters() if p.requires_grad]
        if optimizer == "sgd":
            self.opt: torch.optim.Optimizer = torch.optim.SGD(params, lr=0.01, momentum=0.9)
        else:
            self.opt = torch.optim.AdamW(params, lr=1e-4)
        self.dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}.get(precision)
        self.scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None
        self.device = device

    def __call__(self) -> None:
        self.opt.zero_grad(set_to_none=True)
        if self.dtype is not None:
            with torch.autocast(self.device.type, dtype=self.dtype):
                loss = self.loss_fn(self.model, *self.batch)
        else:
            loss = self.loss_fn(self.model, *self.batch)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            loss.backward()
            self.opt.step()


def time_steps(step: Step, warmup: int, timed: int) -> dict[str, Any]:
    for _ in range(warmup):
        step()
    _sync()
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(timed):
        start = time.perf_counter()
        step()
        _sync()
        times.append(time.perf_counter() - start)
    out: dict[str, Any] = {
        "step_s_median": statistics.median(times),
        "step_s_min": min(times),
        "step_s_max": max(times),
        "steps_timed": timed,
    }
    if torch.cuda.is_available():
        out["peak_allocated_bytes"] = torch.cuda.max_memory_allocated()
        out["peak_reserved_bytes"] = torch.cuda.max_memory_reserved()
    return out


def resnet(depth: int, batch: int, image: int, device: torch.device, channels_last: bool):
    import torchvision

    model = getattr(torchvision.models, f"resnet{depth}")()
    memory_format = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)

    def make_batch() -> tuple[Any, ...]:
        x = torch.randn(batch, 3, image, image, device=device)
        x = x.to(memory_format=memory_format)
        y = torch.randint(0, 1000, (batch,), device=device)
        return x, y

    def loss_fn(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return nn.functional.cross_entropy(m(x), y)

    return model, make_batch, loss_fn


def bert_qa(size: str, batch: int, seq: int, device: torch.device, smoke: bool):
    from transformers import BertConfig, BertForQuestionAnswering

    dims = {"base": (12, 768, 12, 3072), "large": (24, 1024, 16, 4096)}[size]
    if smoke:
        dims = (2, 64, 2, 128)
    layers, hidden, heads, ffn = dims
    config = BertConfig(
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        intermediate_size=ffn,
        max_position_embeddings=512,
    )
    model = BertForQuestionAnswering(config)

    def make_batch() -> tuple[Any, ...]:
        ids = torch.randint(0, config.vocab_size, (batch, seq), device=device)
        start = torch.randint(0, seq, (batch,), device=device)
        end = torch.randint(0, seq, (batch,), device=device)
        return ids, start, end

    def loss_fn(m: nn.Module, ids: Any, start: Any, end: Any) -> torch.Tensor:
        return m(input_ids=ids, start_positions=start, end_positions=end).loss

    return model, make_batch, loss_fn


def causal_lm(kind: str, batch: int, seq: int, device: torch.device, smoke: bool):
    import transformers

    if kind == "gpt2":
        config = transformers.GPT2Config(n_positions=max(seq, 1024))
        if smoke:
            config = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=2, n_positions=seq)
        model = transformers.GPT2LMHeadModel(config)
    else:  # a TinyLlama-1.1B-shaped Llama
        dims = {
            k: v for k, v in TINYLLAMA.items() if k not in ("model_type", "max_position_embeddings")
        }
        if smoke:
            dims = {
                "hidden_size": 64,
                "intermediate_size": 128,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 1000,
            }
        config = transformers.LlamaConfig(max_position_embeddings=seq, **dims)
        model = transformers.LlamaForCausalLM(config)
    vocab = config.vocab_size

    def make_batch() -> tuple[Any, ...]:
        return (torch.randint(0, vocab, (batch, seq), device=device),)

    def loss_fn(m: nn.Module, ids: Any) -> torch.Tensor:
        return m(input_ids=ids, labels=ids).loss

    return model, make_batch, loss_fn


def launch_probe(batch: int, device: torch.device):
    """200 tiny linear layers: a step made of launches, not of work."""
    model = nn.Sequential(*[nn.Linear(64, 64) for _ in range(200)])

    def make_batch() -> tuple[Any, ...]:
        return (torch.randn(batch, 64, device=device),)

    def loss_fn(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
        return m(x).square().mean()

    return model, make_batch, loss_fn


def plan(smoke: bool) -> list[dict[str, Any]]:
    if smoke:
        return [
            {
                "name": "bert-base-qa",
                "builder": "bert",
                "size": "base",
                "precision": "fp32",
                "batch": 2,
                "seq": 32,
            },
            {
                "name": "gpt2",
                "builder": "lm",
                "kind": "gpt2",
                "precision": "fp32",
                "batch": 2,
                "seq": 32,
            },
            {
                "name": "llama",
                "builder": "lm",
                "kind": "llama",
                "precision": "fp32",
                "batch": 2,
                "seq": 32,
            },
            {"name": "launch-probe", "builder": "probe", "precision": "fp32", "batch": 1},
        ]
    runs = []
    for precision, batches in (("fp16", (64, 256, 1280)), ("fp32", (256, 640)), ("bf16", (256,))):
        for b in batches:
            runs.append(
                {
                    "name": "resnet50",
                    "builder": "resnet",
                    "depth": 50,
                    "precision": precision,
                    "batch": b,
                }
            )
    runs.append(
        {
            "name": "resnet50-nchw",
            "builder": "resnet",
            "depth": 50,
            "precision": "fp16",
            "batch": 256,
            "channels_last": False,
        }
    )
    for b in (1, 8, 32):
        runs.append(
            {"name": "resnet50", "builder": "resnet", "depth": 50, "precision": "fp16", "batch": b}
        )
    runs.append(
        {"name": "resnet18", "builder": "resnet", "depth": 18, "precision": "fp32", "batch": 256}
    )
    for size, precision, batches in (
        ("large", "fp16", (8, 32, 112)),
        ("large", "fp32", (64,)),
        ("base", "fp16", (32, 320)),
        ("base", "fp32", (172,)),
    ):
        for b in batches:
            runs.append(
                {
                    "name": f"bert-{size}-qa",
                    "builder": "bert",
                    "size": size,
                    "precision": precision,
                    "batch": b,
                    "seq": 384,
                }
            )
    for b in (8, 16):
        runs.append(
            {
                "name": "gpt2",
                "builder": "lm",
                "kind": "gpt2",
                "precision": "bf16",
                "batch": b,
                "seq": 1024,
            }
        )
    runs.append(
        {
            "name": "gpt2",
            "builder": "lm",
            "kind": "gpt2",
            "precision": "fp32",
            "batch": 8,
            "seq": 1024,
        }
    )
    for b in (2, 8):
        runs.append(
            {
                "name": "tinyllama-1.1b",
                "builder": "lm",
                "kind": "llama",
                "precision": "bf16",
                "batch": b,
                "seq": 2048,
            }
        )
    runs.append({"name": "launch-probe", "builder": "probe", "precision": "fp32", "batch": 1})
    return runs


def build(run: dict[str, Any], device: torch.device, smoke: bool):
    kind = run["builder"]
    if kind == "resnet":
        image = 224
        return resnet(run["depth"], run["batch"], image, device, run.get("channels_last", True))
    if kind == "bert":
        return bert_qa(run["size"], run["batch"], run["seq"], device, smoke)
    if kind == "lm":
        return causal_lm(run["kind"], run["batch"], run["seq"], device, smoke)
    return launch_probe(run["batch"], device)


def device_info() -> dict[str, Any]:
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cuda_available": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info |= {
            "device_name": p.name,
            "sm_count": p.multi_processor_count,
            "total_memory_bytes": p.total_memory,
            "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(),
        }
        try:
            query = "name,driver_version,clocks.max.sm,clocks.max.mem,power.limit"
            info["nvidia_smi"] = subprocess.run(
                ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
                check=False,
                capture_output=True,
                text=True,
                timeout=20,
            ).stdout.strip()
        except (OSError, subprocess.SubprocessError) as exc:
            info["nvidia_smi"] = f"unavailable: {exc}"
    return info


def trace(run: dict[str, Any], device: torch.device, out: Path, smoke: bool) -> str:
    from profiles.capture import capture

    model, make_batch, loss_fn = build(run, device, smoke)
    step = Step(model, make_batch, loss_fn, run["precision"], run.get("optimizer", "auto"), device)
    path = out / f"trace-{run['name']}-{run['precision']}-b{run['batch']}.json.gz"
    with capture(str(path), wait=1, warmup=2, active=3) as session:
        for _ in range(6):
            step()
            session.step()
    return path.name


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--timed", type=int, default=8)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.backends.cudnn.benchmark = True
    # NVIDIA's PyTorch containers (what Lambda's benchmarks ran) allow TF32 for fp32 matmuls
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    result: dict[str, Any] = {
        "device": device_info(),
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": [],
        "traces": [],
    }
    path = args.out / "measurements.json"
    for run in plan(args.smoke):
        started = time.perf_counter()
        record = dict(run)
        try:
            model, make_batch, loss_fn = build(run, device, args.smoke)
            optimizer = "sgd" if run["builder"] in ("resnet", "probe") else "adamw"
            record["optimizer"] = optimizer
            record["parameters"] = sum(p.numel() for p in model.parameters())
            step = Step(model, make_batch, loss_fn, run["precision"], optimizer, device)
            record |= time_steps(step, args.warmup, 2 if args.smoke else args.timed)
            record["samples_per_s"] = run["batch"] / record["step_s_median"]
            del step, model
        except Exception as exc:  # one failed configuration must not lose the others
            record["error"] = f"{type(exc).__name__}: {exc}"
            record["traceback"] = traceback.format_exc()[-2000:]
        record["wall_s"] = round(time.perf_counter() - started, 2)
        result["runs"].append(record)
        print(json.dumps({k: v for k, v in record.items() if k != "traceback"}), flush=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        path.write_text(json.dumps(result, indent=1))
    traced = [
        {"name": "resnet50", "builder": "resnet", "depth": 50, "precision": "fp16", "batch": 256},
        {
            "name": "bert-large-qa",
            "builder": "bert",
            "size": "large",
            "precision": "fp16",
            "batch": 32,
            "seq": 384,
        },
    ]
    if args.smoke:
        traced = [plan(True)[0]]
    for run in traced:
        try:
            result["traces"].append(trace(run, device, args.out, args.smoke))
        except Exception as exc:
            result["traces"].append(f"failed: {type(exc).__name__}: {exc}")
        path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    main()
