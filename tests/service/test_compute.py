"""The compute processes (service/infra/compute.py): profiles counted and new recommendations
ranked in a niced child process, with the same answers and errors as in the worker; a child
that dies is replaced; without a shared cache the worker ranks them itself."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from flask import Flask
from werkzeug.test import TestResponse

from profiles.description import resolve
from profiles.model_catalog import Catalog
from profiles.workload import WorkloadSchema
from service import create_app
from service.engine.deciding import rank
from service.engine.errors import TooSlow
from service.front.bridge import lower_priority
from service.infra import compute, compute_child
from service.infra.compute import ComputePool
from service.state import state
from tests.conftest import with_key
from tests.service.helpers import problem

pytestmark = pytest.mark.slow  # subprocesses: compute processes

GPT2 = {"name": "gpt2"}
REC: dict[str, Any] = {
    "model": GPT2,
    "workload": {"task": "training", "batch_size": 4, "seq_len": 512, "precision": "bf16",
                 "dataset_tokens": 100_000_000},
    "constraints": {"max_gpus": 8},
}  # fmt: skip


@pytest.fixture(scope="module")
def pooled(redis_url: str) -> Iterator[Flask]:
    """An app whose worker has one compute process (as gunicorn's post_worker_init starts
    it), on a real Redis."""
    prefix = f"rightsize-test:compute-{os.getpid()}:"
    app = create_app(
        {"TESTING": True, "REDIS_URL": redis_url, "KEY_PREFIX": prefix, "COMPUTE_PROCESSES": 1}
    )
    with app.app_context():
        pool = state().compute
        pool.start()
        assert pool.running
        assert pool.wait_ready(120)  # until then, the worker computes
        yield app
        pool.stop()


def _metric(app: Flask, series: str) -> float:
    """The value of ``series`` (name and labels) in the app's /metrics; 0 if absent."""
    text = app.test_client().get("/metrics").get_data(as_text=True)
    found = [float(x.split()[-1]) for x in text.splitlines() if x.startswith(series + " ")]
    return found[0] if found else 0.0


def _tasks(app: Flask, kind: str, where: str) -> float:
    """``rightsize_compute_tasks_total{kind, where}`` from the app's /metrics."""
    return _metric(app, f'rightsize_compute_tasks_total{{kind="{kind}",where="{where}"}}')


def _profiled(app: Flask) -> float:
    """How many profile times the app's /metrics holds (``rightsize_profile_seconds``)."""
    return _metric(app, "rightsize_profile_seconds_count")


def _not_here(*_: Any, **__: Any) -> Any:
    raise AssertionError("computed in the worker, not in its compute process")


def _child_pids(pool: ComputePool) -> set[int]:
    return pool.pids()


def test_a_recommendation_ranked_in_a_child_is_the_one_the_worker_would_give(
    pooled: Flask, monkeypatch: pytest.MonkeyPatch, app: Flask
) -> None:
    """The worker does not rank it (its own ranking is made to fail): the child answers,
    stores it where every worker reads, and the answer matches a worker's own."""
    budget = 1000 + time.time_ns() % 10**6  # a request no test asked before
    body = {**REC, "constraints": {**REC["constraints"], "budget_monthly_usd": budget}}

    before = _tasks(pooled, "recommendation", "child")
    with monkeypatch.context() as patch:
        patch.setattr(rank, "recommend", _not_here)
        sent = with_key(pooled.test_client()).post("/v1/recommendations", json=body)
    assert sent.status_code == 200, sent.get_data(as_text=True)
    assert sent.mimetype == "application/json"
    assert _tasks(pooled, "recommendation", "child") == before + 1
    answer = sent.get_json()
    assert answer["request"] == body
    again = pooled.test_client().get(f"/v1/recommendations/{answer['id']}")
    assert again.get_json() == answer
    own = with_key(app.test_client()).post("/v1/recommendations", json=body).get_json()
    assert own["id"] == answer["id"]
    assert own["recommendations"] == answer["recommendations"]


