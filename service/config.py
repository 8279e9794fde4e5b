"""Settings from the environment: every key is ``RIGHTSIZE_<NAME>``.

| variable | default | meaning |
| --- | --- | --- |
| ``RIGHTSIZE_REDIS_URL`` | unset | Redis (caches, traces, jobs, rate limits); unset: embedded |
| ``RIGHTSIZE_STORE_FILE`` | ``$XDG_DATA_HOME/rightsize/store.sqlite3`` | the embedded store |
| ``RIGHTSIZE_STORE_MAX_BYTES`` | 2 GiB | its size (cached answers make room; then 507) |
| ``RIGHTSIZE_KNOWLEDGE_DIR`` | ``knowledge/data`` in the package | knowledge files to load |
| ``RIGHTSIZE_CACHE_TTL_S`` | ``86400`` | lifetime of cached results |
| ``RIGHTSIZE_MEMORY_CACHE_ITEMS`` | ``2048`` | entries kept in process while Redis is away |
| ``RIGHTSIZE_REDIS_TIMEOUT_S`` | ``0.5`` | socket timeout when talking to Redis |
| ``RIGHTSIZE_KEY_PREFIX`` | ``rightsize:`` | prefix of the Redis keys and of the job queue |
| ``RIGHTSIZE_PROFILE_TIME_LIMIT_S`` | ``20`` | a profile that counts longer is stopped (422) |
| ``RIGHTSIZE_COMPUTE_TIME_LIMIT_S`` | ``30`` | planning and ranking past it are stopped (422) |
| ``RIGHTSIZE_TRACE_MAX_BYTES`` | 512 MiB | largest trace upload (413 beyond) |
| ``RIGHTSIZE_TRACE_MAX_DECOMPRESSED_BYTES`` | 4 GiB | largest decompressed trace |
| ``RIGHTSIZE_TRACE_MAX_EVENTS`` | ``20000000`` | most events in one trace |
| ``RIGHTSIZE_TRACE_ASYNC_BYTES`` | 32 MiB | traces of more JSON are analysed in the background |
| ``RIGHTSIZE_TRACE_TIME_LIMIT_S`` | ``600`` | a background analysis is stopped past it |
| ``RIGHTSIZE_TRACE_MEMORY_LIMIT_BYTES`` | 4 GiB | and past this resident memory |
| ``RIGHTSIZE_TRACE_TTL_S`` | ``604800`` | how long trace analyses are kept |
| ``RIGHTSIZE_TRACE_JOBS`` | ``2`` | trace analyses run at once (embedded; a key: one fewer) |
| ``RIGHTSIZE_TRACE_JOBS_PER_KEY`` | ``4`` | trace jobs a key may have queued or running (429) |
| ``RIGHTSIZE_RECOMMENDATION_TTL_S`` | ``7776000`` | recommendations stay citable (90 days) |
| ``RIGHTSIZE_MODEL_DIR`` | ``~/.cache/rightsize`` | performance model cache (JSON only) |
| ``RIGHTSIZE_LOG_LEVEL`` | ``INFO`` | |
| ``RIGHTSIZE_LOG_FORMAT`` | ``json`` | ``json`` (a line each, with request id) or ``text`` |
| ``RIGHTSIZE_KEYS_FILE`` | ``$XDG_DATA_HOME/rightsize/keys.json`` | API keys, hashed |
| ``RIGHTSIZE_SUBMISSIONS_FILE`` | ``$XDG_DATA_HOME/rightsize/submissions.jsonl`` | user rows |
| ``RIGHTSIZE_PRICES_FILE`` | ``$XDG_DATA_HOME/rightsize/prices.csv`` | refreshed prices |
| ``RIGHTSIZE_REQUIRE_READ_KEY`` | ``false`` | reads need a key too (writes always do) |
| ``RIGHTSIZE_RATE_LIMIT`` | ``600 per minute`` | per API key, else per client address |
| ``RIGHTSIZE_CORS_ORIGINS`` | unset | browser origins allowed (comma-separated) |
| ``RIGHTSIZE_COMPUTE_PROCESSES`` | ``2`` | per gunicorn worker: count profiles, rank new answers |
| ``RIGHTSIZE_COMPUTE_NICE`` | ``10`` | how much lower their CPU priority is (0-19) |
| ``RIGHTSIZE_COMPUTE_LIGHT_NICE`` | ``0`` | the light-only one's (with two or more) |
| ``RIGHTSIZE_REQUEST_NICE`` | ``5`` | how much lower the request threads' priority is (0-19) |
| ``RIGHTSIZE_COMPUTE_PER_CLIENT`` | ``2`` | new work one client may have per worker (429 beyond) |
| ``RIGHTSIZE_COMPUTE_QUEUE`` | ``24`` | new work that may wait per worker (503 beyond) |
| ``RIGHTSIZE_COMPUTE_WAIT_S`` | ``15`` | the longest new work waits for a process (503) |
| ``RIGHTSIZE_PROXY_HOPS`` | ``0`` | proxies in front whose X-Forwarded-For names the client |
| ``RIGHTSIZE_HEADER_TIMEOUT_S`` | ``10`` | a request line and headers come within it (408) |
| ``RIGHTSIZE_BODY_TIMEOUT_S`` | ``10`` | the longest pause in a body (408) |
| ``RIGHTSIZE_BODY_MIN_RATE_BYTES_S`` | ``1024`` | a body's least mean rate (408) |
| ``RIGHTSIZE_CONNECTIONS_PER_ADDRESS`` | 64; none behind proxies | a worker's (429; 0: none) |
| ``RIGHTSIZE_MAX_CONNECTIONS`` | ``4096`` | a worker's; beyond, idle ones make room (else 503) |
| ``RIGHTSIZE_SUBMISSIONS_PER_KEY_PER_DAY`` | ``10000`` | benchmark rows a key may store a day |
| ``RIGHTSIZE_SUBMISSIONS_MAX_ROWS_PER_KEY`` | ``10000`` | rows one key may keep (507 beyond) |
| ``RIGHTSIZE_SUBMISSIONS_MAX_ROWS`` | ``100000`` | benchmark rows stored in all (507 beyond) |
| ``RIGHTSIZE_SUBMISSIONS_MAX_BYTES`` | 128 MiB | size of the submissions file (507 beyond) |
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

PREFIX = "RIGHTSIZE_"


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/rightsize``, else ``~/.cache/rightsize``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rightsize"


class ConfigError(ValueError):
    """A setting is missing or malformed; names the key."""

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(f"configuration {key}: {message}")


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise ValueError("must be > 0")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise ValueError("must be > 0")
    return value


def _int_between(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        value = int(text)
        if not low <= value <= high:
            raise ValueError(f"must be between {low} and {high}")
        return value

    return parse


def _redis_url(text: str) -> str | None:
    if text == "":
        return None
    if not text.startswith(("redis://", "rediss://", "unix://")):
        raise ValueError("must start with redis://, rediss:// or unix://")
    return text


def default_data_dir() -> Path:
    """``$XDG_DATA_HOME/rightsize``, else ``~/.local/share/rightsize``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "rightsize"


