"""Submitted benchmark rows: checked as the knowledge files are, and layered over them.

The curated tables under ``knowledge/data`` stay the base. Rows users submit
(``POST /v1/benchmarks``) are validated by :class:`SubmittedRowSchema` (Lambda's
columns, the table the performance model learns from), their GPU and workload resolved
against the base, held to physical bounds (:mod:`knowledge.row_bounds`), and kept
apart; :func:`layered` makes a :class:`Knowledge` with them added, whose version says
so (``<base>+s<digest>``), so that nothing fitted on one is mistaken for the other.
"""

from __future__ import annotations

import datetime as dt
import difflib
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from marshmallow import ValidationError

from knowledge import records
from knowledge.base import Knowledge
from knowledge.benchmark_schemas import SubmittedRowSchema
from knowledge.loader import flatten_messages
from knowledge.row_bounds import KIND, RowBounds


@dataclass(frozen=True)
class RowError:
    index: int
    field: str
    message: str


def check_rows(
    knowledge: Knowledge,
    rows: Sequence[Any],
    bounds: RowBounds | None = None,
    today: dt.date | None = None,
) -> tuple[list[records.Benchmark], list[RowError]]:
    """Validate and link each row, and hold it to ``bounds`` (by default those the curated
    rows give; ``today``: UTC's); every fault of every row is reported (none is stored
    unless the list of errors is empty)."""
    schema = SubmittedRowSchema()
    bounds = bounds or curated_bounds(knowledge)
    today = today or dt.datetime.now(dt.UTC).date()
    out: list[records.Benchmark] = []
    errors: list[RowError] = []
    for index, raw in enumerate(rows):
        if not isinstance(raw, dict):
            errors.append(RowError(index, "(row)", "expected an object of columns"))
            continue
        try:
            bench: records.Benchmark = schema.load(raw)
        except ValidationError as exc:
            errors += [RowError(index, f, m) for f, m in flatten_messages(exc.messages)]
            continue
        gpu_id = knowledge.resolve_gpu(bench.gpu)
        if gpu_id is None:
            close = knowledge.gpu_index.suggest(bench.gpu)
            hint = f"; close matches: {', '.join(close)}" if close else ""
            errors.append(RowError(index, "gpu", f"unknown GPU '{bench.gpu}'{hint}"))
        workload = knowledge.workloads.get(bench.workload)
        if workload is None or workload.kind != KIND or workload.profile is None:
            usable = sorted(
                w.id for w in knowledge.workloads.values() if w.kind == KIND and w.profile
            )
            close = difflib.get_close_matches(bench.workload, usable, n=3, cutoff=0.5)
            errors.append(
                RowError(
                    index,
                    "workload",
                    f"'{bench.workload}' is not a training workload the model can learn from; "
                    f"one of {', '.join(close or usable[:8])}",
                )
            )
        if gpu_id is None or workload is None or workload.kind != KIND:
            continue
        faults = bounds.faults(bench, knowledge.gpus[gpu_id], workload, today)
        errors += [RowError(index, f, m) for f, m in faults]
        if not faults:
            out.append(replace(bench, gpu_id=gpu_id, model=workload.model))
    return out, errors


def curated_bounds(knowledge: Knowledge) -> RowBounds:
    """The bounds ``knowledge``'s own rows give (no FLOP counts), kept with it."""
    found = knowledge.derived.get(("row-bounds", "curated"))
    if not isinstance(found, RowBounds):
        found = knowledge.derived[("row-bounds", "curated")] = RowBounds.of(knowledge)
    return found


def labelled(rows: Iterable[tuple[str, records.Benchmark]]) -> list[records.Benchmark]:
    """The submitted ``rows``, each marked with its submission id (``details.submission``:
    what tells a submitted row from a curated one)."""
    return [replace(b, details={**b.details, "submission": ident}) for ident, b in rows]


def layered(knowledge: Knowledge, rows: Iterable[tuple[str, records.Benchmark]]) -> Knowledge:
    """``knowledge`` with the submitted ``rows`` (each with its submission id) added."""
    added = labelled(rows)
    if not added:
        return knowledge
    digest = hashlib.sha256(knowledge.version.encode())
    for bench in added:
        digest.update(repr(bench).encode())
    return replace(
        knowledge,
        version=f"{knowledge.version}+s{digest.hexdigest()[:8]}",
        benchmarks=[*knowledge.benchmarks, *added],
    )


def submitted_count(knowledge: Knowledge) -> int:
    """How many of ``knowledge``'s rows were submitted (0 for the curated base)."""
    return sum(1 for b in knowledge.benchmarks if "submission" in b.details)
