"""Cloud GPU offers and prices, ``offers.csv`` and ``offer_prices.csv``, from ``../shared/data``.

One module per raw catalog, each returning a :class:`~knowledge.derive.offers_common.Book`:

* :mod:`knowledge.derive.offers_aws`: AWS EC2 (instances.vantage.sh data via tsaol/aws-gpu);
* :mod:`knowledge.derive.offers_gcp`: GCP, host rows plus GPU rows of SkyPilot's catalog;
* :mod:`knowledge.derive.offers_azure`, :mod:`knowledge.derive.offers_lambda`,
  :mod:`knowledge.derive.offers_vast`: the other SkyPilot-format catalogs (anycloud-sh/catalog).

Every offer maps to a GPU id of ``knowledge/data/gpus`` by an explicit table keyed on the
provider's accelerator name and instance family; rows that no table maps, non-GPU
accelerators and rows without an on-demand price are left out and reported. Where a mapping
is a judgement call or corrects the source, the offer's ``notes`` say so.
"""

from __future__ import annotations

from pathlib import Path

from knowledge.derive import (
    Derived,
    offers_aws,
    offers_azure,
    offers_gcp,
    offers_lambda,
    offers_vast,
)
from knowledge.derive.offers_common import OFFER_COLUMNS, PRICE_COLUMNS

PARTS = (
    offers_aws.collect,
    offers_azure.collect,
    offers_gcp.collect,
    offers_lambda.collect,
    offers_vast.collect,
)


def derive(shared: Path) -> Derived:
    """Both offer tables, sorted by provider, instance type and region, with the report."""
    books = sorted((part(shared) for part in PARTS), key=lambda b: b.provider)
    derived = Derived()
    derived.add_table("offers.csv", OFFER_COLUMNS, [r for b in books for r in b.offer_rows()])
    derived.add_table("offer_prices.csv", PRICE_COLUMNS, [r for b in books for r in b.price_rows()])
    for book in books:
        book.report(derived)
    return derived
