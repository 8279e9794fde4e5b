"""The stored training-throughput benchmarks as observations, and the profiles of their steps.

One observation is one (suite, workload, GPU, precision, GPU count, batch per GPU), the
median of the rows that measured it (Lambda's v2 per-host rows join the v2 suite: the same
containers, one row per machine). Its step is the benchmarked workload's profile at that
batch, made from the profiles at batch 1 and 2 (:meth:`StepProfile.between`).

Those profiles (two batches, two precisions, each benchmarked workload) ship with the
package as derived data (``data/benchmark_profiles.json``, written by ``rightsize
benchmark-profiles``), so a first start profiles nothing; an entry whose key no longer
matches (the profiler or a model changed) is profiled again and kept as JSON in the model
cache. Nothing is unpickled.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import statistics
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from knowledge import Knowledge
from knowledge.records import Benchmark, Workload
from profiles.description import resolve
from profiles.model_catalog import Catalog
from profiles.profile import PROFILER_VERSION, profile
from profiles.workload import WorkloadSchema
from service.engine.estimating.step_profile import StepProfile

SUITES = {  # stored suite -> the suite it is fitted as (v2's per-host rows join v2)
    "lambda-v0": "lambda-v0",
    "lambda-v1": "lambda-v1",
    "lambda-v2": "lambda-v2",
    "lambda-v2-host": "lambda-v2",
    # rows users submit (knowledge.submitted): measured on today's stack, the newest one
    "submitted": "lambda-v2",
}
SHIPPED = "benchmark_profiles.json"


@dataclass(frozen=True)
class Observation:
    suite: str
    workload: str
    gpu_id: str
    precision: str  # as the benchmark names it: fp16 (mixed) or fp32 (TF32 on Ampere+)
    count: int
    batch: float  # per GPU
    throughput: float  # in the workload's unit, all GPUs together
    items_per_sample: float
    rows: int
    nvlink: bool | None

    @property
    def samples_per_s(self) -> float:
        return self.throughput / self.items_per_sample

    @property
    def step_s(self) -> float:
        """Measured time of one step (every GPU runs ``batch`` samples per step)."""
        return self.batch * self.count / self.samples_per_s


def profile_precision(precision: str) -> str:
    """The profile's precision for a benchmark's: fp16 = mixed precision, else fp32."""
    return "fp16" if precision == "fp16" else "fp32"


def profile_request(workload: Workload, precision: str, batch: int) -> dict[str, Any]:
    """The workload request that profiles one step of a benchmarked workload."""
    shape = workload.profile
    assert shape is not None
    request: dict[str, Any] = {
        "task": "training",
        "batch_size": batch,
        "precision": profile_precision(precision),
        "optimizer": shape.optimizer,
    }
    if shape.seq_len is not None:
        request["seq_len"] = shape.seq_len
    if shape.image_size is not None:
        request["image_size"] = shape.image_size
    if shape.attention is not None:
        request["attention"] = shape.attention
    return request


def entry_key(workload: Workload, request: dict[str, Any], catalog: Catalog) -> str:
    """What an entry depends on: the profiler version, the request and the model as the
    catalog describes it (a changed description is a new key)."""
    description = catalog.entries.get(workload.model)
    text = json.dumps(
        {
            "model": workload.model,
            "description": getattr(description, "description", None),
            "request": request,
            "profiler": PROFILER_VERSION,
        },
        sort_keys=True,
        default=str,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:20]


def compute_entry(workload: Workload, precision: str, batch: int, catalog: Catalog) -> dict:
    """Profile one step of ``workload`` (what the shipped file holds for it)."""
    request = profile_request(workload, precision, batch)
    result = profile(
        resolve({"name": workload.model}, catalog), WorkloadSchema().load(request), 300.0
    ).to_dict()
    step = StepProfile.from_profile(result)
    return {
        "key": entry_key(workload, request, catalog),
        "workload": workload.id,
        "request": request,
        "step": step.to_dict(),
        "backward_flops": result["flops"]["backward"],
    }


def shipped_entries() -> dict[str, dict[str, Any]]:
    """The packaged entries, by key (empty if the file is missing or unreadable)."""
    try:
        text = resources.files("service.engine.estimating").joinpath("data", SHIPPED).read_text()
        data = json.loads(text)
    except (OSError, ValueError):
        return {}
    return {e["key"]: e for e in data.get("entries", []) if isinstance(e, dict) and "key" in e}


class BenchmarkProfiles:
    """Profiles of the benchmarked workloads' steps: shipped, else cached, else counted."""

    def __init__(self, cache_dir: Path, catalog: Catalog) -> None:
        self.cache_dir = cache_dir
        self.catalog = catalog
        self._shipped = shipped_entries()
        self._memo: dict[str, dict[str, Any]] = {}
        self.profiled = 0  # entries counted by the profiler in this process

    def entry(self, workload: Workload, precision: str, batch: int) -> dict[str, Any]:
        request = profile_request(workload, precision, batch)
        key = entry_key(workload, request, self.catalog)
        found = self._memo.get(key) or self._shipped.get(key)
        path = self.cache_dir / f"step-{key}.json"
        if found is None:
            found = read_json(path)
            if found is None or found.get("key") != key:
                found = compute_entry(workload, precision, batch, self.catalog)
                self.profiled += 1
                write_json(path, found)
        self._memo[key] = found
        return found

    def step(self, workload: Workload, precision: str, batch: float) -> StepProfile:
        """The step of ``workload`` at ``batch`` per GPU and the benchmark's ``precision``."""
        one = StepProfile.from_dict(self.entry(workload, precision, 1)["step"])
        two = StepProfile.from_dict(self.entry(workload, precision, 2)["step"])
        return StepProfile.between(one, two, batch)

    def backward_share(self, workload: Workload, precision: str) -> float:
        """Backward FLOPs over all FLOPs of one step (the window DDP overlaps within)."""
        entry = self.entry(workload, precision, 1)
        step = StepProfile.from_dict(entry["step"])
        total = sum(f for f, _ in step.mix.work.values())
        return float(entry["backward_flops"] or 0.0) / total if total else 0.0

    def tokens_per_sample(self, workload: Workload, precision: str) -> float:
        step = StepProfile.from_dict(self.entry(workload, precision, 1)["step"])
        return step.tokens_per_step / step.samples_per_step


