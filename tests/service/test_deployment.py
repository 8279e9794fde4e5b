"""The deployment files: gunicorn's settings load, compose runs the service, a worker and
Redis from one image, with what they share."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import yaml
from gunicorn.config import Config

ROOT = Path(__file__).resolve().parents[2]


def test_gunicorn_settings_are_valid_gunicorn_settings() -> None:
    conf = importlib.import_module("service.gunicorn_conf")
    config = Config()
    names = ("workers", "threads", "worker_class", "timeout", "graceful_timeout",
             "max_requests", "max_requests_jitter", "keepalive")  # fmt: skip
    for name in names:
        config.set(name, getattr(conf, name))  # gunicorn validates each
    # an event loop a worker: a connection holds no thread (service/front)
    assert config.worker_class_str == "service.front.worker.Worker"
    assert config.worker_class.__name__ == "Worker"
    assert config.timeout >= 30
    # a replaced worker builds the model again and loses what it keeps: not every minute
    # (at 5,000, a worker under bench_load's mix was replaced every 20 s)
    assert config.max_requests >= 50_000
    assert callable(conf.post_worker_init)


def test_how_often_a_worker_is_replaced_is_configurable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RIGHTSIZE_MAX_REQUESTS", "0")  # never
    conf = importlib.reload(importlib.import_module("service.gunicorn_conf"))
    try:
        assert (conf.max_requests, conf.max_requests_jitter) == (0, 0)
        Config().set("max_requests", conf.max_requests)
    finally:
        monkeypatch.delenv("RIGHTSIZE_MAX_REQUESTS")
        importlib.reload(conf)


def test_compose_runs_the_service_a_worker_and_redis() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"redis", "api", "worker"}
    assert "--appendonly" in services["redis"]["command"]
    assert services["worker"]["command"] == ["rightsize", "worker"]
    assert services["api"]["image"] == services["worker"]["image"]
    for name in ("api", "worker"):
        env = services[name]["environment"]
        assert env["RIGHTSIZE_REDIS_URL"].startswith("redis://redis:")
        assert env["RIGHTSIZE_KEYS_FILE"] == "/data/keys.json"  # one keys file, shared
    dockerfile = (ROOT / "Dockerfile").read_text()
    kept = ("KEYS_FILE=/data/keys.json", "STORE_FILE=/data/store.sqlite3",
            "SUBMISSIONS_FILE=/data/submissions.jsonl", "PRICES_FILE=/data/prices.csv")  # fmt: skip
    for setting in kept:
        assert f"RIGHTSIZE_{setting}" in dockerfile  # on the volume: kept across restarts
    assert 'VOLUME ["/data"]' in dockerfile
