"""The HTTP API: flask-smorest blueprints over the engine and the knowledge base."""

from __future__ import annotations

from pathlib import Path

import swagger_ui_bundle
from flask import Blueprint as FlaskBlueprint
from flask import Flask, current_app, g, request, send_from_directory
from werkzeug.wrappers import Response

from service.api import (
    ask,
    benchmarks,
    bodies,
    constraints,
    estimates,
    exports,
    gpus,
    health,
    interconnects,
    jobs,
    models,
    offers,
    operations,
    plans,
    profiles,
    recommendations,
    stacks,
    traces,
)
from service.api.base import Api, exclusive_bounds, stated_additional_properties
from service.api.profile_schemas import spec_variants
from service.engine import deadline
from service.infra import connection
from service.security import BEARER

BLUEPRINTS = (
    health.blp,
    gpus.blp,
    interconnects.blp,
    stacks.blp,
    offers.blp,
    benchmarks.blp,
    models.blp,
    profiles.blp,
    traces.blp,
    estimates.blp,
    plans.blp,
    recommendations.blp,
    exports.blp,
    ask.blp,
    jobs.blp,
)
API_VERSION = "0.1.0"


def _docs_assets() -> FlaskBlueprint:
    """Swagger UI's files, served from the installed package: /docs works offline."""
    folder = Path(swagger_ui_bundle.swagger_ui_path)
    assets = FlaskBlueprint("docs-assets", __name__)

    @assets.route("/docs/assets/<path:filename>")
    def asset(filename: str) -> Response:
        return send_from_directory(folder, filename, max_age=86400)

    return assets


def _start_deadline() -> None:
    limit = current_app.config["RIGHTSIZE_COMPUTE_TIME_LIMIT_S"]
    g.deadline = deadline.start(limit, connection.probe(request.environ))


def _stop_deadline(_: BaseException | None) -> None:
    token = g.pop("deadline", None)
    if token is not None:
        deadline.stop(token)


def init_app(app: Flask) -> Api:
    app.config.setdefault("API_TITLE", "rightsize")
    app.config.setdefault("API_VERSION", API_VERSION)
    app.config.setdefault("OPENAPI_VERSION", "3.0.3")
    app.config.setdefault("OPENAPI_URL_PREFIX", "/")
    app.config.setdefault("OPENAPI_JSON_PATH", "openapi.json")
    app.config.setdefault("OPENAPI_SWAGGER_UI_PATH", "/docs")
    app.config.setdefault("OPENAPI_SWAGGER_UI_URL", "/docs/assets/")
    app.config.setdefault(
        "API_SPEC_OPTIONS",
        {
            "info": {
                "description": "Which GPU hardware to buy or rent for a deep-learning workload, "
                "and why. Errors are application/problem+json (RFC 9457).",
                "license": {"name": "Apache-2.0"},
            }
        },
    )
    app.before_request(bodies.check)
    app.before_request(_start_deadline)
    app.teardown_request(_stop_deadline)
    api = Api(app)
    api.ma_plugin.converter.add_attribute_function(exclusive_bounds)
    api.ma_plugin.converter.add_attribute_function(stated_additional_properties)
    api.ma_plugin.converter.add_attribute_function(spec_variants)
    api.spec.components.security_scheme(
        BEARER,
        {"type": "http", "scheme": "bearer", "description": "an API key: rightsize keys create"},
    )
    for blueprint in BLUEPRINTS:
        api.register_blueprint(blueprint)
    api.later(operations.document)
    requests = (
        recommendations.RecommendationRequestSchema,
        estimates.EstimateRequestSchema,
        plans.PlanRequestSchema,
    )
    api.later(lambda spec: constraints.document(spec, requests))
    app.register_blueprint(_docs_assets())
    return api
