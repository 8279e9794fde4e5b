"""``/v1/offers``: cloud GPU instances and their prices by region."""

from __future__ import annotations

from typing import Any

from flask import request
from flask.views import MethodView
from marshmallow import Schema, fields, validate

from knowledge.records import Offer
from service.api.answers import memoised
from service.api.base import Blueprint, StrictBoolean
from service.api.lookups import gpu_filter
from service.api.pagination import PageQuerySchema, page_schema, paginate
from service.api.schemas import OfferSchema
from service.api.sorting import sort_field, sorted_by
from service.errors import InvalidInput, RejectedRows
from service.prices import catalog_text
from service.security import caller
from service.state import state
from service.submissions import RejectedBatch

blp = Blueprint("offers", __name__, url_prefix="/v1/offers", description="Cloud GPU offers")

OFFER_SORT_KEYS = (
    "on_demand_usd_per_hour",
    "on_demand_usd_per_gpu_hour",
    "spot_usd_per_hour",
    "gpu_count",
    "provider",
    "id",
)


class OfferQuerySchema(PageQuerySchema):
    provider = fields.String(
        validate=validate.Length(max=100),
        metadata={"description": "aws, gcp, azure, lambda, vast, ..."},
    )
    gpu = fields.String(
        validate=validate.Length(1, 100), metadata={"description": "GPU id or any of its names"}
    )
    count = fields.Float(
        validate=validate.Range(min=0, min_inclusive=False),
        metadata={"description": "exactly this many GPUs per instance"},
    )
    max_price_usd_per_hour = fields.Float(
        validate=validate.Range(min=0, min_inclusive=False),
        metadata={"description": "on-demand price of the whole instance at most this, USD/h"},
    )
    region = fields.String(
        validate=validate.Length(max=100), metadata={"description": "only prices in this region"}
    )
    spot = StrictBoolean(
        query=True, metadata={"description": "true: only offers with a spot price"}
    )
    sort = sort_field(OFFER_SORT_KEYS, "on_demand_usd_per_hour")


def _view(offer: Offer, region: str | None) -> dict[str, Any] | None:
    """The offer with prices summarised over ``region`` (or all its regions)."""
    prices = [p for p in offer.prices if region is None or p.region == region]
    if not prices:
        return None
    cheapest = min(prices, key=lambda p: (p.on_demand_usd_per_hour, p.region))
    spots = [p.spot_usd_per_hour for p in prices if p.spot_usd_per_hour is not None]
    reserved = [p.reserved_usd_per_hour for p in prices if p.reserved_usd_per_hour is not None]
    return {
        "id": offer.id,
        "provider": offer.provider,
        "instance_type": offer.instance_type,
        "gpu_id": offer.gpu_id,
        "gpu_count": offer.gpu_count,
        "vcpus": offer.vcpus,
        "memory_gib": offer.memory_gib,
        "interconnect": offer.interconnect,
        "on_demand_usd_per_hour": cheapest.on_demand_usd_per_hour,
        "on_demand_usd_per_gpu_hour": round(cheapest.on_demand_usd_per_hour / offer.gpu_count, 6),
        "cheapest_region": cheapest.region,
        "spot_usd_per_hour": min(spots) if spots else None,
        "reserved_usd_per_hour": min(reserved) if reserved else None,
        "regions": [p.region for p in prices],
        "prices": prices,
        "catalog_date": offer.catalog_date,
        "source": offer.source,
        "notes": offer.notes,
    }


def _keep(view: dict[str, Any], args: dict[str, Any]) -> bool:
    return (
        ("count" not in args or view["gpu_count"] == args["count"])
        and view["on_demand_usd_per_hour"] <= args.get("max_price_usd_per_hour", float("inf"))
        and (not args.get("spot") or view["spot_usd_per_hour"] is not None)
    )


@blp.route("")
class Offers(MethodView):
    @memoised
    @blp.arguments(OfferQuerySchema, location="query")
    @blp.response(200, page_schema(OfferSchema, "OfferPage"))
    @blp.problem(422)
    def get(self, args: dict[str, Any]) -> dict[str, Any]:
        """List cloud offers (cheapest first by default), a page at a time"""
        knowledge = state().layers.service().knowledge  # with refreshed prices
        gpu_id = gpu_filter(knowledge, args["gpu"]) if "gpu" in args else None
        provider = args.get("provider", "").lower() or None
        views = []
        for offer in sorted(knowledge.offers, key=lambda o: o.id):
            if (provider and offer.provider != provider) or (gpu_id and offer.gpu_id != gpu_id):
                continue
            view = _view(offer, args.get("region"))
            if view is not None and _keep(view, args):
                views.append(view)
        return paginate(sorted_by(views, args["sort"]), args, knowledge.version)


PRICES_BODY_LIMIT = 16 * 2**20  # a price catalog (the curated one is under 1 MiB)
PRICES_DOC = {
    "description": "a price catalog in offer_prices.csv's columns (provider, instance_type, "
    "region, on_demand_usd_per_hour, spot_usd_per_hour, reserved_usd_per_hour, "
    "catalog_date, source); each row replaces the price of its offer in its region",
    "required": True,
    "content": {"text/csv": {"schema": {"type": "string"}}},
}


class PriceRefreshSchema(Schema):
    refreshed_by = fields.String(metadata={"description": "id of the admin key"})
    refreshed_at = fields.String()
    rows = fields.Integer()
    offers = fields.Integer(metadata={"description": "offers whose prices changed"})
    applies = fields.String()


@blp.route("/prices")
class Prices(MethodView):
    @blp.needs_key("admin")
    @blp.body(("text/csv",), PRICES_BODY_LIMIT)
    @blp.doc(requestBody=PRICES_DOC)
    @blp.response(200, PriceRefreshSchema)
    @blp.problem(422)
    def put(self) -> dict[str, Any]:
        """Refresh cloud prices from a catalog file: all rows checked, all kept or none"""
        try:
            text = catalog_text(request.get_data(cache=False))
        except ValueError as exc:
            raise InvalidInput("(body)", str(exc), "body") from None
        st = state()
        key = caller()
        try:
            meta = st.prices.refresh(st.knowledge, text, key.key_id if key else "-")
        except RejectedBatch as exc:
            raise RejectedRows(exc.errors, "body", "nothing was changed") from None
        return {**meta, "applies": "within seconds, in every service sharing the file"}
