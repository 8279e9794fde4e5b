"""The cache: a real Redis, and the in-process fallback."""

from __future__ import annotations

import time

from service.cache import MemoryCache, RedisCache, make_cache, redis_client


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
        cache = make_cache(redis_url, redis_prefix, timeout_s=1, max_items=1)
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

    def test_no_url_means_memory(self) -> None:
        assert make_cache(None, "p:", 1, 4).backend == "memory"
