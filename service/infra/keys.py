"""API keys: roles, and the file that keeps them hashed.

A key is ``rs_<id>_<secret>`` (the id is public: logs and ``rightsize keys list`` name a
key by it; the secret is 32 random bytes). Only the key's SHA-256 is stored: a secret of
that length needs no slow hash, and a leaked file gives no key. Roles nest: ``read`` <
``write`` (benchmarks, traces) < ``admin`` (prices, retraining, keys).

The keys live in one JSON file (``RIGHTSIZE_KEYS_FILE``), written by ``rightsize keys``
(atomically, under a lock, mode 0600) and re-read by the service when it changes, so a key
created or revoked takes effect without a restart. Replicas share it as a mounted secret;
it does not depend on Redis, so a write is authorised (or refused) the same way while
Redis is away.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import secrets
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from service.infra.files import locked, read_bounded, write_atomically

ROLES = ("read", "write", "admin")
PREFIX = "rs_"

KEYS_MAX_BYTES = 16 * 2**20  # a few hundred bytes a key: tens of thousands of keys


def allows(held: str, needed: str) -> bool:
    """Whether a key of role ``held`` may do what needs ``needed``."""
    return ROLES.index(held) >= ROLES.index(needed)


def digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class ApiKey:
    key_id: str
    name: str
    role: str
    created_at: str

    def public(self) -> dict[str, str]:
        return asdict(self)


class KeyFile:
    """The keys file: ``{sha256: {key_id, name, role, created_at}}``."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._seen: tuple[float, int] | None = None
        self._by_digest: dict[str, ApiKey] = {}

    def find(self, token: str) -> ApiKey | None:
        """The key ``token`` is, or None (unknown, revoked or malformed)."""
        if not token.startswith(PREFIX) or len(token) > 200:
            return None
        return self._current().get(digest(token))

    def create(self, name: str, role: str) -> tuple[str, ApiKey]:
        """A new key of ``role``: the token (shown once, never stored) and its record."""
        if role not in ROLES:
            raise ValueError(f"role must be one of {', '.join(ROLES)}")
        if not name or len(name) > 100:
            raise ValueError("name must be 1 to 100 characters")
        key_id = secrets.token_hex(4)
        token = f"{PREFIX}{key_id}_{secrets.token_urlsafe(32)}"
        now = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        record = ApiKey(key_id, name, role, now)
        with self._editing() as keys:
            keys[digest(token)] = record.public()
        return token, record

    def revoke(self, key_id: str) -> bool:
        """Remove the key ``key_id``; False when there is none."""
        with self._editing() as keys:
            found = [d for d, record in keys.items() if record["key_id"] == key_id]
            for d in found:
                del keys[d]
        return bool(found)

    def all(self) -> list[ApiKey]:
        return sorted(self._current().values(), key=lambda k: k.created_at)

    def _current(self) -> dict[str, ApiKey]:
        """The file's keys, read again only when its modification time or size changed."""
        try:
            stat = self.path.stat()
        except FileNotFoundError:
            return {}
        mark = (stat.st_mtime, stat.st_size)
        with self._lock:
            if mark != self._seen:
                self._by_digest = {d: ApiKey(**r) for d, r in self._read().items()}
                self._seen = mark
            return self._by_digest

    def _read(self) -> dict[str, dict[str, str]]:
        try:
            data = json.loads(read_bounded(self.path, KEYS_MAX_BYTES) or "{}")
        except FileNotFoundError:
            return {}
        if not isinstance(data, dict):
            raise ValueError(f"{self.path}: not a keys file")
        return data

    @contextmanager
    def _editing(self) -> Iterator[dict[str, dict[str, str]]]:
        """The keys to change, written back atomically under an exclusive lock."""
        with locked(self.path):
            keys = self._read()
            yield keys
            write_atomically(self.path, json.dumps(keys, indent=1, sort_keys=True), 0o600)
