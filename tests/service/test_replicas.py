"""Replicas share one Redis and nothing else: two service processes and an rq worker,
each started as in production (``rightsize serve``, ``rightsize worker``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import WRITE_KEY
from tests.profiles.trace_factory import known_steps
from tests.service.redis_server import RedisServer, free_port

pytestmark = pytest.mark.slow  # subprocesses: two servers and a worker

RIGHTSIZE = str(Path(sys.executable).with_name("rightsize"))
PROFILE = {
    "model": {"name": "gpt2"},
    "workload": {"task": "training", "batch_size": 2, "seq_len": 128},
}


def _call(
    port: int, method: str, path: str, body: bytes | None = None, kind: str = "application/json"
) -> tuple[int, Any]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}",
        data=body,
        method=method,
        headers={"Content-Type": kind, "Authorization": f"Bearer {WRITE_KEY}"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[tuple[RedisServer, list[int], dict[str, str]]]:
    redis = RedisServer()
    redis.start()
    env = {
        **os.environ,
        "RIGHTSIZE_REDIS_URL": redis.url,
        "RIGHTSIZE_TRACE_ASYNC_BYTES": "2000",
        "RIGHTSIZE_LOG_LEVEL": "WARNING",
        # one compute process a server: what they share is the point, and each process
        # builds an app as it starts (two cores: start-ups add up)
        "RIGHTSIZE_COMPUTE_PROCESSES": "1",
    }
    ports = [free_port(), free_port()]
    logs = [(tmp_path / f"serve-{port}.log").open("w") for port in ports]
    servers = [
        subprocess.Popen(
            [RIGHTSIZE, "serve", "--port", str(port), "--workers", "1"],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        for port, log in zip(ports, logs, strict=True)
    ]
    try:
        deadline = time.monotonic() + 180
        for port in ports:
            while True:  # up, and its compute processes take work (they build their apps)
                try:
                    status, ready = _call(port, "GET", "/readyz")
                    compute = ready["compute"]
                    if status == 200 and compute["ready"] == compute["processes"]:
                        break
                except OSError:
                    pass
                assert time.monotonic() < deadline, (tmp_path / f"serve-{port}.log").read_text()
                time.sleep(0.5)
        yield redis, ports, env
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=30)
        for log in logs:
            log.close()
        redis.close()


def test_two_replicas_and_a_worker_share_one_redis(
    cluster: tuple[RedisServer, list[int], dict[str, str]],
) -> None:
    _, (first, second), env = cluster
    # a cache entry written through one is served by the other
    status, made = _call(first, "POST", "/v1/profiles", json.dumps(PROFILE).encode())
    assert status == 200, made
    status, read = _call(second, "GET", f"/v1/profiles/{made['profile_id']}")
    assert status == 200, read
    assert read["flops"] == made["flops"]
    status, again = _call(second, "POST", "/v1/profiles", json.dumps(PROFILE).encode())
    assert again["cached"] is True
    # a job queued through one is run by the worker and read through the other
    status, queued = _call(
        first, "POST", "/v1/traces", known_steps(400).gzipped(), "application/gzip"
    )
    assert status == 202, queued
    assert _call(second, "GET", queued["job_url"])[1]["status"] == "queued"
    worker = subprocess.run(
        [RIGHTSIZE, "worker", "--burst"], env=env, capture_output=True, timeout=300, check=False
    )
    assert worker.returncode == 0, worker.stderr.decode()[-2000:]
    status, done = _call(second, "GET", queued["job_url"])
    assert done["status"] == "finished", done
    status, trace = _call(first, "GET", done["trace_url"])
    assert status == 200
    assert trace["analysis"]["steps_found"] > 0
