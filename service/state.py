"""Per-app state, kept in ``app.extensions['rightsize']`` (never in module globals)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flask import Flask, current_app
from redis import Redis

from knowledge import Knowledge
from profiles.model_catalog import Catalog
from service.engine.estimating.on_request import EstimateService
from service.engine.estimating.profiling import ProfileService
from service.engine.estimating.traces import TraceService
from service.infra.cache import Cache

if TYPE_CHECKING:
    from service.infra.compute import ComputePool
    from service.infra.local_jobs import LocalJobs
    from service.overlays import Layers
    from service.prices import PriceFile
    from service.submissions import SubmissionStore

EXTENSION = "rightsize"


@dataclass(frozen=True)
class AppState:
    knowledge: Knowledge
    cache: Cache
    settings: dict[str, Any]
    catalog: Catalog
    profiles: ProfileService
    traces: TraceService
    estimates: EstimateService
    redis: Redis | None  # the job queue's connection, when Redis is configured
    submissions: SubmissionStore
    layers: Layers  # the curated model, or the one a retrain fitted with submitted rows
    prices: PriceFile  # refreshed cloud prices (admin)
    compute: ComputePool  # child processes for the CPU-heavy work (service.infra.compute)
    local_jobs: LocalJobs | None  # the embedded set-up's background jobs (Redis: the queue)


def attach(app: Flask, state: AppState) -> None:
    app.extensions[EXTENSION] = state


def state() -> AppState:
    """The running app's state (inside a request or an app context)."""
    result: AppState = current_app.extensions[EXTENSION]
    return result
