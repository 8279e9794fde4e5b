"""Who gets the next compute process (service/infra/fair_line.py): the least served tenant first,
light work never behind long work, a bounded wait where the most served give way."""

from __future__ import annotations

import pytest

from service.infra.fair_line import FairLine, Full


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


def _line(clock: Clock, children: int = 2, capacity: int = 8) -> FairLine:
    """A line given ``children`` processes, the first light-only where there are two or
    more (as the pool gives them)."""
    line = FairLine(capacity, clock)
    for i in range(children):
        line.give(f"child-{i}", light_only=children > 1 and i == 0)
    return line


class TestFairness:
    def test_the_tenant_that_used_least_goes_first_whatever_came_before(self, clock: Clock) -> None:
        line = _line(clock, children=1)
        busy = line.join("net:10.0.0.0/24", long=False)
        assert busy.child == "child-0"
        line.charge("net:10.0.0.0/24", 30.0)
        queued = [line.join("net:10.0.0.0/24", long=False) for _ in range(3)]
        clock.now += 1
        quiet = line.join("key:quiet", long=False)
        line.done(busy.child, 1.0)
        assert quiet.child == "child-0"  # not the three that came first
        assert all(turn.child is None for turn in queued)

    def test_what_a_tenant_used_is_forgotten_by_halves(self, clock: Clock) -> None:
        line = _line(clock)
        line.charge("key:a", 8.0)
        clock.now += 60
        assert line.used("key:a") == pytest.approx(4.0)
        clock.now += 120
        assert line.used("key:a") == pytest.approx(1.0)

    def test_running_work_counts_as_used(self, clock: Clock) -> None:
        line = _line(clock)
        line.join("key:a", long=False)
        clock.now += 5
        assert line.used("key:a") == pytest.approx(5.0)


class TestLongWork:
    def test_light_work_finds_a_process_while_long_work_holds_the_rest(self, clock: Clock) -> None:
        line = _line(clock, children=2)
        long = line.join("net:a", long=True)
        assert long.child == "child-1"  # never the light-only one
        waiting_long = line.join("net:b", long=True)
        assert waiting_long.child is None
        light = line.join("key:quiet", long=False)
        assert light.child == "child-0"

    def test_a_light_task_that_runs_long_goes_on_only_off_the_light_only_process(
        self, clock: Clock
    ) -> None:
        line = _line(clock, children=2)
        first = line.join("net:a", long=False)
        second = line.join("net:b", long=False)
        assert first.child == "child-0"  # light work takes the light-only process first
        assert line.run_long(first.child) is False  # called off, to wait as long work
        assert line.run_long(second.child) is True  # the other process may run it long
        assert line.flagged("net:a")  # its next tasks wait as long work
        assert line.join("net:a", long=False).long is True

    def test_with_one_process_long_work_may_have_it(self, clock: Clock) -> None:
        line = _line(clock, children=1)
        turn = line.join("net:a", long=True)
        assert turn.child == "child-0"
        assert line.run_long(turn.child) is True

    def test_a_long_slot_freed_goes_to_waiting_long_work(self, clock: Clock) -> None:
        line = _line(clock, children=2)
        first = line.join("net:a", long=True)
        waiting = line.join("net:b", long=True)
        light = line.join("key:c", long=False)
        line.done(light.child, 0.5)  # the light-only process: not for long work
        assert waiting.child is None
        line.done(first.child, 20.0)
        assert waiting.child == first.child


class TestBoundedWait:
    def test_a_newcomer_takes_the_place_of_the_most_served(self, clock: Clock) -> None:
        line = _line(clock, children=1, capacity=2)
        line.join("net:attacker", long=False)  # running
        line.charge("net:attacker", 100.0)
        heavy = [line.join("net:attacker", long=False) for _ in range(2)]
        quiet = line.join("key:quiet", long=False)
        refused = [t for t in heavy if t.refused is not None]
        assert len(refused) == 1
        assert refused[0].ready.is_set()
        assert quiet.refused is None
        assert line.waiting() == 2

    def test_a_newcomer_that_holds_more_than_every_waiting_one_is_refused(
        self, clock: Clock
    ) -> None:
        line = _line(clock, children=1, capacity=1)
        line.join("key:a", long=False)
        line.join("key:b", long=False)
        line.charge("key:c", 50.0)
        with pytest.raises(Full):
            line.join("key:c", long=False)  # it used more than b, which waits
        with pytest.raises(Full):
            line.join("key:b", long=False)  # b already waits: it does not displace itself

    def test_a_newcomer_with_nothing_in_line_displaces_one_of_many_networks(
        self, clock: Clock
    ) -> None:
        """Twelve networks with a task each, none used yet: the thirteenth still gets in."""
        line = _line(clock, children=1, capacity=8)
        turns = [line.join(f"net:10.{i}.0.0/24", long=True) for i in range(9)]
        assert sum(t.child is not None for t in turns) == 1
        quiet = line.join("key:quiet", long=False)
        assert quiet.refused is None
        assert sum(t.refused is not None for t in turns) == 1

    def test_a_light_newcomer_takes_the_place_of_waiting_long_work(self, clock: Clock) -> None:
        """Long tasks that only waited have used nothing: they still give way."""
        line = _line(clock, children=2, capacity=2)
        line.join("key:quiet", long=False)  # running light
        line.charge("key:quiet", 5.0)
        line.join("net:a", long=True)  # running long
        waiting = [line.join(f"net:{n}", long=True) for n in "bc"]
        assert all(t.child is None for t in waiting)
        light = line.join("key:quiet", long=False)
        assert light.refused is None
        assert sum(t.refused is not None for t in waiting) == 1

    def test_a_turn_given_up_leaves_the_line_and_a_process_it_got_goes_on(
        self, clock: Clock
    ) -> None:
        line = _line(clock, children=1)
        running = line.join("key:a", long=False)
        waiting = line.join("key:b", long=False)
        line.leave(waiting)
        assert line.waiting() == 0
        line.leave(running)  # it had the process: the next in line gets it
        assert line.join("key:c", long=False).child == "child-0"
