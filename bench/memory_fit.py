"""Do the stored Lambda configurations fit the GPUs they ran on, by the profiler's memory?

Every single-GPU row of ``knowledge/data/benchmarks/lambda.csv`` really ran on its GPU, so
its configuration (workload, precision, batch per GPU, GPU) must fit: the profile's
``memory.total_bytes`` (runtime overhead included) at most the usable memory, taken as
98.5 % of ``memory_gb`` GiB (what nvidia-smi shows: an H200's "141 GB" is 150.1e9 bytes).
The profile's shape is the workload's in ``knowledge/data/workloads.yaml``; precision fp16
means mixed precision (profile fp16), fp32 means fp32.

Prints the share that fits per workload, the fullest configuration of each (a workload
whose fullest run is far below 1 has its memory underestimated or ran with room to spare)
and the worst misses (estimate over usable).

Run: .venv/bin/python bench/memory_fit.py [--workload ID ...] [--worst N]
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from dataclasses import dataclass

from knowledge import Knowledge, load_knowledge
from profiles.description import resolve
from profiles.model_catalog import Catalog
from profiles.profile import Memory, profile
from profiles.workload import WorkloadSchema

USABLE_SHARE = 0.985  # of the capacity: what the driver leaves to processes
LAMBDA_SUITES = ("lambda-v0", "lambda-v1", "lambda-v2", "lambda-v2-host")


def usable_bytes(memory_gb: float) -> float:
    """Usable bytes of a GPU whose catalog gives ``memory_gb`` (GiB as vendors mean it)."""
    return USABLE_SHARE * memory_gb * 2**30


@dataclass(frozen=True)
class Config:
    workload: str
    precision: str
    batch: int
    gpu_id: str


def configurations(knowledge: Knowledge, only: set[str] | None) -> list[Config]:
    """Distinct single-GPU Lambda configurations with a batch size and a profile shape."""
    found = set()
    for row in knowledge.benchmarks:
        if row.kind != "training-throughput" or row.suite not in LAMBDA_SUITES:
            continue
        if row.gpu_count != 1 or row.gpu_id is None or not row.batch_size_per_gpu:
            continue
        workload = knowledge.workloads.get(row.workload)
        if workload is None or workload.profile is None:
            continue
        if only and row.workload not in only:
            continue
        found.add(
            Config(row.workload, row.precision or "fp32", int(row.batch_size_per_gpu), row.gpu_id)
        )
    return sorted(found, key=lambda c: (c.workload, c.precision, c.batch, c.gpu_id))


def memory_of(
    knowledge: Knowledge, catalog: Catalog, workload_id: str, precision: str, batch: int
) -> Memory:
    workload = knowledge.workloads[workload_id]
    shape = workload.profile
    assert shape is not None
    request: dict[str, object] = {
        "task": "training",
        "batch_size": batch,
        "precision": "fp16" if precision == "fp16" else "fp32",
        "optimizer": shape.optimizer,
    }
    if shape.seq_len is not None:
        request["seq_len"] = shape.seq_len
    if shape.image_size is not None:
        request["image_size"] = shape.image_size
    model = resolve({"name": workload.model}, catalog)
    return profile(model, WorkloadSchema().load(request), 600).memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", action="append", help="only these workload ids")
    parser.add_argument("--worst", type=int, default=15, help="misses to list")
    args = parser.parse_args()
    knowledge = load_knowledge()
    catalog = Catalog.load()
    configs = configurations(knowledge, set(args.workload) if args.workload else None)
    memories: dict[tuple[str, str, int], Memory] = {}
    seconds: dict[str, float] = defaultdict(float)
    results = []
    for c in configs:
        key = (c.workload, c.precision, c.batch)
        if key not in memories:
            start = time.perf_counter()
            memories[key] = memory_of(knowledge, catalog, *key)
            seconds[c.workload] += time.perf_counter() - start
        usable = usable_bytes(knowledge.gpus[c.gpu_id].memory_gb)
        results.append((c, memories[key], usable))
    by_workload: dict[str, list[bool]] = defaultdict(list)
    for c, memory, usable in results:
        by_workload[c.workload].append(memory.total_bytes <= usable)
    print(f"{'workload':28s} {'fit':>9s} {'share':>7s} {'profiling s':>12s}")
    for wid, fits in sorted(by_workload.items()):
        print(
            f"{wid:28s} {sum(fits):4d}/{len(fits):<4d} {sum(fits) / len(fits):7.1%} "
            f"{seconds[wid]:12.1f}"
        )
    total = [f for fits in by_workload.values() for f in fits]
    print(f"{'all':28s} {sum(total):4d}/{len(total):<4d} {sum(total) / len(total):7.1%}")
    misses = sorted(
        (r for r in results if r[1].total_bytes > r[2]),
        key=lambda r: r[1].total_bytes / r[2],
        reverse=True,
    )
    ratios: dict[str, float] = defaultdict(float)
    for c, memory, usable in results:
        ratios[c.workload] = max(ratios[c.workload], memory.total_bytes / usable)
    print("\nfullest configuration per workload (estimate / usable):")
    for wid, ratio in sorted(ratios.items()):
        print(f"  {wid:28s} {ratio:5.2f}")
    if misses:
        print(f"\nworst misses (estimate / usable; {len(misses)} in all):")
    for c, memory, usable in misses[: args.worst]:
        parts = ", ".join(
            f"{name.removesuffix('_bytes')} {value / 1e9:.2f}"
            for name, value in vars(memory).items()
            if value
        )
        print(
            f"  {memory.total_bytes / usable:5.2f}x  {c.workload} {c.precision} batch {c.batch} "
            f"on {c.gpu_id} ({usable / 1e9:.1f} GB usable): {parts} GB"
        )


if __name__ == "__main__":
    main()
