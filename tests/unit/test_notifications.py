"""The notification queue against a brute-force reading of its rule."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raytide.engine.notifications import NotificationQueue
from raytide.progress import Timestamp

times = st.builds(Timestamp, st.integers(0, 3), st.tuples(st.integers(0, 3), st.integers(0, 3)))


@given(pending=st.sets(times, max_size=8), ready=st.sets(times, max_size=8), one_round=st.booleans())
def test_due_notifications_are_the_ready_ones_in_order_one_round_at_a_time_on_a_cycle(pending, ready, one_round):
    queue = NotificationQueue(["v"])
    for time in pending:
        queue.request("v", time)
    due = queue.take_due("v", ready.__contains__, one_round=one_round)
    expected = {t for t in pending if t in ready}
    if one_round:  # nothing still pending may be strictly before a delivered time
        expected = {t for t in expected if not any(o.less_than(t) for o in pending)}
    assert set(due) == expected
    assert all(not later.less_than(earlier) for earlier, later in zip(due, due[1:])), "in timestamp order"
    assert queue.of("v") == pending - expected


def test_a_time_is_pending_once():
    queue = NotificationQueue(["v"])
    assert queue.request("v", Timestamp(1)) and not queue.request("v", Timestamp(1))
    assert queue.take_due("v", lambda t: True, one_round=False) == [Timestamp(1)]
    assert queue.request("v", Timestamp(1)), "delivered, so it may be asked for again"
