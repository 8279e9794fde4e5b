"""CPU-heavy work in child processes at a lower CPU priority, so that cached answers never
queue behind it.

CPython runs one thread of a process at a time. A recommendation ranked anew holds a
gunicorn worker's interpreter lock for 30-100 ms, a profile counted anew for 100 ms or
more, and every cached answer the worker's other threads have to send meanwhile waits
(``bench/bench_load.py``: cached recommendations' p99 about 300 ms with new ones ranked in
the workers, 34 ms with none). A :class:`ComputePool` runs that work in
``RIGHTSIZE_COMPUTE_PROCESSES`` spawned processes per worker, niced by
``RIGHTSIZE_COMPUTE_NICE``: the worker's thread waits for it without the interpreter lock,
and the kernel runs the workers first.

- Profiles: the count alone, a pure function of the resolved model and the workload, runs
  in a child; the worker caches the result as before.
- Recommendations not in the cache: the whole request is answered by the child's own copy
  of the app, when the cache is shared (Redis reachable), so that what the child stores
  (the profile, the answer) every worker reads. With the in-process cache, or while Redis
  is away, the worker ranks them itself.

Work nobody waits for is called off: a request thread waits for its child in short
steps, and when its client has gone (:mod:`service.infra.connection`) or its time is up, the
task is dropped if it was still waiting for a child, or called off in the child, which
stops it at its next time-limit check (:mod:`profiles.interrupt`) and stays warm; a child
that does not stop within :data:`CALL_OFF_S` is killed and replaced.

Who gets a child is :mod:`service.infra.fair_line`'s choice: fair between tenants (a key, else a
network), long work kept to all children but one so that light work always finds one, at
most :attr:`ComputePool.queue` tasks waiting, none longer than ``wait_s`` (503 and
``Retry-After``). One tenant may have :attr:`ComputePool.per_client` tasks running or
waiting per worker (429 beyond).

A child that dies is replaced and the request it had is computed in the worker. Until
:meth:`ComputePool.start` (tests, the CLI, the rq worker) everything runs in the caller.
The profiles a child counts while it ranks come back with its answer, for the worker's
``/metrics`` (nobody scrapes a child's); ``/readyz`` reports the pool
(:meth:`ComputePool.status`).
"""

from __future__ import annotations

import itertools
import logging
import multiprocessing
import os
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any, TypeVar

from flask import Flask, Request, Response, g, has_request_context
from flask import request as current_request

from profiles.depth import expected_long
from profiles.resolved import ResolvedModel
from profiles.workload import Workload
from service.engine.errors import Abandoned, Busy, TooSlow
from service.engine.estimating.profiling import count_here
from service.infra import connection
from service.infra.compute_child import READY, _answer, _child, _count_in_child, _Failure
from service.infra.fair_line import LIGHT_S, FairLine, Full, Turn

log = logging.getLogger(__name__)

T = TypeVar("T")

# headers the worker sets itself or that describe the child's connection, not the answer
_NOT_FORWARDED = frozenset({"content-length", "connection", "keep-alive", "transfer-encoding"})

# beyond the request's own limits, how long a worker waits for a child before giving up
_GRACE_S = 10.0

# how often a waiting request thread looks at its client and its deadline
STEP_S = 0.1

# how long a child may take to stop a task called off before it is killed and replaced
# (a time-limit check comes every operator counted and every candidate ranked)
CALL_OFF_S = 5.0

RETRY_AFTER_S = 2

BOOT_S = 600.0  # how long a child may take to say so before it is replaced


@dataclass
class _Process:
    """One child: the process, the worker's end of its pipe, and the shared number of the
    task called off."""

    process: BaseProcess
    tasks: Connection
    called_off: Any
    light_only: bool = False  # long work never runs here (service.infra.fair_line)


class _Died(Exception):
    """The child a task was given to died (its pipe closed)."""


class _Demoted(Exception):
    """A task passed :data:`service.infra.fair_line.LIGHT_S` with every long slot taken: called
    off, it waits again as long work."""