def observation_step(
    knowledge: Knowledge, store: BenchmarkProfiles, obs: Observation
) -> StepProfile:
    """The step of one observation: its workload at its batch per GPU and precision."""
    return store.step(knowledge.workloads[obs.workload], obs.precision, obs.batch)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Atomic: a reader sees the old file or the new one, never half of one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as out:
        json.dump(data, out)
    os.replace(tmp, path)


def items_per_sample(workload: Workload, store: BenchmarkProfiles, precision: str) -> float:
    shape = workload.profile
    assert shape is not None
    if shape.items_per_sample == "tokens":
        return store.tokens_per_sample(workload, precision)
    return float(shape.items_per_sample)


def training_flops_per_unit(knowledge: Knowledge) -> dict[str, float]:
    """Training FLOPs (forward + backward, as the profiler counts one sample at batch 1)
    per unit of each benchmarked workload's throughput, from the shipped step profiles
    (the least over their precisions); a workload they lack is left out. Kept with
    ``knowledge``."""
    key = ("training-flops-per-unit",)
    found = knowledge.derived.get(key)
    if isinstance(found, dict):
        return found
    out: dict[str, float] = {}
    for entry in shipped_entries().values():
        workload = knowledge.workloads.get(str(entry.get("workload")))
        if workload is None or workload.profile is None or entry["request"]["batch_size"] != 1:
            continue
        step = StepProfile.from_dict(entry["step"])
        work = step.mix.work.items()
        flops = sum(f for (phase, _), (f, _) in work if phase in ("forward", "backward"))
        shape = workload.profile.items_per_sample
        units = step.tokens_per_step if shape == "tokens" else float(shape) * step.samples_per_step
        if flops > 0 and units > 0:
            out[workload.id] = min(flops / units, out.get(workload.id, math.inf))
    knowledge.derived[key] = out
    return out


@dataclass(frozen=True)
class Skipped:
    row: str
    reason: str


def lambda_rows(knowledge: Knowledge) -> list[Benchmark]:
    return [
        b for b in knowledge.benchmarks if b.kind == "training-throughput" and b.suite in SUITES
    ]


def observations(
    knowledge: Knowledge, store: BenchmarkProfiles
) -> tuple[list[Observation], list[Skipped]]:
    """Every Lambda training-throughput measurement, grouped; and what could not be used."""
    groups: dict[tuple[Any, ...], list[Benchmark]] = defaultdict(list)
    skipped: list[Skipped] = []
    v2_batches: dict[tuple[str, str, str, int], float] = {}
    rows = lambda_rows(knowledge)
    for row in rows:
        if row.suite == "lambda-v2" and row.batch_size_per_gpu:
            key = (row.workload, row.gpu_id or "", row.precision or "", row.gpu_count)
            v2_batches[key] = row.batch_size_per_gpu
    for row in rows:
        workload = knowledge.workloads.get(row.workload)
        label = f"{row.suite} {row.workload} {row.gpu} x{row.gpu_count} {row.precision}"
        if workload is None or workload.profile is None:
            skipped.append(Skipped(label, "the workload has no profile shape in knowledge"))
            continue
        if row.gpu_id is None:
            skipped.append(Skipped(label, "the GPU does not resolve"))
            continue
        batch = row.batch_size_per_gpu or v2_batches.get(
            (row.workload, row.gpu_id, row.precision or "", row.gpu_count)
        )
        if not batch:
            skipped.append(Skipped(label, "no batch size (no v2 row of the same configuration)"))
            continue
        suite = SUITES[row.suite]
        nvlink = row.details.get("nvlink")
        group = (suite, row.workload, row.gpu_id, row.precision, row.gpu_count, batch, nvlink)
        groups[group].append(row)
    found = []
    for (suite, wid, gid, precision, count, batch, nvlink), members in sorted(
        groups.items(), key=lambda kv: str(kv[0])
    ):
        workload = knowledge.workloads[wid]
        found.append(
            Observation(
                suite=suite,
                workload=wid,
                gpu_id=gid,
                precision=precision,
                count=count,
                batch=float(batch),
                throughput=statistics.median(r.value for r in members),
                items_per_sample=items_per_sample(workload, store, precision),
                rows=len(members),
                nvlink=nvlink,
            )
        )
    return found, skipped
