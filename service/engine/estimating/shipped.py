"""The packaged profiles of the benchmarked workloads' steps: written, and checked.

``rightsize benchmark-profiles`` profiles every (workload, precision, batch 1 and 2) the
stored benchmarks need and writes them, with the key each depends on (the profiler
version, the request, the model's catalog description), to
``service/engine/estimating/data/benchmark_profiles.json``. The service reads them instead of
profiling (a first start in seconds, not minutes); a test recomputes them all and fails
when the file is stale.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from knowledge import Knowledge
from profiles.model_catalog import Catalog
from profiles.profile import PROFILER_VERSION
from service.engine.estimating.observations import (
    SHIPPED,
    compute_entry,
    entry_key,
    lambda_rows,
    profile_request,
    shipped_entries,
)

PATH = Path(__file__).parent / "data" / SHIPPED


def needed(knowledge: Knowledge) -> list[tuple[str, str, int]]:
    """(workload, benchmark precision, batch) of every entry the observations use."""
    pairs = sorted({(r.workload, r.precision or "fp32") for r in lambda_rows(knowledge)})
    return [
        (wid, precision, batch)
        for wid, precision in pairs
        if knowledge.workloads.get(wid) is not None and knowledge.workloads[wid].profile is not None
        for batch in (1, 2)
    ]


def compute_all(knowledge: Knowledge, catalog: Catalog) -> list[dict[str, Any]]:
    """Every entry, profiled now (nothing read from any cache)."""
    return [
        compute_entry(knowledge.workloads[wid], precision, batch, catalog)
        for wid, precision, batch in needed(knowledge)
    ]


def write(knowledge: Knowledge, path: Path = PATH) -> tuple[Path, int]:
    entries = compute_all(knowledge, Catalog.load())
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {"profiler_version": PROFILER_VERSION, "entries": entries}
    path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n")
    return path, len(entries)


def stale_entries(knowledge: Knowledge) -> list[str]:
    """The needed entries the packaged file lacks (by key): '<workload> <precision> b<n>'."""
    catalog = Catalog.load()
    have = shipped_entries()
    out = []
    for wid, precision, batch in needed(knowledge):
        workload = knowledge.workloads[wid]
        key = entry_key(workload, profile_request(workload, precision, batch), catalog)
        if key not in have:
            out.append(f"{wid} {precision} b{batch}")
    return out