def _bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError("must be true or false")


def _rate(text: str) -> str:
    from limits import parse_many

    try:
        parse_many(text)
    except ValueError:
        raise ValueError("must be a rate such as '600 per minute' or '10/second'") from None
    return text


def _origins(text: str) -> tuple[str, ...]:
    found = tuple(o.strip() for o in text.split(",") if o.strip())
    for origin in found:
        if origin != "*" and not origin.startswith(("http://", "https://")):
            raise ValueError(f"origin {origin!r} must start with http:// or https://, or be *")
    return found


def _log_format(text: str) -> str:
    if text not in ("json", "text"):
        raise ValueError("must be json or text")
    return text


def _level(text: str) -> str:
    level = text.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise ValueError("must be DEBUG, INFO, WARNING or ERROR")
    return level


# name -> (parser, default)
SETTINGS: dict[str, tuple[Callable[[str], Any], Any]] = {
    "REDIS_URL": (_redis_url, None),
    "KNOWLEDGE_DIR": (str, None),
    "CACHE_TTL_S": (_positive_int, 86400),
    "MEMORY_CACHE_ITEMS": (_positive_int, 2048),
    "STORE_FILE": (str, str(default_data_dir() / "store.sqlite3")),
    "STORE_MAX_BYTES": (_positive_int, 2 * 2**30),
    "REDIS_TIMEOUT_S": (_positive_float, 0.5),
    "KEY_PREFIX": (str, "rightsize:"),
    "PROFILE_TIME_LIMIT_S": (_positive_float, 20.0),
    "COMPUTE_TIME_LIMIT_S": (_positive_float, 30.0),
    "TRACE_MAX_BYTES": (_positive_int, 512 * 2**20),
    "TRACE_MAX_DECOMPRESSED_BYTES": (_positive_int, 4 * 2**30),
    "TRACE_MAX_EVENTS": (_positive_int, 20_000_000),
    "TRACE_ASYNC_BYTES": (_positive_int, 32 * 2**20),
    "TRACE_TIME_LIMIT_S": (_positive_float, 600.0),
    "TRACE_MEMORY_LIMIT_BYTES": (_positive_int, 4 * 2**30),
    "TRACE_TTL_S": (_positive_int, 604800),
    "TRACE_JOBS": (_int_between(1, 64), 2),
    "TRACE_JOBS_PER_KEY": (_int_between(1, 10_000), 4),
    "RECOMMENDATION_TTL_S": (_positive_int, 90 * 86400),
    "MODEL_DIR": (str, str(default_cache_dir())),
    "LOG_LEVEL": (_level, "INFO"),
    "LOG_FORMAT": (_log_format, "json"),
    "KEYS_FILE": (str, str(default_data_dir() / "keys.json")),
    "SUBMISSIONS_FILE": (str, str(default_data_dir() / "submissions.jsonl")),
    "PRICES_FILE": (str, str(default_data_dir() / "prices.csv")),
    "REQUIRE_READ_KEY": (_bool, False),
    "RATE_LIMIT": (_rate, "600 per minute"),
    "CORS_ORIGINS": (_origins, ()),
    "COMPUTE_PROCESSES": (_int_between(0, 64), 2),
    "COMPUTE_NICE": (_int_between(0, 19), 10),
    "COMPUTE_LIGHT_NICE": (_int_between(0, 19), 0),
    "REQUEST_NICE": (_int_between(0, 19), 5),
    "COMPUTE_PER_CLIENT": (_int_between(0, 1000), 2),
    "COMPUTE_QUEUE": (_int_between(1, 10_000), 24),
    "COMPUTE_WAIT_S": (_positive_float, 15.0),
    "PROXY_HOPS": (_int_between(0, 10), 0),
    "HEADER_TIMEOUT_S": (_positive_float, 10.0),
    "BODY_TIMEOUT_S": (_positive_float, 10.0),
    "BODY_MIN_RATE_BYTES_S": (_positive_int, 1024),
    "CONNECTIONS_PER_ADDRESS": (_int_between(0, 1_000_000), None),
    "MAX_CONNECTIONS": (_int_between(1, 1_000_000), 4096),
    "SUBMISSIONS_PER_KEY_PER_DAY": (_positive_int, 10_000),
    "SUBMISSIONS_MAX_ROWS_PER_KEY": (_positive_int, 10_000),
    "SUBMISSIONS_MAX_ROWS": (_positive_int, 100_000),
    "SUBMISSIONS_MAX_BYTES": (_positive_int, 128 * 2**20),
}


def load_settings(
    overrides: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """Settings as ``RIGHTSIZE_<NAME>`` keys: defaults, then the environment, then overrides.

    Overrides (the ``config`` given to ``create_app``) may use the short or the prefixed
    name, are taken as already typed, and may carry other Flask settings too.
    Raises :class:`ConfigError` naming the key.
    """
    env = os.environ if environ is None else environ
    settings: dict[str, Any] = {}
    for name, (parse, default) in SETTINGS.items():
        key = PREFIX + name
        raw = env.get(key)
        if raw is None:
            settings[key] = default
            continue
        try:
            settings[key] = parse(raw)
        except ValueError as exc:
            raise ConfigError(key, f"{exc} (got {raw!r})") from None
    for key, value in (overrides or {}).items():
        settings[PREFIX + key if key in SETTINGS else key] = value
    return settings
