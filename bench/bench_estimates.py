"""Estimate, model build and validation speed, as the service and the CLI see them.

Prints:
- the model build from nothing (an empty model cache: the packaged benchmark step
  profiles are read, the step model fitted, the interval quantiles cross-validated) and
  from a warm cache (the quantiles read back), as a fresh and a restarted server do;
- the median server time of POST /v1/estimates once the profile is cached (200 requests
  each, for a benchmarked workload on one GPU and on 8, and a model the benchmarks did
  not measure), through the Flask test client, so request parsing and JSON included;
- a batch of 1,000 estimates through ``estimate_many`` (what validation calls);
- the wall time of a full validation run (``rightsize validate``'s work, in process).
Targets (issue 10): one estimate <= 20 ms after the profile is cached; 1,000 estimates
<= 1 s.

Run: .venv/bin/python bench/bench_estimates.py [--no-validation]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from knowledge import load_knowledge
from profiles.model_catalog import Catalog
from service import create_app
from service.config import load_settings
from service.engine.estimating.estimate import estimate_many
from service.engine.estimating.model import build
from service.engine.validating.validation import requests_for, validate

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


def _verdict(value: float, target: float) -> str:
    return "met" if value <= target else "NOT met"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-validation", action="store_true")
    args = parser.parse_args()
    knowledge, catalog = load_knowledge(), Catalog.load()

    with tempfile.TemporaryDirectory() as empty:
        start = time.perf_counter()
        build(knowledge, catalog, Path(empty))
        print(f"model build from nothing (empty cache): {time.perf_counter() - start:.2f} s")
    directory = Path(load_settings()["RIGHTSIZE_MODEL_DIR"])
    build(knowledge, catalog, directory)  # make sure the cache is warm
    start = time.perf_counter()
    model = build(knowledge, catalog, directory)
    print(f"model build from a warm cache ({directory}): {time.perf_counter() - start:.2f} s")

    client = create_app({"MODEL_DIR": str(directory)}).test_client()
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
        p95 = sorted(times)[int(0.95 * len(times))] * 1000
        print(
            f"one estimate, {name}: median {median:.2f} ms, p95 {p95:.2f} ms "
            f"(target 20 ms: {_verdict(median, 20)})"
        )

    found = (model.single * (1000 // len(model.single) + 1))[:1000]
    requests = requests_for(model, knowledge, found)
    runs = []
    for _ in range(5):
        start = time.perf_counter()
        estimate_many(requests, model, knowledge)
        runs.append(time.perf_counter() - start)
    batch = statistics.median(runs)
    print(f"1,000 estimates in one batch: median {batch:.3f} s (target 1 s: {_verdict(batch, 1)})")

    if not args.no_validation:
        start = time.perf_counter()
        report = validate(model, knowledge)
        wall = time.perf_counter() - start
        single = report["single_gpu"]
        forward = report["forward_in_time"]
        print(
            f"validation run: {wall:.1f} s (leave one GPU out {single['median_ape']:.1%}, "
            f"forward 2020 {forward['2020']['median_ape']:.1%}, "
            f"forward 2022 {forward['2022']['median_ape']:.1%}, "
            f"multi-GPU {report['multi_gpu']['median_ape']:.1%})"
        )


if __name__ == "__main__":
    main()
