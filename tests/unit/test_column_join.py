"""The columnar joins and sum of collections (``raytide.core.column_join``) against brute force
and against the record-by-record cores, on random streams of insertions and deletions (diffs
of any sign and size, several copies of a record) split into epochs at random, with their
state taken by key and put elsewhere at random epochs: after every epoch the accumulated
output is the operator applied to the inputs accumulated so far (joins: several reading one
shared arrangement, on either side), and each epoch's change of a sum equals what the record
core gives for the same updates.
"""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from raytide.core.arrangement import merge_order, netted
from raytide.core.collection_columns import JoinColumns, SumColumns
from raytide.core.column_join import ArrangedJoins, ColumnSums, JoinSpec, folded_sums, joined_names
from raytide.differential import DIFF, Sums
from raytide.errors import RecordError
from raytide.progress.timestamps import Timestamp
from tests.unit.harness import bound, complete

TRIALS = 200


def random_epochs(rng: random.Random, fields: int, epochs: int) -> list[list[tuple[tuple, int]]]:
    """Per epoch, updates of records ``(key, v1, ...)``: insertions (1 or 2 copies) and
    deletions of copies present (so no count goes negative), in random numbers per epoch."""
    present: Counter = Counter()
    out = []
    for _ in range(epochs):
        updates = []
        for _ in range(rng.choice([0, 1, 3, 8])):
            if +present and rng.random() < 0.45:
                record = rng.choice(sorted(+present))
                diff = -rng.randint(1, present[record])
            else:
                record = (rng.randrange(4), *(rng.randrange(3) for _ in range(fields - 1)))
                diff = rng.choice([1, 1, 2])
            present[record] += diff
            updates.append((record, diff))
        out.append(updates)
    return out


def columns(updates: list[tuple[tuple, int]], names: tuple[str, ...]) -> dict[str, np.ndarray]:
    return {**{name: np.array([r[k] for r, _ in updates], dtype=np.int64) for k, name in enumerate(names)},
            DIFF: np.array([d for _, d in updates], dtype=np.int64)}


def as_counter(rows: dict[str, np.ndarray] | None, names: tuple[str, ...]) -> Counter:
    out: Counter = Counter()
    if rows is not None:
        for k in range(len(rows[DIFF])):
            out[tuple(int(rows[n][k]) for n in names)] += int(rows[DIFF][k])
    return Counter({r: d for r, d in out.items() if d})


def accumulated(epochs: list[list[tuple[tuple, int]]]) -> Counter:
    total: Counter = Counter()
    for updates in epochs:
        for record, diff in updates:
            total[record] += diff
    return +total


def moved(core: ArrangedJoins | ColumnSums, rng: random.Random) -> ArrangedJoins | ColumnSums:
    """``core``'s state split by key between two cores and put back into a third (a rescale)."""
    odd = rng.random() < 0.5
    taken = core.take(lambda key: key % 2 == odd)
    if isinstance(core, ArrangedJoins):
        fresh: ArrangedJoins | ColumnSums = ArrangedJoins(core.names, core.key, core.specs)
        fresh.put(taken)
        fresh.put(core.take(lambda key: True))
    else:
        fresh = ColumnSums(core.key, core.value)
        fresh.put(taken)
        fresh.put(core.take(lambda key: True))
    return fresh


ARRANGED = ("k", "a", "b")


