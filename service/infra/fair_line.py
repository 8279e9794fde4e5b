"""Who gets the next compute process: fair between clients, light work first, waits bounded.

The per-client share of the compute processes was counted per address and served first
come, first served: twelve addresses each posting a 10,000-expert profile queued 24 tasks
in the one compute process of a worker, and another client's new profile waited 30 s or
got a 503. :class:`FairLine` decides instead:

- **Fair between tenants.** A tenant is a key, else a network (:func:`service.security.
  tenant`: a /24 or a /64, so that many addresses of one network are one client). The next
  task is the waiting one whose tenant has used the least compute lately (CPU-seconds,
  halved every :data:`HALF_LIFE_S`, plus what it has running), then the oldest.
- **Light work always finds a process.** Work that takes longer than :data:`LIGHT_S` of
  CPU is *long*. Some processes are *light-only* (the pool keeps one, at the workers'
  priority, where there are two or more): long work never runs there, so a new light
  task never waits behind long ones, nor crawls at a low priority. A light task that
  passes :data:`LIGHT_S` there is called off and waits again as long work (what it did is
  lost: at most :data:`LIGHT_S`); its tenant's next tasks wait as long work for
  :data:`FLAGGED_S`. Light tasks take a light-only process first.
- **Bounded waiting.** At most ``capacity`` tasks wait. When full, a light newcomer takes
  the place of a waiting long task; otherwise a newcomer takes the place of a waiting task
  of the tenant that has had the most (what it used lately, then its tasks waiting or
  running; that task is refused), if that is more than the newcomer's tenant has had;
  otherwise the newcomer is refused at once. A task that waited
  its bound is refused by its caller (503 and ``Retry-After``).
- **Known long work waits as such.** The caller says when a task is known to be long (a
  profile of a model with many experts: :func:`profiles.depth.expected_long`).

It holds no processes itself: the pool (:mod:`service.infra.compute`) gives it the idle ones
and asks it whom to give each to.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

LIGHT_S = 1.0  # CPU-seconds a task may take before it counts as long work
HALF_LIFE_S = 60.0  # how fast what a tenant used is forgotten
FLAGGED_S = 60.0  # how long a tenant whose work ran long has its next tasks wait as long


class Full(Exception):
    """No room to wait: the caller answers 503 with ``Retry-After``."""


@dataclass(eq=False)
class Turn:
    """A task's place in the line: ``child`` is set (and ``ready``) once it has a process;
    ``refused`` instead when a newcomer took its place."""

    tenant: str
    long: bool
    arrived: float
    ready: threading.Event = field(default_factory=threading.Event)
    child: Any = None
    refused: str | None = None


@dataclass
class _Running:
    tenant: str
    long: bool
    since: float


class FairLine:
    """``capacity``: tasks that may wait. The processes it is given say whether they are
    light-only (:meth:`give`)."""

    def __init__(self, capacity: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.capacity = capacity
        self._clock = clock
        self._idle: list[Any] = []
        self._waiting: list[Turn] = []
        self._running: dict[int, _Running] = {}  # by id(child)
        self._light_only: set[int] = set()  # the processes long work never has (by id)
        self._used: dict[str, tuple[float, float]] = {}  # tenant -> (CPU-s, when)
        self._flagged: dict[str, float] = {}  # tenant -> until when its work waits as long
        self._lock = threading.Lock()
        self.displaced = 0  # waiting tasks refused to make room for a newcomer

    # what a tenant has used
    def used(self, tenant: str) -> float:
        """CPU-seconds ``tenant`` used lately, plus the time of what it has running."""
        with self._lock:
            return self._used_now(tenant, self._clock())

    def _used_now(self, tenant: str, now: float) -> float:
        seconds, when = self._used.get(tenant, (0.0, now))
        decayed = seconds * 0.5 ** ((now - when) / HALF_LIFE_S)
        running = sum(now - r.since for r in self._running.values() if r.tenant == tenant)
        return decayed + running

    def charge(self, tenant: str, cpu_s: float) -> None:
        """Add what a task of ``tenant`` took."""
        with self._lock:
            now = self._clock()
            seconds, when = self._used.get(tenant, (0.0, now))
            self._used[tenant] = (seconds * 0.5 ** ((now - when) / HALF_LIFE_S) + cpu_s, now)
            if len(self._used) > 10_000:  # forget the quietest
                for gone in sorted(self._used, key=lambda t: self._used[t][1])[:5_000]:
                    del self._used[gone]

    def flagged(self, tenant: str) -> bool:
        """Whether ``tenant``'s work ran long lately (its next tasks wait as long work)."""
        with self._lock:
            return self._flagged.get(tenant, 0.0) > self._clock()

    def _flag(self, tenant: str, now: float) -> None:
        self._flagged[tenant] = now + FLAGGED_S
        if len(self._flagged) > 10_000:
            self._flagged = {t: u for t, u in self._flagged.items() if u > now}

    # the line
    def join(self, tenant: str, long: bool) -> Turn:
        """A place for a task of ``tenant`` (``long``: known to be long work): a process
        at once where one is idle for it, else a wait (:class:`Full` when there is no room)."""
        with self._lock:
            now = self._clock()
            turn = Turn(tenant, long or self._flagged.get(tenant, 0.0) > now, now)
            found = self._idle_for(turn)
            if found is not None:
                self._idle.remove(found)
                self._start(turn, found, now)
                return turn
            if len(self._waiting) >= self.capacity:
                self._make_room(turn, now)
            self._waiting.append(turn)
            return turn

    def _share(self, tenant: str, now: float) -> tuple[float, int]:
        """How much ``tenant`` has had: what it used lately, then its tasks waiting or
        running (who gives way first when the line is full)."""
        held = sum(t.tenant == tenant for t in self._waiting)
        held += sum(r.tenant == tenant for r in self._running.values())
        return self._used_now(tenant, now), held

    def _make_room(self, newcomer: Turn, now: float) -> None:
        """Refuse a waiting task for ``newcomer`` (or raise :class:`Full`): long work gives
        way to light work (a task that waits never adds to what its tenant used, so twelve
        networks' long tasks looked as light as anyone's), then the most served to the
        least."""
        if not newcomer.long and any(t.long for t in self._waiting):
            waiting = [t for t in self._waiting if t.long]
        else:
            waiting = self._waiting
        heaviest = max(waiting, key=lambda t: (*self._share(t.tenant, now), -t.arrived))
        light_over_long = heaviest.long and not newcomer.long
        if not light_over_long and self._share(heaviest.tenant, now) <= self._share(
            newcomer.tenant, now
        ):
            raise Full(f"{self.capacity} computations are waiting already")
        self._waiting.remove(heaviest)
        self.displaced += 1
        heaviest.refused = (
            f"{self.capacity} computations were waiting; a client that had used less "
            "took this one's place"
        )
        heaviest.ready.set()

    def leave(self, turn: Turn) -> None:
        """Give up ``turn`` (its caller stopped waiting); a process it got meanwhile goes
        to the next in line."""
        with self._lock:
            if turn in self._waiting:
                self._waiting.remove(turn)
                return
        if turn.child is not None:
            self.done(turn.child, 0.0)

    def give(self, child: Any, light_only: bool | None = None) -> None:
        """``child`` is idle (new, or done): to the next waiting task it may take.
        ``light_only``, said when a process is first given: long work never has it."""
        with self._lock:
            if light_only is not None:
                if light_only:
                    self._light_only.add(id(child))
                else:
                    self._light_only.discard(id(child))
            now = self._clock()
            found = self._next(now, id(child) in self._light_only)
            if found is None:
                self._idle.append(child)
                return
            self._waiting.remove(found)
            self._start(found, child, now)

    def done(self, child: Any, cpu_s: float) -> None:
        """``child`` finished its task, which took ``cpu_s``: charged, and ``child`` given
        to the next."""
        with self._lock:
            running = self._running.pop(id(child), None)
        if running is not None and cpu_s:
            self.charge(running.tenant, cpu_s)
        self.give(child)

    def run_long(self, child: Any) -> bool:
        """``child``'s task passed :data:`LIGHT_S`: whether it may go on as long work (not
        on a light-only process), else it is to be called off and wait again as long work."""
        with self._lock:
            now = self._clock()
            running = self._running.get(id(child))
            if running is None:
                return True
            self._flag(running.tenant, now)
            if id(child) in self._light_only:
                return False
            running.long = True
            return True

    def forget(self, child: Any) -> None:
        """``child`` is gone (died, killed): neither idle nor running."""
        with self._lock:
            self._running.pop(id(child), None)
            self._light_only.discard(id(child))
            if child in self._idle:
                self._idle.remove(child)

    def clear(self) -> None:
        with self._lock:
            self._idle.clear()
            self._running.clear()
            self._light_only.clear()

    def waiting(self) -> int:
        with self._lock:
            return len(self._waiting)

    def _idle_for(self, turn: Turn) -> Any:
        """An idle process ``turn`` may have: a light-only one first for light work (the
        others stay free for long work), none of those for long work."""
        light = [c for c in self._idle if id(c) in self._light_only]
        general = [c for c in self._idle if id(c) not in self._light_only]
        found = general if turn.long else light + general
        return found[0] if found else None

    def _next(self, now: float, light_only: bool) -> Turn | None:
        eligible = [t for t in self._waiting if not (light_only and t.long)]
        if not eligible:
            return None
        return min(eligible, key=lambda t: (self._used_now(t.tenant, now), t.arrived))

    def _start(self, turn: Turn, child: Any, now: float) -> None:
        self._running[id(child)] = _Running(turn.tenant, turn.long, now)
        turn.child = child
        turn.ready.set()
