"""Reading knowledge data files: YAML lists and CSV tables, with row positions for errors."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml


class _Loader(yaml.CSafeLoader):
    """Safe YAML loader that leaves dates as strings, so marshmallow parses them."""


_Loader.yaml_implicit_resolvers = {
    key: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for key, resolvers in yaml.CSafeLoader.yaml_implicit_resolvers.items()
}


class FileFormatError(ValueError):
    """A file that cannot be read as the expected list of records."""


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


def csv_records(text: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """The rows of a CSV table as dicts (empty cells become None), labelled ``row N (line M)``."""
    reader = csv.DictReader(io.StringIO(text))
    if not reader.fieldnames:
        raise FileFormatError("empty CSV file: expected a header row")
    for index, row in enumerate(reader):
        if None in row:
            raise FileFormatError(
                f"row {index + 1} (line {reader.line_num}) has more cells than the header"
            )
        yield (
            f"row {index + 1} (line {reader.line_num})",
            {k: (v if v != "" else None) for k, v in row.items()},
        )


def read_text(path: Path) -> str:
    return path.read_text(encoding="utf-8")
