"""Submitted benchmark rows under pressure (issue 26, findings 3 and 4): a write the disk
refuses is not acknowledged and leaves nothing behind, a batch is served whole or not at
all, quotas bound what one key and all keys may store, and reading the rows after a new
batch reads only that batch."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from flask import Flask

from service import create_app, submissions
from service.infra.keys import KeyFile
from service.submissions import SubmissionStore
from tests.conftest import KEYS_FILE, WRITE_KEY, with_key
from tests.service.helpers import get_json, problem
from tests.service.test_benchmarks_write import ROW

FULL_DISK = """
import json, resource, sys
from service import create_app
path, key = sys.argv[1], sys.argv[2]
app = create_app({"TESTING": True, "SUBMISSIONS_FILE": path})
client = app.test_client()
client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {key}"
row = json.loads(sys.argv[3])
out = []
def send(n):
    response = client.post("/v1/benchmarks", json={"rows": [row] * n})
    out.append([response.status_code, response.get_json()])
send(10)
size = __import__("os").path.getsize(path)
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 4096, resource.RLIM_INFINITY))
send(450)  # about 200 KB: the file may grow by 4 KB
send(450)
send(1)  # a small one still fits
print(json.dumps(out))
"""


def _app(tmp_path: Path, **settings: Any) -> Flask:
    return create_app({"TESTING": True, "SUBMISSIONS_FILE": str(tmp_path / "rows.jsonl"),
                       **settings})  # fmt: skip


def _store(app: Flask) -> SubmissionStore:
    store: SubmissionStore = app.extensions["rightsize"].submissions
    return store


@pytest.mark.slow  # a full disk
def test_a_batch_the_disk_refuses_is_a_507_and_leaves_nothing(tmp_path: Path) -> None:
    """With the file size capped (a full disk), a 450-row batch was acknowledged while 267
    rows reached the disk, and served so; later batches got a 500."""
    path = tmp_path / "rows.jsonl"
    run = subprocess.run(
        [sys.executable, "-c", FULL_DISK, str(path), WRITE_KEY, json.dumps(ROW)],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    (small, status_a), (big, refused), (again, _), (after, status_b) = json.loads(
        run.stdout.strip().splitlines()[-1]
    )
    assert (small, big, again, after) == (201, 507, 507, 201), run.stdout
    assert refused["type"].endswith("insufficient-storage")
    assert "nothing was stored" in refused["detail"]
    store = SubmissionStore(path)
    assert [s.batch_id for s in store.all()] == [status_a["batch_id"]] * 10 + [status_b["batch_id"]]
    assert path.read_bytes().endswith(b"\n")  # no part of the refused batches is left


def test_a_batch_cut_short_is_never_served_and_the_next_write_removes_it(
    tmp_path: Path,
) -> None:
    app = _app(tmp_path)
    client = with_key(app.test_client())
    first = client.post("/v1/benchmarks", json={"rows": [ROW] * 3}).get_json()
    path = _store(app).path
    whole = path.read_bytes()
    lines = [json.loads(line) for line in whole.splitlines()]
    assert {line["batch_rows"] for line in lines} == {3}
    # a crash after two of three lines of another batch (never acknowledged)
    cut = [{**line, "id": f"cut-{i}", "batch_id": "cut"} for i, line in enumerate(lines)]
    path.write_bytes(whole + b"".join(json.dumps(c).encode() + b"\n" for c in cut[:2]))
    assert len(SubmissionStore(path).all()) == 3
    problem(client.get("/v1/benchmarks/batches/cut"), 404)
    assert get_json(client, "/v1/benchmarks?layer=submitted")["total"] == 3
    second = client.post("/v1/benchmarks", json=ROW).get_json()
    fresh = SubmissionStore(path).all()
    assert [s.batch_id for s in fresh] == [first["batch_id"]] * 3 + [second["batch_id"]]
    assert b'"cut"' not in path.read_bytes()


def test_a_key_stores_at_most_its_rows_a_day(tmp_path: Path) -> None:
    app = _app(tmp_path, SUBMISSIONS_PER_KEY_PER_DAY=5)
    client = with_key(app.test_client())
    assert client.post("/v1/benchmarks", json={"rows": [ROW] * 4}).status_code == 201
    response = client.post("/v1/benchmarks", json={"rows": [ROW] * 2})
    found = problem(response, 429)
    assert "may store 5 a day" in found["detail"]
    assert 0 < int(response.headers["Retry-After"]) <= 86400
    assert client.post("/v1/benchmarks", json=ROW).status_code == 201  # the fifth fits
    assert len(_store(app).all()) == 5


def test_the_store_holds_at_most_its_rows_in_all(tmp_path: Path) -> None:
    app = _app(tmp_path, SUBMISSIONS_MAX_ROWS=6)
    client = with_key(app.test_client())
    assert client.post("/v1/benchmarks", json={"rows": [ROW] * 5}).status_code == 201
    found = problem(client.post("/v1/benchmarks", json={"rows": [ROW] * 2}), 507)
    assert "RIGHTSIZE_SUBMISSIONS_MAX_ROWS" in found["detail"]
    assert len(_store(app).all()) == 5


def test_a_key_keeps_at_most_its_rows_before_the_store_is_full(tmp_path: Path) -> None:
    """Ten write keys filled the store's 100,000 rows in 14 s, and every key got 507 from
    then on: a key has a cap of its own, below the store's."""
    app = _app(tmp_path, SUBMISSIONS_MAX_ROWS_PER_KEY=4, SUBMISSIONS_MAX_ROWS=10)
    client = with_key(app.test_client())
    assert client.post("/v1/benchmarks", json={"rows": [ROW] * 4}).status_code == 201
    found = problem(client.post("/v1/benchmarks", json=ROW), 507)
    assert "RIGHTSIZE_SUBMISSIONS_MAX_ROWS_PER_KEY" in found["detail"]
    other, _ = KeyFile(KEYS_FILE).create("another team", "write")
    theirs = with_key(app.test_client(), other).post("/v1/benchmarks", json={"rows": [ROW] * 4})
    assert theirs.status_code == 201  # the store still has room for the others
    assert len(_store(app).all()) == 8


