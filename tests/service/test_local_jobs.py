"""The embedded set-up's background jobs (service/infra/local_jobs.py): kept in the store's file
across restarts, shared fairly between keys (issue 37: one key's 1 GiB trace made another
key's 4-second trace wait 69 s), a bounded number per key."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from service.infra.embedded_store import EmbeddedStore
from service.infra.local_jobs import LocalJobs, OwnerBusy


def _wait(jobs: LocalJobs, job_id: str, status: str = "finished") -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while True:
        found = jobs.status(job_id)
        assert found is not None
        if found[0]["status"] == status:
            return found[0]
        assert time.monotonic() < deadline, found
        time.sleep(0.02)


class Work:
    """Jobs that take as long as their payload says, or until released."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.started: list[str] = []

    def __call__(self, payload: dict[str, Any], progress: Any) -> dict[str, Any]:
        self.started.append(payload["name"])
        progress(f"running {payload['name']}")
        if payload.get("hold"):
            self.release.wait(30)
        return {"result": payload["name"]}


def test_a_key_running_a_long_job_leaves_a_runner_to_the_others(tmp_path: Path) -> None:
    work = Work()
    jobs = LocalJobs(EmbeddedStore(tmp_path / "s.sqlite3", 2**30), 3600, {"w": work})
    big = [jobs.submit("w", {"name": f"big-{i}", "hold": True}, "key:a") for i in range(2)]
    _wait(jobs, big[0], "started")
    small = jobs.submit("w", {"name": "small"}, "key:b")
    assert _wait(jobs, small)["result"] == "small"  # while key:a's first still runs
    waiting = jobs.status(big[1])
    assert waiting is not None
    assert waiting[0]["status"] == "queued"  # a key runs one of the two runners at most
    work.release.set()
    assert _wait(jobs, big[1])["result"] == "big-1"


def test_a_key_has_a_bounded_number_of_jobs(tmp_path: Path) -> None:
    work = Work()
    jobs = LocalJobs(EmbeddedStore(tmp_path / "s.sqlite3", 2**30), 3600, {"w": work}, per_owner=2)
    for i in range(2):
        jobs.submit("w", {"name": str(i), "hold": True}, "key:a")
    with pytest.raises(OwnerBusy, match="its share is 2"):
        jobs.submit("w", {"name": "third"}, "key:a")
    jobs.submit("w", {"name": "theirs"}, "key:b")  # others are not held to key:a's share
    work.release.set()


def test_a_job_a_restart_cut_short_runs_again_and_one_done_stays_done(tmp_path: Path) -> None:
    """A job marked started by a process that is gone (the pid of no process, or of another
    one since) is run again when runners start; a finished one keeps its state."""
    path = tmp_path / "s.sqlite3"
    store = EmbeddedStore(path, 2**30)
    before = LocalJobs(store, 3600, {"w": Work()})
    done = before.submit("w", {"name": "done"}, "key:a")
    _wait(before, done)
    # a job as a runner that is gone left it (no process has that pid and start time)
    with store.writing(durable=True) as db:
        db.execute(
            "INSERT INTO jobs VALUES ('cut', 'key:a', 'w', ?, ?, '999999999:1', ?, ?)",
            (
                json.dumps({"name": "cut"}),
                json.dumps({"job_id": "cut", "status": "started"}),
                time.time(),
                time.time(),
            ),
        )
    after = LocalJobs(EmbeddedStore(path, 2**30), 3600, {"w": Work()})
    after.start()
    assert _wait(after, "cut")["result"] == "cut"
    kept = after.status(done)
    assert kept is not None
    assert kept[0]["result"] == "done"
