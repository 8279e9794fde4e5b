"""A price catalog (``PUT /v1/offers/prices``, ``rightsize prices refresh``) that is not the
CSV it should be is refused row by row, never a crash: line endings, huge cells, NULs,
headers, ragged rows, too many rows, and cells a spreadsheet would run as formulas."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from knowledge import Knowledge
from knowledge.files import FileFormatError, csv_records
from knowledge.prices import COLUMNS, MAX_ROWS, check_prices

HEADER = ",".join(COLUMNS)
Row = list[str]  # a good row's cells, as CSV text


@pytest.fixture(scope="module")
def good(knowledge: Knowledge) -> Row:
    offer = knowledge.offers[0]
    region = offer.prices[0].region
    return [offer.provider, offer.instance_type, region, "0.5", "", "", "2026-12-01", "test"]


def _with(row: Row, column: str, text: str) -> str:
    """``row`` as a CSV line, its cell in ``column`` written as ``text``."""
    cells = list(row)
    cells[COLUMNS.index(column)] = text
    return ",".join(cells)


def _file(*lines: str, end: str = "\n") -> str:
    return "".join(line + end for line in lines)


def _faults(knowledge: Knowledge, text: str) -> list[tuple[int, str, str]]:
    priced, errors = check_prices(knowledge, text)
    assert not (priced and errors)
    return [(e.index, e.field, e.message) for e in errors]


@pytest.mark.parametrize("end", [pytest.param("\n", id="lf"), pytest.param("\r\n", id="crlf")])
def test_a_good_catalog_passes(knowledge: Knowledge, good: Row, end: str) -> None:
    priced, errors = check_prices(knowledge, _file(HEADER, ",".join(good), end=end))
    assert errors == []
    assert sum(len(p) for p in priced.values()) == 1


BAD = [  # (make the text from a good row, the index, field and message refused)
    pytest.param(
        lambda row: _file(HEADER, ",".join(row), end="\r"),
        0,
        "(header)",
        "the header (line 1): a carriage return (CR) outside quotes that is not part of a "
        "CRLF line end: expected LF or CRLF line endings",
        id="bare-cr-line-ends",
    ),
    pytest.param(
        lambda row: _file(HEADER, ",".join(row), ",".join(row) + "\r" + ",".join(row)),
        1,
        "(row)",
        "row 2 (line 3): a carriage return (CR) outside quotes",
        id="a-stray-cr",
    ),
    pytest.param(
        lambda row: _file(HEADER, ",".join(row), _with(row, "source", "x" * 131_073)),
        1,
        "(row)",
        "row 2 (line 3): a cell longer than 131,072 characters: expected shorter cells",
        id="a-cell-over-the-csv-limit",
    ),
    pytest.param(
        lambda row: _file(HEADER, _with(row, "source", '"never closed')),
        0,
        "(row)",
        "a quoted cell is never closed: expected a closing quote",
        id="an-open-quote",
    ),
    pytest.param(
        lambda row: _file(HEADER, _with(row, "source", '"test" catalog')),
        0,
        "(row)",
        "text after a closing quote: expected a comma or the end of the line",
        id="text-after-a-quote",
    ),
    pytest.param(
        lambda row: _file(HEADER, _with(row, "source", "te\x00st")),
        0,
        "source",
        "contains a NUL character: expected plain UTF-8 text",
        id="a-nul",
    ),
    pytest.param(
        lambda row: _file(HEADER.replace("source", "sou\x00rce"), ",".join(row)),
        0,
        "(header)",
        "missing 'source'; unknown 'sou\\x00rce': expected a header row naming each of",
        id="a-nul-in-the-header",
    ),
    pytest.param(
        lambda row: "",
        0,
        "(header)",
        "empty CSV file or a blank first line: expected a header row",
        id="an-empty-file",
    ),
    pytest.param(
        lambda row: _file(HEADER),
        0,
        "(file)",
        "a header and no rows: expected at least one price row",
        id="a-header-only",
    ),
    pytest.param(
        lambda row: _file(",".join(row), ",".join(row)),
        0,
        "(header)",
        "the header (line 1) has columns missing 'provider', 'instance_type'",
        id="no-header",
    ),
    pytest.param(
        lambda row: _file(HEADER + ",source", ",".join(row) + ",again"),
        0,
        "(header)",
        "repeated 'source': expected a header row naming each of provider, instance_type",
        id="a-repeated-column",
    ),
    pytest.param(
        lambda row: _file(HEADER, ",".join(row) + ",extra"),
        0,
        "(row)",
        "row 1 (line 2) has 9 cells, more than the 8 columns of the header: expected one "
        "cell a column",
        id="a-long-row",
    ),
    pytest.param(
        lambda row: _file(HEADER, ",".join(row), ",".join(row[:-1])),
        1,
        "(row)",
        "row 2 (line 3) has 7 cells, fewer than the 8 columns of the header: expected one "
        "cell a column",
        id="a-short-row",
    ),
    pytest.param(
        lambda row: _file(HEADER, _with(row, "source", '"=HYPERLINK(""http://x"",""y"")"')),
        0,
        "source",
        "a cell may not start with '=': a spreadsheet would run it as a formula; expected "
        "text that starts with none of = + - @, a tab or a CR",
        id="a-hyperlink-formula",
    ),
    pytest.param(
        lambda row: _file(HEADER, _with(row, "source", "@SUM(A1)")),
        0,
        "source",
        "a cell may not start with '@'",
        id="an-at-formula",
    ),
    pytest.param(
        lambda row: _file(HEADER, _with(row, "source", "-2+3+cmd|' /C calc'!A0")),
        0,
        "source",
        "a cell may not start with '-'",
        id="a-minus-formula",
    ),
    pytest.param(
        lambda row: _file(HEADER, _with(row, "source", '"\ttest"')),
        0,
        "source",
        "a cell may not start with '\\t'",
        id="a-tab-first",
    ),
    pytest.param(
        lambda row: _file(HEADER, _with(row, "source", '"\rtest"')),
        0,
        "source",
        "a cell may not start with '\\r'",
        id="a-cr-first",
    ),
    pytest.param(
        lambda row: _file(HEADER, _with(row, "region", "+us-east-1")),
        0,
        "region",
        "a cell may not start with '+'",
        id="a-formula-region",
    ),
    pytest.param(
        lambda row: _file(HEADER, _with(row, "instance_type", "=1+1")),
        0,
        "instance_type",
        "a cell may not start with '='",
        id="a-formula-instance-type",
    ),
    # the number and date columns need no formula check: a formula is no number
    pytest.param(
        lambda row: _file(HEADER, _with(row, "on_demand_usd_per_hour", "=1+1")),
        0,
        "on_demand_usd_per_hour",
        "Not a valid number.",
        id="a-formula-price",
    ),
    pytest.param(
        lambda row: _file(HEADER, _with(row, "spot_usd_per_hour", "-")),
        0,
        "spot_usd_per_hour",
        "Not a valid number.",
        id="a-dash-for-no-spot-price",
    ),
    pytest.param(
        lambda row: _file(HEADER, _with(row, "on_demand_usd_per_hour", "-4")),
        0,
        "on_demand_usd_per_hour",
        "Must be greater than 0",
        id="a-negative-price",
    ),
    pytest.param(
        lambda row: _file(HEADER, _with(row, "catalog_date", "@2026-12-01")),
        0,
        "catalog_date",
        "Not a valid date.",
        id="a-formula-date",
    ),
]


@pytest.mark.parametrize(("make", "index", "field", "expected"), BAD)
def test_a_bad_catalog_is_refused_by_row_and_field(
    knowledge: Knowledge,
    good: Row,
    make: Callable[[Row], str],
    index: int,
    field: str,
    expected: str,
) -> None:
    faults = _faults(knowledge, make(good))
    assert len(faults) == 1, faults
    assert faults[0][:2] == (index, field)
    assert expected in faults[0][2]


def test_a_number_column_may_hold_a_signed_number(knowledge: Knowledge, good: Row) -> None:
    priced, errors = check_prices(
        knowledge, _file(HEADER, _with(good, "spot_usd_per_hour", "+0.2"))
    )
    assert errors == []
    assert next(iter(priced.values()))[0].spot_usd_per_hour == 0.2


def test_the_faults_of_rows_before_a_broken_one_are_kept(knowledge: Knowledge, good: Row) -> None:
    text = _file(HEADER, _with(good, "source", "=1"), ",".join(good), ",".join(good) + ",x")
    assert [f[:2] for f in _faults(knowledge, text)] == [(0, "source"), (2, "(row)")]


@pytest.mark.slow  # a file of eight million rows
def test_eight_million_rows_are_refused_unread(knowledge: Knowledge) -> None:
    # empty cells make full-width rows: a short row would be refused before the count
    text = HEADER + "\n" + ",,,,,,,\n" * 8_000_000
    faults = _faults(knowledge, text)
    assert faults == [(MAX_ROWS, "(file)", "more than 50,000 rows: expected at most 50,000 rows")]


@pytest.mark.slow  # the most rows allowed
def test_as_many_rows_as_allowed_pass(knowledge: Knowledge, good: Row) -> None:
    rows = [_with(good, "region", f"r{i}") for i in range(MAX_ROWS)]
    priced, errors = check_prices(knowledge, _file(HEADER, *rows))
    assert errors == []
    assert len(priced[(good[0], good[1])]) == MAX_ROWS


def test_the_knowledge_files_reader_stays_lenient() -> None:
    # the curated tables load as before: a short row pads with None, a stray quote stays
    assert list(csv_records('a,b,c\n1\n\n2,"x"y,\n')) == [
        ("row 1 (line 2)", {"a": "1", "b": None, "c": None}),
        ("row 2 (line 4)", {"a": "2", "b": "xy", "c": None}),
    ]
    with pytest.raises(FileFormatError, match=r"row 1 \(line 2\): a carriage return"):
        list(csv_records("a,b\n1,2\r3,4\n"))
