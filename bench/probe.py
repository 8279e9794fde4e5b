"""Issue 37's hostile probe, as a script: against a running service (the default
``rightsize serve``: no Redis), each finding tried again and what came back printed.

1. Slow and idle connections: 16 bodies sent a byte every 5 s and 160 idle connections,
   then another client's reads (they timed out for as long as those stayed).
2. Twelve addresses of twelve networks each asking for a 10,000-expert profile and
   waiting, then another client's new profile and new recommendation (about 30 s or a
   503, against 0.08-0.16 s unloaded).
3. What the default stored, after its worker was replaced (``--flood`` requests to
   ``/healthz``: gunicorn replaces a worker after ``RIGHTSIZE_MAX_REQUESTS`` of them).
4. Rows that cannot be real (``batch_size_per_gpu: 1e308``, ``as_of: 0001-01-01``).
5. One key's data read or changed by another.
6. The smaller ones: an over-long URL, ``interruptible: 0``, a lowercase ``bearer``.

Run: .venv/bin/python bench/probe.py --url http://127.0.0.1:8000 --write-key KEY_A \\
         --other-key KEY_B [--flood 115000]
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import socket
import sys
import threading
import time
import urllib.parse
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.attacks import MOE
from tests.profiles.trace_factory import known_steps

ROW = {
    "gpu": "l4", "gpu_count": 1, "workload": "resnet50-imagenet", "precision": "fp16",
    "batch_size_per_gpu": 128, "throughput": 950, "source": "probe", "as_of": "2026-11-30",
}  # fmt: skip


class Service:
    def __init__(self, url: str) -> None:
        parsed = urllib.parse.urlparse(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 80

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        key: str | None = None,
        raw: bytes | None = None,
        ctype: str = "application/json",
        timeout_s: float = 60,
        source: str | None = None,
        scheme: str = "Bearer",
    ) -> tuple[int, Any, float]:
        """(status, the JSON or text answered, seconds); status 0: no answer in time."""
        began = time.monotonic()
        conn = http.client.HTTPConnection(
            self.host, self.port, timeout=timeout_s,
            source_address=(source, 0) if source else None,
        )  # fmt: skip
        headers = {"Content-Type": ctype}
        if key:
            headers["Authorization"] = f"{scheme} {key}"
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        try:
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            text = response.read()
            kind = response.getheader("Content-Type") or ""
            found: Any = json.loads(text) if "json" in kind and text else text[:120]
            return response.status, found, time.monotonic() - began
        except (OSError, http.client.HTTPException):
            return 0, None, time.monotonic() - began
        finally:
            conn.close()


def _reads(service: Service, count: int, source: str | None = None) -> str:
    timings = [
        service.call("GET", "/v1/gpus/l4", timeout_s=60, source=source) for _ in range(count)
    ]
    ok = sum(1 for status, _, _ in timings if status == 200)
    worst = max(seconds for _, _, seconds in timings)
    statuses = dict(sorted(Counter(status for status, _, _ in timings).items()))
    return f"{ok} of {count} reads answered {statuses}, the slowest in {worst:.2f} s"


ATTACKER = "127.50.0.1"  # the slow and idle connections' address; the reads come from another


def slow_and_idle(service: Service) -> None:
    held: list[socket.socket] = []
    for _ in range(16):
        sock = socket.create_connection((service.host, service.port), source_address=(ATTACKER, 0))
        sock.sendall(b"POST /v1/profiles HTTP/1.1\r\nHost: p\r\nContent-Type: application/json"
                     b"\r\nContent-Length: 100000\r\n\r\n{")  # fmt: skip
        held.append(sock)
    for _ in range(160):
        held.append(
            socket.create_connection((service.host, service.port), source_address=(ATTACKER, 0))
        )
    stop = threading.Event()

    def dribble() -> None:
        while not stop.wait(5):
            for sock in held[:16]:
                with contextlib.suppress(OSError):
                    sock.sendall(b" ")

    threading.Thread(target=dribble, daemon=True).start()
    time.sleep(1)
    print(f"1. beside 16 slow bodies and 160 idle connections: {_reads(service, 10)}")
    print(f"   from the attacker's own address: {_reads(service, 10, ATTACKER)}")
    time.sleep(14)
    print(f"   15 s on: {_reads(service, 10)}")
    stop.set()
    ended = 0
    for sock in held:
        sock.settimeout(0.1)
        try:
            sock.recv(1)  # an answer, or the end: the service let it go
            ended += 1
        except TimeoutError:
            pass  # still held open
        except OSError:
            ended += 1
        sock.close()
    print(f"   of the 176, the service had answered or closed {ended} by then")


def networks(service: Service, key: str) -> None:
    answered: list[int] = []

    def attacker(index: int) -> None:
        body = {"model": {**MOE, "vocab": 90_000 + index + int(time.time()) % 10_000},
                "workload": {"task": "training", "batch_size": 1, "seq_len": 128}}  # fmt: skip
        answered.append(service.call("POST", "/v1/profiles", body,
                                     source=f"127.{60 + index}.0.1")[0])  # fmt: skip

    threads = [threading.Thread(target=attacker, args=(i,)) for i in range(12)]
    for thread in threads:
        thread.start()
    time.sleep(1)
    batch = 7 + int(time.time()) % 1000
    profile = {"model": {"name": "gpt2"},
               "workload": {"task": "training", "batch_size": batch, "seq_len": 64}}  # fmt: skip
    status, _, seconds = service.call("POST", "/v1/profiles", profile, key=key)
    rec = {"model": {"name": "bert-base"}, "workload": {"task": "fine-tuning", "batch_size": 32,
           "seq_len": 384, "dataset_tokens": 10_000_000 + batch}}  # fmt: skip
    rstatus, _, rseconds = service.call("POST", "/v1/recommendations", rec, key=key)
    print(f"2. beside 12 networks' expensive profiles: another client's new profile {status} in "
          f"{seconds:.2f} s, new recommendation {rstatus} in {rseconds:.2f} s")  # fmt: skip
    for thread in threads:
        thread.join(120)
    print(f"   the twelve were answered {sorted(answered)}")


def stored(service: Service, key: str, flood: int) -> None:
    _, profile, _ = service.call("POST", "/v1/profiles", {"model": {"name": "gpt2"},
        "workload": {"task": "training", "batch_size": 3, "seq_len": 64}}, key=key)  # fmt: skip
    _, rec, _ = service.call("POST", "/v1/recommendations", {"model": {"name": "gpt2"},
        "workload": {"task": "training", "batch_size": 4, "seq_len": 512,
                     "dataset_tokens": 100_000_000}}, key=key)  # fmt: skip
    trace = _trace()
    _, uploaded, _ = service.call("POST", "/v1/traces", raw=trace, key=key,
                                  ctype="application/gzip")  # fmt: skip
    paths = {
        "profile": f"/v1/profiles/{profile['profile_id']}",
        "recommendation": f"/v1/recommendations/{rec['id']}",
        "trace": f"/v1/traces/{uploaded['trace_id']}",
    }
    began = time.monotonic()

    def hammer(count: int) -> None:
        conn = http.client.HTTPConnection(service.host, service.port, timeout=30)
        for _ in range(count):
            try:
                conn.request("GET", "/healthz")
                conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                conn.close()
                conn = http.client.HTTPConnection(service.host, service.port, timeout=30)

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(hammer, [flood // 16] * 16))
    print(f"3. {flood} requests to /healthz in {time.monotonic() - began:.0f} s; then:")
    for what, path in paths.items():
        print(f"   the {what} made before: {service.call('GET', path, key=key)[0]}")


def _trace() -> bytes:
    """A small trace of four profiler steps on an H100, gzipped."""
    return known_steps(4).gzipped()


def rows(service: Service, key: str) -> None:
    huge = service.call("POST", "/v1/benchmarks", {"rows": [{**ROW, "batch_size_per_gpu": 1e308}]},
                        key=key)  # fmt: skip
    old = service.call("POST", "/v1/benchmarks", {"rows": [{**ROW, "as_of": "0001-01-01"}]},
                       key=key)  # fmt: skip
    print(f"4. a row with batch_size_per_gpu 1e308: {huge[0]}; as_of 0001-01-01: {old[0]}")


def ownership(service: Service, key: str, other: str) -> None:
    _, batch, _ = service.call("POST", "/v1/benchmarks", {"rows": [ROW]}, key=key)
    listed = service.call("GET", "/v1/benchmarks?layer=submitted&page_size=500")
    seen = len(listed[1]["items"]) if listed[0] == 200 else 0
    theirs = service.call("GET", f"/v1/benchmarks/batches/{batch['batch_id']}", key=other)
    by = "with submitted_by" if theirs[0] == 200 and "submitted_by" in json.dumps(theirs[1]) else ""
    trace = _trace()
    _, mine, _ = service.call("POST", "/v1/traces?reference_gpu=h100-sxm-80gb", raw=trace,
                              key=key, ctype="application/gzip")  # fmt: skip
    service.call("POST", "/v1/traces?reference_gpu=l4", raw=trace, key=other,
                 ctype="application/gzip")  # fmt: skip
    again = service.call("GET", f"/v1/traces/{mine['trace_id']}", key=key)
    ref = again[1].get("reference_gpu_id") if again[0] == 200 else None
    read = service.call("GET", f"/v1/traces/{mine['trace_id']}", key=other)[0]
    print(f"5. submitted rows listed without a key: {seen}; another key reads the batch: "
          f"{theirs[0]} {by}; reads the trace: {read}; the owner's trace after another key "
          f"uploaded its bytes for an L4: reference {ref}")  # fmt: skip


def smaller(service: Service, key: str) -> None:
    long = service.call("GET", "/v1/gpus?" + "a" * 10_000)
    kind = "problem+json" if isinstance(long[1], dict) else "HTML/text"
    tco = service.call("POST", "/v1/tco", {"gpu": "l4", "usage": {"gpu_hours_per_month": 100,
                       "interruptible": 0}})  # fmt: skip
    lower = service.call("GET", "/v1/gpus/l4", key=key, scheme="bearer")
    print(
        f"6. a 10,000-byte query: {long[0]} ({kind}); interruptible 0: {tco[0]}; "
        f"lowercase bearer: {lower[0]}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--write-key", required=True)
    parser.add_argument("--other-key", required=True)
    parser.add_argument("--flood", type=int, default=115_000)
    args = parser.parse_args()
    service = Service(args.url)
    slow_and_idle(service)
    networks(service, args.write_key)
    rows(service, args.write_key)
    ownership(service, args.write_key, args.other_key)
    smaller(service, args.write_key)
    if args.flood:
        stored(service, args.write_key, args.flood)


if __name__ == "__main__":
    main()
