"""The running service under load, driven from a second process over loopback, in either
set-up: ``production`` (a private ``redis-server`` with an append-only file, ``rightsize
serve --workers 2`` and ``rightsize worker``) or ``embedded`` (``rightsize serve`` as
``./scripts/serve`` starts it: one worker, the SQLite store), or ``both``.

It sends each repeated request once (the warm-up), then drives the service for
``--seconds`` at ``--connections`` keep-alive connections with a mix of catalog reads,
profiles, estimates, plans and recommendations in which ``--repeat`` of the requests are
ones asked before (answered from the caches) and the rest are new (another GPU, count,
filter or budget: computed). It prints requests/s, p50/p95/p99 per endpoint (cached and
computed apart) and the errors.

``--outage`` (production) runs the same load a second time while Redis is stopped 10 s
into it and started again 10 s later, and counts the 5xx (target: none).

``--abuse`` runs the same load a second time beside every way issues 26 and 37 found to
take the service down without a key (``bench/attacks.py``: abandoned 10,000-expert
profiles, 200 MiB bodies, slow bodies, slow headers, 1,100 idle connections, and twelve
networks each waiting for an expensive profile), with a quiet client (a key of its own)
asking for new work every 2 s. Targets: cached recommendations' p99 within 2x the normal
run's; the quiet client's new work p99 under 2 s; the mix's new work still answered.

Each connection of the mix is a client of its own (a read key each), as internal tools
are: the service shares its compute processes between clients.

``--code DIR`` serves another checkout of rightsize (an earlier commit, with this
environment's packages) under the same load, for before-and-after figures in one session.

Targets on a 2-core machine (issue 13): no errors; p99 of cached recommendations
<= 50 ms; >= 300 requests/s for the mix.

Run: .venv/bin/python bench/bench_load.py [--seconds 60] [--connections 32] [--outage]
     [--abuse] [--setup production|embedded|both] [--code DIR]
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import os
import random
import resource
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import attacks
from tests.service.redis_server import RedisServer, free_port

RIGHTSIZE = str(Path(sys.executable).with_name("rightsize"))
GPUS = [
    "h100-sxm-80gb", "a100-sxm4-80gb", "l40s", "rtx-4090", "a10g", "l4", "h200-sxm-141gb",
    "b200-sxm-180gb", "a40", "rtx-3090", "rtx-a6000", "mi300x",
]  # fmt: skip
RESNET = {
    "model": {"name": "resnet-50"},
    "workload": {"task": "training", "batch_size": 128, "image_size": 224, "precision": "fp16"},
}
BERT = {
    "model": {"name": "bert-base"},
    "workload": {"task": "fine-tuning", "batch_size": 32, "seq_len": 384, "precision": "fp16"},
}
LLAMA = {
    "model": {"name": "llama-3-8b"},
    "workload": {
        "task": "training",
        "batch_size": 1,
        "seq_len": 4096,
        "precision": "bf16",
        "dataset_tokens": 1_000_000_000,
    },
}
# share of the mix by endpoint (catalog reads are most of what internal tools ask)
MIX = {
    "gpus": 0.20,
    "gpu": 0.10,
    "offers": 0.10,
    "benchmarks": 0.05,
    "models": 0.10,
    "profiles": 0.05,
    "estimates": 0.20,
    "plans": 0.10,
    "recommendations": 0.10,
}
Request = tuple[str, str, str, bytes | None]  # (endpoint, method, path, body)


def _post(endpoint: str, path: str, body: dict[str, Any]) -> Request:
    return (endpoint, "POST", path, json.dumps(body).encode())


def request(endpoint: str, rng: random.Random, new: bool) -> Request:  # noqa: PLR0911
    """A repeated request (from a small fixed set) or a new one (``rng`` picks what is new)."""
    pick = rng.randrange(1_000_000) if new else rng.randrange(3)
    gpu = GPUS[pick % len(GPUS)]
    if endpoint == "gpus":
        size = 5 + pick % 45 if new else 50
        return (endpoint, "GET", f"/v1/gpus?page_size={size}&sort=-memory_gb", None)
    if endpoint == "gpu":
        return (endpoint, "GET", f"/v1/gpus/{gpu}", None)
    if endpoint == "offers":
        price = f"&max_price_usd_per_hour={1 + pick % 97}" if new else ""
        return (endpoint, "GET", f"/v1/offers?page_size=20{price}", None)
    if endpoint == "benchmarks":
        page = 1 + pick % 20 if new else 1
        return (endpoint, "GET", f"/v1/benchmarks?gpu={gpu}&page={page}&page_size=20", None)
    if endpoint == "models":
        return (endpoint, "GET", "/v1/models?page_size=50", None)
    model = (RESNET, BERT, LLAMA)[pick % 3]
    if endpoint == "profiles":
        # new: a batch size not asked before (the profiler runs on the meta device)
        batch = 1 + pick % 512 if new else model["workload"]["batch_size"]
        body = {**model, "workload": {**model["workload"], "batch_size": batch}}
        return _post(endpoint, "/v1/profiles", body)
    if endpoint == "estimates":
        count = 1 + (pick // len(GPUS)) % 8 if new else 1
        return _post(endpoint, "/v1/estimates", {**model, "gpu": gpu, "count": count})
    if endpoint == "plans":
        return _post(endpoint, "/v1/plans", {**LLAMA, "gpu": gpu, "max_count": 16})
    # recommendations: new = a budget not asked before (every candidate costed again)
    constraints = {"max_gpus": 16}
    if new:
        constraints["budget_monthly_usd"] = 1000 + pick
    return _post(endpoint, "/v1/recommendations", {**model, "constraints": constraints})


def drive(port: int, seconds: float, keys: list[str], repeat: float, seed: int, out: Any) -> None:
    """Run in the load process: a thread a key, each a keep-alive connection."""
    results: list[tuple[float, str, bool, int, float]] = []  # (t, endpoint, new, status, ms)
    lock = threading.Lock()
    start = time.monotonic()
    names, weights = list(MIX), list(MIX.values())

    def one(index: int) -> None:
        rng = random.Random(seed * 1000 + index)
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        mine = []
        while (now := time.monotonic()) - start < seconds:
            new = rng.random() >= repeat
            endpoint, method, path, body = request(rng.choices(names, weights)[0], rng, new)
            headers = {"Authorization": f"Bearer {keys[index]}"}
            if body:
                headers["Content-Type"] = "application/json"
            began = time.perf_counter()
            try:
                conn.request(method, path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
                status = response.status
            except (OSError, http.client.HTTPException):
                status = 0  # a dropped connection: counted as an error
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            mine.append((now - start, endpoint, new, status, (time.perf_counter() - began) * 1e3))
        with lock:
            results.extend(mine)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(keys))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    usage = resource.getrusage(resource.RUSAGE_SELF)
    out.put((results, usage.ru_utime + usage.ru_stime))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def report(results: list[tuple[float, str, bool, int, float]], seconds: float) -> dict[str, Any]:
    by: dict[tuple[str, str], list[float]] = defaultdict(list)
    statuses: dict[int, int] = defaultdict(int)
    for _, endpoint, new, status, ms in results:
        by[(endpoint, "new" if new else "repeated")].append(ms)
        statuses[status] += 1
    print(f"{len(results)} requests in {seconds:.0f} s: {len(results) / seconds:.0f} requests/s")
    print(f"statuses: {dict(sorted(statuses.items()))}")
    print(f"{'endpoint':<16}{'kind':<10}{'n':>7}{'p50 ms':>9}{'p95 ms':>9}{'p99 ms':>9}")
    for (endpoint, kind), values in sorted(by.items()):
        p50, p95, p99 = (_percentile(values, q) for q in (0.5, 0.95, 0.99))
        print(f"{endpoint:<16}{kind:<10}{len(values):>7}{p50:>9.1f}{p95:>9.1f}{p99:>9.1f}")
    errors = sum(n for s, n in statuses.items() if s == 0 or s >= 400)
    server_errors = sum(n for s, n in statuses.items() if s == 0 or s >= 500)
    cached_recs = by.get(("recommendations", "repeated"), [0.0])
    return {
        "rps": len(results) / seconds,
        "errors": errors,
        "server_errors": server_errors,
        "cached_recommendations_p99_ms": _percentile(cached_recs, 0.99),
    }


def _get(port: int, path: str) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
    conn.request("GET", path)
    response = conn.getresponse()
    response.read()
    return response.status


def _ready(port: int, deadline: float) -> None:
    """Until every worker's compute processes take work (``ready``, where the service
    says: they build their apps after it starts): ten answers in a row, from whichever
    worker answered each."""
    in_a_row = 0
    while in_a_row < 10:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/readyz")
        compute = json.loads(conn.getresponse().read()).get("compute", {})
        conn.close()
        ready = compute.get("ready", compute.get("processes")) == compute.get("processes")
        in_a_row = in_a_row + 1 if ready else 0
        if time.monotonic() > deadline:
            raise SystemExit("the compute processes did not start")
        time.sleep(0.2)


def _warm(port: int) -> None:
    """Ask every repeated request once (and wait for the performance model)."""
    rng = random.Random(0)
    seen = set()
    for _ in range(400):
        _, method, path, body = request(rng.choice(list(MIX)), rng, False)
        if (path, body) in seen:
            continue
        seen.add((path, body))
        for _ in range(2):  # both workers
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=300)
            conn.request(method, path, body=body, headers={"Content-Type": "application/json"})
            response = conn.getresponse()
            response.read()
            assert response.status < 400, (path, body, response.status)


def load(port: int, args: argparse.Namespace, seed: int, keys: list[str]) -> list[Any]:
    queue: Any = multiprocessing.get_context("spawn").Queue()
    process = multiprocessing.get_context("spawn").Process(
        target=drive, args=(port, args.seconds, keys, args.repeat, seed, queue)
    )
    process.start()
    results, client_cpu_s = queue.get()
    process.join()
    print(f"(the load process used {client_cpu_s / args.seconds:.2f} CPU cores of the 2)")
    return list(results)


def _keys(path: Path, count: int) -> list[str]:
    """A read key a connection (each connection a client of its own)."""
    from service.infra.keys import KeyFile

    store = KeyFile(path)
    return [store.create(f"bench-{i}", "read")[0] for i in range(count)]


ATTACKS = {  # name -> arguments of each of its processes
    "abandon": [(i,) for i in range(8)],
    "bodies": [(i,) for i in range(2)],
    "slow_bodies": [(64,)],
    "slow_headers": [(64,)],
    "idle": [(1100,)],
    "networks": [(i,) for i in range(12)],
}


def abused(port: int, args: argparse.Namespace, keys: list[str], steady: dict[str, Any],
           quiet_key: str) -> None:  # fmt: skip
    """The mix again, beside every attack, and a quiet client's new work."""
    context = multiprocessing.get_context("spawn")
    queue: Any = context.Queue()
    processes = [
        context.Process(target=attacks.run, args=(name, port, args.seconds, runs, queue))
        for name, runs in ATTACKS.items()
    ]
    quiet_runs = [(quiet_key, args.quiet_every)]
    processes.append(
        context.Process(target=attacks.run, args=("quiet", port, args.seconds, quiet_runs, queue))
    )
    print(
        "\nthe same load beside, without a key: 8 clients abandoning 10,000-expert profiles "
        "after 2 s, 2 sending 200 MiB bodies, 64 connections sending a body a byte every 5 s, "
        "64 sending headers so, 1,100 idle connections from 20 addresses, 12 addresses of 12 "
        "networks each waiting for a 10,000-expert profile; and a quiet client (a key) asking "
        f"for a new profile or recommendation every {args.quiet_every:g} s:"
    )
    for process in processes:
        process.start()
    results = load(port, args, 3, keys)
    during = report(results, args.seconds)
    totals: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    quiet: list[tuple[str, int, float]] = []
    cpu = 0.0
    for _ in processes:
        name, found, used = queue.get()
        cpu += used
        if name == "quiet":
            quiet = found
            continue
        for status, n in found.items():
            totals[name][status] += n
    for process in processes:
        process.join()
    for name, statuses in totals.items():
        print(f"  {name}: {dict(statuses)}")
    print(f"  (the attackers used {cpu:.1f} CPU-s in {args.seconds:.0f} s)")
    quiet_ms = [ms for _, _, ms in quiet]
    quiet_ok = sum(1 for _, status, _ in quiet if status == 200)
    print(
        f"  the quiet client: {quiet_ok} of {len(quiet)} new answers 200 "
        f"({dict(sorted(Counter(s for _, s, _ in quiet).items()))}); "
        f"p50 {_percentile(quiet_ms, 0.5):.0f} ms, p99 {_percentile(quiet_ms, 0.99):.0f} ms, "
        f"max {max(quiet_ms):.0f} ms"
    )
    for kind in sorted({k for k, _, _ in quiet}):
        each = [ms for k, _, ms in quiet if k == kind]
        print(f"    {kind}s: {', '.join(f'{ms:.0f}' for ms in each)} ms")
    new_work = [s for _, e, new, s, _ in results if new and e in ("profiles", "recommendations")]
    answered = sum(1 for s in new_work if s == 200)
    ratio = during["cached_recommendations_p99_ms"] / steady["cached_recommendations_p99_ms"]
    print(
        f"targets: cached recommendations p99 {during['cached_recommendations_p99_ms']:.1f} ms, "
        f"{ratio:.2f}x the normal run's (<= 2); the quiet client's new work p99 "
        f"{_percentile(quiet_ms, 0.99) / 1e3:.2f} s (< 2 s); the mix's new profiles and "
        f"recommendations answered {answered} of {len(new_work)}"
    )


