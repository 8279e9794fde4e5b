"""``/v1/recommendations``, ``/v1/tco`` and ``/v1/rules``: ranked, costed and explained
choices of GPU, count, layout and deployment, the cost of owning against renting, and the
rules behind every reason."""

from __future__ import annotations

import datetime as dt
from typing import Any

from flask import Response, current_app, g, request
from flask.views import MethodView
from marshmallow import Schema, ValidationError, fields, post_load, validate

from profiles.depth import expected_long
from profiles.errors import ProfileError
from profiles.workload import WorkloadSchema
from service.api.base import Blueprint, StrictBoolean, schema_instance
from service.api.constraints import OneSource
from service.api.lookups import gpu_filter
from service.api.plans import layout_options, stack_fields
from service.api.profiles import model_field
from service.api.recommendation_schemas import (
    AdviceSchema,
    CostParameterSchema,
    ExcludedSchema,
    HybridSchema,
    OfferAnswerSchema,
    OnPremCostSchema,
    RecommendedSchema,
    TcoCloudSchema,
    TcoEnergiesSchema,
    TcoUsageSchema,
)
from service.api.stack_schemas import StackUsedSchema
from service.api.traces import must_read
from service.engine.deciding import candidate, cost, rank
from service.engine.errors import NotFound
from service.engine.requests import (
    Constraints,
    RecommendationRequest,
    TcoRequest,
    UsageAsked,
    request_digest,
)
from service.engine.rules import SYMBOLS
from service.security import reader
from service.state import state

blp = Blueprint(
    "recommendations", __name__, url_prefix="/v1", description="Recommendations and cost"
)
PREFIX = "recommendation:"


def _money(description: str) -> fields.Float:
    return fields.Float(
        allow_none=True,
        validate=validate.Range(min=0, max=1e12),
        metadata={"description": description},
    )


def _gpu_hours_per_month(**kwargs: Any) -> fields.Float:
    return fields.Float(
        validate=validate.Range(min=0.01, max=1e9),  # costs per GPU-hour divide by it
        metadata={"description": "GPU-hours a month across all the GPUs (the average)"},
        **kwargs,
    )


class UsageSchema(Schema):
    gpu_hours_per_month = _gpu_hours_per_month()
    runs_per_month = fields.Float(
        validate=validate.Range(min=0.001, max=1e6),
        metadata={"description": "jobs a month (instead of gpu_hours_per_month)"},
    )
    horizon_months = fields.Integer(
        load_default=UsageAsked.horizon_months, validate=validate.Range(1, 240), strict=True
    )
    pattern = fields.String(
        load_default=UsageAsked.pattern, validate=validate.OneOf(("steady", "bursty"))
    )
    peak_to_average = fields.Float(
        validate=validate.Range(min=1, max=1000), metadata={"description": "bursty: peak / mean"}
    )
    baseline_share = fields.Float(
        validate=validate.Range(min=0, max=1),
        metadata={"description": "share of the hours that is a steady baseline (hybrid)"},
    )
    interruptible = StrictBoolean(
        load_default=UsageAsked.interruptible,
        metadata={"description": "checkpointed work that may run on spot"},
    )

    @post_load
    def _typed(self, data: dict[str, Any], **_: Any) -> UsageAsked:
        return UsageAsked(**data)


class HoursUsageSchema(UsageSchema):
    """The usage of ``POST /v1/tco``: GPU-hours a month, since there is no job whose runs
    could be counted (at most the count's GPUs times 730 hours)."""

    gpu_hours_per_month = _gpu_hours_per_month(required=True)

    class Meta:
        exclude = ("runs_per_month",)


