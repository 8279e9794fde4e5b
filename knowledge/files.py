"""Reading knowledge data files: YAML lists and CSV tables, with row positions for errors."""

from __future__ import annotations

import csv
import io
import itertools
from collections import Counter
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

if TYPE_CHECKING:
    from _csv import Reader


class _Loader(yaml.CSafeLoader):
    """Safe YAML loader that leaves dates as strings, so marshmallow parses them."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.CSafeLoader.yaml_implicit_resolvers.items()
}


class FileFormatError(ValueError):
    """A file that cannot be read as the expected list of records. ``row``: the data row at
    fault in a CSV table (0-based), None when it is the file or its header."""

    def __init__(self, message: str, row: int | None = None) -> None:
        super().__init__(message)
        self.row = row


def yaml_records(text: str) -> list[tuple[str, Any]]:
    """The records of a YAML list, each with a position label such as ``record 3 (line 41)``."""
    try:
        data = yaml.load(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        raise FileFormatError(f"not valid YAML: {exc}") from exc
    if not isinstance(data, list):
        raise FileFormatError("expected a YAML list of records at the top level")
    lines = _item_lines(text)
    return [
        (f"record {i + 1}" + (f" (line {lines[i]})" if i < len(lines) else ""), item)
        for i, item in enumerate(data)
    ]


def _item_lines(text: str) -> list[int]:
    node = yaml.compose(text, Loader=_Loader)
    if not isinstance(node, yaml.SequenceNode):
        return []
    return [item.start_mark.line + 1 for item in node.value]


def csv_records(
    text: str, *, columns: Collection[str] | None = None, strict: bool = False
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The rows of a CSV table as dicts (empty cells become None), labelled ``row N (line M)``,
    read one at a time, so that a caller may stop early; blank lines are skipped.

    A row with more cells than the header is a :class:`FileFormatError`, and so is text
    that is not CSV. ``strict``: so are a row with fewer cells (else they become None), a
    quote left open and text after a closing quote. ``columns``: the header must name each
    of them once, and nothing else.
    """
    reader = csv.reader(io.StringIO(text), strict=strict)
    header = _next(reader, None)
    if not header:
        raise FileFormatError("empty CSV file or a blank first line: expected a header row")
    if columns is not None:
        _check_header(header, columns)
    index = 0
    while (cells := _next(reader, index)) is not None:
        if not cells:
            continue
        label = f"row {index + 1} (line {reader.line_num})"
        yield label, _record(header, cells, label, index, strict)
        index += 1


def _next(reader: Reader, row: int | None) -> list[str] | None:
    """The next record of ``reader`` (None at the end; ``row``: its index, None for the
    header), the csv module's errors made ours."""
    try:
        return next(reader, None)
    except csv.Error as exc:
        where = "the header" if row is None else f"row {row + 1}"
        raise _not_csv(exc, f"{where} (line {reader.line_num})", row) from exc


def _record(
    header: list[str], cells: list[str], label: str, index: int, strict: bool
) -> dict[str, Any]:
    width = len(header)
    if len(cells) > width or (len(cells) < width and strict):
        more = "more" if len(cells) > width else "fewer"
        raise FileFormatError(
            f"{label} has {len(cells)} cells, {more} than the {width} columns of the header: "
            "expected one cell a column (an empty one for no value)",
            index,
        )
    return {k: (v if v != "" else None) for k, v in itertools.zip_longest(header, cells)}


def _check_header(header: list[str], columns: Collection[str]) -> None:
    counts = Counter(header)
    faults = [
        f"{what} {_some(names)}"
        for what, names in (
            ("missing", [c for c in columns if c not in counts]),
            ("unknown", [c for c in counts if c not in columns]),
            ("repeated", [c for c, n in counts.items() if n > 1]),
        )
        if names
    ]
    if faults:
        raise FileFormatError(
            f"the header (line 1) has columns {'; '.join(faults)}: expected a header row "
            f"naming each of {', '.join(columns)} once"
        )


def _some(names: list[str], shown: int = 5) -> str:
    """A few names, quoted (a stray NUL or BOM shows), not all of a huge header."""
    more = f" and {len(names) - shown:,} more" if len(names) > shown else ""
    return ", ".join(repr(n[:40]) for n in names[:shown]) + more


def _not_csv(exc: csv.Error, where: str, row: int | None) -> FileFormatError:
    """The csv module's error, reworded to say what a reader of the file should fix."""
    # csv.Error has no codes, only CPython's wording; one not known here is passed on whole
    reason = str(exc)
    if "unexpected end of data" in reason:
        reason = "a quoted cell is never closed: expected a closing quote before the end"
    elif "expected after" in reason:
        reason = (
            "text after a closing quote: expected a comma or the end of the line after it "
            '(a quote inside a quoted cell is written twice: "")'
        )
    elif "new-line character" in reason:
        reason = (
            "a carriage return (CR) outside quotes that is not part of a CRLF line end: "
            "expected LF or CRLF line endings (not old Mac CR), and CRs only in quoted cells"
        )
    elif "field larger than field limit" in reason:
        reason = (
            f"a cell longer than {csv.field_size_limit():,} characters: expected shorter "
            "cells (a quote never closed?)"
        )
    else:
        reason = f"not valid CSV ({reason})"
    return FileFormatError(f"{where}: {reason}", row)


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")