def outage(redis: RedisServer, port: int, args: argparse.Namespace, keys: list[str]) -> None:
    """The mix again, Redis stopped from 10 s to 20 s."""

    def stop_and_start() -> None:
        time.sleep(10)
        redis.stop()
        print("  redis stopped at 10 s")
        time.sleep(10)
        redis.start()
        print("  redis started at 20 s")

    killer = threading.Thread(target=stop_and_start)
    print("\nthe same load, Redis stopped from 10 s to 20 s:")
    killer.start()
    during = report(load(port, args, 2, keys), args.seconds)
    killer.join()
    print(f"target: 5xx and dropped connections {during['server_errors']} (0)")


def _serve(args: argparse.Namespace, setup: str, port: int, env: dict[str, str]) -> list[Any]:
    """The service of ``setup`` (and, in production, its rq worker), from ``--code`` when
    given (another checkout: its figures beside these, on the same machine)."""
    workers = "2" if setup == "production" else "1"
    command = [RIGHTSIZE]
    if args.code:
        env = {**env, "PYTHONPATH": str(args.code)}
        command = [sys.executable, "-c", "from service.cli import main; main()"]
    where = str(args.code) if args.code else None
    serve = [*command, "serve", "--port", str(port), "--workers", workers]
    if args.threads:
        serve += ["--threads", str(args.threads)]
    started = [subprocess.Popen(serve, env=env, cwd=where, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)]  # fmt: skip
    if setup == "production":
        quietly = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        started.append(subprocess.Popen([*command, "worker"], env=env, cwd=where, **quietly))
    return started


