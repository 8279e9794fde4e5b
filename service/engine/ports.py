"""What the engine needs from the outside, as protocols the service layer implements.

The engine stores profiles and traces in a key-value store with a time to live; the
service passes in its store (Redis, or SQLite on disk), which satisfies this protocol.
"""

from __future__ import annotations

from typing import Protocol


class KeyValueStore(Protocol):
    def get(self, key: str) -> bytes | None: ...

    def set(self, key: str, value: bytes, ttl_s: int, durable: bool = False) -> bool: ...
