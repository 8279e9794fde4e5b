"""Server time of POST /v1/plans for a 70B model over every layout up to 64 GPUs of one type.

Prints the first request (the model is profiled and the performance model built, as a
fresh server does) and the median, 95th percentile and maximum of 50 requests once the
profile is cached, through the Flask test client (request parsing and JSON included), on
both stacks, and how many layouts each plan weighed. Target (issue 11): <= 200 ms after the
profile is cached.

Run: .venv/bin/python bench/bench_plans.py
"""

from __future__ import annotations

import statistics
import time

from service import create_app

BODY = {
    "model": {"name": "llama-3-70b"},
    "workload": {
        "task": "training",
        "batch_size": 1,
        "seq_len": 4096,
        "precision": "bf16",
        "optimizer": "adamw",
    },
    "gpu": "h100-sxm-80gb",
    "max_count": 64,
    "global_batch_size": 512,
}
TARGET_MS = 200.0
RUNS = 50


def main() -> None:
    client = create_app({"TESTING": True}).test_client()
    start = time.perf_counter()
    first = client.post("/v1/plans", json=BODY)
    assert first.status_code == 200, first.get_json()
    print(f"first request (profile + model build): {(time.perf_counter() - start) * 1e3:.0f} ms")
    for stack in ("pytorch", "optimized"):
        body = {**BODY, "stack": stack}
        times = []
        for _ in range(RUNS):
            start = time.perf_counter()
            response = client.post("/v1/plans", json=body)
            times.append((time.perf_counter() - start) * 1e3)
            assert response.status_code == 200
        plan = response.get_json()
        weighed = plan["layouts_total"]
        median = statistics.median(times)
        p95 = sorted(times)[int(0.95 * len(times)) - 1]
        verdict = "met" if median <= TARGET_MS else "NOT met"
        print(
            f"stack {stack}: {RUNS} plans, median {median:.1f} ms, p95 {p95:.1f} ms, max "
            f"{max(times):.1f} ms (target <= {TARGET_MS:.0f} ms: {verdict}); smallest count "
            f"{plan['smallest_count']}, {weighed} layouts at it, 7 counts 1-64"
        )


if __name__ == "__main__":
    main()