def run_setup(args: argparse.Namespace, setup: str) -> None:
    """The mix (then the outage or the attacks) against one set-up."""
    redis = RedisServer() if setup == "production" else None
    port = free_port()
    home = Path(tempfile.mkdtemp(prefix="rightsize-bench-"))
    keys_file = home / "keys.json"
    env = {
        **os.environ,
        "RIGHTSIZE_RATE_LIMIT": "1000000 per minute",
        "RIGHTSIZE_LOG_LEVEL": "WARNING",
        "RIGHTSIZE_KEY_PREFIX": f"bench-{port}:",
        "RIGHTSIZE_KEYS_FILE": str(keys_file),
        "RIGHTSIZE_STORE_FILE": str(home / "store.sqlite3"),
        "RIGHTSIZE_SUBMISSIONS_FILE": str(home / "submissions.jsonl"),
    }
    env.pop("RIGHTSIZE_REDIS_URL", None)
    if redis is not None:
        redis.start()
        env["RIGHTSIZE_REDIS_URL"] = redis.url
    keys = _keys(keys_file, args.connections + 1)
    quiet_key = keys.pop()
    started = _serve(args, setup, port, env)
    try:
        deadline = time.monotonic() + 240
        while True:
            try:
                if _get(port, "/readyz") == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("the service did not start")
            time.sleep(0.5)
        _ready(port, deadline)
        _warm(port)
        workers = "2 workers" if setup == "production" else "1 worker"
        store = f"Redis {redis.url}" if redis is not None else "the embedded store"
        print(
            f"\n== {setup}{' (' + str(args.code) + ')' if args.code else ''}: {workers}, "
            f"{store}; {args.connections} connections for {args.seconds:.0f} s, "
            f"{args.repeat:.0%} repeated requests"
        )
        steady = report(load(port, args, 1, keys), args.seconds)
        print(
            f"targets: errors {steady['errors']} (0); cached recommendations p99 "
            f"{steady['cached_recommendations_p99_ms']:.1f} ms (<= 50); "
            f"{steady['rps']:.0f} requests/s (>= 300)"
        )
        if args.outage and redis is not None:
            outage(redis, port, args, keys)
        if args.abuse:
            abused(port, args, keys, steady, quiet_key)
    finally:
        for process in started:
            process.terminate()
        for process in started:
            process.wait(timeout=60)
        if redis is not None:
            redis.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--repeat", type=float, default=0.8)
    parser.add_argument("--outage", action="store_true")
    parser.add_argument("--abuse", action="store_true")
    parser.add_argument("--threads", type=int, default=None, help="threads a worker")
    parser.add_argument(
        "--setup",
        choices=["production", "embedded", "both"],
        default="production",
        help="production: Redis, 2 workers and rightsize worker; embedded: as ./scripts/serve",
    )
    parser.add_argument("--code", type=Path, default=None, help="serve another checkout")
    parser.add_argument(
        "--quiet-every", type=float, default=5.0, help="seconds between the quiet client's asks"
    )
    args = parser.parse_args()
    for setup in ("embedded", "production") if args.setup == "both" else (args.setup,):
        run_setup(args, setup)


if __name__ == "__main__":
    main()
