"""Where a restored input replica resumes (raytide/driver/inputs.py, Resume): replays at or
before the restored epoch are dropped, calls past it are new, a half replay is refused; and
each replica resumes from its own epoch in the snapshot (``input_epochs``), which may differ
from its sibling's."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.driver.inputs import Resume
from raytide.errors import RecoveryError
from raytide.physical.protocol import ReplicaKey
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.snapshots.recovery import input_epochs
from raytide.snapshots.replica_state import ReplicaSummary


def test_a_feed_from_the_start_replays_what_was_consumed_then_sends_the_rest():
    resume = Resume("numbers", 0, consumed=4, epoch=2, left=4)  # push 0, advance 1, push 1, advance 2
    assert [resume.replayed(at, 1) for at in (0, 1, 1, 2)] == [True] * 4
    assert not resume.replayed(2, 1) and not resume.replayed(3, 1), "more than was consumed is new"


def test_a_feed_that_continues_past_the_restored_epoch_is_new_data_at_once():
    resume = Resume("numbers", 0, consumed=4, epoch=2, left=4)
    assert not resume.replayed(3, 1) and not resume.replayed(3, 1) and resume.left == 0


def test_a_half_replay_that_moves_on_is_refused_and_a_closed_input_replays_everything():
    resume = Resume("numbers", 1, consumed=4, epoch=2, left=4)
    resume.replayed(0, 1)
    with pytest.raises(RecoveryError, match="replica 1: .* consumed 4 commands, up to epoch 2; this feed replayed "
                                            "only 1 of them before moving on to epoch 5: .* push only epochs after 2"):
        resume.replayed(5, 1)
    closed = Resume("numbers", 0, consumed=2, epoch=None, left=2)
    assert closed.replayed(7, 1) and closed.replayed(None, 1) and not closed.replayed(None, 1)


def driver_calls(epochs: int, replicas: int = 2) -> list[list[int]]:
    """Per input replica, the epoch of each call the driver makes when it feeds one record an
    epoch (dealt to the replicas in turn) and then advances every replica to the next epoch."""
    calls: list[list[int]] = [[] for _ in range(replicas)]
    for epoch in range(epochs):
        calls[epoch % replicas].append(epoch)  # the push, at its epoch
        for replica in calls:
            replica.append(epoch + 1)  # the advance, to its target
    return calls


def restored(calls: list[list[int]], cuts: list[int]) -> dict[tuple[str, int], int | None]:
    """The input epochs a snapshot records when replica ``i`` took its marker after its first
    ``cuts[i]`` calls: each replica's own capability, at the last epoch it advanced to."""
    summaries = {}
    for replica, (mine, cut) in enumerate(zip(calls, cuts)):
        epoch = max([at for at in mine[:cut] if at > 0] or [0])
        held = [((Location.of_vertex("numbers"), Timestamp(epoch)), 1)]
        summaries[ReplicaKey("numbers+times-ten", replica)] = ReplicaSummary(held, {"numbers": cut}, {})
    return input_epochs(summaries)


def assert_each_replays_what_it_consumed(calls: list[list[int]], cuts: list[int]) -> None:
    """The same calls fed again after a restore at ``cuts``: each replica's first ``cuts[i]``
    are replays (not sent), the rest are sent, and nothing is refused."""
    epochs = restored(calls, cuts)
    for replica, cut in enumerate(cuts):
        resume = Resume("numbers", replica, consumed=cut, epoch=epochs[("numbers", replica)], left=cut)
        assert [resume.replayed(at, 1) for at in calls[replica]] == [True] * cut + [False] * (len(calls[replica]) - cut)


def test_replicas_cut_at_different_epochs_replay_exactly_what_each_consumed():
    """The CI failure of 2026-11-24: replica 1 had taken the advance to epoch 28, replica 0
    not yet; with one epoch for the whole input (27) the replay of replica 1 was refused as
    "replayed only 41 of 44 commands before moving on to epoch 28"."""
    calls = driver_calls(40)
    cuts = [calls[0].index(28), calls[1].index(28) + 1]
    assert restored(calls, cuts) == {("numbers", 0): 27, ("numbers", 1): 28}
    assert_each_replays_what_it_consumed(calls, cuts)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_cut_of_the_input_replicas_replays_each_ones_consumed_calls_and_sends_the_rest(data):
    calls = driver_calls(data.draw(st.integers(1, 12)), replicas=data.draw(st.integers(1, 3)))
    cuts = [data.draw(st.integers(0, len(mine))) for mine in calls]
    assert_each_replays_what_it_consumed(calls, cuts)
