"""Per-sender ordering of progress calls, and output epochs released by the frontier."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raytide.errors import ProgressError
from raytide.progress.inorder import InOrder
from raytide.progress.outputs import NEVER, OutputLog


@st.composite
def interleavings(draw):
    """Messages of several senders, numbered per sender, in a random arrival order."""
    counts = draw(st.lists(st.integers(0, 8), min_size=1, max_size=4))
    messages = [(sender, seq) for sender, n in enumerate(counts) for seq in range(n)]
    return draw(st.permutations(messages))


@given(interleavings())
def test_in_order_releases_each_sender_in_sequence_exactly_once(arrivals):
    in_order: InOrder[tuple[int, int]] = InOrder()
    released: list[tuple[int, int]] = []
    for sender, seq in arrivals:
        released += in_order.offer(sender, seq, (sender, seq))
    assert sorted(released) == sorted(arrivals)
    for sender in {s for s, _ in arrivals}:
        assert [q for s, q in released if s == sender] == sorted(q for s, q in arrivals if s == sender)
    assert in_order.waiting() == {}


@given(interleavings(), st.randoms(use_true_random=False))
def test_in_order_releases_runs_that_stand_for_several_numbers_in_sequence(arrivals, rng):
    """A relay's merged run (``count`` numbers in one item) takes its place in the sequence
    as the messages it stands for would: released once every earlier number was, and the
    numbers after it follow."""
    by_sender: dict[int, list[int]] = {}
    for sender, seq in arrivals:
        by_sender.setdefault(sender, []).append(seq)
    runs = []  # (sender, first, count): each sender's numbers cut into consecutive runs at random
    for sender, seqs in by_sender.items():
        first = 0
        while first < len(seqs):
            count = rng.randint(1, len(seqs) - first)
            runs.append((sender, first, count))
            first += count
    rng.shuffle(runs)
    in_order: InOrder[tuple[int, int, int]] = InOrder()
    released = [item for sender, first, count in runs for item in in_order.offer(sender, first, (sender, first, count), count)]
    for sender, seqs in by_sender.items():
        numbers = [n for s, first, count in released if s == sender for n in range(first, first + count)]
        assert numbers == sorted(seqs)
    assert in_order.waiting() == {}


def test_in_order_holds_back_until_the_gap_is_filled_and_rejects_duplicates():
    in_order: InOrder[str] = InOrder()
    assert in_order.offer("a", 1, "second") == []
    assert in_order.waiting() == {"a": [1]}
    assert in_order.offer("b", 0, "other") == ["other"]
    assert in_order.offer("a", 0, "first") == ["first", "second"]
    with pytest.raises(ValueError, match="arrived twice"):
        in_order.offer("a", 1, "again")


def test_in_order_rejects_a_number_it_has_already_in_a_run_either_way_round():
    in_order: InOrder[str] = InOrder()
    assert in_order.offer("a", 2, "run 2-4", count=3) == []
    for sequence, count in ((3, 1), (4, 2), (1, 2), (0, 5)):
        with pytest.raises(ValueError, match="arrived twice"):
            in_order.offer("a", sequence, "overlaps", count)
    assert in_order.offer("a", 0, "0-1", count=2) == ["0-1", "run 2-4"]
    with pytest.raises(ValueError, match=r"message 3-5 from 'a' arrived twice"):
        in_order.offer("a", 3, "released", count=3)
    assert in_order.offer("a", 5, "5") == ["5"]


def test_output_log_releases_epochs_in_order_as_the_frontier_passes():
    log = OutputLog(["out"])
    log.add("out", 0, {2: ["c"], 0: ["a"]})
    log.add("out", 1, {0: ["b"]})
    assert log.advance("out", 0) == []
    assert log.advance("out", 1) == [("out", 0, ["a", "b"])]
    assert log.advance("out", 1) == []
    assert not log.finished()
    assert log.advance("out", NEVER) == [("out", 2, ["c"])]
    assert log.finished()


def test_output_log_rejects_records_for_a_complete_epoch():
    log = OutputLog(["out"])
    log.advance("out", 3)
    with pytest.raises(ProgressError, match="output 'out' replica 1 sent records of epoch 2"):
        log.add("out", 1, {2: ["late"]})
