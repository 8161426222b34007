"""The supervisor's stall rule (:mod:`raytide.supervisor.stalls`) against a brute-force oracle:
random timelines of looks (moving or not, work pending or not), answers and the passing of time."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.supervisor.stalls import StallWatch

ACTORS = ("a", "b", "c")

#: One thing that happens: a look (moved, pending; mostly a stalled job's), an actor's answer, or time passing.
LOOKS = st.sampled_from([(False, True)] * 4 + [(True, True), (False, False), (True, False)])
EVENTS = st.one_of(LOOKS.map(lambda look: ("look", *look)),
                   st.tuples(st.just("answer"), st.sampled_from(ACTORS)),
                   st.tuples(st.just("wait"), st.integers(0, 3)))


def oracle(events: list, stall: float, answer: float) -> list[list[str]]:
    """What the rule says at each look, from the whole history: a ping once ``stall`` has passed
    since the last movement (or the last round's end) with no round under way; the actors not
    answered since the ping once ``answer`` has passed after it."""
    now, calm_since, ping_at, answered, said = 0.0, 0.0, None, set(), []
    for event in events:
        if event[0] == "wait":
            now += event[1]
        elif event[0] == "answer":
            answered.add(event[1])
        elif event[1] or not event[2]:
            calm_since, ping_at = now, None
            said.append([])
        else:
            pinged = ping_at is None and now - calm_since >= stall
            if pinged:
                ping_at, answered = now, set()
            silent: list[str] = []
            if ping_at is not None and now - ping_at >= answer:
                silent = [actor for actor in ACTORS if actor not in answered]
                calm_since, ping_at = now, None
            said.append(["ping", *silent] if pinged else silent)
    return said


@settings(max_examples=500, deadline=None, database=None)
@given(st.lists(EVENTS, max_size=30), st.integers(0, 4), st.integers(0, 4))
def test_the_rule_pings_after_a_stall_and_declares_the_silent(events, stall, answer):
    watch, now, said = StallWatch(stall, answer), 0.0, []
    for event in events:
        if event[0] == "wait":
            now += event[1]
        elif event[0] == "answer":
            watch.answered(event[1])
        else:
            pinged = watch.look(now, event[1], event[2])
            if pinged:
                watch.pinging(now, ACTORS)
            silent = watch.silent(now) if not (event[1] or not event[2]) else []
            said.append(["ping", *silent] if pinged else silent)
    assert said == oracle(events, stall, answer)


def test_negative_bounds_are_refused():
    with pytest.raises(ValueError, match="bounds"):
        StallWatch(-1.0, 1.0)
