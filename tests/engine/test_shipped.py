"""The packaged benchmark step profiles are what the profiler counts today."""

from __future__ import annotations

import json

import pytest

from knowledge import Knowledge
from profiles.model_catalog import Catalog
from service.engine.estimating import shipped

pytestmark = pytest.mark.slow  # every benchmarked workload profiled again


def test_the_packaged_profiles_are_current(knowledge: Knowledge, catalog: Catalog) -> None:
    """Every entry the benchmarks need, profiled now, equals the packaged one: a changed
    profiler, model description or workload makes this fail until `rightsize
    benchmark-profiles` writes the file again."""
    packaged = json.loads(shipped.PATH.read_text())
    fresh = shipped.compute_all(knowledge, catalog)
    assert not shipped.stale_entries(knowledge)
    by_key = {e["key"]: e for e in packaged["entries"]}
    assert len(fresh) == len(shipped.needed(knowledge)) == len(by_key)
    for entry in fresh:
        assert by_key.get(entry["key"]) == json.loads(json.dumps(entry)), entry["workload"]
