"""The attacks ``bench_load.py --abuse`` runs beside its mix, each in a process of its own,
none with a key: the ways issues 26 and 37 found to take the service down, paced so that
the attackers' own loops do not take this 2-core machine's CPU (what is measured is what
the requests cost the service).

- ``abandon`` (issue 26): a new 10,000-expert profile given up after 2 s, every 2 s.
- ``bodies`` (issue 26): a projection whose body is said to be 200 MiB (4 MiB sent), every s.
- ``slow_bodies`` (issue 37): connections sending a 100,000-byte body a byte every 5 s.
- ``slow_headers`` (issue 37): connections sending their headers a byte every 5 s.
- ``idle`` (issue 37): 1,100 TCP connections that send nothing, from 20 addresses.
- ``networks`` (issue 37): 12 addresses of 12 networks, each asking for a new
  10,000-expert profile and waiting for it, again and again.
- ``quiet``: not an attack: a client (its own key) asking for a new profile or a new
  recommendation every few seconds and waiting; its latencies are what the targets read.

Every connection an attack holds is opened again when the server ends it (after a pause:
a refused one is not retried in a loop).
"""

from __future__ import annotations

import asyncio
import http.client
import json
import random
import resource
import socket
import threading
import time
from collections import defaultdict
from typing import Any

MOE = {
    "family": "transformer", "layers": 100, "hidden": 1024, "heads": 16, "ffn": 4096,
    "vocab": 50001, "moe_experts": 10000, "moe_top_k": 10000, "gated": True,
}  # fmt: skip
BIG = 200 * 2**20
PAYLOAD = b"[[[[1]]]]," * (4 * 2**20 // 10)
GPT2 = {"model": {"name": "gpt2"}, "workload": {"task": "training", "seq_len": 256}}


def _send(
    port: int, method: str, path: str, head: dict[str, str], body: bytes, source: str
) -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=30, source_address=(source, 0))
    lines = [f"{method} {path} HTTP/1.1", "Host: bench", *(f"{k}: {v}" for k, v in head.items())]
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
    return sock


def _status_of(sock: socket.socket, wait_s: float) -> int | None:
    """The reply's status, or None if none came within ``wait_s`` (the client gives up)."""
    sock.settimeout(wait_s)
    try:
        head = sock.recv(64)
        return int(head.split(b" ", 2)[1]) if head else None
    except (OSError, ValueError, IndexError):
        return None
    finally:
        sock.close()


def _moe(vocab: int) -> bytes:
    return json.dumps({"model": {**MOE, "vocab": vocab}, "workload": {
        "task": "training", "batch_size": 1, "seq_len": 128}}).encode()  # fmt: skip


def paced(port: int, seconds: float, kind: str, index: int) -> dict[str, int]:
    """``abandon`` and ``bodies``: one attacker, one request at a time."""
    statuses: dict[str, int] = defaultdict(int)
    start = time.monotonic()
    vocab = 60_000 + index * 100_000
    every = 1.0 if kind == "bodies" else 2.0
    while (began := time.monotonic()) - start < seconds:
        if kind == "bodies":
            head = {"Content-Type": "application/json", "Content-Length": str(BIG)}
            try:
                sock = _send(port, "POST", "/v1/traces/x/projections", head, b'{"gpus":[',
                             "127.0.0.1")  # fmt: skip
                sock.sendall(PAYLOAD)
                statuses[str(_status_of(sock, 30))] += 1
            except OSError:
                statuses["closed by the server while sending"] += 1
        else:
            vocab += 1
            body = _moe(vocab)
            head = {"Content-Type": "application/json", "Content-Length": str(len(body))}
            sock = _send(port, "POST", "/v1/profiles", head, body, "127.0.0.1")
            found = _status_of(sock, 2.0)
            statuses["abandoned" if found is None else str(found)] += 1
        time.sleep(max(0.0, every - (time.monotonic() - began)))
    return dict(statuses)


def networks(port: int, seconds: float, index: int) -> dict[str, int]:
    """One of twelve addresses of twelve networks: a new 10,000-expert profile, waited for
    (up to 60 s), then the next."""
    statuses: dict[str, int] = defaultdict(int)
    start = time.monotonic()
    vocab = 600_000 + index * 10_000
    source = f"127.{40 + index}.0.1"
    while time.monotonic() - start < seconds:
        vocab += 1
        body = _moe(vocab)
        head = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        began = time.monotonic()
        try:
            sock = _send(port, "POST", "/v1/profiles", head, body, source)
            statuses[str(_status_of(sock, 60.0))] += 1
        except OSError:
            statuses["refused"] += 1
        time.sleep(max(0.0, 1.0 - (time.monotonic() - began)))  # a refused one: not at once
    return dict(statuses)