class ConstraintsSchema(Schema):
    budget_capital_usd = _money("the most to spend buying (on-premise)")
    budget_monthly_usd = _money("the most to spend a month")
    deadline_hours = fields.Float(validate=validate.Range(min=0, min_inclusive=False, max=1e7))
    max_gpus = fields.Integer(validate=validate.Range(1, 1024), strict=True)
    providers = fields.List(fields.String(), validate=validate.Length(max=20))
    regions = fields.List(fields.String(), validate=validate.Length(max=50))
    deployment = fields.String(
        load_default=Constraints.deployment, validate=validate.OneOf(candidate.DEPLOYMENTS)
    )
    max_server_power_kw = fields.Float(validate=validate.Range(min=0, min_inclusive=False, max=1e3))
    max_kg_co2e = fields.Float(
        validate=validate.Range(min=0, min_inclusive=False, max=1e9),
        metadata={"description": "the most one job may emit, kg CO2e"},
    )

    @post_load
    def _typed(self, data: dict[str, Any], **_: Any) -> Constraints:
        for name in ("providers", "regions"):
            data[name] = tuple(data.get(name) or ())
        return Constraints(**data)


def _within_bounds(overrides: dict[str, float]) -> None:
    bounds = cost.OVERRIDE_BOUNDS
    problems = {k: error for k, v in overrides.items() if (error := bounds[k].error(v))}
    if problems:
        raise ValidationError(problems)


def _onprem_overrides() -> fields.Dict:
    return fields.Dict(
        keys=fields.String(validate=validate.OneOf(cost.OVERRIDABLE)),
        values=fields.Float(),
        validate=_within_bounds,
        metadata={
            "description": "on-premise cost parameters to use instead of the defaults",
            "properties": {
                k: {"type": "number", "minimum": b.least, "maximum": b.most}
                for k, b in cost.OVERRIDE_BOUNDS.items()
            },
            "additionalProperties": False,
        },
    )


class RecommendationRequestSchema(OneSource, Schema):
    SOURCES = (("model", "workload"), ("profile_id",), ("trace_id",))

    model = model_field()
    workload = fields.Nested(WorkloadSchema)
    profile_id = fields.String(validate=validate.Length(1, 100))
    trace_id = fields.String(
        validate=validate.Length(1, 100),
        metadata={"description": "a stored trace of a sample run"},
    )
    count = fields.Integer(
        validate=validate.Range(1, 1024),
        strict=True,
        metadata={"description": "a trace's GPU count"},
    )
    objective = fields.String(
        load_default=RecommendationRequest.objective, validate=validate.OneOf(candidate.OBJECTIVES)
    )
    constraints = fields.Nested(ConstraintsSchema, load_default=Constraints)
    usage = fields.Nested(UsageSchema, load_default=UsageAsked)
    onprem = _onprem_overrides()
    stack = stack_fields()["stack"]
    stack_options = stack_fields()["stack_options"]
    value_of_time_usd_per_hour = fields.Float(
        load_default=RecommendationRequest.value_of_time_usd_per_hour,
        validate=validate.Range(min=0, max=1e7),
        metadata={
            "description": "what an hour of waiting for the result costs the team: "
            "added to each candidate's cost per hour of its job (best_value, cheapest)"
        },
    )
    tie_breaker = fields.String(
        load_default=RecommendationRequest.tie_breaker,
        validate=validate.OneOf(candidate.TIE_BREAKERS),
        metadata={
            "description": "among candidates within 5% of the best score: footprint "
            "(fewer instances, GPUs, then the shorter job), carbon or time"
        },
    )
    global_batch_size = fields.Integer(validate=validate.Range(1, 10_000_000), strict=True)
    weight_precision = layout_options()["weight_precision"]
    kv_precision = layout_options()["kv_precision"]
    submitted_benchmarks = layout_options()["submitted_benchmarks"]
    concurrency = layout_options()["concurrency"]

    @post_load
    def _typed(self, data: dict[str, Any], **_: Any) -> RecommendationRequest:
        return RecommendationRequest(**data)


