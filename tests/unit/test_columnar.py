"""Columnar keyed state, its combiners and its arrangements against per-record brute force.

:class:`KeyedColumns` runs here as the runtime would run its replicas: rows routed to
replicas by the vectorised key-group hash, in random batches, notifications delivered
once a time is complete. Its step keeps per key a running sum, a running minimum and the
count of arranged rows; the oracle applies the same records one by one to plain dicts.
Between epochs and in the middle of one (updates still pending), the replicas are
rescaled to a random width through ``take_keys`` / ``put_keys``, or snapshot and restored.
"""

from __future__ import annotations

import math
import pickle
import random
from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import raytide as rt
from raytide.core.arrangement import MERGE_RATIO, Arrangement, distinct_with_inverse
from raytide.core.columnar import ColumnsSpec, KeyedColumns
from raytide.core.combine import check_combiners, combine_by_key
from raytide.core.gated import GatedColumns
from raytide.core.keygroups import DEFAULT_KEY_GROUPS, KeyGroupAssignment
from raytide.core.keyindex import stable_order
from raytide.core.routing import column_key_groups
from raytide.core.step import Step
from raytide.errors import GraphError, ProgressError
from raytide.progress.timestamps import Timestamp
from tests.unit.harness import RecordingContext, complete

INF = np.iinfo(np.int64).max
#: Keys a table holds (scale 1), dense keys too few for their range (1000: sorted, see
#: ``keyindex.TABLE_ROWS_FACTOR``) and keys too spread out for any table.
KEYS = st.sampled_from([1, 1000, 10**12 + 7]).flatmap(
    lambda scale: st.lists(st.integers(0, 30).map(lambda k: k * scale), max_size=60))


@settings(max_examples=200, deadline=None)
@given(KEYS, st.randoms(use_true_random=False), st.booleans())
def test_combining_by_key_equals_folding_record_by_record(keys, rng, already_one_per_key):
    if already_one_per_key:  # sorted distinct keys: returned as they are, without folding
        keys = sorted(set(keys))
    values = [rng.randint(-50, 50) for _ in keys]
    expected_sum, expected_min = defaultdict(int), {}
    for k, v in zip(keys, values):
        expected_sum[k] += v
        expected_min[k] = min(v, expected_min.get(k, v))
    out_keys, out = combine_by_key(np.array(keys, dtype=np.int64), {"s": np.array(values), "m": np.array(values)},
                                   {"s": np.add, "m": np.minimum})
    assert out_keys.tolist() == sorted(expected_sum)
    assert dict(zip(out_keys.tolist(), out["s"].tolist())) == expected_sum
    assert dict(zip(out_keys.tolist(), out["m"].tolist())) == expected_min


@settings(max_examples=100, deadline=None)
@given(KEYS, st.randoms(use_true_random=False))
def test_summing_floats_by_key_equals_the_exact_sum_per_key(keys, rng):
    """Float sums take ``np.bincount`` (dense keys) or ``np.add.reduceat`` (sparse): the same sums."""
    values = [rng.uniform(-1e6, 1e6) for _ in keys]
    expected: dict[int, list[float]] = defaultdict(list)
    for k, v in zip(keys, values):
        expected[k].append(v)
    out_keys, out = combine_by_key(np.array(keys, dtype=np.int64), {"s": np.array(values, dtype=np.float64)},
                                   {"s": np.add})
    assert out_keys.tolist() == sorted(expected)
    assert out["s"].tolist() == pytest.approx([math.fsum(expected[k]) for k in sorted(expected)], rel=1e-9, abs=1e-6)


def test_a_combiner_that_is_not_associative_and_commutative_is_refused_naming_the_column():
    check_combiners({"a": np.minimum, "b": np.add}, "vertex 'v'")
    for bad in (np.subtract, np.divide, np.power, lambda a, b: a - b, max):
        with pytest.raises(GraphError, match="vertex 'v': the combiner of column 'a'"):
            check_combiners({"a": bad}, "vertex 'v'")


