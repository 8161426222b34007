"""The pure cores of collections against brute force: every output, accumulated at every
time, equals the operator applied to the inputs accumulated at that time.

Times are drawn at loop depth 0 and 1 (an epoch and an iteration: a partial order), inputs
arrive in random order, times are run in random orders the progress tracker could give
(a time only once nothing at or before it can still arrive), and traces are compacted at
random points once epochs are over.
"""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from raytide.differential import Join, Reduction, Trace, accumulate, canonical, check_updates, consolidate, later_times
from raytide.errors import RecordError
from raytide.progress.timestamps import Timestamp

TRIALS = 300


def random_time(rng: random.Random, depth: int) -> Timestamp:
    return Timestamp(rng.randrange(4), tuple(rng.randrange(4) for _ in range(depth)))


def grid(depth: int) -> list[Timestamp]:
    """Every time the trials can reach, and one beyond."""
    return [Timestamp(e, c) for e in range(6) for c in itertools.product(range(6), repeat=depth)]


def at(updates: list[tuple[Timestamp, object, int]], time: Timestamp) -> Counter:
    """A brute-force accumulation: the updates at times ``<= time``, summed per record."""
    total: Counter = Counter()
    for when, record, diff in updates:
        if when <= time:
            total[record] += diff
    return +total if all(v >= 0 for v in total.values()) else Counter({k: v for k, v in total.items() if v})


def test_later_times_are_the_upper_bounds_of_the_time_with_any_subset_of_the_others():
    rng = random.Random(0)
    for _ in range(TRIALS):
        depth = rng.randint(0, 2)
        time = random_time(rng, depth)
        others = [random_time(rng, depth) for _ in range(rng.randint(0, 4))]
        bounds = set()
        for size in range(len(others) + 1):
            for subset in itertools.combinations(others, size):
                bound = time
                for other in subset:
                    bound = bound.join(other)
                bounds.add(bound)
        assert later_times(time, others) == bounds - {time}


def test_a_compacted_trace_holds_the_same_contents_at_every_later_time_and_no_more_than_the_collection():
    rng = random.Random(1)
    for trial in range(TRIALS):
        depth, trace, seen = rng.randint(0, 1), Trace(), []
        done = -1
        for _ in range(rng.randint(1, 30)):
            if done >= 4:
                break
            time = Timestamp(rng.randint(done + 1, 4), tuple(rng.randrange(3) for _ in range(depth)))
            key, value, diff = rng.randrange(3), rng.choice("ab"), rng.choice([-1, 1, 2])
            trace.add(key, value, time, diff)
            seen.append((time, (key, value), diff))
            if rng.random() < 0.3:
                done = rng.randint(done, min(4, done + 2))
                trace.compact(done)
        for time in grid(depth):
            if time.epoch > done:
                expected = {k: {v: n for (kk, v), n in at(seen, time).items() if kk == k} for k in range(3)}
                assert {k: trace.accumulated(k, time) for k in range(3)} == expected, (trial, time)
        held = sum(len(values) for history in trace.keys.values() for values in history.values())
        assert len(trace) == held, trial  # the size kept as updates come and go
        if depth == 0 and done >= 4:  # everything compacted: one update per record left
            assert len(trace) == len(at(seen, Timestamp(5))), trial


def run_reduction(rng: random.Random, logic, depth: int, batches: list) -> tuple[list, list]:
    """Feed ``batches`` (time, updates) to a reduction as a replica would, in a random order the
    tracker allows; returns every output change ``(time, record, diff)`` and the inputs applied."""
    reduction, out, inputs = Reduction(logic), [], []
    waiting = list(batches)
    rng.shuffle(waiting)
    notified: set[Timestamp] = set()
    compacted = -1
    while waiting or notified:
        ready = [t for t in notified if not any(b[0] <= t for b in waiting)
                 and not any(o.less_than(t) for o in notified)]
        if waiting and (not ready or rng.random() < 0.5):
            time, updates = waiting.pop()
            if reduction.receive(time, updates):
                notified.add(time)
            inputs.extend((time, (key, value), diff) for key, value, diff in updates)
            continue
        time = rng.choice(ready)
        notified.discard(time)
        changes, later = reduction.run(time)
        notified.update(later)
        out.extend((time, record, diff) for record, diff in changes)
        over = [e for e in range(5) if not any(t.epoch <= e for t in notified) and not any(b[0].epoch <= e for b in waiting)]
        if over and rng.random() < 0.5 and max(over) > compacted:
            compacted = max(over)
            reduction.compact(compacted)
    return out, inputs


