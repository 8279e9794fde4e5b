"""The performance model is rebuilt when the knowledge changes, and not otherwise."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from knowledge import Knowledge, load_knowledge
from knowledge.loader import default_root
from profiles.catalog import Catalog
from service.engine import model as model_module
from service.engine import observations
from service.engine.model import MODEL_VERSION, PerformanceModel, performance_model
from service.engine.observations import read_json

ROW = "lambda-v0,bert-base-squad,A100 40GB PCIe,1,,fp16,88,88,289,"


def _no(what: str) -> Any:
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError(f"{what} was called: the model was rebuilt from scratch")

    return refuse


def _changed_knowledge(tmp_path: Path) -> Knowledge:
    """A copy of the knowledge with one benchmark row's throughput doubled."""
    root = tmp_path / "data"
    shutil.copytree(default_root(), root)
    path = root / "benchmarks" / "lambda.csv"
    text = path.read_text()
    assert text.count(ROW) == 1
    path.write_text(text.replace(ROW, ROW.replace(",289,", ",578,")))
    return load_knowledge(root)


def _observation(model: PerformanceModel) -> Any:
    (found,) = [
        o
        for o in model.single
        if (o.suite, o.workload, o.gpu_id, o.precision, o.batch)
        == ("lambda-v0", "bert-base-squad", "a100-pcie-40gb", "fp16", 88.0)
    ]
    return found


def test_same_knowledge_same_model(
    knowledge: Knowledge, catalog: Catalog, model_dir: Path, model: PerformanceModel
) -> None:
    assert performance_model(knowledge, catalog, model_dir) is model
    assert performance_model(load_knowledge(), catalog, model_dir) is model


def test_a_new_process_reuses_the_cached_parts(
    knowledge: Knowledge,
    catalog: Catalog,
    model_dir: Path,
    model: PerformanceModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a restart with unchanged knowledge does: no profiling, no conformal refits."""
    monkeypatch.setattr(observations, "profile", _no("the profiler"))
    monkeypatch.setattr(model_module, "conformal_quantiles", _no("conformal_quantiles"))
    again = model_module.build(knowledge, catalog, model_dir)
    assert again is not model
    assert again.fitted.quantiles == model.fitted.quantiles
    assert again.targets == model.targets


def test_changed_knowledge_is_a_new_model(
    tmp_path: Path,
    catalog: Catalog,
    model_dir: Path,
    model: PerformanceModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    changed = _changed_knowledge(tmp_path)
    assert changed.version != model.knowledge_version
    cache = tmp_path / "cache"
    shutil.copytree(model_dir / "mixes", cache / "mixes")  # the workloads did not change
    monkeypatch.setattr(observations, "profile", _no("the profiler"))
    monkeypatch.setattr(model_module, "_MODELS", {})  # keep the session's model memoised
    calls: list[int] = []

    def quantiles(cases: Any, targets: Any) -> dict[str, float]:
        # the intervals of the new version are computed (a call, counted here), not read;
        # their values are not what this test is about, and refitting ten folds is slow
        calls.append(len(cases))
        return {"known": 0.25, "general": 0.5}

    monkeypatch.setattr(model_module, "conformal_quantiles", quantiles)
    rebuilt = performance_model(changed, catalog, cache)
    assert performance_model(changed, catalog, cache) is rebuilt
    assert rebuilt.knowledge_version == changed.version
    assert _observation(rebuilt).throughput == 578.0
    assert _observation(model).throughput == 289.0
    assert rebuilt.targets != model.targets
    # the new version's intervals were computed and kept, keyed by that version
    key = f"{changed.version}-{observations.PROFILER_VERSION}-{MODEL_VERSION}"
    stored = read_json(cache / f"intervals-{key}.json")
    assert stored is not None
    assert stored["quantiles"] == rebuilt.fitted.quantiles == {"known": 0.25, "general": 0.5}
    assert calls == [len(rebuilt.cases)]  # once, for the new version only
    assert not list(cache.glob(f"intervals-{model.knowledge_version}-*.json"))