_TICK_HZ = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _cpu_s(pid: int | None) -> float | None:
    """The CPU-seconds the main thread of process ``pid`` has used, where a child runs its
    tasks (not its other threads: the performance model builds in one as it starts);
    None where /proc does not say."""
    try:
        fields = Path(f"/proc/{pid}/task/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / _TICK_HZ


class ComputePool:
    """``processes`` children per worker process (0: none, everything in the caller), each
    with the app ``build(config)`` makes (a module-level function: the children import it).
    ``per_client``: tasks one tenant may have running or waiting here (0: no limit), the
    tenant being who ``client()`` says asks; ``queue``: tasks that may wait; ``wait_s``:
    the longest a task waits for a child (503 beyond)."""

    def __init__(
        self,
        processes: int,
        niceness: int,
        config: Mapping[str, Any],
        build: Callable[..., Flask],
        observe: Callable[[str, str], None] | None = None,
        profiled: Callable[[float], None] | None = None,
        per_client: int = 0,
        client: Callable[[], str] = lambda: "-",
        queue: int = 24,
        wait_s: float = 15.0,
        light_niceness: int | None = None,
    ) -> None:
        self.processes = processes
        self.niceness = niceness
        # the light-only child's: light work at a low priority crawled behind cached reads
        self.light_niceness = niceness if light_niceness is None else light_niceness
        self.per_client = per_client
        self.queue = queue
        self.wait_s = wait_s
        self._client = client  # who is asking, in a request (its key, else its address)
        self._build = build
        self._observe = observe  # (kind, where): where each task ran, child or worker
        self._profiled = profiled  # seconds of each profile a child counted while ranking
        self.replaced = 0  # children replaced after one died or would not stop
        self.called_off = 0  # tasks called off: their client went away or their time was up
        # the app's settings as given (the child builds the same app from them)
        self._config = {k: v for k, v in config.items() if k.startswith("RIGHTSIZE_")}
        self._context = multiprocessing.get_context("spawn")
        self._children: dict[int, _Process] = {}
        self._line = FairLine(queue)
        self._numbers = itertools.count(1)
        self._spawner: ThreadPoolExecutor | None = None
        self._clients: Counter[str] = Counter()
        self._some_ready = threading.Event()  # a child has built its app
        self._ready: set[int] = set()  # the children that have (by pid)
        self._running = False
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._running

    def pids(self) -> set[int]:
        """The children's process ids."""
        with self._lock:
            return set(self._children)

    def status(self) -> dict[str, Any]:
        """What ``/readyz`` reports: the children this worker should have and has alive."""
        with self._lock:
            alive = sum(child.process.is_alive() for child in self._children.values())
            ready = len(self._ready)
        if self.processes == 0:
            detail = "no compute processes: profiles and rankings run in the worker"
        elif not self._running:
            detail = "not started: everything runs in the caller (outside gunicorn)"
        else:
            detail = (
                f"{alive} of {self.processes} per worker alive, {ready} ready, at nice "
                f"{self.niceness}"
                + (f" (the light-only one at {self.light_niceness})" if self.processes > 1 else "")
            )
        return {
            "processes": self.processes,
            "running": self._running,
            "alive": alive,
            "ready": ready,
            "replaced": self.replaced,
            "called_off": self.called_off,
            "per_client": self.per_client,
            "waiting": self._line.waiting(),
            "displaced": self._line.displaced,
            "detail": detail,
        }

    def start(self) -> None:
        """Start the children (in a gunicorn worker, after the fork: never in the master,
        where a fork after OpenMP has run can hang). Their apps build in the background."""
        with self._lock:
            if self.processes > 0 and not self._running:
                self._running = True
                # children are started from this one thread, made here: a child takes the
                # priority of the thread that starts it, and the threads answering requests
                # run lower (service.front.bridge.lower_priority)
                self._spawner = ThreadPoolExecutor(1, thread_name_prefix="rightsize-spawn")
                self._spawner.submit(lambda: None).result()
                for index in range(self.processes):
                    # with two or more, the first is light-only (with one, long work may
                    # have it: nothing could run it otherwise)
                    self._spawn(light_only=self.processes > 1 and index == 0)

    def stop(self) -> None:
        with self._lock:
            self._running = False
            if self._spawner is not None:
                self._spawner.shutdown(wait=False)
                self._spawner = None
            children, self._children = list(self._children.values()), {}
            self._line.clear()
            self._some_ready.clear()
            self._ready.clear()
        for child in children:
            _end(child)

    def wait_ready(self, timeout_s: float) -> bool:
        """Whether a child has built its app within ``timeout_s`` (it waits for one)."""
        return self._some_ready.wait(timeout_s)

    def _spawn(self, light_only: bool) -> None:
        """A new child, in line once its app is built: work waits for a child that is
        ready (``wait_s`` at most), never behind one's start (a first request once waited
        for a child's app to build past its own limit, and was told it asked for too
        much), and never in the worker meanwhile (counted there, under the interpreter's
        lock, it held every cached answer up); under the lock. ``light_only``: long work
        never runs there, and it runs at ``light_niceness``."""
        mine, theirs = self._context.Pipe()
        called_off = self._context.RawValue("q", 0)
        niceness = self.light_niceness if light_only else self.niceness
        process = self._context.Process(
            target=_child,
            args=(theirs, called_off, self._config, niceness, self._build),
            name="rightsize-compute",
            daemon=True,
        )
        assert self._spawner is not None  # made by start(); no child starts after stop()
        self._spawner.submit(process.start).result()
        theirs.close()
        child = _Process(process, mine, called_off, light_only)
        assert process.pid is not None
        self._children[process.pid] = child
        welcome = threading.Thread(target=self._welcome, args=(child,), daemon=True)
        welcome.start()

    def _welcome(self, child: _Process) -> None:
        """Put ``child`` in line once it says it is ready (replace it if it never does)."""
        try:
            ready = child.tasks.poll(BOOT_S) and child.tasks.recv() == (0, READY)
        except (EOFError, OSError):
            return  # ended meanwhile (the pool stopped, or it was replaced)
        if not ready:
            log.warning("a compute process did not start within %g s; replacing it", BOOT_S)
            self._replace(child)
            return
        with self._lock:
            if child.process.pid not in self._children:
                return
            self._ready.add(child.process.pid)
        self._some_ready.set()
        self._line.give(child, light_only=child.light_only)

    def _replace(self, child: _Process) -> None:
        """End ``child`` (dead, or not stopping) and start another in its place."""
        self._line.forget(child)
        with self._lock:
            self._ready.discard(child.process.pid or 0)
            mine = self._children.pop(child.process.pid or 0, None) is not None
            if mine:
                self.replaced += 1
                if self._running:
                    self._spawn(child.light_only)
        _end(child)

    def tenant(self) -> str:
        """Who the request's work is counted for (``-`` outside a request)."""
        return self._client() if has_request_context() else "-"

    @contextmanager
    def admitted(self) -> Iterator[None]:
        """Count the request's new work against its tenant's share (429 beyond it); a
        request is counted once, however many tasks it hands over."""
        if self.per_client <= 0 or not has_request_context() or g.get("compute_admitted"):
            yield
            return
        client = self._client()
        with self._lock:
            if self._clients[client] >= self.per_client:
                raise Busy(
                    f"this client already has {self.per_client} new computations running or "
                    "waiting (the limit per client): wait for their answers, then ask again",
                    RETRY_AFTER_S,
                    shared=True,
                )
            self._clients[client] += 1
        g.compute_admitted = True
        try:
            yield
        finally:
            g.compute_admitted = False
            with self._lock:
                self._clients[client] -= 1
                if self._clients[client] <= 0:
                    del self._clients[client]

    def _run(
        self,
        kind: str,
        timeout_s: float,
        here: Callable[[], T],
        fn: Callable[..., T],
        *args: Any,
        long: bool = False,
    ) -> T:
        """``fn(*args)`` in a child (``here()`` in the caller without children, or when the
        child died), within ``timeout_s`` from now; ``long``: known to be long work."""
        with self.admitted():
            if not self._running:
                return self._here(kind, here)
            until = time.monotonic() + timeout_s
            gone = connection.probe(current_request.environ) if has_request_context() else None
            tenant = self.tenant()
            while True:
                child = self._take(min(until, time.monotonic() + self.wait_s), gone, tenant, long)
                if child is None:
                    log.warning("a compute process died; another starts, this request runs here")
                    return self._here(kind, here)
                try:
                    found: T = self._ask(child, until, timeout_s, gone, fn, args)
                except _Demoted:
                    long = True  # it waits again, for a long slot
                    continue
                except _Died:
                    log.warning("a compute process died; another starts, this request runs here")
                    self._replace(child)
                    return self._here(kind, here)
                break
        self._note(kind, "child")
        return found

    def _take(
        self, until: float, gone: Callable[[], bool] | None, tenant: str, long: bool
    ) -> _Process | None:
        """A child for ``tenant``'s task (None: the one found had died, and was replaced),
        waiting in line while the client is there, until ``until`` at the latest."""
        try:
            turn: Turn = self._line.join(tenant, long)
        except Full as exc:
            self.called_off += 1
            raise Busy(f"{exc}; nothing was computed: try again shortly", RETRY_AFTER_S) from None
        while not turn.ready.wait(STEP_S):
            if gone is not None and gone():
                self._line.leave(turn)
                self.called_off += 1
                raise Abandoned()
            if time.monotonic() > until:
                self._line.leave(turn)
                self.called_off += 1
                why = (
                    f"no compute process was free for this request within {self.wait_s:g} s"
                    if self._ready
                    else "the compute processes are still starting (each builds its app "
                    "after the service starts)"
                )
                raise Busy(f"{why}; nothing was computed: try again shortly", RETRY_AFTER_S)
        if turn.refused is not None:
            self.called_off += 1
            raise Busy(f"{turn.refused}; nothing was computed: try again shortly", RETRY_AFTER_S)
        child = turn.child
        assert child is not None
        if child.process.is_alive():
            return child
        self._replace(child)
        return None

    def _ask(
        self,
        child: _Process,
        until: float,
        timeout_s: float,
        gone: Callable[[], bool] | None,
        fn: Callable[..., T],
        args: tuple[Any, ...],
    ) -> T:
        """``fn(*args)`` run by ``child``; called off when the client goes, time is up, or
        it runs long while the long slots are taken (:class:`_Demoted`)."""
        number = next(self._numbers)
        cpu_at = _cpu_s(child.process.pid)
        began, long = time.monotonic(), False
        try:
            child.tasks.send((number, fn, args))
            while True:
                if child.tasks.poll(STEP_S):
                    answered, result = child.tasks.recv()
                    if answered == number:
                        self._line.done(child, self._used(child, cpu_at, began))
                        return result
                    continue
                if gone is not None and gone():
                    self._call_off(child, number, cpu_at, began)
                    raise Abandoned()
                if time.monotonic() > until:  # the child's own limits did not stop it
                    self._call_off(child, number, cpu_at, began)
                    raise TooSlow(timeout_s)
                if not long and self._used(child, cpu_at, began) > LIGHT_S:
                    long = True
                    if not self._line.run_long(child):
                        self._call_off(child, number, cpu_at, began)
                        raise _Demoted()
        except (EOFError, OSError, BrokenPipeError):
            raise _Died() from None

    @staticmethod
    def _used(child: _Process, cpu_at: float | None, began: float) -> float:
        """What ``child`` has spent on its task: CPU-seconds, or seconds where /proc does
        not say."""
        now = _cpu_s(child.process.pid)
        if now is None or cpu_at is None:
            return time.monotonic() - began
        return now - cpu_at

    def _call_off(self, child: _Process, number: int, cpu_at: float | None, began: float) -> None:
        """Stop task ``number`` in ``child``: the child is given back once it has, or
        killed and replaced past :data:`CALL_OFF_S` (in the background: the caller's answer
        does not wait)."""
        self.called_off += 1
        child.called_off.value = number

        def reclaim() -> None:
            until = time.monotonic() + CALL_OFF_S
            try:
                while (left := until - time.monotonic()) > 0:
                    if child.tasks.poll(left) and child.tasks.recv()[0] == number:
                        self._line.done(child, self._used(child, cpu_at, began))
                        return
            except (EOFError, OSError):
                pass
            log.warning("a compute process did not stop a task called off; replacing it")
            self._replace(child)

        threading.Thread(target=reclaim, name="compute-call-off", daemon=True).start()

    def _here(self, kind: str, here: Callable[[], T]) -> T:
        self._note(kind, "worker")
        return here()

    def _note(self, kind: str, where: str) -> None:
        if self._observe is not None:
            self._observe(kind, where)

    def count(self, model: ResolvedModel, workload: Workload, limit_s: float) -> dict[str, Any]:
        """The profile of ``workload`` on ``model`` (a child counts it)."""
        found = self._run(
            "profile",
            limit_s + _GRACE_S,
            lambda: count_here(model, workload, limit_s),
            _count_in_child,
            model,
            workload,
            limit_s,
            long=expected_long(model),
        )
        if isinstance(found, _Failure):
            raise found.rebuilt()
        return found

    def answer(
        self, request: Request, request_id: str, timeout_s: float, shared: bool, long: bool = False
    ) -> Response | None:
        """``request`` answered by a child (its log lines under ``request_id``), or None
        where the caller must answer it: the cache is not ``shared`` (what a child stored,
        the workers would not read), there are no children, or one died. ``long``: known
        to be long work."""
        if not shared:
            return self._here("recommendation", lambda: None)
        headers = [(k, v) for k, v in request.headers.items()
                   if k.lower() not in ("host", "x-request-id")]  # fmt: skip
        headers.append(("X-Request-ID", request_id))
        found = self._run(
            "recommendation",
            timeout_s + _GRACE_S,
            lambda: None,
            _answer,
            request.method,
            request.path,
            request.query_string.decode("latin-1"),
            headers,
            request.get_data(),
            long=long,
        )
        if found is None:
            return None
        if isinstance(found, _Failure):
            raise found.rebuilt()
        status, sent, body, profiles = found
        for seconds in profiles:
            self._note("profile", "child")
            if self._profiled is not None:
                self._profiled(seconds)
        kept = [(k, v) for k, v in sent if k.lower() not in _NOT_FORWARDED]
        return Response(body, status=status, headers=kept)


def _end(child: _Process) -> None:
    """Stop ``child`` and close the worker's end of its pipe."""
    child.tasks.close()
    if child.process.is_alive():
        child.process.kill()
    child.process.join(timeout=5)
