"""The pure window algorithms (``raytide.windows``) against brute-force references.

Records are ``(key, epoch, label)``; a window's accumulator is the sorted tuple of the labels
folded into it, so a reference and the algorithm agree only if every window holds exactly
the right records. The references assign windows from their definitions (every start that
is a multiple of the step and covers the epoch; sessions as runs of a key's sorted epochs
closer than the gap), not from the specs' arithmetic.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import raytide as rt
from raytide.windows import Pending, Session, Sliding, Tumbling, WindowSpec, add, close, merge, split

Record = tuple[int, int, int]


def fold(a: tuple, b: tuple) -> tuple:
    return tuple(sorted(a + b))


def specs() -> st.SearchStrategy[WindowSpec]:
    return st.one_of(
        st.integers(1, 5).map(Tumbling),
        st.integers(1, 6).flatmap(lambda size: st.integers(1, size).map(lambda every: Sliding(size, every))),
        st.integers(1, 5).map(Session),
    )


records = st.lists(st.tuples(st.integers(0, 3), st.integers(0, 15), st.integers(0, 10**6)), max_size=40)


def reference(spec: WindowSpec, given_records: list[Record]) -> dict[tuple, tuple]:
    """``{(key, start, end): labels}`` from the definitions."""
    out: dict[tuple, tuple] = defaultdict(tuple)
    if isinstance(spec, Session):
        per_key: dict[int, list[tuple[int, int]]] = defaultdict(list)
        for key, epoch, label in given_records:
            per_key[key].append((epoch, label))
        for key, seen in per_key.items():
            seen.sort()
            run = [seen[0]]
            for epoch, label in seen[1:]:
                if epoch - run[-1][0] >= spec.gap:
                    out[(key, run[0][0], run[-1][0] + spec.gap)] = tuple(sorted(x for _, x in run))
                    run = []
                run.append((epoch, label))
            out[(key, run[0][0], run[-1][0] + spec.gap)] = tuple(sorted(x for _, x in run))
        return dict(out)
    size, every = (spec.size, spec.size) if isinstance(spec, Tumbling) else (spec.size, spec.every)
    for key, epoch, label in given_records:
        for start in range(epoch - size + 1, epoch + 1):
            if start % every == 0:
                out[(key, start, start + size)] = fold(out[(key, start, start + size)], (label,))
    return dict(out)


def closed_all(pending: Pending) -> dict[tuple, tuple]:
    got = {}
    for end in sorted(pending.ends):
        for key, start, stop, acc in close(pending, end):
            assert (key, start, stop) not in got
            got[(key, start, stop)] = acc
    assert pending == Pending()
    return got


@given(specs(), records, st.randoms(use_true_random=False))
def test_records_in_any_order_fill_the_windows_of_the_definitions(spec, given_records, rng):
    pending = Pending()
    shuffled = list(given_records)
    rng.shuffle(shuffled)
    for key, epoch, label in shuffled:
        add(pending, spec, key, epoch, (label,), fold)
    assert closed_all(pending) == reference(spec, given_records)


@given(specs(), records, st.randoms(use_true_random=False))
@settings(max_examples=150)
def test_windows_closed_as_the_frontier_passes_their_end_are_final_and_closed_once(spec, given_records, rng):
    """As the vertex sees them: a record arrives any time before its epoch completes (early
    ones mixed in), and when epoch ``f`` completes the windows ending at ``f + 1`` close."""
    pending, got = Pending(), {}
    waiting = list(given_records)
    rng.shuffle(waiting)
    last = max((r[1] for r in given_records), default=0) + 8
    for frontier in range(last):
        chosen = [r[1] <= frontier or rng.random() < 0.2 for r in waiting]
        due = [r for r, now in zip(waiting, chosen) if now]
        waiting = [r for r, now in zip(waiting, chosen) if not now]
        for key, epoch, label in due:
            add(pending, spec, key, epoch, (label,), fold)
        for key, start, end, acc in close(pending, frontier + 1):
            assert end == frontier + 1 and (key, start, end) not in got
            got[(key, start, end)] = acc
    assert pending == Pending() and got == reference(spec, given_records)


@given(specs(), records, st.randoms(use_true_random=False))
@settings(max_examples=150)
def test_state_split_by_key_and_merged_at_random_moments_gives_the_same_windows(spec, given_records, rng):
    """Three replicas own keys; now and then one splits off some keys and another merges them
    (a rescale). Every key's windows end up where its records went, with the same values."""
    replicas = [Pending() for _ in range(3)]
    owner = {key: rng.randrange(3) for key in range(4)}
    shuffled = list(given_records)
    rng.shuffle(shuffled)
    for key, epoch, label in shuffled:
        add(replicas[owner[key]], spec, key, epoch, (label,), fold)
        if rng.random() < 0.3:
            source, target = rng.randrange(3), rng.randrange(3)
            moving = {key for key in owner if owner[key] == source and rng.random() < 0.5}
            if source != target:
                merge(replicas[target], split(replicas[source], moving.__contains__), spec, fold)
                owner.update((key, target) for key in moving)
    for replica in replicas:
        assert all(keys for keys in replica.ends.values())
        assert {key for keys in replica.ends.values() for key in keys} == set(replica.windows)
    got: dict[tuple, tuple] = {}
    for replica in replicas:
        got.update(closed_all(replica))
    assert got == reference(spec, given_records)


@given(specs(), records, st.randoms(use_true_random=False))
def test_partial_states_of_one_key_merge_into_the_windows_of_all_their_records(spec, given_records, rng):
    """Two replicas' states that hold the same keys (partial results, or a restore that met
    a key twice) merge as if one replica had seen every record: sessions merge where they
    overlap, windows of equal bounds fold."""
    halves = [Pending(), Pending()]
    for key, epoch, label in given_records:
        add(halves[rng.randrange(2)], spec, key, epoch, (label,), fold)
    merge(halves[0], halves[1], spec, fold)
    assert closed_all(halves[0]) == reference(spec, given_records)


@pytest.mark.parametrize(("make", "named"), [
    (lambda: rt.Tumbling(0), "Tumbling(size)"),
    (lambda: rt.Tumbling(-3), "Tumbling(size)"),
    (lambda: rt.Tumbling(1.5), "Tumbling(size)"),
    (lambda: rt.Tumbling(True), "Tumbling(size)"),
    (lambda: rt.Sliding(0, 1), "Sliding(size)"),
    (lambda: rt.Sliding(4, 0), "Sliding(every)"),
    (lambda: rt.Sliding(4, -2), "Sliding(every)"),
    (lambda: rt.Sliding(2, 3), "every must be at most size"),
    (lambda: rt.Session(0), "Session(gap)"),
    (lambda: rt.Session(-1), "Session(gap)"),
])
def test_bad_window_specs_are_refused_naming_what_was_wrong(make, named):
    with pytest.raises(rt.ArgumentError, match=named.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_specs_take_numpy_integers_and_keep_python_ints():
    import numpy as np

    assert Sliding(np.int64(4), np.int32(2)) == Sliding(4, 2)
    assert type(Tumbling(np.int64(3)).size) is int


def test_a_sliding_window_not_a_multiple_of_its_step_covers_every_epoch():
    spec = Sliding(5, every=2)
    assert [len(spec.windows_of(epoch)) for epoch in range(6)] == [3, 2, 3, 2, 3, 2]
    assert spec.windows_of(0) == [(-4, 1), (-2, 3), (0, 5)]
