"""Submitted benchmark rows, kept durably in an append-only, fsynced JSON-lines file.

Why a file and not Redis: the rows are data, not a cache. The embedded default runs
without Redis and must keep them; a Redis used as a cache may be configured to evict
keys (``maxmemory-policy``), and with its default AOF policy (``everysec``) acknowledges
a write up to a second before it is on disk. Here a batch is one ``write`` of all its
lines under an exclusive lock, followed by ``fsync``, before the 201 is sent: a batch is
on disk whole, or (after a crash in the middle of the write) its torn last line is
ignored when reading, and it was never acknowledged. Replicas share the file as they
share the keys file (one volume, ``RIGHTSIZE_SUBMISSIONS_FILE``); the file is readable
by people and by ``git diff`` when rows graduate into the curated tables.

Retraining (``rightsize retrain`` or the admin job) fits the model on the curated rows
plus every row stored so far and writes a marker beside the file (``*.trained.json``):
which rows the trained model used. Services read the marker when it changes and switch
to that model once it is built, never blocking a request on it.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import secrets
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from knowledge import Knowledge, records
from knowledge.submitted import RowError, check_rows, layered
from profiles.catalog import Catalog
from service.files import locked, write_atomically

log = logging.getLogger(__name__)
MAX_ROWS = 1000  # per batch


class RejectedBatch(ValueError):
    """A batch with at least one bad row: nothing of it was stored."""

    def __init__(self, errors: list[RowError]) -> None:
        super().__init__(f"{len(errors)} error(s) in the batch; nothing was stored")
        self.errors = errors


@dataclass(frozen=True)
class Stored:
    """One stored row: its id, its batch, who submitted it and when, and the row."""

    id: str
    batch_id: str
    submitted_by: str
    submitted_at: str
    row: dict[str, Any]

    def public(self) -> dict[str, Any]:
        return asdict(self)


class SubmissionStore:
    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.trained_path = self.path.with_name(self.path.stem + ".trained.json")
        self._lock = threading.Lock()
        self._seen: tuple[float, int] | None = None
        self._rows: list[Stored] = []
        self._checked: tuple[Any, list[tuple[str, records.Benchmark]]] | None = None

    def submit(self, knowledge: Knowledge, rows: Sequence[Any], submitted_by: str) -> list[Stored]:
        """Check every row against ``knowledge``; store all of them, or none (raises
        :class:`RejectedBatch` with every row's faults)."""
        if not rows:
            raise RejectedBatch([RowError(0, "rows", "at least one row is needed")])
        if len(rows) > MAX_ROWS:
            raise RejectedBatch([RowError(MAX_ROWS, "rows", f"at most {MAX_ROWS} rows a batch")])
        _, errors = check_rows(knowledge, rows)
        if errors:
            raise RejectedBatch(errors)
        batch = secrets.token_hex(6)
        now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        stored = [
            Stored(f"{batch}-{i}", batch, submitted_by, now, dict(row))
            for i, row in enumerate(rows)
        ]
        text = "".join(json.dumps(s.public(), sort_keys=True) + "\n" for s in stored)
        with locked(self.path):
            fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                if _torn(fd):  # a write cut short before: end its line, never join it
                    text = "\n" + text
                os.write(fd, text.encode())
                os.fsync(fd)
            finally:
                os.close(fd)
        return stored

    def all(self) -> list[Stored]:
        """Every stored row, oldest first (read again when the file changed)."""
        return self._current()[1]

    def _current(self) -> tuple[tuple[float, int] | None, list[Stored]]:
        """The file's mark (modification time and size) and its rows, read together."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return None, []
        mark = (stat.st_mtime, stat.st_size)
        with self._lock:
            if mark != self._seen:
                self._rows = self._read()
                self._seen = mark
            return self._seen, self._rows

    def benchmarks(self, knowledge: Knowledge) -> list[tuple[str, records.Benchmark]]:
        """The stored rows as benchmark records (rows that no longer check against
        ``knowledge``, e.g. after a GPU was renamed, are left out and logged); checked
        again only when the file or the knowledge changed."""
        seen, rows = self._current()
        mark = (seen, knowledge.version)
        checked = self._checked
        if checked is not None and checked[0] == mark:
            return checked[1]
        out = []
        for stored in rows:
            found, errors = check_rows(knowledge, [stored.row])
            if errors:
                log.warning("submitted row %s no longer checks: %s", stored.id, errors[0])
                continue
            out.append((stored.id, found[0]))
        self._checked = (mark, out)
        return out

    def layer(self, knowledge: Knowledge) -> Knowledge:
        """``knowledge`` with every stored row added."""
        return layered(knowledge, self.benchmarks(knowledge))

    def mark_trained(self, knowledge: Knowledge, base_version: str) -> dict[str, Any]:
        """Record that a model was fitted on ``knowledge`` (the base plus the rows)."""
        rows = sorted(b.details["submission"] for b in knowledge.benchmarks
                      if "submission" in b.details)  # fmt: skip
        marker = {
            "knowledge_version": knowledge.version,
            "base_version": base_version,
            "submitted_rows": len(rows),
            "row_ids": rows,
            "trained_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
        write_atomically(self.trained_path, json.dumps(marker, indent=1))
        return marker

    def trained(self) -> dict[str, Any] | None:
        """The marker of the last retrain, or None."""
        try:
            data = json.loads(self.trained_path.read_text(encoding="utf-8"))
        except (FileNotFoundError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _read(self) -> list[Stored]:
        out = []
        with open(self.path, encoding="utf-8", errors="replace") as lines:
            for number, line in enumerate(lines, 1):
                try:
                    out.append(Stored(**json.loads(line)))
                except (ValueError, TypeError):
                    # a torn last line of a write that never completed (never acknowledged)
                    log.warning("%s line %d is not a stored row; skipped", self.path, number)
        return out


def _torn(fd: int) -> bool:
    size = os.fstat(fd).st_size
    return size > 0 and os.pread(fd, 1, size - 1) != b"\n"


def retrain(
    base: Knowledge, catalog: Catalog, store: SubmissionStore, model_dir: Path
) -> dict[str, Any]:
    """Fit the model on the curated rows and every stored one; mark it for the services."""
    from service.engine.model import build  # scikit-learn: only where a model is fitted

    knowledge = store.layer(base)
    model = build(knowledge, catalog, model_dir)
    marker = store.mark_trained(knowledge, base.version)
    return {**marker, "built_s": round(model.built_s, 2), "rows_fitted": len(model.single)}


def validate_layer(
    base: Knowledge, catalog: Catalog, store: SubmissionStore, model_dir: Path
) -> dict[str, Any]:
    """Validate the model fitted with the stored rows (:func:`validate_knowledge`)."""
    return validate_knowledge(store.layer(base), catalog, model_dir)


def validate_knowledge(knowledge: Knowledge, catalog: Catalog, model_dir: Path) -> dict[str, Any]:
    """Validate the model fitted on ``knowledge``; the report is kept for its version
    (``GET /v1/validation`` serves it while that model is in use). Returns the figures."""
    from service.engine.model import build
    from service.engine.service import save_report
    from service.engine.validation import figures, validate

    report = validate(build(knowledge, catalog, model_dir), knowledge, catalog)
    save_report(model_dir, report)
    return {"knowledge_version": knowledge.version, "figures": figures(report)}
