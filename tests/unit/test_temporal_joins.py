"""Joins across time, pure (:mod:`raytide.windows.joins`), against brute force: records of
random epochs arriving in any order the frontier allows (an epoch's records may come before
an earlier epoch is complete, never after their own is), the state trimmed or settled at
each complete epoch, and split by key and merged back midway."""

from __future__ import annotations

import random
from collections import Counter

from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.windows.joins import (
    LEFT,
    RIGHT,
    IntervalState,
    LatestState,
    add,
    add_record,
    add_update,
    expire,
    merge_interval,
    merge_latest,
    settle,
    split_interval,
    split_latest,
)

EPOCHS, KEYS = 6, 3


def schedule(rng: random.Random, records: list[tuple[int, int, int, int]]) -> list:
    """Arrivals and completions: each record arrives at a random moment up to its epoch's
    completion (``("done", t)`` after every record of epochs ``<= t``)."""
    events = []
    for t in range(EPOCHS):
        mine = [r for r in records if r[1] == t]
        for record in mine:
            events.insert(rng.randint(max(0, len(events) - 4 * len(records)), len(events)), ("record", record))
        events.append(("done", t))
    return events


def drawn(seed: int, count: int) -> tuple[random.Random, list[tuple[int, int, int, int]]]:
    rng = random.Random(seed)
    return rng, [(rng.choice([LEFT, RIGHT]), rng.randrange(EPOCHS), rng.randrange(KEYS), n) for n in range(count)]


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**6), count=st.integers(0, 25), lower=st.integers(-3, 2), width=st.integers(0, 3))
def test_the_interval_join_finds_every_pair_within_the_bounds_once_and_forgets_what_cannot_match(seed, count, lower,
                                                                                                  width):
    upper = lower + width
    rng, records = drawn(seed, count)
    expected = Counter((max(a[1], b[1]), (a[2], a, b)) for a in records for b in records
                       if a[0] == LEFT and b[0] == RIGHT and a[2] == b[2] and lower <= b[1] - a[1] <= upper)
    states, got = [IntervalState(lower, upper)], Counter()
    split_at = rng.randrange(len(records) + 1)
    done = -1
    for n, (kind, item) in enumerate(schedule(rng, records)):
        if n == split_at:  # a rescale: some keys move to another replica
            states.append(split_interval(states[0], lambda key: key % 2 == 1))
        if kind == "record":
            side, epoch, key, _ = item
            state = states[-1] if len(states) > 1 and key % 2 == 1 else states[0]
            assert epoch > done
            got.update(add(state, side, key, epoch, item))
        else:
            done = item
            for state in states:
                expire(state, item)
                for side in (LEFT, RIGHT):  # nothing kept that no later record could match
                    assert all(state.end_of(side, e) > item for epochs in state.sides[side].values() for e in epochs)
    if len(states) > 1:
        merge_interval(states[0], states[1])
    assert got == expected
    expire(states[0], EPOCHS + 10)  # the inputs closed: every epoch complete
    assert states[0].sides == ({}, {}) and states[0].ends == {}


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 10**6), count=st.integers(0, 25))
def test_join_latest_gives_each_record_the_value_of_its_key_as_of_its_epoch(seed, count):
    """Side LEFT: records; side RIGHT: table updates (the value is the update itself)."""
    rng, records = drawn(seed, count)
    expected: Counter = Counter()
    for r in records:
        if r[0] == LEFT:
            times = [u[1] for u in records if u[0] == RIGHT and u[2] == r[2] and u[1] <= r[1]]
            values = [u for u in records if u[0] == RIGHT and u[2] == r[2] and times and u[1] == max(times)]
            expected.update([(r[1], (r[2], r, v)) for v in values] or [(r[1], (r[2], r, None))])
    states, got = [LatestState()], Counter()
    split_at = rng.randrange(len(records) + 1)
    for n, (kind, item) in enumerate(schedule(rng, records)):
        if n == split_at:
            states.append(split_latest(states[0], lambda key: key != 0))
        if kind == "record":
            side, epoch, key, _ = item
            state = states[-1] if len(states) > 1 and key != 0 else states[0]
            (add_record if side == LEFT else add_update)(state, epoch, key, item)
        else:
            for state in states:
                got.update((item, match) for match in settle(state, item))
    if len(states) > 1:
        merge_latest(states[0], states[1])
    assert got == expected
    assert states[0].epochs() == set()
