"""The performance model is trained by a command, and by the service as it starts."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from knowledge import Knowledge
from service import create_app
from service.cli import main
from service.engine.estimating.model import MODEL_VERSION, PerformanceModel

pytestmark = pytest.mark.slow  # subprocesses: the service starting


def test_train_command_builds_the_model_into_its_cache(
    model: PerformanceModel, knowledge: Knowledge, cache_copy: Path
) -> None:
    result = CliRunner().invoke(main, ["train", "--model-dir", str(cache_copy)])
    assert result.exit_code == 0, result.output
    assert f"performance model {MODEL_VERSION} on knowledge {knowledge.version}" in result.output
    assert f"{len(model.single)} single-GPU" in result.output
    assert list(cache_copy.glob(f"intervals-{knowledge.version}-*-{MODEL_VERSION}.json"))


def test_warm_builds_in_the_background_and_readyz_says_so(cache_copy: Path) -> None:
    app = create_app({"TESTING": True, "MODEL_DIR": str(cache_copy)})
    client = app.test_client()
    ready = client.get("/readyz").get_json()
    assert ready["performance_model"]["state"] == "not-built"
    estimates = app.extensions["rightsize"].estimates
    thread = estimates.warm()
    assert estimates.warm() is thread  # one build, however often asked
    thread.join(timeout=300)
    assert not thread.is_alive()
    model = client.get("/readyz").get_json()["performance_model"]
    assert model["state"] == "ready"
    assert model["model_version"] == MODEL_VERSION
    assert model["built_s"] > 0


def test_two_apps_own_their_models(cache_copy: Path) -> None:
    """No process-wide model: each app's estimate service builds and keeps its own."""
    one = create_app({"TESTING": True, "MODEL_DIR": str(cache_copy)})
    two = create_app({"TESTING": True, "MODEL_DIR": str(cache_copy)})
    first = one.extensions["rightsize"].estimates
    second = two.extensions["rightsize"].estimates
    assert first.built() is None
    assert second.built() is None
    model = first.model()
    assert first.model() is model
    assert second.built() is None
    assert second.model() is not model


def test_warm_reports_a_failed_build(cache_copy: Path, monkeypatch: Any) -> None:
    app = create_app({"TESTING": True, "MODEL_DIR": str(cache_copy / "elsewhere")})

    def broken(*_: Any) -> PerformanceModel:
        raise OSError("disk full")

    monkeypatch.setattr("service.engine.estimating.on_request.build", broken)
    estimates = app.extensions["rightsize"].estimates
    estimates.warm().join(timeout=60)
    status = app.test_client().get("/readyz").get_json()["performance_model"]
    assert status == {**status, "state": "failed", "detail": "OSError: disk full"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _get(url: str) -> dict[str, Any]:
    with urllib.request.urlopen(url, timeout=5) as response:
        body: dict[str, Any] = json.loads(response.read())
        return body


def test_serve_builds_the_model_as_it_starts(cache_copy: Path) -> None:
    port = _free_port()
    env = {**os.environ, "RIGHTSIZE_MODEL_DIR": str(cache_copy)}
    env.pop("RIGHTSIZE_REDIS_URL", None)
    log = cache_copy.parent / "serve.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "from service.cli import main; main()",
                "serve",
                "--port",
                str(port),
            ],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 240
        state = None
        while time.monotonic() < deadline and state != "ready":
            assert server.poll() is None, log.read_text()
            with contextlib.suppress(OSError):  # not listening yet
                state = _get(f"http://127.0.0.1:{port}/readyz")["performance_model"]["state"]
            time.sleep(0.5)
        # no estimate was asked for: the worker built the model as it started
        assert state == "ready", log.read_text()
        assert "performance model" in log.read_text()  # the worker's log line
    finally:
        server.terminate()
        server.wait(timeout=30)
