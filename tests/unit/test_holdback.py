"""The hold-back rule against its definition, and what a replica holds."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raytide.engine.holdback import HeldProgress, is_covered
from raytide.physical.protocol import Cause, HeldCause
from raytide.progress import Location, Timestamp

HERE = Location.of_input("v", 0)
times = st.builds(Timestamp, st.integers(0, 4), st.tuples(st.integers(0, 3)))
statuses = st.lists(st.tuples(times, st.booleans()), max_size=4)


@given(time=times, status=statuses)
def test_a_message_is_covered_when_the_frontier_is_held_below_it_or_at_it_from_elsewhere(time, status):
    below = any(f.less_equal(time) and f != time for f, _ in status)
    at_it_from_elsewhere = any(f == time and held for f, held in status)
    cause = HeldCause(Cause.MESSAGE, HERE, time)
    assert is_covered(cause, {HERE: status}, {}) == (below or at_it_from_elsewhere)
    assert not is_covered(cause, {}, {}), "no status yet: nothing is known to cover it"


@given(epoch=st.integers(0, 5), current=st.one_of(st.none(), st.integers(0, 5)))
def test_pushed_records_are_covered_while_their_input_holds_that_epoch(epoch, current):
    cause = HeldCause(Cause.CAPABILITY, Location.of_vertex("in"), Timestamp(epoch))
    assert is_covered(cause, {}, {"in": current}) == (current == epoch)


def test_held_deltas_go_when_a_cause_is_uncovered_or_something_forces_them_and_cancelled_ones_never():
    held = HeldProgress(limit=3)
    t0 = Timestamp(0)
    held.update((HERE, t0), -1)
    held.caused_by(HeldCause(Cause.MESSAGE, HERE, t0))
    assert not held.should_ship(lambda cause: True, in_cycle=False)
    assert held.should_ship(lambda cause: False, in_cycle=False)
    assert held.should_ship(lambda cause: True, in_cycle=True), "on a cycle every iteration waits on them"
    assert list(held.waits()) == [(HERE, t0)]
    assert held.take() == [((HERE, t0), -1)] and not held.causes
    held.update((HERE, t0), 1)
    held.update((HERE, t0), -1)
    held.caused_by(HeldCause(Cause.MESSAGE, HERE, t0))
    assert not held.should_ship(lambda cause: False, in_cycle=True), "deltas that cancel hold nothing"
    assert not held.causes
    for epoch in range(4):
        held.update((HERE, Timestamp(epoch)), 1)
    assert held.should_ship(lambda cause: True, in_cycle=False), "more distinct pointstamps than the limit"
    held.take()
    held.update((HERE, t0), 1)
    held.force()
    assert held.should_ship(lambda cause: True, in_cycle=False)
