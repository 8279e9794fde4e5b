"""Profiler speed and memory, as the service sees them.

Prints, each in a fresh process (imports done before timing starts):
- cold profile time, Llama 3 70B and Llama 3.1 405B training (batch 1, 4096 tokens, bf16);
- warm cached request: median server time of POST /v1/profiles over 200 requests;
- the serving process's peak RSS while profiling 405B;
- a batch-size sweep (POST /v1/profiles, each batch size new): the first three batch sizes
  of a model and workload are counted, later ones carried along their line
  (profiles.batch) where the step allows it.
Targets (issue 3): 70B <= 3 s, 405B <= 8 s, warm <= 5 ms, RSS <= 1.5 GB.

Run: .venv/bin/python bench/bench_profiles.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import json, resource, statistics, sys, time
    from service import create_app
    app = create_app()
    client = app.test_client()
    body = json.loads(sys.argv[1])
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    response = client.post("/v1/profiles", json=body)
    cold = time.perf_counter() - start
    assert response.status_code == 200, response.get_data(as_text=True)
    warm = []
    for _ in range(200):
        start = time.perf_counter()
        client.post("/v1/profiles", json=body)
        warm.append(time.perf_counter() - start)
    print(json.dumps({
        "cold_s": cold, "counting_s": response.get_json()["seconds"],
        "warm_median_ms": statistics.median(warm) * 1000,
        "rss_before_mb": rss_before / 1024,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }))
    """
)


SWEEP = textwrap.dedent(
    """
    import json, statistics, sys, time
    from service import create_app
    client = create_app().test_client()
    model, workload = json.loads(sys.argv[1])
    times = []
    for batch in range(1, 24):
        start = time.perf_counter()
        body = {"model": model, "workload": {**workload, "batch_size": batch}}
        response = client.post("/v1/profiles", json=body)
        assert response.status_code == 200, response.get_data(as_text=True)
        times.append(time.perf_counter() - start)
    print(json.dumps({"counted_ms": statistics.median(times[:3]) * 1000,
                      "later_ms": statistics.median(times[3:]) * 1000}))
    """
)
SWEPT = [
    ({"name": "llama-3-8b"},
     {"task": "training", "seq_len": 4096, "precision": "bf16"}),
    ({"name": "bert-base"},
     {"task": "fine-tuning", "seq_len": 384, "precision": "fp16"}),
    ({"name": "llama-3-8b"},
     {"task": "inference", "prompt_tokens": 1024, "output_tokens": 256, "precision": "bf16"}),
    ({"name": "resnet-50"},
     {"task": "training", "image_size": 224, "precision": "fp16"}),
]  # fmt: skip


def sweep(model: dict[str, str], workload: dict[str, object]) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, "-c", SWEEP, json.dumps([model, workload])],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def measure(name: str) -> dict[str, float]:
    body = {
        "model": {"name": name},
        "workload": {"task": "training", "batch_size": 1, "seq_len": 4096, "precision": "bf16"},
    }
    out = subprocess.run(
        [sys.executable, "-c", CHILD, json.dumps(body)], check=True, capture_output=True, text=True
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    for name, target in (("llama-3-70b", 3.0), ("llama-3.1-405b", 8.0)):
        r = measure(name)
        print(
            f"{name:16s} cold {r['cold_s']:.2f} s (target <= {target:g} s; counting "
            f"{r['counting_s']:.2f} s)  warm median {r['warm_median_ms']:.2f} ms (<= 5 ms)  "
            f"peak RSS {r['peak_rss_mb']:.0f} MB (<= 1500 MB; {r['rss_before_mb']:.0f} MB "
            "before the request)"
        )
    print("batch sizes 1-23 of one model and workload, each new to the service:")
    for model, workload in SWEPT:
        r = sweep(model, workload)
        print(
            f"  {model['name']:11s} {workload['task']:11s} first three (counted) median "
            f"{r['counted_ms']:.0f} ms, the next twenty median {r['later_ms']:.0f} ms"
        )


if __name__ == "__main__":
    main()
