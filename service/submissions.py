"""Submitted benchmark rows, kept durably in an append-only, fsynced JSON-lines file.

Why a file and not Redis: the rows are data, not a cache. The embedded default runs
without Redis and must keep them; a Redis used as a cache may be configured to evict
keys (``maxmemory-policy``), and with its default AOF policy (``everysec``) acknowledges
a write up to a second before it is on disk. Replicas share the file as they share the
keys file (one volume, ``RIGHTSIZE_SUBMISSIONS_FILE``); it is readable by people and by
``git diff`` when rows graduate into the curated tables.

A batch is written under an exclusive lock, every byte (a short write is continued, a
failed one undone: the file is cut back to where it was) and fsynced before the 201; if
the disk or the file-size limit refuses it, nothing of it stays and the caller hears so
(:class:`service.infra.files.StoreFull`). Each line carries its batch's row count, so that a
reader serves a batch only when all of it is there: a batch a crash cut short, never
acknowledged, is never served, and the next write removes it.

A row is its sender's (the key's id is stored with it): listed and read by that key and
the administrators, and by everyone when it was sent shared (``share``), then without who
sent it (:meth:`Stored.visible_to`, :meth:`Stored.seen_by`). Rows stored before the choice
existed are not shared.

Quotas (:class:`Quotas`): rows a batch, rows a key a day (UTC), rows and bytes in all.
Readers keep an index of the file (rows, batches, rows by key and day) and read only what
was appended since they last looked; the rows' checks against the knowledge are kept the
same way.

Retraining (``rightsize retrain`` or the admin job) fits the model on the curated rows
plus every stored row that still checks (a row stored before a bound it breaks is skipped
and reported, never fitted) and writes a marker beside the file (``*.trained.json``):
which rows the trained model used. Services read the marker when it changes and switch
to that model once it is built, never blocking a request on it.
"""

from __future__ import annotations

import datetime as dt
import errno
import json
import logging
import os
import secrets
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from knowledge import Knowledge, records
from knowledge.row_bounds import RowBounds
from knowledge.submitted import RowError, check_rows, layered
from profiles.model_catalog import Catalog
from service.engine.owners import Reader
from service.infra.files import (
    FULL,
    FileTooLarge,
    StoreFull,
    locked,
    read_bounded,
    write_atomically,
)

log = logging.getLogger(__name__)
MAX_ROWS = 1000  # per batch
READ_CHUNK = 8 * 2**20
MARKER_MAX_BYTES = 64 * 2**20  # the retrain marker lists the ids of the rows it used


class RejectedBatch(ValueError):
    """A batch with at least one bad row: nothing of it was stored."""

    def __init__(self, errors: list[RowError]) -> None:
        super().__init__(f"{len(errors)} error(s) in the batch; nothing was stored")
        self.errors = errors


class RetrainFailed(RuntimeError):
    """The refit raised: no marker was written, so the services keep the model they use."""


class OverQuota(Exception):
    """The key has sent its rows for the day; ``retry_after_s``: until the next UTC day."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Quotas:
    rows_per_key_per_day: int = 10_000
    rows: int = 100_000
    bytes: int = 128 * 2**20
    # a key's rows in all, below the store's: ten write keys filled 100,000 rows in 14 s,
    # and every key got 507 from then on
    rows_per_key: int = 10_000

    @classmethod
    def of(cls, settings: Mapping[str, Any]) -> Quotas:
        """The quotas the service's settings give (``RIGHTSIZE_SUBMISSIONS_*``)."""
        return cls(
            settings["RIGHTSIZE_SUBMISSIONS_PER_KEY_PER_DAY"],
            settings["RIGHTSIZE_SUBMISSIONS_MAX_ROWS"],
            settings["RIGHTSIZE_SUBMISSIONS_MAX_BYTES"],
            settings["RIGHTSIZE_SUBMISSIONS_MAX_ROWS_PER_KEY"],
        )


@dataclass(frozen=True)
class Stored:
    """One stored row: its id, its batch, who submitted it and when, the row, and whether
    its sender shared it with everyone (rows stored before the choice existed: not)."""

    id: str
    batch_id: str
    submitted_by: str
    submitted_at: str
    row: dict[str, Any]
    shared: bool = False

    def public(self) -> dict[str, Any]:
        return asdict(self)

    def visible_to(self, reader: Reader) -> bool:
        """Whether ``reader`` may see the row: its sender and the administrators, and
        everyone when it is shared."""
        return self.shared or reader.may_read(self.submitted_by)

    def seen_by(self, reader: Reader) -> dict[str, Any]:
        """The row as ``reader`` sees it: who sent it is told to the sender and the
        administrators alone."""
        out = self.public()
        if not reader.may_read(self.submitted_by):
            del out["submitted_by"]
        return out


