"""The store: a real Redis, the in-process fallback, and the embedded SQLite store."""

from __future__ import annotations

import multiprocessing
import resource
import time
from pathlib import Path

import pytest

from service.config import load_settings
from service.infra.cache import MemoryCache, RedisCache, make_cache, redis_client
from service.infra.embedded_store import EmbeddedStore
from service.infra.files import StoreFull


def _settings(**given: object) -> dict[str, object]:
    return load_settings(given, environ={})


class TestMemoryCache:
    def test_round_trip_and_expiry(self) -> None:
        cache = MemoryCache(max_items=10)
        cache.set("a", b"1", ttl_s=60)
        assert cache.get("a") == b"1"
        cache.set("b", b"2", ttl_s=1)
        cache._items["b"] = (time.monotonic() - 1, b"2")  # expire it without sleeping
        assert cache.get("b") is None

    def test_evicts_least_recently_used(self) -> None:
        cache = MemoryCache(max_items=2)
        cache.set("a", b"1", 60)
        cache.set("b", b"2", 60)
        cache.get("a")
        cache.set("c", b"3", 60)
        assert cache.get("b") is None
        assert cache.get("a") == b"1"

    def test_health_says_fallback(self) -> None:
        health = MemoryCache(1).health()
        assert health["backend"] == "memory"
        assert health["fallback"] is True


class TestRedisCache:
    def test_round_trip_with_ttl(self, redis_url: str, redis_prefix: str) -> None:
        cache = make_cache(_settings(REDIS_URL=redis_url, KEY_PREFIX=redis_prefix))
        assert isinstance(cache, RedisCache)
        cache.set("k", b"value", ttl_s=30)
        assert cache.get("k") == b"value"
        ttl = cache.client.ttl(redis_prefix + "k")
        assert 0 < ttl <= 30
        cache.delete("k")
        assert cache.get("k") is None
        assert cache.health() == {"backend": "redis", "ok": True, "fallback": False}

    def test_unreachable_redis_falls_back_to_this_process(self) -> None:
        cache = RedisCache(redis_client("redis://127.0.0.1:1/0", timeout_s=0.2), "p:")
        assert cache.get("k") is None
        assert cache.set("k", b"v", 10) is False  # kept, but only here
        assert cache.get("k") == b"v"
        cache.delete("k")
        assert cache.get("k") is None
        health = cache.health()
        assert health["ok"] is False
        assert "error" in health

    def test_no_url_means_the_embedded_store(self, tmp_path: Path) -> None:
        store = make_cache(_settings(STORE_FILE=str(tmp_path / "s.sqlite3")))
        assert store.backend == "sqlite"
        assert store.shared is True


def _write_in_another_process(path: str) -> None:
    EmbeddedStore(path, 2**20).set("theirs", b"from another process", 60, durable=True)


class TestEmbeddedStore:
    def test_round_trip_expiry_and_delete(self, tmp_path: Path) -> None:
        store = EmbeddedStore(tmp_path / "s.sqlite3", 2**20)
        store.set("a", b"1", ttl_s=60)
        assert store.get("a") == b"1"
        store.set("b", b"2", ttl_s=-1)  # already expired
        assert store.get("b") is None
        store.delete("a")
        assert store.get("a") is None

    def test_what_one_opening_wrote_another_reads(self, tmp_path: Path) -> None:
        """A new process (a restarted worker, a compute process) reads what was stored."""
        path = tmp_path / "s.sqlite3"
        EmbeddedStore(path, 2**20).set("k", b"kept", 60, durable=True)
        process = multiprocessing.get_context("spawn").Process(
            target=_write_in_another_process, args=(str(path),)
        )
        process.start()
        process.join(60)
        again = EmbeddedStore(path, 2**20)
        assert again.get("k") == b"kept"
        assert again.get("theirs") == b"from another process"

    def test_cached_answers_make_room_and_durable_ones_are_never_evicted(
        self, tmp_path: Path
    ) -> None:
        store = EmbeddedStore(tmp_path / "s.sqlite3", 10_000)
        store.set("kept", b"k" * 4000, 60, durable=True)
        for i in range(10):
            store._checked = 0.0  # add the bytes up on every write (not every 5 s)
            store.set(f"cached-{i}", b"c" * 1000, 60)
        assert store.get("kept") == b"k" * 4000
        assert store.get("cached-0") is None  # the oldest cached answers went first
        assert store.get("cached-9") == b"c" * 1000
        store._checked = 0.0
        with pytest.raises(StoreFull, match="RIGHTSIZE_STORE_MAX_BYTES"):
            store.set("another", b"x" * 9000, 60, durable=True)
        assert store.get("another") is None
        assert store.get("kept") == b"k" * 4000

    def test_a_full_disk_is_store_full_with_nothing_written(self, tmp_path: Path) -> None:
        store = EmbeddedStore(tmp_path / "s.sqlite3", 2**30)
        store.set("before", b"1", 60, durable=True)
        size = (tmp_path / "s.sqlite3").stat().st_size
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 4096 * 4, hard))
        try:
            with pytest.raises(StoreFull):  # noqa: PT012 - the limit falls on one of them
                for i in range(200):
                    store.set(f"big-{i}", b"b" * 65536, 60, durable=True)
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
        assert store.get("before") == b"1"  # Python ignores SIGXFSZ: the write fails
