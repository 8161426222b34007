"""The epoch gate's bookkeeping (``raytide.core.epoch_gate``): which epoch runs, where the next starts."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.core.epoch_gate import TOKEN_KEY, EpochGate, round_complete, round_time
from raytide.core.gated import GROUP_KEYS
from raytide.core.keygroups import DEFAULT_KEY_GROUPS, KeyGroupAssignment
from raytide.core.routing import ExchangeRouter, column_key_groups
from raytide.progress.timestamps import Timestamp

E0, E1, E2 = (0, ()), (1, ()), (2, ())


def test_an_entry_waits_while_an_earlier_epoch_is_in_the_loop_and_starts_after_its_conclusion():
    gate = EpochGate()
    assert gate.start_counter(E0) == 0
    gate.started[E0] = 0
    assert gate.start_counter(E1) is None and gate.start_counter(E2) is None  # parked behind epoch 0
    gate.parked[E2], gate.parked[E1] = {0: ["e2"]}, {0: ["e1"]}
    assert gate.conclude(E0, 7) == (E1, 8, {0: ["e1"]})  # the earliest parked one, at the next counter
    gate.started[E1] = 8
    assert gate.live() == E1 and gate.start_counter(E2) is None
    assert gate.conclude(E1, 12) == (E2, 13, {0: ["e2"]})
    assert gate.conclude(E2, 15) is None and gate.live() is None
    assert gate.start_counter((3, ())) == 16  # nothing in the loop: after the latest conclusion


def test_merged_gates_agree_on_where_epochs_start_and_end():
    """A replica that concluded epoch 0 and started epoch 1 merges with one that had not
    yet: the merged one re-concludes at the same counter and starts epoch 1 where the other did."""
    behind, ahead = EpochGate(), EpochGate()
    for gate in (behind, ahead):
        gate.started[E0] = 0
    behind.parked[E1] = {0: ["mine"]}
    behind.awaiting.add(Timestamp(0, (4,)))
    ahead.concluded[E0], ahead.started[E1] = 4, 5
    ahead.awaiting.add(Timestamp(1, (6,)))
    behind.merge(ahead)
    assert behind.awaiting == {Timestamp(0, (4,)), Timestamp(1, (6,))}
    behind.awaiting.discard(Timestamp(0, (4,)))  # notified (GatedColumns.on_notify), then concluded
    assert behind.conclude(E0, 4) == (E1, 5, {0: ["mine"]})
    assert behind.conclude(E0, 9) is None and behind.concluded[E0] == 4  # the earliest conclusion stands


def test_a_round_another_replica_ran_before_a_rescale_is_not_ended_by_the_tokens_it_consumed():
    """A replica that took keys whose round 2 their old replica ran before the cut holds no
    tokens for round 2 (they were consumed there): that says nothing sent, wrongly. The other
    gate's fact that round 2 went on does (without it, this replica concluded epoch 0 at 2 and
    the others at 3: found by the rescale trials)."""
    gate, other = EpochGate(), EpochGate()
    gate.started[E0] = other.started[E0] = 0
    other.went_on_at(E0, 2)
    assert gate.ends_at(E0, 2, tokens=0), "alone, no tokens means nothing was sent to the round"
    gate.merge(other)
    assert not gate.ends_at(E0, 2, tokens=0) and not gate.ends_at(E0, 2, tokens=3)
    assert gate.ends_at(E0, 3, tokens=0), "round 3 no replica ran: its tokens decide"
    gate.concluded[E0] = 3
    assert gate.ends_at(E0, 3, tokens=5), "a conclusion another replica found stands"
    gate.went_on_at(E0, 1)
    assert gate.went_on[E0] == 2, "the latest round stands"


def test_an_epoch_concluded_again_starts_no_parked_epoch_beside_the_live_one_but_lets_the_live_one_join():
    """A replica that took keys concludes epoch 0 again at its notification, after it started
    epoch 1 (facts from a replica that had). Parked rows of epoch 1 (keys whose replica had
    parked it) join epoch 1 at its start; epoch 2's wait for epoch 1 (it used to start at once,
    two epochs in the loop: found by the rescale trials)."""
    gate = EpochGate({E0: 0, E1: 5}, {E0: 4}, {E2: {0: ["e2"]}})
    assert gate.conclude(E0, 4) is None and E2 in gate.parked
    gate.parked[E1] = {0: ["moved, parked"]}
    assert gate.conclude(E0, 4) == (E1, 5, {0: ["moved, parked"]})
    assert gate.conclude(E1, 8) == (E2, 9, {0: ["e2"]})
    late = EpochGate({E0: 0, E1: 5}, {E0: 4, E1: 8}, {E2: {0: ["e2"]}})
    assert late.conclude(E0, 4) == (E2, 9, {0: ["e2"]}), "after the latest conclusion, not after the one repeated"


def test_an_entry_waits_for_the_finish_of_an_earlier_epoch_a_rescale_moved_here():
    """A replica concluded epoch 0 itself, then took keys whose old replica still awaited
    epoch 0's last round (their finish had not run). Epoch 1's entry is incomparable with
    that round, so it may be notified first: it parks until the finish has run there, then
    starts where it would have. Started at once, its first round lowered a moved node's
    label, overwriting the mark of the epoch 0 row not yet sent: the row was lost (found by
    a rescale sweep over larger graphs, seed 5066, and once on Ray in CI)."""
    gate, moved = EpochGate({E0: 0}, {E0: 4}), EpochGate({E0: 0}, {E0: 4})
    moved.awaiting.add(Timestamp(0, (4,)))
    gate.merge(moved)
    assert gate.behind(E1) and not gate.behind(E0)
    assert gate.start_counter(E1) is None, "the entry parks behind the awaited finish"
    gate.parked[E1] = {0: ["e1"]}
    gate.awaiting.discard(Timestamp(0, (4,)))  # the notification of the finish runs
    assert gate.conclude(E0, 4) == (E1, 5, {0: ["e1"]})
    gate.awaiting.add(Timestamp(1, (6,)))
    assert not gate.behind(E1) and gate.behind(E2), "a round of the live epoch holds back only later entries"


def test_a_round_waits_for_its_notification_while_a_slow_round_at_or_before_it_has_not_run():
    gate = EpochGate(slow={Timestamp(0, (4,))})
    assert gate.waits_before(Timestamp(0, (4,))) and gate.waits_before(Timestamp(1, (6,)))
    assert not gate.waits_before(Timestamp(0, (3,))), "an earlier round is not held up by a later one"


def test_a_gate_pickled_before_slow_and_went_on_existed_unpickles_with_neither():
    gate = EpochGate.__new__(EpochGate)
    gate.__setstate__({"started": {E0: 0}, "concluded": {}, "parked": {}, "awaiting": set()})
    assert gate.slow == set() and gate.went_on == {} and gate.started == {E0: 0}


def test_round_times_keep_the_outer_loops_counters():
    assert round_time((3, (2,)), 5) == Timestamp(3, (2, 5))


def test_an_entry_joins_what_a_rescale_parked_for_its_epoch_rather_than_replacing_it():
    """A replica parked epoch 1's entry, then took keys in a rescale: the moving keys' parked rows
    came with the other gate, and their own entry rows arrive at the entry's notification. The
    entry the epoch starts from holds both (it used to keep only the last: rows lost)."""
    gate, other = EpochGate(), EpochGate()
    gate.started[E0] = other.started[E0] = 0
    gate.parked[E1], other.parked[E1] = {0: ["mine"]}, {0: ["moved, parked"], 2: ["tick"]}
    gate.merge(other)
    assert gate.parked[E1] == {0: ["mine", "moved, parked"], 2: ["tick"]}
    entry = gate.entry(E1, {0: ["moved, not yet notified"]})
    assert entry == {0: ["mine", "moved, parked", "moved, not yet notified"], 2: ["tick"]}
    assert E1 not in gate.parked, "taken out of the parking: parked again or run, never both"


def _round_messages(width: int, owners: list[int], rows_per_sender: list[list[int]], sent_width: int | None = None,
                    ) -> dict[int, list[tuple[str, dict]]]:
    """Per destination replica, the messages of one round as the runtime routes them: each
    sender's rows by key and its token (one row per key group, what it sent per group), both
    through the real exchange router."""
    table = KeyGroupAssignment(tuple(owners), width)
    out: dict[int, list[tuple[str, dict]]] = {r: [] for r in range(width)}
    for sender, keys in enumerate(rows_per_sender):
        keys_array = np.asarray(keys, dtype=np.int64)
        if len(keys_array):
            for dest, part in ExchangeRouter("k", width, table=table).route({"k": keys_array}):
                out[dest].append(("rows", part))
        per_group = np.bincount(column_key_groups(keys_array), minlength=DEFAULT_KEY_GROUPS)
        token = {TOKEN_KEY: GROUP_KEYS, "sent": np.full(DEFAULT_KEY_GROUPS, len(keys)), "rows": per_group,
                 "sender": np.full(DEFAULT_KEY_GROUPS, sender), "width": np.full(DEFAULT_KEY_GROUPS, sent_width or width)}
        for dest, part in ExchangeRouter(TOKEN_KEY, width, table=table).route(token):
            out[dest].append(("token", part))
    return out


def _complete(messages: list[tuple[str, dict]], width: int) -> bool:
    return round_complete([m for kind, m in messages if kind == "token"], [m for kind, m in messages if kind == "rows"],
                          width)


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_a_round_is_complete_exactly_when_every_message_of_it_has_arrived(data):
    """Against brute force: a random width and routing table, random rows per sender; each
    replica's messages arrive in a random order, and :func:`round_complete` says yes only
    once the last has (never before, whatever is missing), and then it does."""
    width = data.draw(st.integers(1, 4))
    owners = list(range(width)) + data.draw(st.lists(st.integers(0, width - 1), min_size=DEFAULT_KEY_GROUPS - width,
                                                     max_size=DEFAULT_KEY_GROUPS - width))
    owners = data.draw(st.permutations(owners))
    rows = data.draw(st.lists(st.lists(st.integers(0, 500), max_size=12), min_size=width, max_size=width))
    for dest, messages in _round_messages(width, owners, rows).items():
        order = data.draw(st.permutations(messages))
        for arrived in range(len(order) + 1):
            assert _complete(order[:arrived], width) == (arrived == len(order)), (dest, arrived, len(order))


def test_tokens_of_another_width_or_twice_over_never_complete_a_round():
    """Rounds that straddle a rescale: tokens sent at width 3 reaching a replica of width 2
    (senders 0 and 1 present, 2's still on its way) or a sender's token dealt twice are no
    complete round, though every row they announce is there."""
    owners = [group % 3 for group in range(DEFAULT_KEY_GROUPS)]
    three = _round_messages(3, owners, [[1, 2, 3, 7, 8, 9], [4, 5, 10, 11], []])
    from_two_senders = [(kind, m) for kind, m in three[0] if kind == "rows" or m["sender"][0] < 2]
    tokens = [m for kind, m in from_two_senders if kind == "token"]
    announced_rows = [m for kind, m in from_two_senders if kind == "rows"]
    assert announced_rows, "some of the rows went to replica 0"
    assert round_complete(tokens, announced_rows, 3) is False  # sender 2 missing
    assert round_complete(tokens, announced_rows, 2) is False  # senders 0 and 1, but sent at width 3
    whole = _round_messages(2, [group % 2 for group in range(DEFAULT_KEY_GROUPS)], [[1, 2], [3]])[1]
    assert _complete(whole, 2)
    assert not _complete(whole + [m for m in whole if m[0] == "token"][:1], 2)  # a token twice
    assert not _complete(whole + [m for m in whole if m[0] == "rows"][:1], 2)  # more rows than announced
