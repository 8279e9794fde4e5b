"""The front (service/front) on its own: uvicorn with the front's protocol serving a small
Flask app through the bridge, in this process, with small limits. (The service itself,
attacked from many addresses: test_abuse.py.)"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator

import pytest
import uvicorn
from flask import Flask, request

from service.front import Bridge, FrontLimits
from service.front.bridge import wsgi_environ
from tests.service.redis_server import free_port

LIMITS = FrontLimits(header_timeout_s=1.0, body_timeout_s=1.0, max_connections=8)


def _app() -> Flask:
    app = Flask("front-test")

    @app.post("/echo")
    def echo() -> dict[str, object]:
        return {
            "body": request.get_data(as_text=True),
            "forwarded": request.headers.get("X-Forwarded-For"),
        }

    @app.get("/gone")
    def gone() -> str:
        told = request.environ["rightsize.gone"]
        until = time.monotonic() + 5
        while time.monotonic() < until and not told():
            time.sleep(0.05)
        GONE.append(told())
        return "done"

    return app


GONE: list[bool] = []


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    found = free_port()
    config = uvicorn.Config(
        Bridge(_app(), 4, LIMITS),
        port=found,
        http="service.front.protocol:Protocol",
        interface="asgi3",
        lifespan="on",
        log_level="error",
        proxy_headers=False,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    yield found
    server.should_exit = True
    thread.join(10)


def _ask(port: int, raw: bytes, timeout_s: float = 5.0) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout_s) as sock:
        sock.sendall(raw)
        data = b""
        while part := sock.recv(65536):
            data += part
    return data


def test_a_chunked_body_reaches_the_app_whole(port: int) -> None:
    chunks = b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
    reply = _ask(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                       b"Transfer-Encoding: chunked\r\n\r\n" + chunks)  # fmt: skip
    assert reply.startswith(b"HTTP/1.1 200")
    assert b'"body":"hello world"' in reply


def test_a_header_spelled_with_underscores_is_not_taken_for_the_real_one(port: int) -> None:
    reply = _ask(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                       b"X_Forwarded_For: 6.6.6.6\r\nContent-Length: 0\r\n\r\n")  # fmt: skip
    assert b'"forwarded":null' in reply


def test_the_app_hears_that_its_client_left(port: int) -> None:
    sock = socket.create_connection(("127.0.0.1", port))
    sock.sendall(b"GET /gone HTTP/1.1\r\nHost: x\r\n\r\n")
    time.sleep(0.3)
    sock.close()
    deadline = time.monotonic() + 10
    while not GONE:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert GONE == [True]


def test_a_full_worker_closes_an_idle_connection_to_let_a_new_client_in(port: int) -> None:
    """At its connections' limit the worker closes the oldest idle one of the address
    holding the most, rather than turning a new client away."""
    idle = [socket.create_connection(("127.0.0.1", port), source_address=("127.0.7.1", 0))
            for _ in range(LIMITS.max_connections)]  # fmt: skip
    try:
        reply = _ask(port, b"POST /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                           b"Content-Length: 2\r\n\r\nok")  # fmt: skip
        assert reply.startswith(b"HTTP/1.1 200")
        closed = 0
        for sock in idle:
            sock.settimeout(0.5)
            with contextlib.suppress(TimeoutError):
                closed += sock.recv(1) == b""
        assert closed >= 1
    finally:
        for sock in idle:
            sock.close()


def test_the_environment_is_wsgis() -> None:
    scope = {
        "type": "http",
        "method": "GET",
        "path": "/v1/gpus/a b",
        "raw_path": b"/v1/gpus/a%20b",
        "query_string": b"q=1",
        "headers": [(b"content-type", b"application/json"), (b"x-a", b"1"), (b"x-a", b"2")],
        "client": ("10.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }
    environ = wsgi_environ(scope)
    assert environ["PATH_INFO"] == "/v1/gpus/a b"
    assert environ["QUERY_STRING"] == "q=1"
    assert environ["CONTENT_TYPE"] == "application/json"
    assert environ["HTTP_X_A"] == "1,2"
    assert environ["REMOTE_ADDR"] == "10.0.0.1"


def test_behind_proxies_no_address_is_held_to_a_share() -> None:
    from service.config import load_settings

    settings = load_settings({"PROXY_HOPS": 1}, environ={})
    assert FrontLimits.of(settings).connections_per_address == 0
    assert FrontLimits.of({**settings, "RIGHTSIZE_PROXY_HOPS": 0}).connections_per_address == 64
    given = load_settings({"PROXY_HOPS": 1, "CONNECTIONS_PER_ADDRESS": 500}, environ={})
    assert FrontLimits.of(given).connections_per_address == 500
