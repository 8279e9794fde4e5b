"""Submitted benchmark rows that cannot be real are refused, naming the field; one bad row
never stops a refit. A hostile probe stored ``batch_size_per_gpu: 1e308`` (and ten rows of
``throughput: 1e308``) with a 201; every ``rightsize retrain`` after it exited 1 (``array
must not contain infs or NaNs``), and the append-only file keeps the row."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from knowledge import Knowledge
from knowledge.loader import default_root
from knowledge.row_bounds import KIND, RowBounds
from knowledge.submitted import curated_bounds
from profiles.model_catalog import Catalog
from service import create_app, jobs
from service.cli import main
from service.config import load_settings
from service.infra.keys import KeyFile
from service.overlays import trained_knowledge
from service.submissions import RetrainFailed, SubmissionStore, retrain, row_bounds
from tests.conftest import KEYS_FILE, with_key
from tests.service.helpers import fields_in, get_json, problem
from tests.service.test_benchmarks_write import ROW

README_ROW = {
    "gpu": "l4",
    "gpu_count": 1,
    "workload": "resnet50-imagenet",
    "precision": "fp16",
    "batch_size_per_gpu": 128,
    "throughput": 950,
    "source": "our lab",
    "as_of": "2026-11-30",
}


@pytest.fixture
def app(tmp_path: Path) -> Flask:
    return create_app({"TESTING": True, "SUBMISSIONS_FILE": str(tmp_path / "rows.jsonl")})


def _post(client: FlaskClient, body: Any) -> Any:
    """POST ``body`` as Python's json writes it (``Infinity`` and ``NaN`` included)."""
    return client.post("/v1/benchmarks", data=json.dumps(body), content_type="application/json")


