"""Server time of POST /v1/recommendations for a catalog model over every GPU, layout and
offer, cold (the profile cached, the answer not) and warm (the same request again: the
stored answer under its id).

Prints the first request (the model profiled and the performance model built, as a fresh
server does), then the median and 95th percentile of ``RUNS`` requests of each kind, through
the Flask test client (request parsing and JSON included): first-time (the profile cached,
nothing else: the layout search runs), cold (another horizon, so that no stored answer
serves it; the layout search of the same workload is reused) and warm (the same request
again). Targets (issue 12): cold <= 300 ms, warm <= 10 ms.

Run: .venv/bin/python bench/bench_recommendations.py
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from service import create_app

BODY: dict[str, Any] = {
    "model": {"name": "llama-3-8b"},
    "workload": {
        "task": "training",
        "batch_size": 1,
        "seq_len": 4096,
        "precision": "bf16",
        "optimizer": "adamw",
        "dataset_tokens": 10_000_000_000,
        "epochs": 1,
    },
    "constraints": {"max_gpus": 64},
}
TARGETS_MS = {"first-time": 300.0, "cold": 300.0, "warm": 10.0}
RUNS = 20


def _timed(client: Any, body: dict[str, Any]) -> tuple[float, dict[str, Any]]:
    start = time.perf_counter()
    response = client.post("/v1/recommendations", json=body)
    elapsed = (time.perf_counter() - start) * 1e3
    assert response.status_code == 200, response.get_json()
    return elapsed, response.get_json()


def main() -> None:
    client = create_app({"TESTING": True}).test_client()
    first, answer = _timed(client, BODY)
    print(f"first request (profile + model build): {first:.0f} ms")
    candidates = answer["candidates_total"]
    excluded = len(answer["excluded"])
    for kind in ("first-time", "cold", "warm"):
        times = []
        for i in range(RUNS):
            if kind == "first-time":  # nothing kept but the profile: the layout search too
                client.application.extensions["rightsize"].layers.service().runs.clear()
            horizon = {"first-time": 100 + i, "cold": 12 + i}.get(kind, 36)
            body = {**BODY, "usage": {"runs_per_month": 1, "horizon_months": horizon}}
            times.append(_timed(client, body)[0])
        median = statistics.median(times)
        p95 = sorted(times)[int(0.95 * len(times)) - 1]
        verdict = "met" if median <= TARGETS_MS[kind] else "NOT met"
        print(
            f"{kind}: {RUNS} requests, median {median:.1f} ms, p95 {p95:.1f} ms (target <= "
            f"{TARGETS_MS[kind]:.0f} ms: {verdict})"
        )
    print(f"{candidates} candidates kept (GPU x count x deployment), {excluded} GPU types excluded")


if __name__ == "__main__":
    main()
