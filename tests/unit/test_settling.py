"""What a replica's settle waits on (raytide/engine/settling.py): progress held back at a vertex's
input need not be waited on when a pending notification of that vertex at or before its time is
one tokens alone make due (its delivery ships what is held). The settle finds that from the minimal
such notifications, once per look, not by testing every held time against every pending one (which
made a replica that fell behind its feed quadratic in its backlog): the same answer, checked here
against the definition over times with loop counters (a partial order)."""

from __future__ import annotations

from types import SimpleNamespace

from hypothesis import given
from hypothesis import strategies as st

from raytide.engine.settling import Settling
from raytide.progress.timestamps import Timestamp
from tests.strategies import timestamps

VERTICES = ("a", "b")


@given(st.dictionaries(st.sampled_from(VERTICES), st.sets(timestamps(1), max_size=12)),
       st.sets(timestamps(1), max_size=12), st.lists(st.tuples(st.sampled_from(VERTICES), timestamps(1)), max_size=12))
def test_held_progress_is_shipped_at_a_token_exactly_when_a_due_notification_precedes_it(
        pending: dict[str, set[Timestamp]], alone: set[Timestamp], held: list[tuple[str, Timestamp]]) -> None:
    """``alone``: the pending times tokens answer alone (any subset); for every held ``(vertex, time)`` the
    settle's answer is the definition's: some pending notification of the vertex at or before ``time``
    that tokens alone make due."""
    replica = SimpleNamespace(notifications=SimpleNamespace(pending=pending),
                              tokens=SimpleNamespace(answers_alone=lambda vertex, time: time in alone))
    shipping = Settling._shipped_at_tokens(replica)  # type: ignore[arg-type]
    for vertex, time in held:
        expected = any(due.less_equal(time) and due in alone for due in pending.get(vertex, ()))
        assert any(due.less_equal(time) for due in shipping.get(vertex, ())) == expected, (vertex, time, shipping)
