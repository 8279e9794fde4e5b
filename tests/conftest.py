"""Shared fixtures: the real knowledge base, a fresh app per test, a real Redis."""

from __future__ import annotations

import os
import tempfile
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from werkzeug.serving import make_server

from knowledge import Knowledge, load_knowledge
from knowledge.derive import default_shared_root
from service import create_app
from service.app import Shared
from service.infra.keys import KeyFile

REDIS_URL = os.environ.get("RIGHTSIZE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
SHARED_DATA = default_shared_root()
# every app the tests make keeps its API keys here, never in the user's own keys file
KEYS_FILE = Path(tempfile.mkdtemp(prefix="rightsize-test-keys-")) / "keys.json"
os.environ["RIGHTSIZE_KEYS_FILE"] = str(KEYS_FILE)
# and their submitted benchmark rows here (a test that submits uses its own file)
os.environ["RIGHTSIZE_SUBMISSIONS_FILE"] = str(KEYS_FILE.with_name("submissions.jsonl"))
os.environ["RIGHTSIZE_PRICES_FILE"] = str(KEYS_FILE.with_name("prices.csv"))
# the embedded store of apps made outside a test (module fixtures); each test has its own
os.environ["RIGHTSIZE_STORE_FILE"] = str(KEYS_FILE.with_name("store.sqlite3"))
# the performance model's cache: the tests' own, kept between sessions (its interval
# quantiles take a while), so that nothing the user made (`rightsize validate`'s report)
# shows through and nothing a test makes lands in the user's cache
os.environ["RIGHTSIZE_MODEL_DIR"] = str(Path(tempfile.gettempdir()) / "rightsize-test-models")
WRITE_KEY, _ = KeyFile(KEYS_FILE).create("tests", "write")


def with_key(client: FlaskClient, token: str = WRITE_KEY) -> FlaskClient:
    """``client`` sending ``token`` (by default a write key) with every request."""
    client.environ_base["HTTP_AUTHORIZATION"] = f"Bearer {token}"
    return client


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--part",
        choices=("all", "parallel", "serial"),
        default="all",
        help="parallel: leave out the tests marked serial (scripts/test runs these in "
        "processes side by side); serial: only those, run after, alone",
    )


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """With ``--part serial``, test files with no serial test are not even imported (their
    collection took half a minute for nothing)."""
    if config.getoption("--part") != "serial" or collection_path.suffix != ".py":
        return None
    name = collection_path.name
    if not name.startswith("test_"):
        return None
    return "mark.serial" not in collection_path.read_text(encoding="utf-8")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    part = config.getoption("--part")
    if part == "all":
        return
    keep, dropped = [], []
    for item in items:
        alone = item.get_closest_marker("serial") is not None
        (keep if alone == (part == "serial") else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.fixture(autouse=True)
def _own_store(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every app a test makes starts on an empty embedded store of its own."""
    monkeypatch.setenv("RIGHTSIZE_STORE_FILE", str(tmp_path / "store.sqlite3"))


@pytest.fixture(scope="session")
def knowledge() -> Knowledge:
    return load_knowledge()


# the rule book and the layout searches, shared by the apps of this test process as a
# service's own requests share them (an app per test would search every layout again)
SHARED = Shared()


@pytest.fixture
def app() -> Flask:
    return create_app({"TESTING": True}, shared=SHARED)


@pytest.fixture
def client(app: Flask) -> FlaskClient:
    """A client with a write key (the uploads need one; reads ignore it)."""
    return with_key(app.test_client())


@pytest.fixture
def anonymous(app: Flask) -> FlaskClient:
    """A client without a key."""
    return app.test_client()


@pytest.fixture(scope="session")
def redis_url() -> str:
    """A real Redis server: the test command starts one; its absence is a failure, not a skip."""
    client = redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        client.ping()
    except redis.RedisError as exc:
        pytest.fail(f"no Redis at {REDIS_URL} ({exc}); run the README's test command")
    return REDIS_URL


@pytest.fixture
def redis_prefix(redis_url: str) -> Iterator[str]:
    """A key prefix unique to the test; its keys are deleted afterwards (nothing else is)."""
    prefix = f"rightsize-test:{uuid.uuid4().hex}:"
    yield prefix
    client = redis.Redis.from_url(redis_url)
    keys = list(client.scan_iter(match=prefix + "*"))
    if keys:
        client.delete(*keys)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data, where CI keeps the raw public data; skip (saying so) where absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(
            f"raw public data not found at {SHARED_DATA}; the project's own data covers this"
        )
    return SHARED_DATA


@pytest.fixture(scope="module")
def live_server() -> Iterator[str]:
    """The app served over real HTTP on a free loopback port (threaded werkzeug, the
    in-process cache): its base URL, e.g. ``http://127.0.0.1:41234``."""
    server = make_server("127.0.0.1", 0, create_app({"TESTING": True}), threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=10)