@dataclass(frozen=True)
class SkippedRow:
    """A stored row a refit leaves out, and why (its faults against today's checks)."""

    id: str
    reason: str


@dataclass
class _Index:
    """What a reader knows of the file: the whole batches up to ``offset`` (bytes read),
    the rows of a batch still being written (or cut short), and the counts the quotas read."""

    inode: int = -1
    offset: int = 0  # bytes read: up to the end of the last whole line
    whole: int = 0  # bytes up to the end of the last whole batch
    generation: int = 0  # changes when the file was read again from its start
    rows: list[Stored] = field(default_factory=list)
    batches: dict[str, tuple[int, int]] = field(default_factory=dict)  # id -> (first, n)
    per_key_day: Counter[tuple[str, str]] = field(default_factory=Counter)
    per_key: Counter[str] = field(default_factory=Counter)
    pending: list[tuple[Stored, int]] = field(default_factory=list)  # (row, its batch's rows)


# (file generation, knowledge version), rows checked, the rows that check, those skipped
_Checked = tuple[tuple[int, str], int, list[tuple[str, records.Benchmark]], list[SkippedRow]]


class SubmissionStore:
    def __init__(self, path: Path | str, quotas: Quotas | None = None) -> None:
        self.path = Path(path)
        self.trained_path = self.path.with_name(self.path.stem + ".trained.json")
        self.quotas = quotas or Quotas()
        self._lock = threading.Lock()
        self._index = _Index()
        self._checked: _Checked | None = None

    def submit(
        self, knowledge: Knowledge, rows: Sequence[Any], submitted_by: str, shared: bool = False
    ) -> list[Stored]:
        """Check every row against ``knowledge``; store all of them, or none (raises
        :class:`RejectedBatch` with every row's faults, :class:`OverQuota`, or
        :class:`service.infra.files.StoreFull` past the store's quotas or the disk's room).
        ``shared``: every key may see the rows, not only ``submitted_by`` and admins."""
        if not rows:
            raise RejectedBatch([RowError(0, "rows", "at least one row is needed")])
        if len(rows) > MAX_ROWS:
            raise RejectedBatch([RowError(MAX_ROWS, "rows", f"at most {MAX_ROWS} rows a batch")])
        _, errors = check_rows(knowledge, rows, row_bounds(knowledge))
        if errors:
            raise RejectedBatch(errors)
        batch = secrets.token_hex(6)
        now = dt.datetime.now(dt.UTC)
        stamp = now.isoformat(timespec="seconds")
        stored = [
            Stored(f"{batch}-{i}", batch, submitted_by, stamp, dict(row), shared)
            for i, row in enumerate(rows)
        ]
        text = "".join(
            json.dumps({**s.public(), "batch_rows": len(stored)}, sort_keys=True) + "\n"
            for s in stored
        ).encode()
        with locked(self.path), self._lock:  # other processes, and this one's readers
            index = self._sync()
            self._within_quotas(index, submitted_by, len(stored), len(text), now)
            _append(self.path, text, index.whole)
        return stored

    def _within_quotas(
        self, index: _Index, key: str, rows: int, size: int, now: dt.datetime
    ) -> None:
        quotas = self.quotas
        today = now.date().isoformat()
        sent = index.per_key_day[(key, today)]
        if sent + rows > quotas.rows_per_key_per_day:
            tomorrow = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), dt.UTC)
            raise OverQuota(
                f"key {key} has stored {sent} rows today (UTC) and may store "
                f"{quotas.rows_per_key_per_day} a day; this batch has {rows}: nothing was "
                "stored",
                max(1, int((tomorrow - now).total_seconds())),
            )
        if index.per_key[key] + rows > quotas.rows_per_key:
            raise StoreFull(
                f"key {key} has stored {index.per_key[key]} rows of the {quotas.rows_per_key} "
                f"a key may keep; this batch has {rows}: nothing was stored (an administrator "
                "can raise RIGHTSIZE_SUBMISSIONS_MAX_ROWS_PER_KEY)"
            )
        if len(index.rows) + rows > quotas.rows:
            raise StoreFull(
                f"the store holds {len(index.rows)} rows of its {quotas.rows}; this batch has "
                f"{rows}: nothing was stored (an administrator can raise "
                "RIGHTSIZE_SUBMISSIONS_MAX_ROWS)"
            )
        if index.whole + size > quotas.bytes:
            raise StoreFull(
                f"the store holds {index.whole} bytes of its {quotas.bytes}; this batch is "
                f"{size}: nothing was stored (an administrator can raise "
                "RIGHTSIZE_SUBMISSIONS_MAX_BYTES)"
            )

    def all(self) -> list[Stored]:
        """Every stored row of every whole batch, oldest first."""
        with self._lock:
            return self._sync().rows

    def batch(self, batch_id: str) -> list[Stored]:
        """The rows of one whole batch ([] if there is none of that id)."""
        with self._lock:
            index = self._sync()
            first, count = index.batches.get(batch_id, (0, 0))
            return index.rows[first : first + count]

    def benchmarks(self, knowledge: Knowledge) -> list[tuple[str, records.Benchmark]]:
        """The stored rows as benchmark records, those that check (:meth:`checked`)."""
        return self.checked(knowledge)[0]

    def checked(
        self, knowledge: Knowledge
    ) -> tuple[list[tuple[str, records.Benchmark]], list[SkippedRow]]:
        """The stored rows as benchmark records, and those left out: rows that no longer
        check against ``knowledge`` (a GPU renamed; a row stored before a bound it breaks,
        :mod:`knowledge.row_bounds`), logged. Only rows appended since the last call are
        checked, unless the file or the knowledge changed otherwise."""
        with self._lock:
            index = self._sync()
            rows, generation = index.rows, index.generation
            mark = (generation, knowledge.version)
            checked = self._checked
            if checked is None or checked[0] != mark:
                checked = (mark, 0, [], [])
            _, done, out, skipped = checked
            if done == len(rows):
                return out, skipped
            out, skipped = list(out), list(skipped)  # lists handed out before stay as they were
            bounds = row_bounds(knowledge)
            for stored in rows[done:]:
                found, errors = check_rows(knowledge, [stored.row], bounds)
                if errors:
                    reason = "; ".join(f"{e.field}: {e.message}" for e in errors)
                    log.warning("submitted row %s no longer checks: %s", stored.id, reason)
                    skipped.append(SkippedRow(stored.id, reason))
                    continue
                out.append((stored.id, found[0]))
            self._checked = (mark, len(rows), out, skipped)
            return out, skipped

    def visible(self, knowledge: Knowledge, reader: Reader) -> list[tuple[str, records.Benchmark]]:
        """The rows of :meth:`benchmarks` that ``reader`` may see (:meth:`Stored.visible_to`);
        a retrain fits every row, seen or not."""
        seen = {s.id for s in self.all() if s.visible_to(reader)}
        return [(ident, bench) for ident, bench in self.benchmarks(knowledge) if ident in seen]

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
            data = json.loads(read_bounded(self.trained_path, MARKER_MAX_BYTES))
        except (FileNotFoundError, ValueError):
            return None
        except FileTooLarge as exc:
            log.warning("%s: not used", exc)
            return None
        return data if isinstance(data, dict) else None

    def _sync(self) -> _Index:
        """The index brought up to the file: what was appended is read (from where the
        last read ended), anything else (a new file, one cut back) from the start. Called
        under ``self._lock`` or the file's lock."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            if self._index.inode != -1:
                self._index = _Index(generation=self._index.generation + 1)
            return self._index
        index = self._index
        # rows of a batch not yet whole are read again: a writer may have cut them away
        index.offset = index.whole
        index.pending.clear()
        if stat.st_ino != index.inode or stat.st_size < index.offset:
            index = self._index = _Index(inode=stat.st_ino, generation=index.generation + 1)
        if stat.st_size > index.offset:
            with open(self.path, "rb") as source:
                source.seek(index.offset)
                carried = b""
                left = stat.st_size - index.offset
                while left > 0 and (chunk := source.read(min(READ_CHUNK, left))):
                    left -= len(chunk)
                    carried += chunk
                    carried = carried[_read_lines(self.path, carried, index) :]
        return index


def _read_lines(path: Path, data: bytes, index: _Index) -> int:
    """Add the whole lines of ``data`` (read from ``index.offset``) to ``index``, and say
    how many bytes they took; a batch's rows join the index when the last is there."""
    end = data.rfind(b"\n") + 1  # a line still being written (or torn) waits
    position = index.offset
    for line in data[:end].splitlines(keepends=True):
        position += len(line)
        try:
            stored, count = _parsed(line)
        except (ValueError, TypeError, KeyError):
            # a torn line of a write that never completed (never acknowledged)
            log.warning("%s at byte %d: not a stored row; skipped", path, position - len(line))
            index.pending.clear()
            index.whole = position  # read past for good
            continue
        if index.pending and index.pending[0][0].batch_id != stored.batch_id:
            index.pending.clear()  # a batch cut short, then another: the first never whole
        index.pending.append((stored, count))
        if len(index.pending) >= count:
            first = len(index.rows)
            batch = [s for s, _ in index.pending]
            index.rows.extend(batch)
            known = index.batches.get(stored.batch_id)
            if known is not None and sum(known) == first:  # rows stored a line a batch before
                first, batch_size = known[0], known[1] + len(batch)
            else:
                batch_size = len(batch)
            index.batches[stored.batch_id] = (first, batch_size)
            for s in batch:
                index.per_key_day[(s.submitted_by, s.submitted_at[:10])] += 1
                index.per_key[s.submitted_by] += 1
            index.pending.clear()
            index.whole = position
    index.offset += end
    return end


