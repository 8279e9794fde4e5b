"""Fixtures for profiler tests: the catalog and a helper that profiles a named model."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from profiles import profile as profile_module
from profiles.description import resolve
from profiles.model_catalog import Catalog
from profiles.profile import Profile, profile
from profiles.workload import WorkloadSchema

HF_CONFIGS = Path(__file__).parent / "fixtures" / "hf"


@pytest.fixture(autouse=True)
def counted_afresh() -> None:
    """Each test starts without the batch sizes earlier tests counted (profiles.batch)."""
    profile_module._LINES.clear()


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return Catalog.load()


@pytest.fixture(scope="session")
def run(catalog: Catalog) -> Callable[..., Profile]:
    """``run(model, **workload)``: profile a catalog name (or a description dict)."""

    def _run(model: str | dict[str, Any], **workload: Any) -> Profile:
        description = {"name": model} if isinstance(model, str) else model
        return profile(resolve(description, catalog), WorkloadSchema().load(workload), 60)

    return _run


def hf_config(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((HF_CONFIGS / f"{name}.json").read_text(encoding="utf-8"))
    return data
