"""``/v1/interconnects``: links between GPUs, hosts and nodes."""

from __future__ import annotations

from typing import Any

from flask.views import MethodView
from marshmallow import fields, validate

from knowledge.schemas import INTERCONNECT_KINDS, SCOPES
from service.api.answers import memoised
from service.api.base import Blueprint
from service.api.pagination import PageQuerySchema, page_schema, paginate
from service.api.schemas import InterconnectSchema
from service.api.sorting import sort_field, sorted_by
from service.state import state

blp = Blueprint(
    "interconnects", __name__, url_prefix="/v1/interconnects", description="GPU and node links"
)


class InterconnectQuerySchema(PageQuerySchema):
    kind = fields.String(validate=validate.OneOf(INTERCONNECT_KINDS))
    scope = fields.String(validate=validate.OneOf(SCOPES))
    sort = sort_field(("id", "bandwidth_gb_per_s_per_direction", "latency_us"), "id")


@blp.route("")
class Interconnects(MethodView):
    @memoised
    @blp.arguments(InterconnectQuerySchema, location="query")
    @blp.response(200, page_schema(InterconnectSchema, "InterconnectPage"))
    @blp.problem(422)
    def get(self, args: dict[str, Any]) -> dict[str, Any]:
        """List interconnects (PCIe, NVLink, NVSwitch, InfiniBand, Ethernet), a page at a time"""
        knowledge = state().knowledge
        links = [
            link
            for link in sorted(knowledge.interconnects.values(), key=lambda i: i.id)
            if all(getattr(link, k) == args[k] for k in ("kind", "scope") if k in args)
        ]
        return paginate(sorted_by(links, args["sort"]), args, knowledge.version)