def test_reading_after_a_new_batch_reads_and_checks_only_that_batch(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """393,000 rows took 48 s to list, again after every one-row batch: the whole file was
    read and every row checked again on each change."""
    app = _app(tmp_path)
    client = with_key(app.test_client())
    for _ in range(3):
        assert client.post("/v1/benchmarks", json={"rows": [ROW] * 1000}).status_code == 201
    checked: list[int] = []
    real = submissions.check_rows

    def counting(knowledge: Any, rows: Any, *rest: Any) -> Any:
        checked.append(len(rows))
        return real(knowledge, rows, *rest)

    monkeypatch.setattr(submissions, "check_rows", counting)
    assert get_json(client, "/v1/benchmarks?layer=submitted&page_size=1")["total"] == 3000
    assert sum(checked) == 3000  # the first read checks every row
    read: list[int] = []
    real_read = submissions._read_lines

    def reading(path: Path, data: bytes, index: Any) -> int:
        read.append(len(data))
        return real_read(path, data, index)

    monkeypatch.setattr(submissions, "_read_lines", reading)
    before = _store(app).path.stat().st_size
    checked.clear()
    assert client.post("/v1/benchmarks", json=ROW).status_code == 201
    grown = _store(app).path.stat().st_size - before
    assert get_json(client, "/v1/benchmarks?layer=submitted&page_size=1")["total"] == 3001
    assert checked == [1, 1]  # the new row as sent, then as stored: not the 3,000 before
    assert max(read) == grown  # what was appended, not the file


def test_a_batch_stored_before_lines_said_their_batch_is_served_whole(tmp_path: Path) -> None:
    """Files written before each line carried its batch's size (or whether it was shared):
    every row of a batch is still served with it, to the administrators (a row stored
    before sharing was a choice is not shared)."""
    app = _app(tmp_path)
    client = with_key(app.test_client())
    admin = with_key(app.test_client(), KeyFile(KEYS_FILE).create("admin", "admin")[0])
    path = _store(app).path
    legacy = [
        {"id": f"old-{i}", "batch_id": "old", "submitted_by": "k", "row": ROW,
         "submitted_at": "2026-11-30T10:00:00+00:00"}
        for i in range(3)
    ]  # fmt: skip
    path.write_text("".join(json.dumps(line) + "\n" for line in legacy), encoding="utf-8")
    assert [r["id"] for r in get_json(admin, "/v1/benchmarks/batches/old")["rows"]] == [
        "old-0", "old-1", "old-2"
    ]  # fmt: skip
    problem(client.get("/v1/benchmarks/batches/old"), 404)  # another key's, not shared
    new = client.post("/v1/benchmarks", json=ROW).get_json()
    assert len(get_json(client, f"/v1/benchmarks/batches/{new['batch_id']}")["rows"]) == 1
    assert len(get_json(admin, "/v1/benchmarks/batches/old")["rows"]) == 3