def _parsed(line: bytes) -> tuple[Stored, int]:
    data = json.loads(line)
    count = int(data.pop("batch_rows", 1))  # rows stored before batches said their size
    return Stored(**data), count


def _append(path: Path, text: bytes, whole: int) -> None:
    """Append ``text`` after the last whole batch (a batch cut short after it is removed),
    every byte and fsynced, or nothing: the file is cut back to where it was."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        size = os.fstat(fd).st_size
        if size != whole:  # the end of a write that never completed (never acknowledged)
            log.warning("%s: removing %d bytes of a batch cut short", path, size - whole)
            os.ftruncate(fd, whole)
        try:
            written = 0
            while written < len(text):
                done = os.pwrite(fd, text[written:], whole + written)
                if done == 0:
                    raise OSError(errno.ENOSPC, "the file takes no more bytes")
                written += done
            os.fsync(fd)
        except OSError as exc:
            os.ftruncate(fd, whole)
            os.fsync(fd)
            if exc.errno in FULL:
                raise StoreFull(
                    f"the submissions file cannot grow ({os.strerror(exc.errno or 0)}): "
                    "nothing was stored"
                ) from None
            raise
    finally:
        os.close(fd)


def row_bounds(knowledge: Knowledge) -> RowBounds:
    """The bounds a submitted row is held to: the curated rows' and the benchmarked
    workloads' FLOPs from their shipped step profiles, kept with ``knowledge`` (every
    process reckons them alike, so that a retrain and the services skip the same rows)."""
    from service.engine.estimating.observations import training_flops_per_unit  # profiles: torch

    found = knowledge.derived.get(("row-bounds", "shipped"))
    if not isinstance(found, RowBounds):
        found = RowBounds.of(knowledge, training_flops_per_unit(knowledge))
        knowledge.derived[("row-bounds", "shipped")] = found
    return found


def retrain(
    base: Knowledge, catalog: Catalog, store: SubmissionStore, model_dir: Path
) -> dict[str, Any]:
    """Fit the model on the curated rows and every stored one that checks; mark it for the
    services. ``skipped`` lists the stored rows left out, and why. A fit that raises
    raises :class:`RetrainFailed` and marks nothing: the services keep their model."""
    from service.engine.estimating.model import build  # scikit-learn: only where a model is fitted

    rows, skipped = store.checked(base)
    knowledge = layered(base, rows)
    try:
        model = build(knowledge, catalog, model_dir)
    except Exception as exc:
        reason = " ".join(f"{type(exc).__name__}: {exc}".split())  # one line
        raise RetrainFailed(
            f"the refit on knowledge {knowledge.version} failed ({reason}); nothing was "
            "marked, the services keep the model they use"
        ) from exc
    marker = store.mark_trained(knowledge, base.version)
    return {
        **marker,
        "built_s": round(model.built_s, 2),
        "rows_fitted": len(model.single),
        "skipped": [asdict(s) for s in skipped],
    }


def validate_layer(
    base: Knowledge, catalog: Catalog, store: SubmissionStore, model_dir: Path
) -> dict[str, Any]:
    """Validate the model fitted with the stored rows (:func:`validate_knowledge`)."""
    return validate_knowledge(store.layer(base), catalog, model_dir)


def validate_knowledge(knowledge: Knowledge, catalog: Catalog, model_dir: Path) -> dict[str, Any]:
    """Validate the model fitted on ``knowledge``; the report is kept for its version
    (``GET /v1/validation`` serves it while that model is in use). Returns the figures."""
    from service.engine.estimating.model import build
    from service.engine.estimating.on_request import save_report
    from service.engine.validating.validation import figures, validate

    report = validate(build(knowledge, catalog, model_dir), knowledge, catalog)
    save_report(model_dir, report)
    return {"knowledge_version": knowledge.version, "figures": figures(report)}