@pytest.mark.parametrize("build", ["keyed_columns", "iterate_columns"])
def test_a_dataflow_given_a_bad_combiner_is_refused_when_built_naming_vertex_and_column(build):
    """As docs/errors.md promises: when the dataflow is built, before any data moves."""
    flow = rt.Dataflow("bad-combiner")
    with pytest.raises(GraphError, match="vertex 'sums': the combiner of column 'v' is subtract"):
        getattr(flow.input("rows"), build)(running, key="k", state={"total": (np.int64, 0)},
                                           combine={"v": np.subtract, "m": np.minimum}, name="sums")


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.tuples(st.integers(0, 25), st.integers(-99, 99)), max_size=20), max_size=12),
       st.lists(st.integers(0, 30), max_size=15))
def test_an_arrangement_expands_every_row_of_every_slot_asked_for(batches, asked):
    arrangement, size = Arrangement(("x",)), 0
    for done, batch in enumerate(batches, 1):  # slots grow batch after batch, as a key index gives them
        size = max([size] + [slot + 1 for slot, _ in batch])
        arrangement.add(np.array([s for s, _ in batch], dtype=np.int64), {"x": np.array([x for _, x in batch])}, size)
        slot_of_row, rows = arrangement.rows()  # read between adds (a snapshot, PageRank): kept, never stale
        assert Counter(zip(slot_of_row.tolist(), rows["x"].tolist() if "x" in rows else [])) == Counter(
            pair for earlier in batches[:done] for pair in earlier)
        sizes = [segment.rows for segment in arrangement.segments]  # merged by size: each over twice the next
        assert all(bigger > MERGE_RATIO * smaller for bigger, smaller in zip(sizes, sizes[1:])), sizes
        if len(slot_of_row):  # so is distinct (PageRank's targets): every row's value, from the newest rows
            values, where = arrangement.distinct("x")
            assert values.tolist() == sorted(set(rows["x"].tolist())) and values[where].tolist() == rows["x"].tolist()
    slots = np.array(sorted(set(asked)), dtype=np.int64)
    which, rows = arrangement.expand(slots)
    got = Counter(zip(slots[which].tolist(), rows["x"].tolist()))
    wanted = set(slots.tolist())
    assert got == Counter((s, x) for batch in batches for s, x in batch if s in wanted)
    assert arrangement.degrees(size).tolist() == [sum(s == slot for b in batches for s, _ in b) for slot in range(size)]
    assert len(arrangement) == sum(map(len, batches))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-3, 12), max_size=80), st.sampled_from([np.int64, np.int32, np.uint16, np.uint64]),
       st.sampled_from([0, 1 << 40, 1 << 58]))
def test_stable_order_is_numpys_stable_argsort_ties_in_row_order(values, dtype, spread):
    """Packed or not (a range past 63 bits with the row numbers is argsorted as it is); unsigned keys past 2**63."""
    base = 1 << 63 if dtype == np.uint64 else 0
    if dtype not in (np.int64, np.uint64):
        spread = 0
    if dtype != np.int64:
        values = [v + 3 for v in values]
    column = np.array([base + v * spread + v for v in values], dtype=dtype)
    assert stable_order(column).tolist() == np.argsort(column, kind="stable").tolist()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(-5, 40), max_size=60), st.sampled_from([np.int64, np.int32, np.uint16]),
       st.sampled_from([0, 1 << 22]))
def test_distinct_with_inverse_is_np_unique_dense_or_not(values, dtype, offset):
    """Dense (a table) and sparse (far apart or negative: np.unique) columns alike."""
    if dtype == np.uint16:
        values, offset = [v for v in values if v >= 0], 0
    column = np.array([v + offset for v in values], dtype=dtype)
    distinct, inverse = distinct_with_inverse(column)
    expected, expected_inverse = np.unique(column, return_inverse=True)
    assert distinct.dtype == column.dtype and distinct.tolist() == expected.tolist()
    assert inverse.tolist() == expected_inverse.tolist()


def running(s: Step) -> dict[str, np.ndarray]:
    """Per key updated: its running sum, running minimum and arranged rows so far."""
    s.state["total"][s.slots] += s.values["v"]
    s.state["low"][s.slots] = np.minimum(s.state["low"][s.slots], s.values["m"])
    rows = s.arrangement(1).degrees(len(s.ids))[s.slots]
    return {"k": s.keys, "total": s.state["total"][s.slots], "low": s.state["low"][s.slots], "rows": rows}


