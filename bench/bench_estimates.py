"""Estimate and validation speed, as the service and the CLI see them.

Prints:
- the time to build the performance model (operator mixes cached, as after first start);
- the median server time of POST /v1/estimates once the profile is cached (200 requests
  each, for a benchmarked workload on one GPU and on 8, and a model the benchmarks did
  not measure), through the Flask test client, so request parsing and JSON included;
- the wall time of a full validation run (``rightsize validate``'s work, in process).
Targets (issue 5): one estimate <= 20 ms after the profile is cached.

Run: .venv/bin/python bench/bench_estimates.py [--no-validation]
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path
from typing import Any

from knowledge import load_knowledge
from profiles.catalog import Catalog
from service import create_app
from service.config import load_settings
from service.engine.model import build
from service.engine.validation import validate

BODIES: dict[str, dict[str, Any]] = {
    "resnet-50 (benchmarked), 1x A100": {
        "model": {"name": "resnet-50"},
        "workload": {"task": "training", "batch_size": 256, "precision": "fp16"},
        "gpu": "a100-sxm4-80gb",
    },
    "bert-large (benchmarked), 8x H100": {
        "model": {"name": "bert-large"},
        "workload": {"task": "training", "batch_size": 32, "seq_len": 384, "precision": "fp16"},
        "gpu": "h100-sxm-80gb",
        "count": 8,
    },
    "llama-3-8b (not benchmarked), 8x H100": {
        "model": {"name": "llama-3-8b"},
        "workload": {"task": "training", "batch_size": 1, "seq_len": 4096, "precision": "bf16"},
        "gpu": "h100-sxm-80gb",
        "count": 8,
    },
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-validation", action="store_true")
    args = parser.parse_args()
    directory = Path(load_settings()["RIGHTSIZE_MODEL_DIR"])
    knowledge, catalog = load_knowledge(), Catalog.load()

    start = time.perf_counter()
    model = build(knowledge, catalog, directory)
    print(f"model build (mixes cached in {directory}): {time.perf_counter() - start:.2f} s")

    client = create_app().test_client()
    for name, body in BODIES.items():
        first = client.post("/v1/estimates", json=body)  # profiles once, builds the model
        assert first.status_code == 200, first.get_data(as_text=True)
        times = []
        for _ in range(200):
            start = time.perf_counter()
            response = client.post("/v1/estimates", json=body)
            times.append(time.perf_counter() - start)
            assert response.status_code == 200
        median = statistics.median(times) * 1000
        verdict = "met" if median <= 20 else "NOT met"
        print(
            f"estimate, {name}: median {median:.2f} ms, p95 "
            f"{sorted(times)[int(0.95 * len(times))] * 1000:.2f} ms (target 20 ms: {verdict})"
        )

    if not args.no_validation:
        start = time.perf_counter()
        report = validate(model, knowledge)
        wall = time.perf_counter() - start
        single = report["single_gpu"]
        print(
            f"validation run: {wall:.1f} s (single-GPU median {single['median_ape']:.1%}, "
            f"multi-GPU median {report['multi_gpu']['median_ape']:.1%})"
        )


if __name__ == "__main__":
    main()