def test_joins_reading_one_arrangement_each_equal_the_join_of_their_inputs_after_every_epoch():
    """One to three joins read one arrangement, each on a random side: after every epoch each
    join's accumulated output is the join of its inputs accumulated so far (so each epoch's
    change is exactly the join's change), state moved by key at random epochs."""
    rng = random.Random(71)
    for trial in range(TRIALS):
        epochs, readers = rng.randint(1, 6), rng.randint(1, 3)
        own_names = [("k", f"c{j}") for j in range(readers)]
        specs = [JoinSpec(ARRANGED, own, "k", "k") if rng.random() < 0.5 else JoinSpec(own, ARRANGED, "k", "k", False)
                 for own in own_names]
        arranged, own = random_epochs(rng, 3, epochs), [random_epochs(rng, 2, epochs) for _ in specs]
        joins: ArrangedJoins | ColumnSums = ArrangedJoins(ARRANGED, "k", specs)
        totals = [Counter() for _ in specs]
        for epoch in range(epochs):
            if rng.random() < 0.3:
                joins = moved(joins, rng)
            present = lambda updates, names: columns(updates, names) if updates or rng.random() < 0.5 else None  # noqa: E731
            assert isinstance(joins, ArrangedJoins)
            outs = joins.run(present(arranged[epoch], ARRANGED), [present(o[epoch], n) for o, n in zip(own, own_names)])
            for j, spec in enumerate(specs):
                totals[j].update(as_counter(outs[j], spec.output_names))
                sides = (accumulated(arranged[: epoch + 1]), accumulated(own[j][: epoch + 1]))
                left, right = sides if spec.arranged_left else sides[::-1]
                brute = Counter({(*a, *b[1:]): n * m for a, n in left.items() for b, m in right.items() if a[0] == b[0]})
                assert +totals[j] == brute and not -totals[j], (trial, epoch, j)
        assert joins.held >= len(accumulated(arranged)) + sum(len(accumulated(o)) for o in own)
        assert isinstance(joins, ArrangedJoins) and joins.shared >= len(accumulated(arranged))


def test_a_shared_arrangement_holds_its_rows_once_however_many_joins_read_it():
    joins = ArrangedJoins(ARRANGED, "k", [JoinSpec(ARRANGED, ("k", f"c{j}"), "k", "k") for j in range(3)])
    rows = {"k": np.arange(100) % 7, "a": np.arange(100), "b": np.zeros(100, dtype=np.int64),
            DIFF: np.ones(100, dtype=np.int64)}
    joins.run(rows, [None, None, None])
    assert joins.shared == joins.held == 100


def test_a_column_join_keeps_its_arrangements_to_the_live_rows_when_changes_cancel():
    """A tenth of the left's rows updated every epoch (old row taken back, new one added): merges
    net what is taken back, so the arrangements hold at most twice the live rows."""
    join = ArrangedJoins(("k", "a"), "k", [JoinSpec(("k", "a"), ("k", "b"), "k", "k")])
    keys, values, ones = np.arange(1000) % 50, np.arange(1000), np.ones(100, dtype=np.int64)
    join.run({"k": keys, "a": values.copy(), DIFF: np.ones(1000, dtype=np.int64)},
             [{"k": np.arange(50), "b": np.arange(50), DIFF: np.ones(50, dtype=np.int64)}])
    for epoch in range(1, 60):
        some = slice(epoch % 10 * 100, epoch % 10 * 100 + 100)
        old, values[some] = values[some].copy(), values[some] + 1000
        join.run({"k": np.tile(keys[some], 2), "a": np.concatenate([old, values[some]]), DIFF: np.concatenate([-ones, ones])},
                 [None])
        assert join.held <= 2 * 1050, (epoch, join.held)
    left = join.rows(0)
    assert sorted(left["a"].tolist()) == sorted(values.tolist()) and set(left[DIFF].tolist()) == {1}
    assert join.cancelled >= 5000


def test_column_sums_equal_the_record_sums_per_epoch():
    rng = random.Random(72)
    for trial in range(TRIALS):
        epochs = random_epochs(rng, 2, rng.randint(1, 6))
        sums, record_sums = ColumnSums("k", "v"), Sums()
        for epoch, updates in enumerate(epochs):
            if rng.random() < 0.3:
                sums = moved(sums, rng)
            folded: dict = {}
            for (key, value), diff in updates:
                change = folded.setdefault(key, [0, 0])
                change[0] += diff
                change[1] += value * diff
            wanted = Counter(dict(record_sums.apply(folded)))
            cut = rng.randint(0, len(updates))  # folded in two parts, as two senders would
            parts = [folded_sums(columns(part, ("k", "v")), "k", "v") for part in (updates[:cut], updates[cut:])]
            partials = {name: np.concatenate([part[name] for part in parts]) for name in parts[0]}
            assert as_counter(sums.apply(partials), ("k", "total")) == wanted, (trial, epoch)


def test_column_sums_refuse_a_key_with_fewer_than_no_records_and_values_that_are_not_numbers():
    sums = ColumnSums("k", "v")
    sums.apply(folded_sums({"k": np.array([3]), "v": np.array([1]), DIFF: np.array([1])}, "k", "v"))
    with pytest.raises(RecordError, match="key 3 would have -1 records"):
        sums.apply(folded_sums({"k": np.array([3]), "v": np.array([1]), DIFF: np.array([-2])}, "k", "v"))
    with pytest.raises(RecordError, match="a sum takes numbers"):
        folded_sums({"k": np.array([3]), "v": np.array(["x"]), DIFF: np.array([1])}, "k", "v")