def test_profiles_a_child_counts_while_ranking_reach_the_workers_metrics(
    pooled: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nobody scrapes a child: the profile it counts for a new recommendation comes back
    with the answer, into the worker's profile times and its tasks by where they ran."""
    batch = 5 + time.time_ns() % 1000  # a workload no test profiled before
    body = {**REC, "workload": {**REC["workload"], "batch_size": batch}}
    times, tasks = _profiled(pooled), _tasks(pooled, "profile", "child")
    monkeypatch.setattr(rank, "recommend", _not_here)
    sent = with_key(pooled.test_client()).post("/v1/recommendations", json=body)
    assert sent.status_code == 200, sent.get_data(as_text=True)
    counted = _profiled(pooled) - times  # the workload, and its variants the ranking tries
    assert counted >= 1
    assert _tasks(pooled, "profile", "child") == tasks + counted
    again = with_key(pooled.test_client()).post("/v1/recommendations", json=body)
    assert again.status_code == 200  # cached: nothing counted anywhere
    assert _profiled(pooled) == times + counted


def test_a_profile_counted_in_a_child_is_the_one_counted_here(
    pooled: Flask, monkeypatch: pytest.MonkeyPatch, app: Flask
) -> None:
    batch = 3 + time.time_ns() % 500
    body = {"model": GPT2, "workload": {"task": "training", "batch_size": batch, "seq_len": 64}}

    before = _tasks(pooled, "profile", "child")
    with monkeypatch.context() as patch:
        patch.setattr(compute, "count_here", _not_here)
        sent = with_key(pooled.test_client()).post("/v1/profiles", json=body)
    assert sent.status_code == 200, sent.get_data(as_text=True)
    assert _tasks(pooled, "profile", "child") == before + 1
    here = with_key(app.test_client()).post("/v1/profiles", json=body)
    for key in ("profile_id", "flops", "memory"):
        assert sent.get_json()[key] == here.get_json()[key]


def test_errors_raised_in_a_child_reach_the_client_as_the_worker_would_send_them(
    pooled: Flask, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A workload the model cannot take fails in the child's count (the profile) and in the
    child's ranking (the recommendation): the same 422 naming the field either way."""
    bad = {"task": "training", "batch_size": 2, "seq_len": 64, "image_size": 224}

    monkeypatch.setattr(compute, "count_here", _not_here)
    monkeypatch.setattr(rank, "recommend", _not_here)
    client = with_key(pooled.test_client())
    for path, body in (
        ("/v1/profiles", {"model": GPT2, "workload": bad}),
        ("/v1/recommendations", {"model": GPT2, "workload": bad}),
    ):
        sent = client.post(path, json=body)
        found = problem(sent, 422)
        assert "workload.image_size" in str(found), found


def test_an_error_keeps_its_own_fields_across_the_process_boundary() -> None:
    """The service's errors take their own arguments (a limit, a field), which pickling
    would not give back: they are carried as data and rebuilt."""
    failure = compute_child._Failure(TooSlow, ("message",), {"limit_s": 3.0})
    rebuilt = failure.rebuilt()
    assert isinstance(rebuilt, TooSlow)
    assert rebuilt.limit_s == 3.0
    model = resolve(GPT2, Catalog.load())
    workload = WorkloadSchema().load({"task": "training", "batch_size": 1, "seq_len": 10**7})
    carried = compute_child._count_in_child(model, workload, 5.0)
    assert isinstance(carried, compute_child._Failure)
    again = carried.rebuilt()
    assert "seq_len" in str(again)
    assert isinstance(again.__cause__, compute_child.ChildTraceback)  # where the child raised it
    assert "Traceback" in str(again.__cause__)


def test_a_child_that_dies_is_replaced_and_its_request_answered(pooled: Flask) -> None:
    """``/readyz`` reports the pool: its child alive, then the replacement, at the pool's
    priority although a request thread (which runs lower) found the child dead."""
    pool = state().compute
    before = _child_pids(pool)
    assert before
    ready = pooled.test_client().get("/readyz").get_json()["compute"]
    assert ready["running"]
    assert ready["alive"] == ready["processes"] == 1
    replaced = ready["replaced"]
    for pid in before:
        os.kill(pid, signal.SIGKILL)
    time.sleep(0.5)
    here = _tasks(pooled, "profile", "worker")
    batch = 3 + time.time_ns() % 500
    body = {"model": GPT2, "workload": {"task": "training", "batch_size": batch, "seq_len": 32}}
    base = os.getpriority(os.PRIO_PROCESS, 0)
    with ThreadPoolExecutor(1, initializer=lower_priority, initargs=(4,)) as threads:
        assert threads.submit(os.getpriority, os.PRIO_PROCESS, 0).result() == base + 4

        def ask() -> TestResponse:
            with pooled.app_context():
                return with_key(pooled.test_client()).post("/v1/profiles", json=body)

        sent = threads.submit(ask).result()
    assert sent.status_code == 200, sent.get_data(as_text=True)
    assert _tasks(pooled, "profile", "worker") == here + 1  # its child had died
    assert pool.running
    deadline = time.monotonic() + 120
    while pool.status()["ready"] < 1:  # the new child takes work once its app is built
        assert time.monotonic() < deadline
        time.sleep(0.2)
    after = with_key(pooled.test_client()).post(
        "/v1/profiles", json={**body, "workload": {**body["workload"], "batch_size": batch + 1}}
    )
    assert after.status_code == 200
    assert _child_pids(pool)
    assert not _child_pids(pool) & before
    assert [_niceness(pid) for pid in _child_pids(pool)] == [base + 10]
    ready = pooled.test_client().get("/readyz").get_json()
    assert ready["status"] == "ready"
    assert ready["compute"]["replaced"] == replaced + 1
    assert ready["compute"]["alive"] == 1


def test_the_embedded_store_is_shared_so_a_child_answers_and_the_worker_reads_it() -> None:
    """Without Redis the store is the SQLite file every process opens: a child ranks a new
    recommendation and stores it, and the worker serves it by its id."""
    app = create_app({"TESTING": True, "COMPUTE_PROCESSES": 1})
    with app.app_context():
        pool = state().compute
        pool.start()
        try:
            assert pool.wait_ready(120)
            sent = with_key(app.test_client()).post("/v1/recommendations", json=REC)
            assert sent.status_code == 200, sent.get_data(as_text=True)
            assert _tasks(app, "recommendation", "child") == 1
            ident = sent.get_json()["id"]
            again = app.test_client().get(f"/v1/recommendations/{ident}")
            assert again.get_data() == sent.get_data()
        finally:
            pool.stop()


def test_while_redis_is_away_the_worker_ranks_new_recommendations_itself(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While Redis is away a child's stored answer would be its own (each process keeps
    what it stores meanwhile): the worker ranks (and stores) it."""
    app = create_app({"TESTING": True, "COMPUTE_PROCESSES": 1,
                      "REDIS_URL": "redis://127.0.0.1:1/0", "REDIS_TIMEOUT_S": 0.2})  # fmt: skip
    with app.app_context():
        pool = state().compute
        pool.start()
        try:
            assert pool.wait_ready(120)
            calls = []
            real = rank.recommend

            def counted(*args: Any, **kwargs: Any) -> Any:
                calls.append(1)
                return real(*args, **kwargs)

            monkeypatch.setattr(rank, "recommend", counted)
            sent = with_key(app.test_client()).post("/v1/recommendations", json=REC)
            assert sent.status_code == 200
            assert calls == [1]
            assert _tasks(app, "recommendation", "worker") == 1
            assert _tasks(app, "recommendation", "child") == 0
            ident = sent.get_json()["id"]
            assert app.test_client().get(f"/v1/recommendations/{ident}").status_code == 200
        finally:
            pool.stop()
        ready = app.test_client().get("/readyz").get_json()["compute"]
        assert not ready["running"]
        assert ready["alive"] == 0
        assert "not started" in ready["detail"]


WORKER = """
import sys, time
from service import compute_app
from service.infra.compute import ComputePool
from service.config import load_settings
pool = ComputePool(1, 10, load_settings(), compute_app)
pool.start()
print(pool.wait_ready(120), flush=True)
print(*pool.pids(), flush=True)
time.sleep(120)
"""


def test_a_child_ends_when_its_worker_is_killed() -> None:
    """gunicorn kills a stuck worker outright (its timeout): the worker cannot stop its
    children, which would wait on their queue forever; each follows its worker and ends."""
    with subprocess.Popen(
        [sys.executable, "-c", WORKER], stdout=subprocess.PIPE, text=True
    ) as worker:
        try:
            assert worker.stdout is not None
            assert worker.stdout.readline().strip() == "True"  # the child's app is built
            (child,) = (int(p) for p in worker.stdout.readline().split())
            assert _alive(child)
            assert _niceness(child) == 10
        finally:
            worker.kill()
    deadline = time.monotonic() + 15
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
            return handle.read().split(")")[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _niceness(pid: int) -> int:
    with open(f"/proc/{pid}/stat", encoding="ascii") as handle:
        return int(handle.read().split(")")[1].split()[16])
