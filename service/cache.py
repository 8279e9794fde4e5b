"""Result cache: Redis when ``RIGHTSIZE_REDIS_URL`` is set, an in-process LRU otherwise.

Both store bytes under string keys with a time to live. The Redis cache never raises on
a lost connection during a request: a cache is an optimisation, so a failed read is a
miss and a failed write is dropped (and logged); ``/readyz`` reports the outage.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from typing import Protocol

import redis

log = logging.getLogger(__name__)


class Cache(Protocol):
    backend: str

    def get(self, key: str) -> bytes | None: ...

    def set(self, key: str, value: bytes, ttl_s: int) -> None: ...

    def delete(self, key: str) -> None: ...

    def health(self) -> dict[str, object]: ...


class MemoryCache:
    """A thread-safe LRU with per-entry expiry, for running without Redis."""

    backend = "memory"

    def __init__(self, max_items: int) -> None:
        self._items: OrderedDict[str, tuple[float, bytes]] = OrderedDict()
        self._max = max_items
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes | None:
        with self._lock:
            entry = self._items.get(key)
            if entry is None:
                return None
            expires, value = entry
            if expires < time.monotonic():
                del self._items[key]
                return None
            self._items.move_to_end(key)
            return value

    def set(self, key: str, value: bytes, ttl_s: int) -> None:
        with self._lock:
            self._items[key] = (time.monotonic() + ttl_s, value)
            self._items.move_to_end(key)
            while len(self._items) > self._max:
                self._items.popitem(last=False)

    def delete(self, key: str) -> None:
        with self._lock:
            self._items.pop(key, None)

    def health(self) -> dict[str, object]:
        return {"backend": self.backend, "ok": True, "fallback": True, "items": len(self._items)}


class RedisCache:
    """Cache entries in Redis under ``prefix``."""

    backend = "redis"

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self.client = client
        self.prefix = prefix

    def get(self, key: str) -> bytes | None:
        try:
            value = self.client.get(self.prefix + key)
        except redis.RedisError as exc:
            log.warning("redis get failed, treating as a miss: %s", exc)
            return None
        return value if isinstance(value, bytes) else None

    def set(self, key: str, value: bytes, ttl_s: int) -> None:
        try:
            self.client.set(self.prefix + key, value, ex=ttl_s)
        except redis.RedisError as exc:
            log.warning("redis set failed, result not cached: %s", exc)

    def delete(self, key: str) -> None:
        try:
            self.client.delete(self.prefix + key)
        except redis.RedisError as exc:
            log.warning("redis delete failed: %s", exc)

    def health(self) -> dict[str, object]:
        try:
            self.client.ping()
        except redis.RedisError as exc:
            return {"backend": self.backend, "ok": False, "fallback": False, "error": str(exc)}
        return {"backend": self.backend, "ok": True, "fallback": False}


def redis_client(url: str, timeout_s: float) -> redis.Redis:
    """A client that fails fast: a request never waits long on an absent Redis."""
    return redis.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, health_check_interval=30
    )


def make_cache(redis_url: str | None, prefix: str, timeout_s: float, max_items: int) -> Cache:
    if redis_url is None:
        return MemoryCache(max_items)
    return RedisCache(redis_client(redis_url, timeout_s), prefix)