@pytest.mark.parametrize("depth", [0, 1])
def test_a_reduction_outputs_at_every_time_the_logic_of_its_input_at_that_time(depth):
    rng = random.Random(depth)
    logics = {
        "count": lambda key, contents: {(key, sum(contents.values())): 1},
        "min": lambda key, contents: {(key, min(contents)): 1},
        "distinct values": lambda key, contents: dict.fromkeys(((key, v) for v in contents), 1),
    }
    for trial in range(TRIALS):
        name = rng.choice(sorted(logics))
        batches: list = []
        for _ in range(rng.randint(1, 8)):
            time = random_time(rng, depth)
            updates = [(rng.randrange(3), rng.randrange(4), rng.choice([1, 1, 2])) for _ in range(rng.randint(1, 3))]
            batches.append((time, updates))
        # deletions of what an earlier time (in every order) surely added, so no count goes negative
        for time, updates in list(batches):
            if rng.random() < 0.5:
                later = Timestamp(time.epoch + rng.randint(0, 1), tuple(c + rng.randint(0, 1) for c in time.counters))
                batches.append((later, [(k, v, -d) for k, v, d in updates[:1]]))
        out, inputs = run_reduction(rng, logics[name], depth, batches)
        for time in grid(depth):
            contents = at(inputs, time)
            per_key: dict = {}
            for (key, value), copies in contents.items():
                per_key.setdefault(key, {})[value] = copies
            expected: Counter = Counter()
            for key, values in per_key.items():
                expected.update(logics[name](key, values))
            got = Counter()
            for when, record, diff in out:
                if when <= time:
                    got[record] += diff
            assert +got == expected and all(v >= 0 for v in got.values()), (trial, name, time)


@pytest.mark.parametrize("depth", [0, 1])
def test_a_join_outputs_at_every_time_the_join_of_its_inputs_at_that_time(depth):
    rng = random.Random(10 + depth)
    for trial in range(TRIALS):
        join, out, seen = Join(), [], ([], [])
        arrivals = [(rng.randrange(2), random_time(rng, depth),
                     [(rng.randrange(3), rng.choice("xyz"), rng.choice([-1, 1, 2])) for _ in range(rng.randint(1, 3))])
                    for _ in range(rng.randint(1, 10))]
        done = -1
        for side, time, updates in sorted(arrivals, key=lambda a: (a[1].epoch, rng.random())):
            if time.epoch - 1 > done and rng.random() < 0.5:
                done = time.epoch - 1
                join.compact(done)
            for when, changes in join.receive(side, time, updates).items():
                assert time <= when
                out.extend((when, record, diff) for record, diff in changes)
            seen[side].extend((time, (k, v), d) for k, v, d in updates)
        for time in grid(depth):
            left, right = at(seen[0], time), at(seen[1], time)
            expected = Counter()
            for (k1, a), n in left.items():
                for (k2, b), m in right.items():
                    if k1 == k2:
                        expected[(k1, (a, b))] += n * m
            got = Counter()
            for when, record, diff in out:
                if when <= time:
                    got[record] += diff
            assert {k: v for k, v in got.items() if v} == {k: v for k, v in expected.items() if v}, (trial, time)


def test_state_taken_by_key_and_put_elsewhere_runs_as_if_it_had_stayed():
    rng = random.Random(5)
    logic = lambda key, contents: {(key, sum(contents.values())): 1}  # noqa: E731
    for trial in range(100):
        whole, parts = Reduction(logic), [Reduction(logic), Reduction(logic)]
        times = sorted({random_time(rng, 1) for _ in range(6)}, key=Timestamp.sort_key)
        for time in times:
            updates = [(rng.randrange(6), rng.randrange(3), 1) for _ in range(3)]
            whole.receive(time, updates)
            parts[0].receive(time, updates)
        moved = parts[1]
        cut = rng.randrange(len(times) + 1)
        outs: tuple[Counter, Counter] = (Counter(), Counter())
        for index, time in enumerate(times):
            if index == cut:
                moved.put(parts[0].take(lambda key: key % 2 == 1))
            for target, reductions in ((0, [whole]), (1, parts)):
                for reduction in reductions:
                    changes, _ = reduction.run(time)
                    outs[target].update(dict(Counter({(time, r): d for r, d in changes})))
        assert outs[0] == outs[1], trial


def test_updates_are_checked_and_consolidated():
    assert consolidate([((1, 2), 1), ((1, 2), -1), ("a", 3)]) == [("a", 3)]
    assert check_updates([("a", 1), ["b", -2]], "here") == [("a", 1), ("b", -2)]
    for bad, says in [("a", "is not a pair"), (("a", 1.5), "diff of type float"), (("a", True), "diff of type bool"),
                      (([1], 1), "unhashable record of type list")]:
        with pytest.raises(RecordError, match=f"here: update 0 of the batch.*{says}"):
            check_updates([bad], "here")
    with pytest.raises(RecordError, match="would have -1 copies"):
        accumulate([("a", -1)])


def test_equal_values_get_equal_routing_keys():
    assert canonical(1) == canonical(1.0) == canonical(True) == 1
    assert canonical((1, "a")) == canonical((1.0, "a"))
    assert canonical(0.5) != canonical(1.5)
    assert canonical(None) == canonical(None)