SPEC = ColumnsSpec(running, "k", {"total": (np.int64, 0), "low": (np.int64, INF)},
                   {"v": np.add, "m": np.minimum}, arranged={1: "k"})


class Replicas:
    """The replicas of one KeyedColumns vertex, fed as the runtime would feed them."""

    def __init__(self, width: int) -> None:
        self.width = width
        self.vertices = [KeyedColumns(SPEC) for _ in range(width)]
        self.contexts = [self._bind(v, r) for r, v in enumerate(self.vertices)]

    def _bind(self, vertex: KeyedColumns, replica: int, notifications=None) -> RecordingContext:
        context = RecordingContext(notifications)
        context.replica, context.parallelism = replica, self.width
        vertex.bind(context)
        return context

    def owners(self, keys: np.ndarray) -> np.ndarray:
        table = np.array(KeyGroupAssignment.contiguous(self.width, DEFAULT_KEY_GROUPS).owners)
        return table[column_key_groups(keys, DEFAULT_KEY_GROUPS)]

    def deliver(self, port: int, rows: dict[str, np.ndarray], time: Timestamp) -> None:
        owners = self.owners(rows["k"])
        for replica in np.unique(owners).tolist():
            self.vertices[replica].on_recv(port, {n: v[owners == replica] for n, v in rows.items()}, time)

    def finish(self, epoch: int) -> list[tuple]:
        out = []
        for vertex, context in zip(self.vertices, self.contexts):
            context.sent.clear()
            complete(vertex, context, Timestamp(epoch))
            for _, batch in context.sent:
                out.extend(zip(*(batch[n].tolist() for n in ("k", "total", "low", "rows"))))
        return sorted(out)

    def rescale(self, width: int) -> Replicas:
        new = Replicas.__new__(Replicas)
        new.width = width
        new.vertices = [KeyedColumns(SPEC) for _ in range(width)]
        new.contexts = [new._bind(v, r) for r, v in enumerate(new.vertices)]
        for old, context in zip(self.vertices, self.contexts):
            for replica, vertex in enumerate(new.vertices):
                part = old.take_keys(lambda key, r=replica: int(new.owners(np.array([key]))[0]) == r)
                vertex.put_keys(pickle.loads(pickle.dumps(part)))
            assert not old.index.ids.size and not old.pending and not context.notifications
        return new

    def snapshot_and_restore(self) -> None:
        for replica, (vertex, context) in enumerate(zip(self.vertices, self.contexts)):
            fresh = KeyedColumns(SPEC)
            self.contexts[replica] = self._bind(fresh, replica, context.notifications)
            fresh.restore(pickle.loads(pickle.dumps(vertex.snapshot())))
            self.vertices[replica] = fresh


def split(n: int, rng: random.Random) -> list[tuple[int, int]]:
    cuts = sorted(rng.sample(range(1, n), min(n - 1, rng.randint(0, 3)))) if n > 1 else []
    return list(zip([0] + cuts, cuts + [n]))


#: How the state oracle's keys 0..40 become a replica's keys, so that every branch of the key
#: index (:mod:`raytide.core.keyindex`) holds state: a lookup table; a table too long for a
#: later batch's few keys (sorted instead); keys too spread out for any table, or negative
#: (a sorted array); and a table that turns into a sorted array mid-run (keys from 30 on far out).
KEY_MAPS = {"table": lambda k: k, "few for the table": lambda k: k * 1000, "spread": lambda k: k * (10**12 + 7),
            "negative": lambda k: k - 20, "table, then spread": lambda k: k if k < 30 else k * 10**12 + 7}


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.lists(st.tuples(st.integers(0, 40), st.integers(-9, 9), st.integers(-9, 9)), max_size=25),
                          st.lists(st.integers(0, 40), max_size=10)), min_size=1, max_size=5),
       st.integers(1, 4), st.randoms(use_true_random=False), st.sampled_from(sorted(KEY_MAPS)))
