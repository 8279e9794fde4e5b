"""Work nobody waits for is called off (issue 26, finding 2): eight abandoned profiles of a
10,000-expert model once made every new profile wait past its limit for 5.5 minutes.

The pool's own mechanics, on a child with a small app: a task whose client went away
while it waited for the child never runs; one whose client went away while it ran is
stopped and the child stays warm; a child that does not stop is replaced; one client
cannot hold more than its share. The client's departure is a socket closed at the far end,
as gunicorn's ``gunicorn.socket`` shows it. (Against the real server: test_abuse.py.)"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from service import create_app
from service.engine.errors import Abandoned, Busy
from service.infra import compute
from service.infra.compute import ComputePool
from service.infra.compute_child import _sleep
from service.security import client_id
from tests.service.compute_tasks import mark, small_app, stubborn

pytestmark = pytest.mark.slow  # subprocesses: a real server


@pytest.fixture(scope="module")
def app() -> Flask:
    return create_app({"TESTING": True})


@pytest.fixture(scope="module")
def pool() -> Iterator[ComputePool]:
    started = ComputePool(1, 0, {}, small_app, per_client=2, client=client_id)
    started.start()
    assert started.wait_ready(120)
    yield started
    started.stop()


@pytest.fixture
def client_of(app: Flask) -> Iterator[Any]:
    """Makes clients; closes their sockets afterwards."""
    made: list[Client] = []

    def make(address: str = "192.0.2.1") -> Client:
        made.append(Client(app, address))
        return made[-1]

    yield make
    for one in made:
        one.close()


class Client:
    """A request in progress whose client can leave (its socket closed at the far end)."""

    def __init__(self, app: Flask, address: str = "192.0.2.1") -> None:
        self.ours, self.theirs = socket.socketpair()
        self.context = app.test_request_context(
            "/v1/profiles",
            method="POST",
            environ_base={"REMOTE_ADDR": address},
            environ_overrides={"gunicorn.socket": self.ours},
        )

    def leave(self) -> None:
        self.theirs.close()

    def close(self) -> None:
        self.ours.close()
        self.theirs.close()

    def run(self, pool: ComputePool, timeout_s: float, fn: Any, *args: Any) -> Any:
        with self.context:
            return pool._run("test", timeout_s, lambda: "here", fn, *args)


def _in_thread(fn: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def target() -> None:
        started = time.monotonic()
        try:
            out["result"] = fn()
        except BaseException as exc:
            out["error"] = exc
        out["seconds"] = time.monotonic() - started

    thread = threading.Thread(target=target)
    thread.start()
    return thread, out


def test_a_task_whose_client_left_while_it_waited_never_runs(
    client_of: Any, pool: ComputePool, tmp_path: Path
) -> None:
    called_off = pool.status()["called_off"]
    busy, first = _in_thread(lambda: pool._run("test", 30, lambda: None, _sleep, 1.5))
    time.sleep(0.3)  # the child is busy with the first task
    marker = tmp_path / "ran"
    client = client_of()
    waiting, second = _in_thread(lambda: client.run(pool, 30, mark, str(marker)))
    time.sleep(0.3)
    client.leave()
    waiting.join(5)
    assert isinstance(second["error"], Abandoned)
    assert second["seconds"] < 1.5  # it did not wait for the child
    busy.join(10)
    assert first["result"] == 1.5
    assert pool._run("test", 30, lambda: None, _sleep, 0.01) == 0.01  # the next one runs
    assert not marker.exists()
    assert pool.status()["called_off"] == called_off + 1


def test_a_task_whose_client_left_while_it_ran_stops_and_the_child_stays(
    client_of: Any, pool: ComputePool
) -> None:
    pids, replaced = pool.pids(), pool.status()["replaced"]
    client = client_of()
    running, out = _in_thread(lambda: client.run(pool, 60, _sleep, 30))
    time.sleep(0.5)
    client.leave()
    running.join(5)
    assert isinstance(out["error"], Abandoned)
    assert out["seconds"] < 2
    started = time.monotonic()
    assert pool._run("test", 30, lambda: None, _sleep, 0.01) == 0.01
    assert time.monotonic() - started < 2  # the child stopped the task at once
    assert pool.pids() == pids  # and is the same warm process
    assert pool.status()["replaced"] == replaced


def test_a_task_past_its_deadline_is_called_off_like_an_abandoned_one(pool: ComputePool) -> None:
    pids = pool.pids()
    with pytest.raises(compute.TooSlow):
        pool._run("test", 0.5, lambda: None, _sleep, 30)
    assert pool._run("test", 30, lambda: None, _sleep, 0.01) == 0.01
    assert pool.pids() == pids


def test_one_client_holds_at_most_its_share_and_others_still_get_in(
    client_of: Any, pool: ComputePool
) -> None:
    """Two tasks of one client (its share) occupy and queue for the child: a third is a
    429 at once; another client's task waits its turn and runs."""
    greedy = [client_of("198.51.100.7") for _ in range(3)]
    held = [_in_thread(lambda c=c: c.run(pool, 30, _sleep, 1.0)) for c in greedy[:2]]
    time.sleep(0.3)
    with pytest.raises(Busy) as refused:
        greedy[2].run(pool, 30, _sleep, 0.01)
    assert refused.value.shared  # a 429
    assert refused.value.retry_after_s
    other = client_of("203.0.113.9")
    assert other.run(pool, 30, _sleep, 0.01) == 0.01
    for thread, out in held:
        thread.join(10)
        assert out["result"] == 1.0
    assert greedy[2].run(pool, 30, _sleep, 0.01) == 0.01  # its share is free again


def test_work_that_never_got_a_child_is_a_503_not_too_expensive(pool: ComputePool) -> None:
    busy, _ = _in_thread(lambda: pool._run("test", 30, lambda: None, _sleep, 1.0))
    time.sleep(0.2)
    with pytest.raises(Busy) as waited:
        pool._run("test", 0.3, lambda: None, _sleep, 0.01)
    assert not waited.value.shared  # a 503
    busy.join(5)


def test_a_child_that_does_not_stop_is_killed_and_replaced(
    client_of: Any, pool: ComputePool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(compute, "CALL_OFF_S", 0.5)
    pids, replaced = pool.pids(), pool.status()["replaced"]
    client = client_of()
    running, out = _in_thread(lambda: client.run(pool, 60, stubborn, 60))
    time.sleep(0.5)
    client.leave()
    running.join(5)
    assert isinstance(out["error"], Abandoned)
    deadline = time.monotonic() + 10
    while pool.pids() == pids and time.monotonic() < deadline:
        time.sleep(0.1)
    assert pool.pids()
    assert not pool.pids() & pids
    assert pool.status()["replaced"] == replaced + 1
    while pool.status()["ready"] < 1:  # until the new child has built its app, work runs here
        assert time.monotonic() < deadline + 60
        time.sleep(0.1)
    assert pool._run("test", 120, lambda: None, _sleep, 0.01) == 0.01  # the new child works


def test_work_in_the_worker_stops_when_its_client_leaves() -> None:
    """Rankings the worker does itself (no shared cache) check their client between
    candidates, as they check their time."""
    from service.engine import deadline

    left = [False]
    token = deadline.start(30, gone=lambda: left[0])
    try:
        deadline.check()
        left[0] = True
        time.sleep(deadline.PROBE_EVERY_S + 0.05)  # the socket is looked at every 0.2 s
        with pytest.raises(Abandoned):
            deadline.check()
    finally:
        deadline.stop(token)
