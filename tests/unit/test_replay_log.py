"""The log of calls a recovery replays (:mod:`raytide.supervisor.replay`), which the Ray
driver's inputs and the simulator both keep: against a brute-force oracle of what a replica
at a position has not consumed yet."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raytide.errors import RecoveryError
from raytide.supervisor.replay import CallLog, ReplayLog

#: Calls as ``(weight, method)``: pushes and advances count one, a push with its advance two,
#: refs one each, a marker nothing.
CALLS = st.lists(st.tuples(st.sampled_from([0, 1, 1, 2, 3]), st.sampled_from(["push", "advance", "marker"])),
                 max_size=12)


def _unconsumed(calls: list[tuple[int, str]], position: int) -> list[int]:
    """The oracle: the indices of the calls a replica that consumed ``position`` commands has
    not taken; a call of weight 0 goes with the calls after it."""
    consumed, left = 0, []
    for index, (weight, _) in enumerate(calls):
        if consumed >= position:
            left.append(index)
        consumed += weight
    return left


@given(CALLS, st.data())
def test_the_calls_after_a_position_are_those_the_replica_has_not_consumed(calls, data):
    log = CallLog()
    for index, (weight, method) in enumerate(calls):
        log.append(weight, method, (index,))
    ends = [sum(weight for weight, _ in calls[:cut]) for cut in range(len(calls) + 1)]
    trimmed_to = data.draw(st.sampled_from(ends))
    log.trim(trimmed_to)
    position = data.draw(st.sampled_from([end for end in ends if end >= trimmed_to]))
    assert [args[0] for _, args in log.after(position, "x")] == _unconsumed(calls, position)


def test_the_markers_between_commands_are_sent_again_after_the_position_only():
    log = CallLog()
    for weight, method in [(1, "push"), (0, "marker"), (1, "advance"), (1, "push")]:
        log.append(weight, method, ())
    assert [method for method, _ in log.after(1, "x")] == ["marker", "advance", "push"]
    assert [method for method, _ in log.after(2, "x")] == ["push"]
    assert log.after(3, "x") == []


def test_the_oldest_retained_snapshot_bounds_what_is_kept_and_older_positions_are_refused():
    log = ReplayLog([("in", 0)], retain=2)
    for epoch in range(6):
        log[("in", 0)].append(1, "push", (epoch,))
    for position in (2, 4, 5):
        for replica, oldest in log.committed({("in", 0): position}).items():
            log.trim(replica, oldest)
    assert log[("in", 0)].base == 4  # the last two committed: 4 and 5
    assert [args for _, args in log.after(("in", 0), 4)] == [(4,), (5,)]
    with pytest.raises(RecoveryError, match=r"input 'in' replica 0 cannot go back to command 2"):
        log.after(("in", 0), 2)
