"""Refreshed cloud prices: a price catalog in ``offer_prices.csv``'s columns, checked as
that file is, laid over the curated prices.

A refresh names rows by (provider, instance type, region); each replaces the curated
price of that key or adds a region, and every other price stays. Every row must parse
and name an offer that exists; one bad row rejects the whole file.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import replace
from typing import Any

from marshmallow import ValidationError
from marshmallow.fields import String

from knowledge import records
from knowledge.base import Knowledge
from knowledge.files import FileFormatError, csv_records
from knowledge.loader import flatten_messages
from knowledge.schemas import OfferPriceSchema
from knowledge.submitted import RowError

MAX_ROWS = 50_000
Priced = dict[tuple[str, str], list[records.OfferPrice]]  # (provider, instance) -> prices

COLUMNS = tuple(OfferPriceSchema().fields)
# The columns kept as text. The others must parse as numbers or ISO dates, and what does
# (``+1``, `` 1``) is inert in a spreadsheet, so the formula check would only misname their
# faults (``-`` for no spot price is "not a valid number", not a formula).
TEXT_COLUMNS = frozenset(n for n, f in OfferPriceSchema().fields.items() if isinstance(f, String))
# A spreadsheet opening the stored file runs a cell starting so as a formula (CSV injection).
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def check_prices(knowledge: Knowledge, text: str) -> tuple[Priced, list[RowError]]:
    """Parse and check a price catalog a row at a time; every fault of every row is reported
    (index: the data row, 0-based). A fault of the file itself (not CSV, a wrong header, a
    ragged row) stops the reading there, after the faults of the rows before it; more than
    :data:`MAX_ROWS` rows is the one fault reported."""
    rows = _Rows(knowledge)
    errors: list[RowError] = []
    try:
        for index, (_, raw) in enumerate(csv_records(text, columns=COLUMNS, strict=True)):
            if index == MAX_ROWS:
                # refused whole, unread: its rows' faults would only bury this one
                message = f"more than {MAX_ROWS:,} rows: expected at most {MAX_ROWS:,} rows"
                return {}, [RowError(MAX_ROWS, "(file)", message)]
            errors += rows.check(index, raw)
    except FileFormatError as exc:
        where = "(header)" if exc.row is None else "(row)"
        return {}, [*errors, RowError(exc.row or 0, where, str(exc))]
    if rows.count == 0:
        return {}, [RowError(0, "(file)", "a header and no rows: expected at least one price row")]
    return dict(rows.priced), errors


class _Rows:
    """The rows of one catalog checked so far, and the prices of those that passed."""

    def __init__(self, knowledge: Knowledge) -> None:
        self.schema = OfferPriceSchema()
        self.offers = {(o.provider, o.instance_type) for o in knowledge.offers}
        self.priced: Priced = defaultdict(list)
        self.seen: dict[tuple[str, str, str], int] = {}
        self.count = 0

    def check(self, index: int, raw: dict[str, Any]) -> list[RowError]:
        """The faults of one row (none: its price is kept)."""
        self.count += 1
        faults = _cell_faults(index, raw)
        try:
            data: dict[str, Any] = self.schema.load(raw)
        except ValidationError as exc:
            named = {f.field for f in faults}  # one fault a cell: the first check's
            pairs = flatten_messages(exc.messages)
            return faults + [RowError(index, f, m) for f, m in pairs if f not in named]
        return faults or self._add(index, data)

    def _add(self, index: int, data: dict[str, Any]) -> list[RowError]:
        key = (data.pop("provider"), data.pop("instance_type"))
        if key not in self.offers:
            message = (
                f"no offer '{key[0]}:{key[1]}': expected a known offer's provider and instance type"
            )
            return [RowError(index, "instance_type", message)]
        where = (*key, data["region"])
        if where in self.seen:
            message = f"repeats row {self.seen[where]}: expected one row an offer and region"
            return [RowError(index, "region", message)]
        self.seen[where] = index
        self.priced[key].append(records.OfferPrice(**data))
        return []


def _cell_faults(index: int, raw: dict[str, Any]) -> list[RowError]:
    """Cells that the stored file must not carry to whoever opens it."""
    faults = []
    for column, cell in raw.items():
        if cell is None:
            continue
        if "\x00" in cell:
            message = "contains a NUL character: expected plain UTF-8 text (a UTF-16 file?)"
            faults.append(RowError(index, column, message))
        elif column in TEXT_COLUMNS and cell.startswith(FORMULA_STARTS):
            message = (
                f"a cell may not start with {cell[0]!r}: a spreadsheet would run it as a "
                "formula; expected text that starts with none of = + - @, a tab or a CR"
            )
            faults.append(RowError(index, column, message))
    return faults


def with_prices(knowledge: Knowledge, priced: Priced) -> Knowledge:
    """``knowledge`` with the refreshed prices laid over its offers'."""
    if not priced:
        return knowledge
    digest = hashlib.sha256(knowledge.version.encode())
    offers = []
    for offer in knowledge.offers:
        fresh = priced.get((offer.provider, offer.instance_type))
        if not fresh:
            offers.append(offer)
            continue
        digest.update(repr((offer.id, fresh)).encode())
        regions = {p.region: p for p in offer.prices} | {p.region: p for p in fresh}
        ordered = tuple(sorted(regions.values(), key=lambda p: p.region))
        offers.append(replace(offer, prices=ordered))
    version = f"{knowledge.version}+p{digest.hexdigest()[:8]}"
    return replace(knowledge, version=version, offers=offers)