def _stored_file(path: Path, rows: list[dict[str, Any]]) -> None:
    """A submissions file as an older service wrote it, one batch of ``rows``."""
    lines = [
        {
            "id": f"old-{i}",
            "batch_id": "old",
            "submitted_by": "k",
            "row": row,
            "submitted_at": "2026-11-30T10:00:00+00:00",
            "batch_rows": len(rows),
        }
        for i, row in enumerate(rows)
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")


def _no_lambda_rows(tmp_path: Path) -> Path:
    """The curated knowledge without Lambda's table: a fit on it has no rows and raises."""
    root = tmp_path / "knowledge"
    shutil.copytree(default_root(), root)
    table = root / "benchmarks" / "lambda.csv"
    table.write_text(table.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    return root


TODAY = dt.datetime.now(dt.UTC).date()
OUT_OF_BOUNDS = [
    pytest.param({"batch_size_per_gpu": 1e308}, "batch_size_per_gpu", "at most", id="batch-1e308"),
    pytest.param({"batch_size_per_gpu": 0.5}, "batch_size_per_gpu", "at least 1", id="batch-half"),
    pytest.param({"throughput": 1e308}, "throughput", "TFLOPS", id="throughput-1e308"),
    pytest.param({"throughput": float("inf")}, "throughput", "infinity", id="throughput-inf"),
    pytest.param({"throughput": float("nan")}, "throughput", "nan", id="throughput-nan"),
    pytest.param(
        {"batch_size_per_gpu": float("inf")}, "batch_size_per_gpu", "infinity", id="batch-inf"
    ),
    pytest.param({"throughput": 50_000}, "throughput", "121 TFLOPS", id="above-the-l4-peak"),
    pytest.param({"throughput": 1e-6}, "throughput", "a day", id="a-step-over-a-day"),
    pytest.param({"gpu_count": 2.5}, "gpu_count", "integer", id="half-a-gpu"),
    pytest.param({"gpu_count": 1e308}, "gpu_count", "100000", id="gpu-count-1e308"),
    pytest.param(
        {"batch_size_global": 10**400}, "batch_size_global", "less than", id="global-batch-10e400"
    ),
    pytest.param({"as_of": "0001-01-01"}, "as_of", "released in 2023", id="year-one"),
    pytest.param({"as_of": "2019-06-01"}, "as_of", "released in 2023", id="before-the-l4"),
    pytest.param(
        {"as_of": str(TODAY + dt.timedelta(days=5))}, "as_of", "not after", id="in-five-days"
    ),
    pytest.param({"watt_total": 1e308}, "watt_total", "W TDP", id="watts-1e308"),
    pytest.param({"price_usd": 1e308}, "price_usd", "USD a GPU", id="price-1e308"),
]


class TestRowsThatCannotBeReal:
    @pytest.mark.parametrize(("change", "field", "says"), OUT_OF_BOUNDS)
    def test_is_refused_naming_the_field(
        self, app: Flask, client: FlaskClient, change: dict[str, Any], field: str, says: str
    ) -> None:
        body = problem(_post(client, {"rows": [README_ROW, {**README_ROW, **change}]}), 422)
        assert fields_in(body) == {f"rows.1.{field}"}
        assert says.lower() in body["errors"][0]["message"].lower()
        assert "nothing was stored" in body["detail"]
        assert not app.extensions["rightsize"].submissions.path.exists()

    def test_the_throughput_bound_states_its_figures(self, client: FlaskClient) -> None:
        body = problem(_post(client, {**README_ROW, "throughput": 50_000}), 422)
        message = body["errors"][0]["message"]
        # 2 × 121 TFLOPS over ResNet-50's ~2.4e10 training FLOPs an image: ~9,900 images/s
        assert message.startswith("at most 9,901 images/s, not 50,000")
        assert "NVIDIA L4's fp16 peak" in message
        assert "2.44e+10 FLOPs to train on one of its images" in message

    def test_ten_rows_of_1e308_are_each_named(self, client: FlaskClient) -> None:
        body = problem(_post(client, {"rows": [{**README_ROW, "throughput": 1e308}] * 10}), 422)
        assert fields_in(body) == {f"rows.{i}.throughput" for i in range(10)}

    def test_the_readme_example_is_stored(self, client: FlaskClient) -> None:
        response = _post(client, README_ROW)
        assert response.status_code == 201, response.get_data(as_text=True)
        assert response.get_json()["rows"][0]["row"] == README_ROW

    def test_a_date_of_tomorrow_is_allowed_for_time_zones(self, client: FlaskClient) -> None:
        tomorrow = str(TODAY + dt.timedelta(days=1))
        assert _post(client, {**README_ROW, "as_of": tomorrow}).status_code == 201


class TestCuratedRows:
    @pytest.mark.parametrize("shipped", [True, False], ids=["flops", "curated-rates"])
    def test_every_curated_row_is_within_the_bounds(
        self, knowledge: Knowledge, shipped: bool
    ) -> None:
        """A guard on the bounds themselves: no curated measurement breaks them."""
        bounds: RowBounds = row_bounds(knowledge) if shipped else curated_bounds(knowledge)
        rows = [b for b in knowledge.benchmarks if b.kind == KIND and b.gpu_id is not None]
        assert len(rows) > 3000
        faults = [
            (b.suite, b.workload, b.gpu_id, b.precision, b.gpu_count, fault)
            for b in rows
            for fault in bounds.faults(
                b, knowledge.gpus[b.gpu_id or ""], knowledge.workloads[b.workload], TODAY
            )
        ]
        assert faults == []

    def test_every_benchmarked_workload_has_its_flops(self, knowledge: Knowledge) -> None:
        profiled = {w.id for w in knowledge.workloads.values() if w.kind == KIND and w.profile}
        assert set(row_bounds(knowledge).flops_per_unit) == profiled


@pytest.mark.slow  # a refit on the queue's worker
class TestRetrainSkipsRowsItCannotUse:
    def test_rows_stored_before_the_bounds_are_skipped_and_listed(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, knowledge: Knowledge
    ) -> None:
        path = tmp_path / "rows.jsonl"
        _stored_file(
            path,
            [
                {**ROW, "throughput": 1e308},
                {**ROW, "batch_size_per_gpu": 1e308},
                {**ROW, "throughput": float("inf")},
                ROW,
            ],
        )
        monkeypatch.setenv("RIGHTSIZE_SUBMISSIONS_FILE", str(path))
        monkeypatch.setenv("RIGHTSIZE_MODEL_DIR", str(tmp_path / "model"))
        result = CliRunner().invoke(main, ["retrain"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        assert "1 submitted rows with the curated ones" in result.output
        assert "3 stored rows skipped (not fitted):" in result.output
        assert "old-0: throughput: at most" in result.output
        assert "old-1: batch_size_per_gpu: at most" in result.output
        assert "old-2: throughput: Special numeric values" in result.output
        store = SubmissionStore(path)
        marker = store.trained()
        assert marker is not None
        assert marker["row_ids"] == ["old-3"]
        # the services take the same rows the refit used, and switch to its model
        found, used = trained_knowledge(knowledge, store)
        assert used == marker
        assert found.version == marker["knowledge_version"] != knowledge.version

    def test_the_job_result_lists_the_rows_skipped(
        self, tmp_path: Path, redis_url: str, redis_prefix: str, knowledge: Knowledge
    ) -> None:
        """Only bad rows: the refit is the curated one (its intervals are kept per
        knowledge version in the shared model folder)."""
        path = tmp_path / "rows.jsonl"
        _stored_file(path, [{**ROW, "as_of": "2019-06-01"}])
        settings = load_settings()
        job_id = jobs.submit_retrain(
            redis.Redis.from_url(redis_url),
            {
                **settings,
                "RIGHTSIZE_SUBMISSIONS_FILE": str(path),
                "RIGHTSIZE_KEY_PREFIX": redis_prefix,
            },
            False,
        )
        done = _job_after_work(redis_url, redis_prefix, job_id)
        assert done["status"] == "finished", done
        assert done["result"]["submitted_rows"] == 0
        assert done["result"]["knowledge_version"] == knowledge.version
        [skipped] = done["result"]["skipped"]
        assert skipped["id"] == "old-0"
        assert skipped["reason"].startswith("as_of: not before 2023-01-01")


def _job_after_work(redis_url: str, prefix: str, job_id: str) -> dict[str, Any]:
    """``GET /v1/jobs/{id}`` (an administrator's) after a worker emptied the queue of the
    test's own ``prefix``."""
    jobs.worker(redis.Redis.from_url(redis_url), prefix, simple=True).work(burst=True)
    admin, _ = KeyFile(KEYS_FILE).create("admin", "admin")
    app = create_app({"TESTING": True, "REDIS_URL": redis_url, "KEY_PREFIX": prefix})
    found: dict[str, Any] = get_json(with_key(app.test_client(), admin), f"/v1/jobs/{job_id}")
    return found


@pytest.mark.slow  # a refit on the queue's worker
class TestAFailedRefit:
    def test_marks_nothing_and_says_why(self, tmp_path: Path, knowledge: Knowledge) -> None:
        store = SubmissionStore(tmp_path / "rows.jsonl")
        store.trained_path.write_text('{"knowledge_version": "in use"}', encoding="utf-8")
        before = store.trained_path.stat()
        with pytest.raises(RetrainFailed, match=r"failed \(IndexError: .*\); nothing was marked"):
            retrain(replace(knowledge, benchmarks=[]), Catalog.load(), store, tmp_path / "model")
        after = store.trained_path.stat()
        assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)
        assert store.trained() == {"knowledge_version": "in use"}

    def test_the_command_exits_1_with_one_line(
        self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("RIGHTSIZE_KNOWLEDGE_DIR", str(_no_lambda_rows(tmp_path)))
        monkeypatch.setenv("RIGHTSIZE_SUBMISSIONS_FILE", str(tmp_path / "rows.jsonl"))
        monkeypatch.setenv("RIGHTSIZE_MODEL_DIR", str(tmp_path / "model"))
        result = CliRunner().invoke(main, ["retrain"])
        assert result.exit_code == 1
        assert "Traceback" not in result.output
        [line] = result.output.strip().splitlines()
        assert line.startswith("Error: the refit on knowledge ")
        assert line.endswith("nothing was marked, the services keep the model they use")
        assert not SubmissionStore(tmp_path / "rows.jsonl").trained_path.exists()

    def test_fails_the_job_with_the_reason(
        self, tmp_path: Path, redis_url: str, redis_prefix: str
    ) -> None:
        settings = load_settings()
        rows = tmp_path / "rows.jsonl"
        job_id = jobs.submit_retrain(
            redis.Redis.from_url(redis_url),
            {
                **settings,
                "RIGHTSIZE_KNOWLEDGE_DIR": str(_no_lambda_rows(tmp_path)),
                "RIGHTSIZE_SUBMISSIONS_FILE": str(rows),
                "RIGHTSIZE_MODEL_DIR": str(tmp_path),
                "RIGHTSIZE_KEY_PREFIX": redis_prefix,
            },
            False,
        )
        done = _job_after_work(redis_url, redis_prefix, job_id)
        assert done["status"] == "failed", done
        assert done["error"]["kind"] == "retrain-failed"
        assert "nothing was marked" in done["error"]["message"]
        assert not SubmissionStore(rows).trained_path.exists()
