"""The epoch gate's bookkeeping (``raytide.core.epoch_gate``): which epoch runs, where the next starts."""

from __future__ import annotations

from raytide.core.epoch_gate import EpochGate, round_time
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
    assert behind.conclude(E0, 4) == (E1, 5, {0: ["mine"]})
    assert behind.conclude(E0, 9) is None and behind.concluded[E0] == 4  # the earliest conclusion stands


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
