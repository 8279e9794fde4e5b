"""The stored training-throughput benchmarks as observations the estimates learn from.

One observation is one (suite, workload, GPU, precision, GPU count, batch per GPU), the
median of the rows that measured it (Lambda's v2 per-host rows join the v2 suite: the same
containers, one row per machine). Each carries the operator mix the profiler counts for
its step, built from profiles at batch 1 and 2 (FLOPs and bytes are linear in the batch),
which are cached on disk as JSON keyed by the profiler version and the workload's shape.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from knowledge import Knowledge
from knowledge.records import Benchmark, Workload
from profiles.catalog import Catalog
from profiles.description import resolve
from profiles.profile import PROFILER_VERSION, profile
from profiles.workload import WorkloadSchema
from service.engine.roofline import OpMix

SUITES = {  # stored suite -> the suite it is fitted as (v2's per-host rows join v2)
    "lambda-v0": "lambda-v0",
    "lambda-v1": "lambda-v1",
    "lambda-v2": "lambda-v2",
    "lambda-v2-host": "lambda-v2",
}
GENERATION = {"lambda-v0": 0, "lambda-v1": 1, "lambda-v2": 2}


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


def _profile_precision(precision: str) -> str:
    return "fp16" if precision == "fp16" else "fp32"


class MixStore:
    """Operator mixes of the benchmark workloads at batch 1 and 2, cached as JSON files."""

    def __init__(self, directory: Path, catalog: Catalog, time_limit_s: float = 300.0) -> None:
        self.directory = directory
        self.catalog = catalog
        self.time_limit_s = time_limit_s
        self._memo: dict[str, dict[str, Any]] = {}

    def _request(self, workload: Workload, precision: str, batch: int) -> dict[str, Any]:
        shape = workload.profile
        assert shape is not None
        request: dict[str, Any] = {
            "task": "training",
            "batch_size": batch,
            "precision": _profile_precision(precision),
            "optimizer": shape.optimizer,
        }
        if shape.seq_len is not None:
            request["seq_len"] = shape.seq_len
        if shape.image_size is not None:
            request["image_size"] = shape.image_size
        return request

    def _key(self, workload: Workload, request: dict[str, Any]) -> str:
        text = json.dumps(
            {"model": workload.model, "request": request, "profiler": PROFILER_VERSION},
            sort_keys=True,
        )
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    def entry(self, workload: Workload, precision: str, batch: int) -> dict[str, Any]:
        """The mix and the tokens per sample of one profile (counted once, then read)."""
        request = self._request(workload, precision, batch)
        key = self._key(workload, request)
        if key in self._memo:
            return self._memo[key]
        path = self.directory / f"mix-{key}.json"
        found = read_json(path)
        if found is None or found.get("key") != key:
            result = profile(
                resolve({"name": workload.model}, self.catalog),
                WorkloadSchema().load(request),
                self.time_limit_s,
            ).to_dict()
            found = {
                "key": key,
                "workload": workload.id,
                "request": request,
                "mix": OpMix.from_profile(result).to_dict(),
                "tokens_per_sample": result["tokens_per_step"] / result["samples_per_step"],
                "gradient_bytes": result["memory"]["gradients_bytes"],
                "backward_flops": result["flops"]["backward"],
            }
            write_json(path, found)
        self._memo[key] = found
        return found

    def mix(self, workload: Workload, precision: str, batch: float) -> OpMix:
        one = OpMix.from_dict(self.entry(workload, precision, 1)["mix"])
        two = OpMix.from_dict(self.entry(workload, precision, 2)["mix"])
        return OpMix.between(one, two, batch)


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


def items_per_sample(workload: Workload, store: MixStore, precision: str) -> float:
    shape = workload.profile
    assert shape is not None
    if shape.items_per_sample == "tokens":
        return float(store.entry(workload, precision, 1)["tokens_per_sample"])
    return float(shape.items_per_sample)


@dataclass(frozen=True)
class Skipped:
    row: str
    reason: str


def observations(knowledge: Knowledge, store: MixStore) -> tuple[list[Observation], list[Skipped]]:
    """Every Lambda training-throughput measurement, grouped; and what could not be used."""
    groups: dict[tuple[Any, ...], list[Benchmark]] = defaultdict(list)
    skipped: list[Skipped] = []
    v2_batches: dict[tuple[str, str, str, int], float] = {}
    lambda_rows = [
        b for b in knowledge.benchmarks if b.kind == "training-throughput" and b.suite in SUITES
    ]
    for row in lambda_rows:
        if row.suite == "lambda-v2" and row.batch_size_per_gpu:
            key = (row.workload, row.gpu_id or "", row.precision or "", row.gpu_count)
            v2_batches[key] = row.batch_size_per_gpu
    for row in lambda_rows:
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
    for (suite, wid, gid, precision, count, batch, nvlink), rows in sorted(
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
                throughput=statistics.median(r.value for r in rows),
                items_per_sample=items_per_sample(workload, store, precision),
                rows=len(rows),
                nvlink=nvlink,
            )
        )
    return found, skipped
