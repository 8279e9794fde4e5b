"""Each connection's HTTP/1.1, as uvicorn parses it (httptools), held to the front's limits.

uvicorn closes a kept-alive connection that stays idle (gunicorn's ``keepalive``, 5 s), but
waits for a new connection's first request, and for its headers, as long as they take;
its malformed requests are answered in plain text. :class:`Protocol` adds:

- **Time**: the request line and headers must be whole within ``header_timeout_s`` of the
  connection's start, or of the request's first byte on a kept-alive one: a 408 problem
  past it, or a silent close if nothing came at all.
- **Size**: a request target past ``url_bytes`` is a 414, more than ``header_fields``
  header fields or one past ``header_field_bytes`` a 431, said as soon as they pass.
- **Connections**: an address holding ``connections_per_address`` connections is told 429
  on its next one, and the connection closed: 1,100 idle connections from one address kept
  every other client out. A worker holding ``max_connections`` makes room for a new one by
  closing a connection that is not being answered (idle, or still sending its headers) of
  the address that holds the most, the oldest first; only when every one is being
  answered is the newcomer told 503.

Every answer is ``application/problem+json`` (:mod:`service.front.problems`). The counts are
the worker's, kept on uvicorn's per-server state.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.front import problems
from service.front.bridge import FrontLimits

log = logging.getLogger(__name__)
RETRY_AFTER_S = 5


class Protocol(HttpToolsProtocol):
    """uvicorn's httptools protocol within :class:`FrontLimits` (the bridge's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.limits: FrontLimits = getattr(self.app, "limits", None) or FrontLimits()
        self._timer: asyncio.TimerHandle | None = None
        self._in_head = False
        self._address: str | None = None  # counted against its address's share
        self._refusal: tuple[int, str] | None = None
        self._since = 0.0

    def _open(self) -> Counter[str]:
        """The worker's open connections by address (on uvicorn's per-server state)."""
        found: Counter[str] | None = getattr(self.server_state, "rightsize_open", None)
        if found is None:
            found = Counter()
            self.server_state.rightsize_open = found  # type: ignore[attr-defined]
        return found

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._since = self.loop.time()
        address = self.client[0] if self.client else "-"
        open_ = self._open()
        limits = self.limits
        if len(self.connections) > limits.max_connections and not self._make_room(open_):
            self._turn_away(503, f"this worker holds {limits.max_connections} connections")
            return
        per_address = limits.connections_per_address
        if per_address and open_[address] >= per_address:
            self._turn_away(429, f"this address holds {per_address} connections: close some")
            return
        open_[address] += 1
        self._address = address
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._address is not None:
            open_ = self._open()
            open_[self._address] -= 1
            if open_[self._address] <= 0:
                del open_[self._address]
            self._address = None
        super().connection_lost(exc)

    def _waiting_for_a_request(self) -> bool:
        """Whether nothing of this connection is being answered (it is idle, or sending
        its request line and headers)."""
        return self._address is not None and (self.cycle is None or self.cycle.response_complete)

    def _make_room(self, open_: Counter[str]) -> bool:
        """Close the oldest connection waiting for a request of the address that holds the
        most; False when every connection is being answered."""
        found = [
            c
            for c in self.connections
            if isinstance(c, Protocol) and c is not self and c._waiting_for_a_request()
        ]
        if not found:
            return False
        victim = max(found, key=lambda c: (open_[c._address or ""], -c._since))
        log.warning("a worker at its connections' limit closed one of %s's", victim._address)
        victim.transport.close()
        return True

    def _turn_away(self, status: int, detail: str) -> None:
        log.warning("a connection was turned away: %s", detail)
        self.transport.write(problems.raw(status, detail, RETRY_AFTER_S))
        self.transport.close()

    def _arm(self) -> None:
        self._disarm()
        self._timer = self.loop.call_later(self.limits.header_timeout_s, self._too_slow)

    def _disarm(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _too_slow(self) -> None:
        """The headers did not come in time: 408 when a request began, else a close."""
        self._timer = None
        if self.transport.is_closing():
            return
        if self._in_head:
            detail = (
                f"the request line and headers must come within {self.limits.header_timeout_s:g} s"
            )
            self.transport.write(problems.raw(408, detail))
        self.transport.close()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head = True
        if self._timer is None:  # a kept-alive connection's next request
            self._arm()

    def on_url(self, url: bytes) -> None:
        super().on_url(url)
        if len(self.url) > self.limits.url_bytes:
            self._refuse(414, f"the request target passes {self.limits.url_bytes} bytes")

    def on_header(self, name: bytes, value: bytes) -> None:
        super().on_header(name, value)
        limits = self.limits
        if len(self.headers) > limits.header_fields:
            self._refuse(431, f"more than {limits.header_fields} header fields")
        if len(name) + len(value) > limits.header_field_bytes:
            field = name.decode("latin-1")[:64]
            self._refuse(431, f"the header field {field} passes {limits.header_field_bytes} bytes")

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._disarm()
        super().on_headers_complete()

    def _refuse(self, status: int, detail: str) -> None:
        """Stop parsing: the parser's error reaches :meth:`send_400_response`, which says
        this instead."""
        self._refusal = (status, detail)
        raise ValueError(detail)

    def send_400_response(self, msg: str) -> None:
        status, detail = self._refusal or (400, f"not an HTTP/1.1 request ({msg})")
        self._disarm()
        self.transport.write(problems.raw(status, detail))
        self.transport.close()
