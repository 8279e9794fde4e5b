"""Profiles on demand: resolve the description, serve from the cache or count, store.

The cache key is the profile id (a content hash of the resolved model, the workload and
the profiler version), so equal requests however spelled (a catalog name and the same
model given as a family) share one entry.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from profiles.description import resolve
from profiles.model_catalog import Catalog
from profiles.profile import profile, profile_id
from profiles.resolved import ResolvedModel
from profiles.workload import Workload
from service.engine.ports import KeyValueStore

PREFIX = "profile:"


def count_here(model: ResolvedModel, workload: Workload, time_limit_s: float) -> dict[str, Any]:
    """One profile counted in this thread, as JSON-ready data."""
    return profile(model, workload, time_limit_s).to_dict()


@dataclass
class ProfileService:
    catalog: Catalog
    cache: KeyValueStore
    ttl_s: int
    time_limit_s: float
    observe: Callable[[float], None] | None = None  # seconds each counted profile took
    # what counts one: this thread, or the service's compute pool (a child process)
    count: Callable[[ResolvedModel, Workload, float], dict[str, Any]] = count_here

    def resolve(self, model: Any) -> ResolvedModel:
        return resolve(model, self.catalog)

    def profile(self, model: Any, workload: Workload) -> tuple[dict[str, Any], bool]:
        """The profile as JSON-ready data, and whether it came from the cache."""
        resolved = self.resolve(model)
        key = PREFIX + profile_id(resolved, workload)
        hit = self.cache.get(key)
        if hit is not None:
            return json.loads(hit), True
        started = time.perf_counter()
        result = self.count(resolved, workload, self.time_limit_s)
        if self.observe is not None:
            self.observe(time.perf_counter() - started)
        self.cache.set(key, json.dumps(result).encode(), self.ttl_s, durable=True)
        return result, False

    def get(self, ident: str) -> dict[str, Any] | None:
        hit = self.cache.get(PREFIX + ident)
        return json.loads(hit) if hit is not None else None
