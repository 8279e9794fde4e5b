"""Exports of a stored recommendation for the people who sign the purchase."""

from __future__ import annotations

import json

from flask import Response
from flask.views import MethodView

from service import exports, quote
from service.api.base import Blueprint, schema_instance
from service.api.recommendations import UsageSchema, stored
from service.engine.requests import UsageAsked
from service.state import state

blp = Blueprint(
    "exports", __name__, url_prefix="/v1", description="Procurement exports of recommendations"
)
TEXT = {"type": "string"}
# The quote is a document, not an app: it runs nothing and loads nothing.
QUOTE_POLICY = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"


@blp.route("/recommendations/<string:rec_id>/export.csv")
class CandidatesCsv(MethodView):
    @blp.response(
        200,
        TEXT,
        content_type="text/csv",
        description="one row per candidate, in rank order, under a header row; text cells a "
        "spreadsheet would read as a formula start with an apostrophe",
        headers={
            "Content-Disposition": {
                "description": 'attachment; filename="rightsize-<id>.csv"',
                "schema": TEXT,
            }
        },
    )
    @blp.problem(404)
    @blp.problem(503)
    def get(self, rec_id: str) -> Response:
        """A recommendation's candidates as CSV, for a spreadsheet

        One row per candidate (GPU, count and deployment) in rank order: the deployment
        (provider, instance type or server design, region, pricing, instances), unit prices
        (per GPU-hour, per instance-hour in the cloud, capital per GPU and per server on
        premise), the job's hours and cost, the monthly, horizon and capital cost, energy,
        memory, the Pareto flag and the ids of the rules behind the reasons (';'-separated).
        Sent as an attachment named rightsize-<id>.csv.
        """
        text = exports.candidates_csv(json.loads(stored(rec_id)))
        disposition = f'attachment; filename="rightsize-{rec_id}.csv"'
        return Response(text, mimetype="text/csv", headers={"Content-Disposition": disposition})


@blp.route("/recommendations/<string:rec_id>/quote")
class Quote(MethodView):
    @blp.response(
        200,
        TEXT,
        content_type="text/html",
        description="a print-ready page (A4, no script, no external resources)",
    )
    @blp.problem(404)
    @blp.problem(503)
    def get(self, rec_id: str) -> Response:
        """A recommendation as a quote page to print or save as PDF

        The workload asked, the first choice and, for an on-premise choice (or beside a
        cloud one, when the answer has an on-premise candidate), a bill of materials priced
        as POST /v1/tco prices it today: GPUs, servers, the fabric between servers, power and
        cooling, the TCO over the horizon against renting. Then the other candidates, the
        reasons, the assumptions and the source of every figure.
        """
        answer = json.loads(stored(rec_id))
        raw_usage = (answer.get("request") or {}).get("usage") or {}
        asked: UsageAsked = schema_instance(UsageSchema).load(raw_usage)
        bill = exports.bill_of_materials(state().layers.service().knowledge, answer, asked)
        page = quote.quote_html(answer, bill)
        return Response(
            page, mimetype="text/html", headers={"Content-Security-Policy": QUOTE_POLICY}
        )