class RecommendationSchema(Schema):
    id = fields.String(metadata={"description": "stable: the same request on the same knowledge"})
    objective = fields.String()
    recommendations = fields.List(fields.Nested(RecommendedSchema))
    why_first = fields.String(
        allow_none=True, metadata={"description": "why the first answer beat the runner-up"}
    )
    candidates_total = fields.Integer()
    excluded = fields.List(fields.Nested(ExcludedSchema), metadata={"description": "by GPU"})
    advice = fields.List(fields.Nested(AdviceSchema), metadata={"description": "fixes first"})
    summary = fields.String(metadata={"description": "markdown, at most 1,200 characters"})
    assumptions = fields.List(fields.String())
    stack = fields.Nested(
        StackUsedSchema,
        allow_none=True,
        metadata={"description": "the software stack assumed, with its properties and "
                  "which the request overrode (null for a trace, projected as it ran)"},
    )  # fmt: skip
    knowledge_version = fields.String()
    rules_version = fields.String(metadata={"description": "digest of knowledge/rules"})
    created_at = fields.String()
    request = fields.Dict(
        metadata={
            "description": "the request as it was sent (a RecommendationRequest as the "
            "client wrote it: no defaults filled in, numbers as written)"
        }
    )


@blp.route("/recommendations")
class Recommendations(MethodView):
    @blp.arguments(RecommendationRequestSchema)
    @blp.response(200, RecommendationSchema)
    @blp.problem(404)
    @blp.problem(422)
    @blp.problem(503)
    def post(self, body: RecommendationRequest) -> Response:
        """Rank GPUs, counts, layouts and deployments for a workload, with costs and reasons"""
        found = answer(request.get_json(), body)  # as sent: what the id hashes and cites
        if isinstance(found, Response):
            return found
        return Response(found, mimetype="application/json")


def answer(raw: dict[str, Any], body: RecommendationRequest) -> bytes | Response:
    """The recommendation for ``body`` (``raw``: the request as sent), as stored JSON: from
    the cache when the same request was answered on the same knowledge, else computed (in a
    compute process where there are some) and stored. A compute process answers the whole
    HTTP request being served: its Response is final, returned as is."""
    st = state()
    service = st.layers.service(body.submitted_benchmarks)
    if body.trace_id:  # the cache keys on the request: the trace is its owner's first
        must_read(body.trace_id)
    ident = request_digest(raw, f"{service.knowledge.version}:{service.rules.digest}")
    hit = st.cache.get(PREFIX + ident)
    if hit is not None:  # the answer as first given, sent as stored
        return hit
    limits = ("RIGHTSIZE_COMPUTE_TIME_LIMIT_S", "RIGHTSIZE_PROFILE_TIME_LIMIT_S")
    shared = st.cache.shared
    limit = sum(float(st.settings[k]) for k in limits)
    with st.compute.admitted():  # new work: within the client's share, wherever it runs
        long = _known_long(body)
        answered = st.compute.answer(request, g.request_id, limit, shared, long)
        if answered is not None:  # by a compute process
            return answered
        ranked = rank.recommend(service, body, reader())
    full = {
        "id": ident,
        **ranked,
        "created_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "request": raw,
    }
    data: bytes = current_app.json.dumps(schema_instance(RecommendationSchema).dump(full)).encode()
    ttl_s = int(st.settings["RIGHTSIZE_RECOMMENDATION_TTL_S"])
    st.cache.set(PREFIX + ident, data, ttl_s, durable=True)
    return data


def _known_long(body: RecommendationRequest) -> bool:
    """Whether ranking ``body`` is known to be long work: its model's count is (the
    compute pool keeps such work off the process light work needs)."""
    if body.model is None:
        return False
    try:
        return expected_long(state().profiles.resolve(body.model))
    except ProfileError:
        return False  # the ranking says what is wrong with it, at once


def stored(rec_id: str) -> bytes:
    """A stored recommendation's JSON, or NotFound."""
    hit = state().cache.get(PREFIX + rec_id)
    if hit is None:
        raise NotFound("recommendation", rec_id)
    return hit


@blp.route("/recommendations/<string:rec_id>")
class Recommendation(MethodView):
    @blp.response(200, RecommendationSchema)
    @blp.problem(404)
    @blp.problem(503)
    def get(self, rec_id: str) -> Response:
        """A recommendation as it was given: inputs, date and answer"""
        return Response(stored(rec_id), mimetype="application/json")


