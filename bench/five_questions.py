"""The five questions of issue 27, asked as a new user asks them: the first answer of each
(and the runner-up), one line apiece. Run: .venv/bin/python bench/five_questions.py [--json]"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from service import create_app

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_recommendations import BODY

QUESTIONS: dict[str, dict[str, Any]] = {
    "qlora-llama-3-8b": {
        "model": {"name": "llama-3-8b"},
        "workload": {
            "task": "fine-tuning",
            "method": "qlora",
            "batch_size": 4,
            "seq_len": 2048,
            "precision": "bf16",
            "dataset_tokens": 20_000_000,
            "epochs": 1,
        },
    },
    "bert-base-squad": {
        "model": {"name": "bert-base"},
        "workload": {
            "task": "fine-tuning",
            "batch_size": 32,
            "seq_len": 384,
            "precision": "bf16",
            "dataset_samples": 88_000,
            "epochs": 2,
        },
    },
    "lora-llama-3-70b": {
        "model": {"name": "llama-3-70b"},
        "workload": {
            "task": "fine-tuning",
            "method": "lora",
            "batch_size": 1,
            "seq_len": 4096,
            "precision": "bf16",
            "dataset_tokens": 50_000_000,
            "epochs": 1,
        },
    },
    "resnet-50-imagenet": {
        "model": {"name": "resnet-50"},
        "workload": {
            "task": "training",
            "batch_size": 256,
            "precision": "bf16",
            "optimizer": "sgd+momentum",
            "dataset_samples": 1_281_167,
            "epochs": 90,
        },
    },
    "llama-3-8b-pretrain": BODY,  # the README's worked example
}


def line(rec: dict[str, Any]) -> str:
    dep = rec["deployment"]
    if isinstance(dep, dict):  # after issue 27
        where = (
            f"{dep['instances']} x {dep.get('instance_type') or dep.get('server_design')}"
            f" ({dep['provider']}, {dep['pricing']})"
        )
        hours = rec["job"]["hours"]
    else:
        offer = rec.get("offer") or {}
        where = (
            f"{offer.get('instances', rec.get('nodes'))} x "
            f"{offer.get('instance_type', 'server')} ({offer.get('provider', dep)})"
        )
        hours = rec["estimate"]["hours_per_unit"]
    return (
        f"{rec['count']} x {rec['gpu_name']} as {where}: {hours:.3g} h, "
        f"{rec['cost']['per_unit_usd']:.3g} USD"
    )


def main() -> None:
    client = create_app({"TESTING": True}).test_client()
    out = {}
    for name, body in QUESTIONS.items():
        r = client.post("/v1/recommendations", json=body)
        answer = r.get_json()
        if r.status_code != 200:
            print(name, r.status_code, answer)
            continue
        recs = answer["recommendations"]
        out[name] = [line(x) for x in recs[:2]]
        print(f"{name}:\n  1. {out[name][0]}\n  2. {out[name][1] if len(recs) > 1 else '-'}")
        if answer.get("why_first"):
            print(f"  why: {answer['why_first']}")
    if "--json" in sys.argv:
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