def test_columnar_state_equals_per_record_state_through_batches_rescales_and_restores(epochs, width, rng, keys):
    replicas = Replicas(width)
    total, low, rows = defaultdict(int), {}, Counter()
    key = KEY_MAPS[keys]
    epochs = [([(key(k), v, m) for k, v, m in updates], [key(k) for k in arranged]) for updates, arranged in epochs]
    for epoch, (updates, arranged) in enumerate(epochs):
        time = Timestamp(epoch)
        rows.update(arranged)
        for key, v, m in updates:
            total[key] += v
            low[key] = min(m, low.get(key, INF))
        expected = sorted((k, total[k], low[k], rows[k]) for k in {k for k, _, _ in updates})
        replicas.deliver(1, {"k": np.array(arranged, dtype=np.int64), "x": np.zeros(len(arranged))}, time)
        data = np.array(updates, dtype=np.int64).reshape(-1, 3)
        for a, b in split(len(data), rng):
            replicas.deliver(0, {"k": data[a:b, 0], "v": data[a:b, 1], "m": data[a:b, 2]}, time)
            if rng.random() < 0.3:  # mid-epoch: updates are pending
                replicas = replicas.rescale(rng.randint(1, 4))
        if rng.random() < 0.3:
            replicas.snapshot_and_restore()
        assert replicas.finish(epoch) == expected, epoch


def test_bad_keys_columns_and_state_changes_are_named():
    def vertex(step=running, **spec):
        v = KeyedColumns(ColumnsSpec(step, "k", {"total": (np.int64, 0), "low": (np.int64, INF)},
                                     {"v": np.add, "m": np.minimum}, arranged={1: "k"}, **spec))
        v.bind(RecordingContext())
        return v

    t = Timestamp(0)
    v = vertex()
    v.on_recv(0, {"k": np.array([0.5]), "v": np.array([1]), "m": np.array([1])}, t)
    with pytest.raises(TypeError, match="key column 'k' holds float64 values .* keys must be integers"):
        v.on_notify(t)
    with pytest.raises(ValueError, match="unequal lengths"):
        vertex().on_recv(0, {"k": np.array([1, 2]), "v": np.array([1])}, t)
    v = vertex()
    v.on_recv(0, {"k": np.array([1]), "v": np.array([1]), "m": np.array([1]), "extra": np.array([1])}, t)
    with pytest.raises(ValueError, match="every value column needs one combiner"):
        v.on_notify(t)

    def widens(s: Step) -> None:
        s.state["total"] = s.state["total"].astype(np.float64)

    def ragged(s: Step) -> dict:
        return {"k": s.keys, "total": s.keys[:-1]}

    for step, error in ((widens, "state column 'total' as a float64 array"), (ragged, "unequal lengths")):
        v = vertex(step)
        v.on_recv(0, {"k": np.array([1, 2]), "v": np.array([1, 1]), "m": np.array([1, 1])}, t)
        with pytest.raises((TypeError, ValueError), match=error):
            v.on_notify(t)


def test_an_earlier_epoch_after_a_later_one_in_a_loop_is_refused_naming_both():
    v = KeyedColumns(SPEC)
    v.bind(RecordingContext())
    v.on_notify(Timestamp(1, (0,)))
    v.on_notify(Timestamp(1, (3,)))
    with pytest.raises(ProgressError, match=r"notification at .*0.*after the vertex worked on epoch 1"):
        v.on_notify(Timestamp(0, (4,)))


def test_a_loops_finish_sends_its_batches_out_of_the_loop_and_bad_ones_are_named():
    """``finish`` runs with no updates at the epoch's conclusion; what it returns goes on the
    outputs after the next-round one (port 1 on), never round the loop."""
    def gated(finish):
        spec = ColumnsSpec(lambda s: None, "k", {"total": (np.int64, 0)}, {"v": np.add}, outputs=2, finish=finish)
        vertex = GatedColumns(spec)
        context = RecordingContext()
        vertex.bind(context)
        vertex.gate.started[(0, ())] = 0
        vertex._slots(np.array([3, 5]))  # two keys held
        return vertex, context

    vertex, context = gated(lambda s: {"k": s.ids, "total": s.state["total"] + len(s.keys)})
    vertex._finish((0, ()), 4)
    [(time, batch)] = context.sent
    assert time == Timestamp(0, (4,)) and batch["k"].tolist() == [3, 5] and batch["total"].tolist() == [0, 0]
    vertex, _ = gated(lambda s: [1, 2])
    with pytest.raises(TypeError, match="the finish function returned a list for output 1"):
        vertex._finish((0, ()), 4)
