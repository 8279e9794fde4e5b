"""The two ways to take the service down without a key (issue 26, findings 1 and 2),
tried against the real server as a new user starts it (``rightsize serve``: gunicorn, the
embedded cache, one compute process), from raw sockets.

1. A large body to a read under /v1/traces (the uploads' 512 MiB limit covered every path
   there): refused before it is read, with its length stated or chunked.
2. Profiles of a 10,000-expert model abandoned by their client after a second: one client
   holds at most its share of the compute process, what it abandoned is called off, and
   another client's new profile is answered (it once waited past its limit for minutes).
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import WRITE_KEY
from tests.service.redis_server import free_port

RIGHTSIZE = str(Path(sys.executable).with_name("rightsize"))
MOE = {
    "model": {"family": "transformer", "layers": 100, "hidden": 1024, "heads": 16,
              "ffn": 4096, "vocab": 50001, "moe_experts": 10000, "moe_top_k": 10000,
              "gated": True},
    "workload": {"task": "training", "batch_size": 1, "seq_len": 128},
}  # fmt: skip
GPT2 = {"model": {"name": "gpt2"}, "workload": {"task": "training", "batch_size": 2, "seq_len": 64}}


def _call(port: int, method: str, path: str, body: Any = None, key: str | None = None) -> Any:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    conn.request(method, path, body=json.dumps(body) if body is not None else None,
                 headers=headers)  # fmt: skip
    response = conn.getresponse()
    data = response.read()
    conn.close()
    return response.status, json.loads(data) if data else None


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    port = free_port()
    log = tmp_path_factory.mktemp("abuse") / "serve.log"
    env = {**os.environ, "RIGHTSIZE_LOG_LEVEL": "WARNING"}
    env.pop("RIGHTSIZE_REDIS_URL", None)
    with log.open("w") as out:
        process = subprocess.Popen(
            [RIGHTSIZE, "serve", "--port", str(port)], env=env, stdout=out, stderr=out
        )
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if _call(port, "GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.5)
        # the compute process is warm once it has answered (its app builds after start)
        assert _call(port, "POST", "/v1/profiles", GPT2)[0] == 200
        yield port
    finally:
        process.terminate()
        process.wait(timeout=60)


def _raw(port: int, method: str, path: str, head: dict[str, str]) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=60)
    lines = [f"{method} {path} HTTP/1.1", "Host: localhost",
             *(f"{k}: {v}" for k, v in head.items()), "", ""]  # fmt: skip
    sock.sendall("\r\n".join(lines).encode())
    return sock


def _status(sock: socket.socket) -> int:
    reply = b""
    while b"\r\n" not in reply:
        part = sock.recv(4096)
        if not part:
            break
        reply += part
    return int(reply.split(b" ", 2)[1])


@pytest.mark.parametrize("chunked", [False, True], ids=["with a length", "chunked"])
def test_a_large_body_to_a_projection_is_refused_unread(server: int, chunked: bool) -> None:
    unit = b"[[[[[[[[1]]]]]]]]"
    body = b'{"gpus":[' + b",".join([unit] * (20 * 2**20 // 18)) + b'],"count":1}'
    head = {"Content-Type": "application/json"}
    head.update({"Transfer-Encoding": "chunked"} if chunked else {"Content-Length": str(len(body))})
    sock = _raw(server, "POST", "/v1/traces/x/projections", head)
    sent = 0
    try:
        for start in range(0, len(body), 2**16):
            piece = body[start : start + 2**16]
            sock.sendall(b"%x\r\n%s\r\n" % (len(piece), piece) if chunked else piece)
            sent += len(piece)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the server answered and closed: it did not read the rest
    try:
        status = _status(sock)
    finally:
        sock.close()
    assert status == 413
    assert _call(server, "GET", "/healthz")[0] == 200


def test_abandoned_computations_are_called_off_and_others_still_answer(server: int) -> None:
    before = _call(server, "GET", "/readyz")[1]["compute"]
    attackers = []
    for vocab in range(50001, 50005):  # none cached
        body = json.dumps({**MOE, "model": {**MOE["model"], "vocab": vocab}}).encode()
        head = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        sock = _raw(server, "POST", "/v1/profiles", head)
        sock.sendall(body)
        attackers.append(sock)
    time.sleep(1.0)
    statuses = []
    for sock in attackers:  # the client gives up
        sock.settimeout(0.2)
        try:
            statuses.append(_status(sock))
        except (TimeoutError, OSError):
            statuses.append(None)
        sock.close()
    assert statuses.count(429) == 2  # past this client's share: refused at once
    assert statuses.count(None) == 2  # its share: running and waiting, then abandoned
    started = time.monotonic()
    status, answer = _call(server, "POST", "/v1/profiles", GPT2 | {"workload": {
        **GPT2["workload"], "batch_size": 3}}, key=WRITE_KEY)  # fmt: skip
    waited = time.monotonic() - started
    assert status == 200, answer
    after = _call(server, "GET", "/readyz")[1]["compute"]
    assert after["called_off"] >= before["called_off"] + 2
    assert after["replaced"] == before["replaced"]  # stopped in the child, which stays warm
    assert after["alive"] == 1
    print(f"another client's new profile answered in {waited:.2f} s")
