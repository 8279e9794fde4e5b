"""The performance model: built from knowledge and the packaged step profiles, owned by
whoever builds it, refitted without held-out rows, rebuilt when the knowledge changes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from knowledge import Knowledge, load_knowledge
from knowledge.loader import default_root
from profiles.model_catalog import Catalog
from service.engine.estimating import model as model_module
from service.engine.estimating import observations
from service.engine.estimating.model import MODEL_VERSION, PerformanceModel, build
from service.engine.estimating.observations import read_json

ROW = "lambda-v0,bert-base-squad,A100 40GB PCIe,1,,fp16,88,88,289,"


def _no(what: str) -> Any:
    def refuse(*_: Any, **__: Any) -> Any:
        raise AssertionError(f"{what} was called")

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


class TestBuild:
    def test_a_build_profiles_nothing_and_reuses_the_cached_intervals(
        self,
        knowledge: Knowledge,
        catalog: Catalog,
        cache_copy: Path,
        model: PerformanceModel,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        """What a restart does: the benchmark steps come from the package, the intervals
        from the cache; no profiler, no cross-validation."""
        monkeypatch.setattr(observations, "profile", _no("the profiler"))
        monkeypatch.setattr(model_module, "conformal_quantiles", _no("conformal_quantiles"))
        again = build(knowledge, catalog, cache_copy)
        assert again is not model  # each owner builds its own
        assert again.profiles.profiled == 0
        assert again.quantiles == model.quantiles
        assert len(again.single) == len(model.single) > 700

    @pytest.mark.slow  # a refit
    def test_changed_knowledge_is_a_new_model(
        self,
        tmp_path: Path,
        catalog: Catalog,
        cache_copy: Path,
        model: PerformanceModel,
        monkeypatch: pytest.MonkeyPatch,
    ) -> None:
        changed = _changed_knowledge(tmp_path)
        assert changed.version != model.knowledge_version
        monkeypatch.setattr(observations, "profile", _no("the profiler"))
        calls: list[int] = []

        def quantiles(built: PerformanceModel) -> dict[str, float]:
            calls.append(len(built.single))
            return {"known": 0.25, "general": 0.5}

        monkeypatch.setattr(model_module, "conformal_quantiles", quantiles)
        rebuilt = build(changed, catalog, cache_copy)
        assert rebuilt.knowledge_version == changed.version
        assert _observation(rebuilt).throughput == 578.0
        assert _observation(model).throughput == 289.0
        # the new version's intervals were computed once and kept, keyed by that version
        key = f"{changed.version}-{observations.PROFILER_VERSION}-{MODEL_VERSION}"
        stored = read_json(cache_copy / f"intervals-{key}.json")
        assert stored is not None
        assert stored["quantiles"] == rebuilt.quantiles == {"known": 0.25, "general": 0.5}
        assert calls == [len(rebuilt.single)]
        build(changed, catalog, cache_copy)
        assert calls == [len(rebuilt.single)]

    def test_intervals_are_out_of_sample_and_wider_for_unmeasured_models(
        self, model: PerformanceModel
    ) -> None:
        assert 0.03 < model.quantiles["known"] < model.quantiles["general"] < 1.5


class TestRefit:
    def test_a_refit_leaves_the_held_out_rows_out(
        self, model: PerformanceModel, knowledge: Knowledge
    ) -> None:
        fold = model.refit(lambda o: o.gpu_id != "h100-sxm-80gb")
        assert {o.gpu_id for o in fold.single} == {o.gpu_id for o in model.single} - {
            "h100-sxm-80gb"
        }
        assert len(fold.rows) == len(fold.single)
        assert fold.step_model is not model.step_model
        # the bandwidth cap is what a GPU was shown to use, whatever the fold
        older = model.refit(lambda o: knowledge.gpus[o.gpu_id].release_year < 2020)
        assert older.step_model.bytes_per_sm_cycle == model.step_model.bytes_per_sm_cycle
        assert len(older.single) < len(fold.single)

    def test_the_fit_follows_the_measurements(self, model: PerformanceModel) -> None:
        """Held in, the step model reproduces most measured steps closely."""
        errors = []
        for obs, row in zip(model.single, model.rows, strict=True):
            parts = model.step_model.parts(row.profile, row.gpu, row.mode, obs.workload, obs.suite)
            errors.append(abs(obs.step_s / parts.total_s - 1))
        errors.sort()
        assert errors[len(errors) // 2] < 0.08
        assert errors[int(len(errors) * 0.9)] < 0.3
