"""The application factory.

``create_app`` builds the Flask application: settings from ``RIGHTSIZE_*`` environment
variables (see :mod:`service.config`), the knowledge base loaded and validated once (the
app refuses to start on invalid knowledge), the cache (Redis, or in-process), the API.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flask import Flask
from redis.exceptions import RedisError
from werkzeug.middleware.proxy_fix import ProxyFix
from werkzeug.wrappers import Response

from knowledge import load_knowledge
from profiles.model_catalog import Catalog
from profiles.trace.stream import Limits
from service import api, errors, jobs, security, web
from service.config import load_settings
from service.engine.estimating.on_request import RUNS_KEPT, EstimateService
from service.engine.estimating.profiling import ProfileService
from service.engine.estimating.traces import Bounds, TraceService
from service.engine.memo import Memo
from service.engine.rules import RuleBook
from service.infra import metrics
from service.infra.cache import RedisCache, make_cache
from service.infra.compute import ComputePool
from service.infra.compute_child import seen
from service.infra.embedded_store import EmbeddedStore
from service.infra.local_jobs import LocalJobs
from service.infra.uploads import analysis_job
from service.overlays import Layers
from service.prices import PriceFile
from service.state import AppState, attach, state
from service.submissions import Quotas, SubmissionStore


@dataclass(frozen=True)
class Shared:
    """What the apps of one process may share when their owner says so (the test session
    makes an app per test): the rule book, and the layout searches of recent
    recommendations (keyed by knowledge version and profile, so apps on other knowledge
    never meet)."""

    rules: RuleBook = field(default_factory=RuleBook.load)
    runs: Memo[Any] = field(default_factory=lambda: Memo(RUNS_KEPT))


# long: the one place an app's parts are built, in the order each needs the others
def create_app(config: Mapping[str, Any] | None = None, *, shared: Shared | None = None) -> Flask:
    """Build the application; ``config`` overrides settings (short or ``RIGHTSIZE_`` names);
    ``shared``: what it takes from its owner instead of making its own (see :class:`Shared`)."""
    settings = load_settings(config)
    app = Flask(__name__)
    app.config.update(settings)
    security.configure_logging(settings["RIGHTSIZE_LOG_LEVEL"], settings["RIGHTSIZE_LOG_FORMAT"])
    knowledge = load_knowledge(settings["RIGHTSIZE_KNOWLEDGE_DIR"])
    store = make_cache(settings)
    redis = store.client if isinstance(store, RedisCache) else None
    figures = metrics.Metrics()
    cache = metrics.CountingCache(store, figures)
    if redis is not None:
        figures.watch_queue(lambda: _queue_depth(redis, settings["RIGHTSIZE_KEY_PREFIX"]))
    catalog = Catalog.load()
    compute = _compute_pool(settings, figures)

    def observe_profile(seconds: float) -> None:
        figures.profile.observe(seconds)
        seen(seconds)  # in a compute child: carried back to its worker's figures

    profiles = ProfileService(
        catalog,
        cache,
        settings["RIGHTSIZE_CACHE_TTL_S"],
        settings["RIGHTSIZE_PROFILE_TIME_LIMIT_S"],
        observe_profile,
        compute.count,
    )
    limits, bounds = _trace_limits(settings)
    rules = shared.rules if shared else RuleBook.load()  # loaded and compiled once an app
    traces = TraceService(
        knowledge, cache, settings["RIGHTSIZE_TRACE_TTL_S"], limits, profiles, bounds, rules
    )
    estimates = EstimateService(
        knowledge, catalog, profiles, traces, Path(settings["RIGHTSIZE_MODEL_DIR"]), rules
    )
    if shared is not None:
        estimates.runs = shared.runs
    submissions = SubmissionStore(settings["RIGHTSIZE_SUBMISSIONS_FILE"], Quotas.of(settings))
    prices = PriceFile(settings["RIGHTSIZE_PRICES_FILE"])
    attach(
        app,
        AppState(
            knowledge=knowledge,
            cache=cache,
            settings=settings,
            catalog=catalog,
            profiles=profiles,
            traces=traces,
            estimates=estimates,
            redis=redis,
            submissions=submissions,
            layers=Layers(estimates, submissions, prices),
            prices=prices,
            compute=compute,
            local_jobs=_local_jobs(store, settings, traces),
        ),
    )
    # werkzeug refuses larger bodies with 413 before reading them; JSON endpoints are
    # held to a smaller limit in service.api
    app.config["MAX_CONTENT_LENGTH"] = limits.compressed_bytes + 2**20
    _wire(app, settings, figures, redis, knowledge.version)
    return app


def _compute_pool(settings: Mapping[str, Any], figures: metrics.Metrics) -> ComputePool:
    """The compute processes: started by each gunicorn worker (service/gunicorn_conf.py);
    until then, work runs inline."""
    return ComputePool(
        settings["RIGHTSIZE_COMPUTE_PROCESSES"],
        settings["RIGHTSIZE_COMPUTE_NICE"],
        settings,
        compute_app,
        lambda kind, where: figures.compute.labels(kind, where).inc(),
        figures.profile.observe,
        settings["RIGHTSIZE_COMPUTE_PER_CLIENT"],
        security.tenant,
        settings["RIGHTSIZE_COMPUTE_QUEUE"],
        settings["RIGHTSIZE_COMPUTE_WAIT_S"],
        settings["RIGHTSIZE_COMPUTE_LIGHT_NICE"],
    )


def _trace_limits(settings: Mapping[str, Any]) -> tuple[Limits, Bounds]:
    """What a trace upload may be (sizes, events) and how it is read (inline below a
    size, then in a bounded process)."""
    limits = Limits(
        compressed_bytes=settings["RIGHTSIZE_TRACE_MAX_BYTES"],
        decompressed_bytes=settings["RIGHTSIZE_TRACE_MAX_DECOMPRESSED_BYTES"],
        events=settings["RIGHTSIZE_TRACE_MAX_EVENTS"],
    )
    bounds = Bounds(
        inline_bytes=settings["RIGHTSIZE_TRACE_ASYNC_BYTES"],
        time_limit_s=settings["RIGHTSIZE_TRACE_TIME_LIMIT_S"],
        memory_bytes=settings["RIGHTSIZE_TRACE_MEMORY_LIMIT_BYTES"],
    )
    return limits, bounds


def _wire(
    app: Flask, settings: Mapping[str, Any], figures: metrics.Metrics, redis: Any, version: str
) -> None:
    """Errors, metrics, security, the API and the page on ``app``; the client's address
    from trusted proxies; the knowledge version on every answer."""
    errors.init_app(app)
    metrics.init_app(app, figures)
    security.init_app(app, redis.connection_pool if redis is not None else None)
    api.init_app(app)
    web.init_app(app)
    if settings["RIGHTSIZE_PROXY_HOPS"]:
        # behind a balancer every client has its address: the limits count per client only
        # if the address it forwards is taken (from that many trusted proxies, no more)
        hops = settings["RIGHTSIZE_PROXY_HOPS"]
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops)  # type: ignore[method-assign]

    @app.after_request
    def _version_header(response: Response) -> Response:
        response.headers["X-Knowledge-Version"] = version
        return response


def compute_app(config: Mapping[str, Any]) -> Flask:
    """A compute process's app (:mod:`service.infra.compute`): built as the worker's, its
    performance model started at once."""
    app = create_app(config)
    with app.app_context():
        state().estimates.warm()
    return app


def _local_jobs(store: Any, settings: Mapping[str, Any], traces: TraceService) -> LocalJobs | None:
    """The embedded set-up's background jobs, kept in its store (with Redis: the queue)."""
    if not isinstance(store, EmbeddedStore):
        return None
    handlers = {"trace": analysis_job(traces)}
    return LocalJobs(
        store,
        settings["RIGHTSIZE_TRACE_TTL_S"],
        handlers,
        runners=settings["RIGHTSIZE_TRACE_JOBS"],
        per_owner=settings["RIGHTSIZE_TRACE_JOBS_PER_KEY"],
    )


def _queue_depth(client: Any, prefix: str) -> float:
    """Jobs waiting (0 while Redis is away: the scrape must not fail)."""
    try:
        return float(len(jobs.queue(client, prefix)))
    except RedisError:
        return 0.0
