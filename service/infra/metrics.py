"""``GET /metrics``: the service's figures in Prometheus text format.

Requests and their latency by endpoint (the route's template, so that ids do not multiply
the series; ``unmatched`` for any other path), method (``other`` for any but the standard
seven) and status; cache lookups by kind (the key's prefix: profile, recommendation,
trace...) and result, whose ratio is the hit ratio; the time to count a profile on a cache
miss (those a compute process counted while ranking included); where profiles were counted
and recommendations ranked (a compute process or the worker, :mod:`service.infra.compute`); the
job queue's depth (Redis only). Each app has its own registry; under gunicorn each worker
reports its own counts (scrape each worker, or sum them).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from flask import Flask, g, request
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from werkzeug.wrappers import Response

from service.infra.cache import Cache

LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
# labels take only values the service chooses: a client's own method names (any token is
# a valid HTTP method) would add a series each, and grow every scrape without bound
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


def method_label(method: str) -> str:
    return method if method in METHODS else "other"


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "rightsize_requests", "HTTP requests", ["endpoint", "method", "status"], registry=r
        )
        self.latency = Histogram(
            "rightsize_request_duration_seconds",
            "time to answer a request",
            ["endpoint", "method"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.cache = Counter(
            "rightsize_cache_lookups", "cache lookups", ["kind", "result"], registry=r
        )
        self.profile = Histogram(
            "rightsize_profile_seconds",
            "time to count a profile (a cache miss)",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.queue = Gauge("rightsize_queue_depth", "jobs waiting in the queue", registry=r)
        self.compute = Counter(
            "rightsize_compute_tasks",
            "profiles counted and recommendations ranked, by where (child: a compute process)",
            ["kind", "where"],
            registry=r,
        )

    def watch_queue(self, depth: Callable[[], float]) -> None:
        self.queue.set_function(depth)


class CountingCache:
    """A cache that counts its hits and misses by the kind of key."""

    def __init__(self, inner: Cache, metrics: Metrics) -> None:
        self.inner = inner
        self.backend = inner.backend
        self._metrics = metrics

    def get(self, key: str) -> bytes | None:
        found = self.inner.get(key)
        kind = key.split(":", 1)[0] if ":" in key else "other"
        self._metrics.cache.labels(kind, "hit" if found is not None else "miss").inc()
        return found

    def set(self, key: str, value: bytes, ttl_s: int, durable: bool = False) -> bool:
        return self.inner.set(key, value, ttl_s, durable)

    def delete(self, key: str) -> None:
        self.inner.delete(key)

    def health(self) -> dict[str, object]:
        return self.inner.health()

    @property
    def reachable(self) -> bool:
        return self.inner.reachable

    @property
    def shared(self) -> bool:
        return self.inner.shared


def init_app(app: Flask, metrics: Metrics) -> None:
    def start() -> None:
        g.metrics_started = time.perf_counter()

    def finish(response: Response) -> Response:
        rule = request.url_rule.rule if request.url_rule is not None else "unmatched"
        method = method_label(request.method)
        metrics.requests.labels(rule, method, str(response.status_code)).inc()
        started = g.get("metrics_started")
        if started is not None:
            metrics.latency.labels(rule, method).observe(time.perf_counter() - started)
        return response

    def scrape() -> Response:
        return Response(generate_latest(metrics.registry), mimetype=CONTENT_TYPE_LATEST)

    app.before_request(start)
    app.after_request(finish)
    app.add_url_rule("/metrics", "metrics", scrape, methods=["GET"])
