"""Progress for a replica recovered alone (:mod:`raytide.engine.monotone_progress`): figures
reported again, late and out of order (a replacement reporting what its earlier incarnation
did, from an older snapshot) give the frontier the messages themselves give."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from raytide.engine.monotone_progress import MonotoneProgress

#: Per (channel, epoch): messages sent, and how many of them were taken.
FIGURES = st.dictionaries(st.tuples(st.integers(0, 2), st.integers(0, 3)),
                          st.integers(0, 4).flatmap(lambda sent: st.tuples(st.just(sent), st.integers(0, sent))),
                          max_size=8)


def _oracle(figures: dict, input_at: int, epoch: int) -> bool:
    """Complete at ``epoch``: the input is past it and every message at or before it was taken."""
    return input_at > epoch and all(taken == sent for (_, at), (sent, taken) in figures.items() if at <= epoch)


def _reports(figures: dict, data: st.DataObject) -> list[tuple[str, tuple, int]]:
    """Each figure reported at its final value, plus stale and repeated reports, shuffled."""
    reports = []
    for key, (sent, taken) in figures.items():
        reports += [("sent", key, sent), ("taken", key, taken)]
        reports += [("sent", key, data.draw(st.integers(0, sent))) for _ in range(data.draw(st.integers(0, 2)))]
        reports += [("taken", key, data.draw(st.integers(0, taken))) for _ in range(data.draw(st.integers(0, 2)))]
    return data.draw(st.permutations(reports))


def _board(reports: list, input_at: int, merge: str = "max") -> MonotoneProgress:
    board = MonotoneProgress(merge=merge)
    for kind, (channel, epoch), count in reports:
        (board.report_sent if kind == "sent" else board.report_taken)(channel, epoch, count)
    board.reached(input_at)
    board.reached(input_at - 1)  # a restored input reports an earlier epoch: nothing moves back
    return board


@given(FIGURES, st.integers(0, 5), st.data())
def test_an_epoch_is_complete_exactly_when_its_messages_are_all_taken(figures, input_at, data):
    board = _board(_reports(figures, data), input_at)
    for epoch in range(5):
        assert board.complete(epoch) == _oracle(figures, input_at, epoch)
        owed = sum(sent - taken for (_, at), (sent, taken) in figures.items() if at <= epoch)
        assert sum(board.owed(epoch).values()) == owed


def test_summing_reports_instead_is_caught():
    """The planted bug: a replacement's report of what its earlier incarnation had taken, added."""
    reports = [("sent", (0, 0), 2), ("taken", (0, 0), 2), ("taken", (0, 0), 1)]
    assert _board(reports, 1).complete(0) and not _board(reports, 1, merge="sum").complete(0)


def test_an_epoch_waits_for_every_input_replica():
    board = MonotoneProgress(inputs=2)
    board.reached(3, replica=0)
    assert not board.complete(0)
    board.reached(1, replica=1)
    assert board.complete(0) and not board.complete(1)
