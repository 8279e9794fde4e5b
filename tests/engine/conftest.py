"""The performance model built once per test session, in the service's model cache."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from knowledge import Knowledge
from profiles.model_catalog import Catalog
from service.config import load_settings
from service.engine.estimating.model import PerformanceModel, build


@pytest.fixture(scope="session")
def catalog() -> Catalog:
    return Catalog.load()


@pytest.fixture(scope="session")
def model_dir() -> Path:
    """The model cache every app of the tests uses (RIGHTSIZE_MODEL_DIR, set by
    tests/conftest.py): the interval quantiles are computed once, as the service does on
    its first build."""
    return Path(load_settings()["RIGHTSIZE_MODEL_DIR"])


@pytest.fixture(scope="session")
def model(knowledge: Knowledge, catalog: Catalog, model_dir: Path) -> PerformanceModel:
    return build(knowledge, catalog, model_dir)


@pytest.fixture
def cache_copy(model: PerformanceModel, model_dir: Path, tmp_path: Path) -> Path:
    """The session's model cache, copied: what a test writes there leaves the user's own
    cache alone."""
    copy = tmp_path / "models"
    shutil.copytree(model_dir, copy, ignore=shutil.ignore_patterns("validation-*"))
    return copy
