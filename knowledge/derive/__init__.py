"""Derive the project's own knowledge tables from the raw public data in ``../shared/data``.

Each submodule exposes ``derive(shared: Path) -> Derived``: the rows of each output table
(already in the project's schema, with ``source`` and ``as_of``/``catalog_date`` columns)
and a report of every source row it left out, with the reason. Nothing is left out
silently. ``python -m knowledge.derive`` writes the tables under ``knowledge/data``;
``--check`` only compares them with the files on disk (used by a test).
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Derived:
    """Output of one derivation: tables by relative path, and excluded source rows."""

    tables: dict[str, tuple[list[str], list[dict[str, object]]]] = field(default_factory=dict)
    excluded: list[str] = field(default_factory=list)

    def add_table(self, relpath: str, columns: list[str], rows: list[dict[str, object]]) -> None:
        self.tables[relpath] = (columns, rows)

    def exclude(self, where: str, why: str) -> None:
        self.excluded.append(f"{where}: {why}")


def render_csv(columns: list[str], rows: list[dict[str, object]]) -> str:
    """Render rows as CSV text with a fixed column order and ``\\n`` line ends."""
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n", extrasaction="raise")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row.get(k)) for k in columns})
    return buf.getvalue()


def _cell(value: object) -> object:
    if value is None:
        return ""
    if isinstance(value, float):
        return (
            repr(round(value, 6)).removesuffix(".0")
            if value == int(value)
            else repr(round(value, 6))
        )
    return value


def default_shared_root() -> Path:
    """``$RIGHTSIZE_SHARED_DATA``, else ``../shared/data`` beside the checkout (where CI keeps
    the raw public data)."""
    override = os.environ.get("RIGHTSIZE_SHARED_DATA")
    if override:
        return Path(override)
    return Path(__file__).resolve().parents[2].parent / "shared" / "data"