class TcoRequestSchema(Schema):
    gpu = fields.String(required=True, metadata={"description": "GPU id or name"})
    count = fields.Integer(
        load_default=TcoRequest.count, validate=validate.Range(1, 4096), strict=True
    )
    usage = fields.Nested(HoursUsageSchema, required=True)
    onprem = _onprem_overrides()
    providers = fields.List(fields.String(), validate=validate.Length(max=20))
    regions = fields.List(fields.String(), validate=validate.Length(max=50))

    @post_load
    def _typed(self, data: dict[str, Any], **_: Any) -> TcoRequest:
        for name in ("providers", "regions"):
            if data.get(name) is not None:
                data[name] = tuple(data[name])
        return TcoRequest(**data)


class TcoSchema(Schema):
    gpu = fields.String(metadata={"description": "GPU id"})
    count = fields.Integer()
    usage = fields.Nested(TcoUsageSchema)
    on_premise = fields.Nested(OnPremCostSchema)
    cloud = fields.Nested(
        TcoCloudSchema, allow_none=True, metadata={"description": "the cheapest matching offer"}
    )
    cloud_offers = fields.List(fields.Nested(OfferAnswerSchema))
    break_even_gpu_hours_per_month = fields.Float(allow_none=True)
    cheapest = fields.String(metadata={"description": "on_premise, cloud or hybrid"})
    hybrid = fields.Nested(HybridSchema, allow_none=True)
    energy = fields.Nested(TcoEnergiesSchema, metadata={"description": "kWh and kg CO2e"})
    parameters = fields.List(
        fields.Nested(CostParameterSchema), metadata={"description": "each with its source"}
    )
    assumptions = fields.List(fields.String())


@blp.route("/tco")
class Tco(MethodView):
    @blp.arguments(TcoRequestSchema)
    @blp.response(200, TcoSchema)
    @blp.problem(404)
    @blp.problem(422)
    def post(self, body: TcoRequest) -> dict[str, Any]:
        """Owning against renting a GPU type at a count and usage, with break-even"""
        knowledge = state().layers.service().knowledge  # with refreshed prices
        gpu_filter(knowledge, body.gpu, location="json")
        gpu = knowledge.gpu(body.gpu)
        usage = cost.usage_from(body.usage, None)
        return cost.tco(knowledge, gpu, body.count, usage, body.onprem,
                        body.providers, body.regions)  # fmt: skip


class RuleSchema(Schema):
    id = fields.String()
    title = fields.String()
    scope = fields.String(
        metadata={"description": "what it is about: gpu, candidate, request, trace"}
    )
    effect = fields.String(metadata={"description": "exclude, penalise, warn or advise"})
    when = fields.String(metadata={"description": "its condition (rule-engine syntax)"})
    message = fields.String()
    myth = fields.String(allow_none=True, metadata={"description": "the myth it answers"})
    source = fields.String()
    as_of = fields.String(metadata={"description": "the source's date"})
    factor = fields.Float(metadata={"description": "a penalty's factor on the score"})


class SymbolSchema(Schema):
    name = fields.String()
    type = fields.String(metadata={"description": "rule-engine's type of its value"})
    scopes = fields.List(fields.String())
    meaning = fields.String()


class RulesSchema(Schema):
    rules = fields.List(fields.Nested(RuleSchema))
    symbols = fields.List(fields.Nested(SymbolSchema))


@blp.route("/rules")
class Rules(MethodView):
    @blp.response(200, RulesSchema)
    def get(self) -> dict[str, Any]:
        """Every rule behind the reasons, with its condition, effect and source"""
        return {
            "rules": [r.to_dict() for r in state().estimates.rules.rules],
            "symbols": [
                {"name": n, "type": t.name, "scopes": sorted(scopes), "meaning": meaning}
                for n, (t, scopes, meaning) in SYMBOLS.items()
            ],
        }
