"""Joins across time, pure (:mod:`raytide.windows.joins`), against brute force: records of
random epochs (or, for the interval join on event-time inputs, random timestamps in seconds,
each at the epoch of its side's granularity) arriving in any order the frontier allows (an
epoch's records may come before an earlier epoch is complete, never after their own is), the
state trimmed or settled at each complete epoch, exactly as soon as nothing could match a
record any more, and split by key and merged back midway."""

from __future__ import annotations

import math
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
                    assert all(end > item for by_end in state.sides[side].values() for end in by_end)
    if len(states) > 1:
        merge_interval(states[0], states[1])
    assert got == expected
    expire(states[0], EPOCHS + 10)  # the inputs closed: every epoch complete
    assert states[0].sides == ({}, {}) and states[0].ends == {}


def timed(seed: int, count: int, grains: tuple[float, float]) -> tuple[random.Random, list[tuple]]:
    """Records ``(side, epoch, key, number, seconds)``: times on a quarter-second grid (sums exact in floats)."""
    rng = random.Random(seed)
    records = []
    for number in range(count):
        side = rng.choice([LEFT, RIGHT])
        seconds = rng.randrange(int(EPOCHS * grains[side] * 4)) / 4
        records.append((side, math.floor(seconds / grains[side]), rng.randrange(KEYS), number, seconds))
    return rng, records


def needed_until(record: tuple, lower: float, upper: float, grains: tuple[float, float]) -> int:
    """From the definition: the last epoch in which a record of the other side that matches
    ``record`` can arrive (at the epoch of its own time), or the record's own epoch."""
    side, epoch, _, _, seconds = record
    latest = seconds + upper if side == LEFT else seconds - lower
    return max(epoch, math.floor(latest / grains[1 - side]))


@settings(max_examples=300, deadline=None)
@given(seed=st.integers(0, 10**6), count=st.integers(0, 30), lower=st.integers(-12, 8), width=st.integers(0, 12),
       grains=st.tuples(st.sampled_from([0.5, 1.0, 2.0]), st.sampled_from([0.5, 1.0, 2.0])))
def test_the_interval_join_on_timestamps_finds_every_pair_within_the_bounds_in_seconds_and_trims_by_the_frontier(
        seed, count, lower, width, grains):
    """Bounds in seconds (quarters), timestamps within epochs of either side's granularity:
    every pair with ``lower <= tb - ta <= upper`` once, at the later record's epoch; after each
    complete epoch the state holds exactly the records a later one could still match."""
    lower, upper = lower / 4, (lower + width) / 4
    rng, records = timed(seed, count, grains)
    expected = Counter((max(a[1], b[1]), (a[2], a, b)) for a in records for b in records
                       if a[0] == LEFT and b[0] == RIGHT and a[2] == b[2] and lower <= b[4] - a[4] <= upper)
    states, got, arrived = [IntervalState(lower, upper, grains)], Counter(), []
    split_at = rng.randrange(len(records) + 1)
    for n, (kind, item) in enumerate(schedule(rng, records)):
        if n == split_at:  # a rescale: some keys move to another replica
            states.append(split_interval(states[0], lambda key: key % 2 == 1))
        if kind == "record":
            state = states[-1] if len(states) > 1 and item[2] % 2 == 1 else states[0]
            got.update(add(state, item[0], item[2], item[1], item, item[4]))
            arrived.append(item)
            continue
        for state in states:
            expire(state, item)
        kept = sorted(entry[2][3] for state in states for side in state.sides for by_end in side.values()
                      for entries in by_end.values() for entry in entries)
        assert kept == sorted(r[3] for r in arrived if needed_until(r, lower, upper, grains) > item), "trimmed wrong"
    assert got == expected


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
