"""The estimates against real steps measured on GPUs outside the stored benchmarks.

Reads the measurements ``bench/device/measure_gpu.py`` took (``bench/device/results/
*.json``: stock PyTorch, synthetic inputs, step time and the allocator's peak) and prints,
for each configuration, the measured step and peak memory beside the estimate:

- the step time as rightsize estimates it (calibrated on Lambda's benchmarks, which ran
  NVIDIA's containers with real data pipelines: a different stack, so a gap is expected;
  its size and sign are what this shows), for the measured GPU;
- the memory the profiler counts (without the stated runtime overhead, which the
  allocator's peak does not see) against the peak allocated. The models measured are the
  reference implementations (torchvision, Hugging Face), not the profiler's own modules.

Run: .venv/bin/python bench/device_check.py [results.json ...]
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from knowledge import load_knowledge
from profiles.description import resolve
from profiles.model_catalog import Catalog
from profiles.profile import profile
from profiles.workload import WorkloadSchema
from service.engine.estimating.estimate import EstimateInput, estimate
from service.engine.estimating.model import build
from service.engine.estimating.step_profile import StepProfile

RESULTS = Path(__file__).parent / "device" / "results"
sys.path.insert(0, str(RESULTS.parent))
from measure_gpu import TINYLLAMA  # noqa: E402  (the shape it measured)


def description(run: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The model and workload of one measured configuration, as rightsize is asked."""
    batch, precision = run["batch"], run["precision"]
    workload: dict[str, Any] = {"task": "training", "batch_size": batch, "precision": precision}
    name = run["name"]
    if name.startswith("resnet"):
        depth = int(name.removeprefix("resnet").split("-")[0])
        model: dict[str, Any] = {"family": "resnet", "depth": depth}
        return model, workload | {"optimizer": "sgd+momentum"}
    if "seq" not in run:  # the launch probe: no model of the catalog's
        return None
    workload |= {"seq_len": run["seq"], "optimizer": "adamw"}
    if name.startswith("bert"):
        return {"name": "bert-large" if "large" in name else "bert-base"}, workload
    if name == "gpt2":
        return {"name": "gpt2"}, workload
    if name.startswith("tinyllama"):
        return {"hf_config": TINYLLAMA}, workload
    return None


def main() -> None:
    paths = [Path(p) for p in sys.argv[1:]] or sorted(RESULTS.glob("*.json"))
    knowledge, catalog = load_knowledge(), Catalog.load()
    with tempfile.TemporaryDirectory() as cache:
        model = build(knowledge, catalog, Path(cache))
    for path in paths:
        data = json.loads(path.read_text())
        if "device" not in data or "runs" not in data:  # another script's results
            continue
        device = data["device"]
        gpu = knowledge.gpu(device["device_name"])
        print(f"{path.name}: {device['device_name']} ({gpu.id}), torch {device['torch']}")
        print(
            f"  {'configuration':<32} {'measured':>9} {'estimate':>9} {'':>6}  "
            f"{'peak GB':>8} {'counted':>8} {'':>6}"
        )
        time_errors, memory_errors = [], []
        for run in data["runs"]:
            asked = description(run)
            if "error" in run or asked is None:
                continue
            counted = profile(resolve(asked[0], catalog), WorkloadSchema().load(asked[1]), 120)
            step = StepProfile.from_profile(counted.to_dict())
            found = estimate(EstimateInput(step, gpu), model, knowledge)
            memory = step.memory.total_bytes - step.memory.runtime_overhead_bytes
            measured = run["step_s_median"]
            peak = run["peak_allocated_bytes"]
            time_errors.append(found.step_time_s / measured - 1)
            memory_errors.append(memory / peak - 1)
            label = f"{run['name']} {run['precision']} b={run['batch']}"
            print(
                f"  {label:<32} {measured * 1e3:7.1f}ms {found.step_time_s * 1e3:7.1f}ms "
                f"{time_errors[-1]:+6.0%}  {peak / 1e9:8.2f} {memory / 1e9:8.2f} "
                f"{memory_errors[-1]:+6.0%}"
            )
        time_errors.sort(key=abs)
        memory_errors.sort(key=abs)
        print(
            f"  median |error|: step time {abs(time_errors[len(time_errors) // 2]):.0%}, "
            f"peak memory {abs(memory_errors[len(memory_errors) // 2]):.0%} "
            f"({len(time_errors)} configurations)"
        )


if __name__ == "__main__":
    main()