def test_a_join_refuses_columns_on_both_sides():
    with pytest.raises(ValueError, match=r"columns \['x'\] are on both sides"):
        joined_names(("k", "x"), ("k", "x"), "k")
    assert joined_names(("o", "c", "a"), ("c", "r"), "c") == ("o", "c", "a", "r")


@pytest.mark.parametrize("span", [5, 1 << 40, None])
def test_netting_packed_or_not_sums_equal_rows_and_keeps_them_sorted(span):
    """``netted`` packs integer columns into one key when they fit in 63 bits (spans 5, 2**40 for
    two columns do not) and falls back to ``np.lexsort`` (floats, wide spans): the same rows,
    summed, zeros dropped, in (slot, columns by name) order; two sorted runs merge as one sort."""
    rng = np.random.default_rng(3)
    for _ in range(100):
        n = int(rng.integers(1, 60))
        slots = rng.integers(0, 6, n)
        a = rng.integers(-3, 3, n) * (span or 1) if span else rng.integers(0, 4, n) + 0.5
        rows = {"b": rng.integers(-2, 2, n) * (span or 1), "a": a, DIFF: rng.integers(-2, 3, n)}
        got_slots, got = netted(slots, rows, DIFF)
        brute: Counter = Counter()
        for k in range(n):
            brute[(int(slots[k]), rows["a"][k].item(), int(rows["b"][k]))] += int(rows[DIFF][k])
        triples = list(zip(got_slots.tolist(), got["a"].tolist(), got["b"].tolist()))
        assert dict(zip(triples, got[DIFF].tolist())) == {r: d for r, d in brute.items() if d}
        assert triples == sorted(triples)
        split = int(rng.integers(0, n + 1))
        runs = np.concatenate([np.sort(rng.integers(0, 9, split)), np.sort(rng.integers(0, 9, n - split))])
        assert merge_order(runs, split).tolist() == np.argsort(runs, kind="stable").tolist()


def test_the_vertices_pending_batches_and_state_move_by_key_as_if_they_had_stayed():
    """``JoinColumns`` / ``SumColumns`` driven by hand: batches of three epochs received, epoch 0
    run, then every odd key's state and pending rows taken and put into a second replica (each
    replica left notified at exactly the times it holds rows of); the two replicas' outputs
    together equal one replica's that kept everything, and nothing is sent twice."""
    rng = random.Random(9)
    for trial in range(40):
        batches = [(epoch, port, columns(random_epochs(rng, 2, 1)[0] or [((1, 1), 1)], ("k", "v" if port == 0 else "w")))
                   for epoch in (0, 1, 2) for port in (0, 1) for _ in range(rng.randint(1, 2))]
        for make in (lambda: JoinColumns(("k", "v"), "k", [JoinSpec(("k", "v"), ("k", "w"), "k", "k")]), lambda: SumColumns("k", "v")):
            (vertex, alone), a, b = bound(make()), bound(make()), bound(make())
            for epoch, port, rows in batches:
                if isinstance(vertex, SumColumns):
                    port, rows = 0, folded_sums({"k": rows["k"], "v": rows.get("v", rows.get("w")), DIFF: rows[DIFF]},
                                                "k", "v")
                for target in (vertex, a[0]):
                    target.on_recv(port, {n: v.copy() for n, v in rows.items()}, Timestamp(epoch))
            for v, context in ((vertex, alone), a):
                complete(v, context, Timestamp(0))
            b[0].put_keys(a[0].take_keys(lambda key: key % 2 == 1))
            for v, context in (a, b):
                assert set(context.notifications) == set(v.pending) and len(set(context.notifications)) == len(context.notifications), trial
                complete(v, context)
            complete(vertex, alone)
            names = ("k", "v", "w") if isinstance(vertex, JoinColumns) else ("k", "total")
            split = [as_counter(message, names) for _, message in a[1].sent + b[1].sent]
            assert sum(split, Counter()) == sum((as_counter(m, names) for _, m in alone.sent), Counter()), trial
