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

from knowledge import records
from knowledge.catalog import Knowledge
from knowledge.files import FileFormatError, csv_records
from knowledge.loader import flatten_messages
from knowledge.schemas import OfferPriceSchema
from knowledge.submitted import RowError

MAX_ROWS = 50_000
Priced = dict[tuple[str, str], list[records.OfferPrice]]  # (provider, instance) -> prices


def check_prices(knowledge: Knowledge, text: str) -> tuple[Priced, list[RowError]]:
    """Parse and check a price catalog; every fault of every row is reported (index: the
    data row, 0-based)."""
    schema = OfferPriceSchema()
    offers = {(o.provider, o.instance_type) for o in knowledge.offers}
    out: Priced = defaultdict(list)
    errors: list[RowError] = []
    seen: dict[tuple[str, str, str], int] = {}
    try:
        rows = list(csv_records(text))
    except FileFormatError as exc:
        return {}, [RowError(0, "(file)", str(exc))]
    if not rows:
        return {}, [RowError(0, "(file)", "no price rows")]
    if len(rows) > MAX_ROWS:
        return {}, [RowError(MAX_ROWS, "(file)", f"at most {MAX_ROWS} rows")]
    for index, (_, raw) in enumerate(rows):
        try:
            data: dict[str, Any] = schema.load(raw)
        except ValidationError as exc:
            errors += [RowError(index, f, m) for f, m in flatten_messages(exc.messages)]
            continue
        key = (data.pop("provider"), data.pop("instance_type"))
        if key not in offers:
            errors.append(RowError(index, "instance_type", f"no offer '{key[0]}:{key[1]}'"))
            continue
        where = (*key, data["region"])
        if where in seen:
            errors.append(RowError(index, "region", f"repeats row {seen[where]}"))
            continue
        seen[where] = index
        out[key].append(records.OfferPrice(**data))
    return dict(out), errors


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
