"""The store of answers, traces and profiles: Redis when ``RIGHTSIZE_REDIS_URL`` is set,
else SQLite on disk (:mod:`service.infra.embedded_store`); an in-process LRU backs Redis while it
is away.

Each stores bytes under string keys with a time to live. The Redis cache never raises on
a lost connection during a request: while Redis is away, entries go to an in-process
LRU (the fallback) and are read back from it, so a profile or trace stored during an
outage still resolves on this process, before and after Redis returns; ``set`` says
which happened (``False``: only this process holds the entry), and ``/readyz`` reports
the outage as "degraded". Each call tries Redis again: no restart is needed.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from typing import Any, Protocol

import redis

from service.infra.embedded_store import EmbeddedStore

log = logging.getLogger(__name__)


class Cache(Protocol):
    backend: str

    @property
    def reachable(self) -> bool:
        """False while the shared store is away (what it holds cannot be read now)."""
        ...

    @property
    def shared(self) -> bool:
        """Whether what one process stores, the others read now (a compute process may
        then answer a whole request and store it)."""
        ...

    def get(self, key: str) -> bytes | None: ...

    def set(self, key: str, value: bytes, ttl_s: int, durable: bool = False) -> bool:
        """Store; ``True`` when the entry is shared (Redis, the embedded store),
        ``False`` when only this process holds it. ``durable``: an object a client was
        given an id for (kept until it expires, never evicted for room)."""
        ...

    def delete(self, key: str) -> None: ...

    def health(self) -> dict[str, object]: ...


class MemoryCache:
    """A thread-safe LRU with per-entry expiry, for running without Redis."""

    backend = "memory"
    reachable = True
    shared = False

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

    def set(self, key: str, value: bytes, ttl_s: int, durable: bool = False) -> bool:
        with self._lock:
            self._items[key] = (time.monotonic() + ttl_s, value)
            self._items.move_to_end(key)
            while len(self._items) > self._max:
                self._items.popitem(last=False)
        return True

    def __len__(self) -> int:
        return len(self._items)

    def delete(self, key: str) -> None:
        with self._lock:
            self._items.pop(key, None)

    def health(self) -> dict[str, object]:
        return {"backend": self.backend, "ok": True, "fallback": True, "items": len(self._items)}


class RedisCache:
    """Cache entries in Redis under ``prefix``; an in-process LRU while Redis is away."""

    backend = "redis"

    def __init__(self, client: redis.Redis, prefix: str, fallback_items: int = 1024) -> None:
        self.client = client
        self.prefix = prefix
        self.fallback = MemoryCache(fallback_items)
        self.reachable = True  # as of the last call

    def get(self, key: str) -> bytes | None:
        try:
            value = self.client.get(self.prefix + key)
        except redis.RedisError as exc:
            log.warning("redis get failed, reading the in-process fallback: %s", exc)
            self.reachable = False
            return self.fallback.get(key)
        self.reachable = True
        if isinstance(value, bytes):
            return value
        return self.fallback.get(key) if len(self.fallback) else None

    @property
    def shared(self) -> bool:
        return self.reachable

    def set(self, key: str, value: bytes, ttl_s: int, durable: bool = False) -> bool:
        try:
            self.client.set(self.prefix + key, value, ex=ttl_s)
        except redis.RedisError as exc:
            log.warning("redis set failed, kept in this process only: %s", exc)
            self.reachable = False
            self.fallback.set(key, value, ttl_s)
            return False
        self.reachable = True
        return True

    def delete(self, key: str) -> None:
        self.fallback.delete(key)
        try:
            self.client.delete(self.prefix + key)
        except redis.RedisError as exc:
            log.warning("redis delete failed: %s", exc)

    def health(self) -> dict[str, object]:
        try:
            self.client.ping()
            self.reachable = True
        except redis.RedisError as exc:
            self.reachable = False
            return {
                "backend": self.backend,
                "ok": False,
                "fallback": False,
                "error": str(exc),
                "items": len(self.fallback),
            }
        return {"backend": self.backend, "ok": True, "fallback": False}


def redis_client(url: str, timeout_s: float) -> redis.Redis:
    """A client that fails fast: a request never waits long on an absent Redis."""
    return redis.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, health_check_interval=30
    )


def make_cache(settings: Mapping[str, Any]) -> Cache:
    """Redis where ``RIGHTSIZE_REDIS_URL`` is set, else the embedded store on disk."""
    url = settings["RIGHTSIZE_REDIS_URL"]
    if url is None:
        path, most = settings["RIGHTSIZE_STORE_FILE"], settings["RIGHTSIZE_STORE_MAX_BYTES"]
        return EmbeddedStore(path, most)
    client = redis_client(url, settings["RIGHTSIZE_REDIS_TIMEOUT_S"])
    return RedisCache(
        client, settings["RIGHTSIZE_KEY_PREFIX"], settings["RIGHTSIZE_MEMORY_CACHE_ITEMS"]
    )
