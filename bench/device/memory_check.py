"""Peak memory of real training steps on a CUDA GPU, to check the profiler's memory count.

Two parts, each configuration in its own try (one failure loses none of the others):

- ``own``: the profiler's own module for a description (built on the meta device, then
  materialised on the GPU by :func:`profiles.measure.real_step_peak`), one steady step with
  the workload's optimizer; the caching allocator's peak and what was allocated before the
  step (weights and optimizer states). Mixed-precision profiles are run with the module in
  that precision (no fp32 master copy, states in the module's dtype), so compare the step's
  own part (peak less start) with the profile's gradients, activations and temporaries.
- ``hf``: Hugging Face models under autocast, as ``measure_gpu.py`` runs them, with one
  thing changed at a time (the GELU kernel, dropout), to tell where a stock step's memory
  goes beyond the profiler's model.

Writes ``memory_check.json`` into ``--out``. ``--smoke``: tiny sizes on the CPU (own only).

    python bench/device/memory_check.py --out /tmp/out
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from measure_gpu import TINYLLAMA  # noqa: E402  (the same shape as measured there)

OWN: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("resnet50-fp32-b128", {"name": "resnet-50"},
     {"batch_size": 128, "precision": "fp32", "optimizer": "sgd+momentum", "image_size": 224}),
    ("resnet50-fp16-b256", {"name": "resnet-50"},
     {"batch_size": 256, "precision": "fp16", "optimizer": "sgd+momentum", "image_size": 224}),
    ("bert-large-bf16-b32-s384", {"name": "bert-large"},
     {"batch_size": 32, "precision": "bf16", "optimizer": "adamw", "seq_len": 384}),
    ("gpt2-bf16-b8-s1024", {"name": "gpt2"},
     {"batch_size": 8, "precision": "bf16", "optimizer": "adamw", "seq_len": 1024}),
    ("tinyllama-bf16-b2-s2048", {"hf_config": TINYLLAMA},
     {"batch_size": 2, "precision": "bf16", "optimizer": "adamw", "seq_len": 2048}),
    ("txl-large-bf16-b8-s384", {"name": "transformer-xl-large"},
     {"batch_size": 8, "precision": "bf16", "optimizer": "adam", "seq_len": 384}),
    ("mask-rcnn-fp32-b4", {"name": "mask-rcnn"},
     {"batch_size": 4, "precision": "fp32", "optimizer": "sgd+momentum"}),
    ("waveglow-fp32-b8", {"name": "waveglow"},
     {"batch_size": 8, "precision": "fp32", "optimizer": "adam"}),
]  # fmt: skip
SMOKE: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
    ("resnet18-fp32-b1-64", {"family": "resnet", "depth": 18},
     {"batch_size": 1, "precision": "fp32", "optimizer": "sgd+momentum", "image_size": 64}),
]  # fmt: skip


def own(description: dict[str, Any], fields: dict[str, Any], device: str) -> dict[str, int]:
    from profiles.build import build
    from profiles.description import resolve
    from profiles.measure import real_step_peak
    from profiles.model_catalog import Catalog
    from profiles.profile import DTYPES
    from profiles.workload import WorkloadSchema

    model = resolve(description, Catalog.load())
    workload = WorkloadSchema().load({"task": "training", **fields})
    runnable = build(model, DTYPES[workload.precision])
    peak = real_step_peak(runnable, workload, device)
    return {"start_bytes": peak.start_bytes, "peak_bytes": peak.peak_bytes}


def hf_step(kind: str, batch: int, seq: int, dtype: torch.dtype, **config: Any) -> dict[str, int]:
    """Three AMP training steps (fused AdamW, fp32 weights); peak of the third."""
    import transformers

    if kind == "gpt2":
        model: Any = transformers.GPT2LMHeadModel(transformers.GPT2Config(**config))
    else:
        dims = {"num_hidden_layers": 24, "hidden_size": 1024, "num_attention_heads": 16,
                "intermediate_size": 4096, "max_position_embeddings": 512}  # fmt: skip
        model = transformers.BertForQuestionAnswering(transformers.BertConfig(**dims, **config))
    model = model.cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    vocab = model.config.vocab_size
    ids = torch.randint(0, vocab, (batch, seq), device="cuda")
    pos = torch.randint(0, seq, (batch,), device="cuda")

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=dtype):
            if kind == "gpt2":
                loss = model(input_ids=ids, labels=ids).loss
            else:
                loss = model(input_ids=ids, start_positions=pos, end_positions=pos).loss
        loss.backward()
        opt.step()

    for _ in range(2):
        step()
    torch.cuda.synchronize()
    start = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    return {"start_bytes": start, "peak_bytes": torch.cuda.max_memory_allocated()}


HF: list[tuple[str, str, int, int, torch.dtype, dict[str, Any]]] = [
    ("hf-gpt2-bf16-b8-s1024", "gpt2", 8, 1024, torch.bfloat16, {}),
    ("hf-gpt2-bf16-b8-s1024-gelu-fused", "gpt2", 8, 1024, torch.bfloat16,
     {"activation_function": "gelu_pytorch_tanh"}),
    ("hf-gpt2-bf16-b8-s1024-gelu-fused-no-dropout", "gpt2", 8, 1024, torch.bfloat16,
     {"activation_function": "gelu_pytorch_tanh", "resid_pdrop": 0.0, "embd_pdrop": 0.0,
      "attn_pdrop": 0.0}),
    ("hf-bert-large-fp16-b32-s384", "bert", 32, 384, torch.float16, {}),
    ("hf-bert-large-fp16-b32-s384-no-dropout", "bert", 32, 384, torch.float16,
     {"hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0}),
]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.smoke else "cuda"
    result: dict[str, Any] = {"torch": torch.__version__, "runs": []}
    path = args.out / "memory_check.json"
    jobs: list[tuple[str, Any]] = [
        (name, lambda d=d, f=f: own(d, f, device)) for name, d, f in (SMOKE if args.smoke else OWN)
    ]
    if not args.smoke:
        jobs += [(h[0], lambda h=h: hf_step(h[1], h[2], h[3], h[4], **h[5])) for h in HF]
    for name, job in jobs:
        started = time.perf_counter()
        record: dict[str, Any] = {"name": name}
        try:
            record |= job()
        except Exception as exc:  # one failed configuration must not lose the others
            record["error"] = f"{type(exc).__name__}: {exc}"
            record["traceback"] = traceback.format_exc()[-1500:]
        record["wall_s"] = round(time.perf_counter() - started, 2)
        result["runs"].append(record)
        print(json.dumps({k: v for k, v in record.items() if k != "traceback"}), flush=True)
        gc.collect()
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        path.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
