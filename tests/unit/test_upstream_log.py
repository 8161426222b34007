"""Upstream backup and downstream dedup (:mod:`raytide.engine.upstream_log`,
:mod:`raytide.engine.dedup`): against brute force, a list of every message sent on each
channel and a set of the numbers a receiver has taken."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import raytide as rt
from raytide.actors.vertex_actor import VertexActor
from raytide.engine.dedup import SequenceDedup
from raytide.engine.upstream_log import ReplayRefused, UpstreamLog
from raytide.errors import RecoveryError
from raytide.snapshots.store import SnapshotStore
from raytide.testing.alone import running_counts
from raytide.testing.local import LocalJob, LocalRecovery

#: A sender's life: messages on channels 0-2, snapshots marked, marked snapshots committed.
STEPS = st.lists(st.one_of(st.tuples(st.just("send"), st.integers(0, 2)), st.tuples(st.just("mark"), st.none()),
                           st.tuples(st.just("commit"), st.none())), max_size=40)


def _run(steps: list, cap: int | None = None) -> tuple[UpstreamLog, dict[int, list[str]], dict[int, int]]:
    """The log after ``steps`` (capped at ``cap``), every message ever sent per channel (the
    oracle), and the marks of the last committed snapshot (0 where it marked nothing)."""
    log, sent, marks, committed = UpstreamLog("s[0]", cap=cap), {0: [], 1: [], 2: []}, {}, {0: 0, 1: 0, 2: 0}
    for kind, channel in steps:
        if kind == "send":
            message = f"m{channel}.{len(sent[channel])}"
            assert log.append(channel, message) == len(sent[channel])
            sent[channel].append(message)
        elif kind == "mark":
            marks[len(marks)] = log.mark(len(marks))
        elif marks:
            last = max(marks)
            log.commit(last)
            committed = {c: marks[last].get(c, 0) for c in committed}
    return log, sent, committed


@given(STEPS, st.data())
def test_a_replay_from_any_kept_position_is_every_message_sent_from_it_in_order(steps, data):
    log, sent, committed = _run(steps)
    for channel, messages in sent.items():
        position = data.draw(st.integers(committed[channel], len(messages)))
        assert log.replay(channel, position) == list(enumerate(messages))[position:]


@given(STEPS)
def test_a_commit_keeps_exactly_what_was_sent_since_its_marks(steps):
    log, sent, committed = _run(steps)
    assert log.size() == sum(len(messages) - committed[channel] for channel, messages in sent.items())
    for channel, position in committed.items():
        if position:
            with pytest.raises(RecoveryError, match=f"channel {channel} from message {position - 1}"):
                log.replay(channel, position - 1)


def test_a_restored_sender_numbers_on_from_its_snapshot():
    log = UpstreamLog("s[1]", {"c": 7})
    assert log.append("c", "x") == 7 and log.replay("c", 7) == [(7, "x")] and log.positions() == {"c": 8}


#: What a receiver is sent on one channel: numbers as a sender recovered alone resends them
#: (a run of 0..n, then back to any earlier number and on again).
RESENT = st.lists(st.integers(0, 12), min_size=1, max_size=6).map(
    lambda ends: [n for end, start in zip(ends, [0] + [e // 2 for e in ends]) for n in range(min(start, end), end)])


@given(RESENT)
def test_dedup_takes_each_number_once_in_order(numbers):
    dedup, taken = SequenceDedup("k[0]"), []
    for number in numbers:
        if dedup.admit("c", number, epoch=3):
            taken.append(number)
    assert taken == sorted(set(numbers)) and dedup.dropped == len(numbers) - len(taken)


def test_dedup_refuses_a_gap_naming_the_receiver_the_channel_and_the_epoch():
    dedup = SequenceDedup("k[2]", {"c": 4})
    with pytest.raises(RecoveryError, match=r"replica k\[2\]: message 6 on channel c at epoch 9 came before 4..5"):
        dedup.admit("c", 6, epoch=9)


def test_dedup_off_takes_duplicates():
    dedup = SequenceDedup("k[0]", {"c": 3}, enabled=False)
    assert dedup.admit("c", 1) and dedup.positions() == {"c": 3}


def test_a_receiver_ahead_of_a_restored_sender_is_replayed_nothing():
    log = UpstreamLog("x[0]", {"c": 1})
    log.append("c", "m1")
    assert log.replay("c", 3) == []


def test_a_channel_that_keeps_nothing_numbers_on_and_refuses_a_replay():
    """A channel into a receiver never recovered alone: numbered for its dedup, kept nowhere."""
    log = UpstreamLog("s[0]", {"sink": 3}, keeps=lambda channel: channel != "sink")
    assert [log.append("sink", "x"), log.append("count", "y"), log.append("sink", "z")] == [3, 0, 4]
    assert log.size() == 1 and log.positions() == {"sink": 5, "count": 1} and log.replay("sink", 5) == []
    with pytest.raises(RecoveryError, match="cannot replay channel sink from message 4: it keeps nothing"):
        log.replay("sink", 4)


@given(STEPS, st.integers(1, 6), st.data())
def test_a_log_past_its_cap_drops_all_it_keeps_and_refuses_a_replay_from_before_the_drop(steps, cap, data):
    log, sent, committed = _run(steps, cap)
    assert log.size() <= cap and (log.dropped > cap) == (log.drops > 0)
    for channel, messages in sent.items():
        position = data.draw(st.integers(0, len(messages)))
        if log.refusal(channel, position) is None:  # kept: exactly what was sent from there
            assert position >= committed[channel]
            assert log.replay(channel, position) == list(enumerate(messages))[position:]
        else:
            with pytest.raises(ReplayRefused, match=f"channel {channel} from message {position}"):
                log.replay(channel, position)
    if log.drops:  # a drop forgot everything sent before it: the latest message on some channel is past it
        assert any(log.refusal(channel, 0) and "past its cap of" in log.refusal(channel, 0) for channel in sent
                   if sent[channel])


def test_the_jobs_cap_reaches_every_replicas_log_on_ray_and_in_the_simulator(tmp_path):
    """``Recovery(upstream_log_cap=)`` is what every replica's log keeps at most: built by the Ray
    shell (no Ray needed to build one) and by the simulator, and kept across a restore. Planted:
    the vertex actor not passing it on (the module's cap used instead) fails here."""
    plan = running_counts(4)
    recovery = rt.Recovery(str(tmp_path / "ray"), upstream_log_cap=8)
    replicas = [VertexActor(plan, "cap", key.chain, key.replica, max_inflight=8, myself=object(), recovery=recovery)
                for key in plan.replica_keys()]
    local = LocalJob(plan, {"x": [[1, 2]]}, recovery=LocalRecovery(SnapshotStore(str(tmp_path / "sim")), alone=True,
                                                                  upstream_log_cap=8))
    cores = [replica.core for replica in replicas] + list(local.replicas.values())
    assert [core.outbox.numbering.log.cap for core in cores] == [8] * len(cores)
    for core in cores:
        core.outbox.numbering.restore(None)
        assert core.outbox.numbering.log.cap == 8
    for replica in replicas:
        replica.close()