async def _hold(port: int, source: str, kind: str, until: float, seen: dict[str, int]) -> None:
    """One connection slot: open, dribble (or idle), note how it ended, open again."""
    while time.monotonic() < until:
        try:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, local_addr=(source, 0)
            )
        except OSError:
            seen["connect failed"] += 1
            await asyncio.sleep(1.0)
            continue
        seen["opened"] += 1
        if kind == "slow_bodies":
            writer.write(b"POST /v1/profiles HTTP/1.1\r\nHost: bench\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 100000\r\n\r\n{")  # fmt: skip
        step = b" " if kind == "slow_bodies" else b"X"
        if kind == "slow_headers":
            writer.write(b"POST /v1/profiles HTTP/1.1\r\nX-Slow: ")
        ended = "still open at the end"
        try:
            while time.monotonic() < until:
                if kind == "idle":
                    data = await asyncio.wait_for(reader.read(256), until - time.monotonic())
                else:
                    await writer.drain()
                    try:
                        data = await asyncio.wait_for(reader.read(256), 5.0)
                    except TimeoutError:
                        writer.write(step)
                        continue
                status = data.split(b" ", 2)[1].decode() if data.startswith(b"HTTP/") else ""
                ended = f"answered {status}" if status else "closed by the server"
                break
        except (TimeoutError, OSError, IndexError):
            ended = "still open at the end" if time.monotonic() >= until else "reset"
        seen[ended] += 1
        writer.close()
        # not a busy loop when refused: a real client of this kind comes back later
        await asyncio.sleep(2.0 + 3.0 * random.random())


async def _slots(port: int, seconds: float, kind: str, count: int) -> dict[str, int]:
    seen: dict[str, int] = defaultdict(int)
    until = time.monotonic() + seconds
    # the idle ones from 20 addresses (55 each); the slow ones from one address each
    sources = [
        f"127.0.{100 + i % 20}.{1 + i // 20}"
        if kind == "idle"
        else f"127.1.{i // 250}.{i % 250 + 1}"
        for i in range(count)
    ]
    await asyncio.gather(*(_hold(port, s, kind, until, seen) for s in sources))
    return dict(seen)


def slots(port: int, seconds: float, kind: str, count: int) -> dict[str, int]:
    """``slow_bodies``, ``slow_headers`` or ``idle``: ``count`` connections held at once."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, count + 256)), hard))
    return asyncio.run(_slots(port, seconds, kind, count))


def quiet(port: int, seconds: float, key: str, every_s: float) -> list[tuple[str, int, float]]:
    """A client asking for new work every ``every_s`` and waiting: (kind, status, ms)."""
    found: list[tuple[str, int, float]] = []
    start = time.monotonic()
    rng = random.Random(7)
    while (began := time.monotonic()) - start < seconds:
        batch = 1 + rng.randrange(10_000)
        if len(found) % 2 == 0:
            kind, path = "profile", "/v1/profiles"
            body: dict[str, Any] = {**GPT2, "workload": {**GPT2["workload"], "batch_size": batch}}
        else:
            kind, path = "recommendation", "/v1/recommendations"
            body = {"model": {"name": "bert-base"}, "workload": {"task": "fine-tuning",
                    "batch_size": 32, "seq_len": 384, "dataset_tokens": 10_000_000 + batch},
                    "constraints": {"max_gpus": 8}}  # fmt: skip
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        try:
            head = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}
            conn.request("POST", path, json.dumps(body), head)
            response = conn.getresponse()
            response.read()
            status = response.status
        except (OSError, http.client.HTTPException):
            status = 0
        finally:
            conn.close()
        found.append((kind, status, (time.monotonic() - began) * 1e3))
        time.sleep(max(0.0, every_s - (time.monotonic() - began)))
    return found


def _threads(port: int, seconds: float, name: str, runs: list[tuple[Any, ...]]) -> dict[str, int]:
    """The attackers of one kind, a thread each (one process: few CPU-seconds to start)."""
    totals: dict[str, int] = defaultdict(int)
    lock = threading.Lock()

    def one(args: tuple[Any, ...]) -> None:
        found = (
            networks(port, seconds, *args)
            if name == "networks"
            else paced(port, seconds, name, *args)
        )
        with lock:
            for status, n in found.items():
                totals[status] += n

    threads = [threading.Thread(target=one, args=(a,)) for a in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return dict(totals)


def run(name: str, port: int, seconds: float, runs: list[tuple[Any, ...]], out: Any) -> None:
    """An attack's process: its figures, and the CPU it took, back to the bench."""
    if name in ("abandon", "bodies", "networks"):
        found: Any = _threads(port, seconds, name, runs)
    elif name == "quiet":
        found = quiet(port, seconds, *runs[0])
    else:
        found = slots(port, seconds, name, *runs[0])
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.put((name, found, usage.ru_utime + usage.ru_stime))
