"""The components benchmark's vectorised pieces (bench/workloads) against brute-force oracles, without Ray.

The last tests run :class:`LabelPropagation` itself, several replicas in this process, in
rounds as the runtime would (every record of a round delivered, then every notification
of that round), and compare the labels with union-find, epoch after epoch.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import raytide as rt
from bench.baselines.cc_ray import components_union_find
from bench.workloads import columnar
from bench.workloads.columnar import (
    Adjacency,
    MinCombiner,
    NodeIndex,
    group_by_first,
    narrow,
)
from bench.workloads.components import (
    LabelPropagation,
    both_directions,
    latest_labels,
    split_reports,
)
from raytide.errors import ProgressError

#: Ids the structures meet: small dense ones, dense ones few for their table (1000: a batch
#: is looked up by sorting it, see ``keyindex.TABLE_ROWS_FACTOR``), and ones too large and
#: spread out for a table.
SCALES = st.sampled_from([1, 1000, 10**12 + 7])


def ids_batches(max_id: int = 60) -> st.SearchStrategy[list[list[int]]]:
    return st.lists(st.lists(st.integers(0, max_id), max_size=25), max_size=6)


@given(batches=ids_batches(), scale=SCALES, sparse_from=st.integers(0, 6))
def test_node_index_gives_each_new_id_the_next_slot(batches, scale, sparse_from):
    index, seen = NodeIndex(), []
    for k, batch in enumerate(batches):
        ids = np.array(batch, dtype=np.int64) * (scale if k >= sparse_from else 1)  # may turn sparse midway
        new = index.add(ids)
        expected = sorted(set(ids.tolist()) - set(seen))
        assert new.tolist() == expected
        seen += expected
    assert index.ids.tolist() == seen and len(index) == len(seen)
    if seen:
        assert index.slots(np.array(seen[::-1])).tolist() == list(range(len(seen)))[::-1]
    absent = np.array([-1, 10**15, 61], dtype=np.int64)
    assert index.lookup(np.concatenate([absent, np.array(seen[:3], dtype=np.int64)])).tolist() == \
        [-1] * 3 + list(range(min(3, len(seen))))


@given(pairs=st.lists(st.tuples(st.integers(0, 9), st.integers(-5, 2**40)), max_size=40), wide=st.booleans())
def test_group_by_first_is_a_csr_of_the_pairs(pairs, wide):
    groups = 10
    firsts = np.array([f for f, _ in pairs], dtype=np.int64)
    seconds = np.array([s if wide else abs(s) % 1000 for _, s in pairs], dtype=np.int64)
    offsets, grouped = group_by_first(firsts, seconds, groups)
    for g in range(groups):
        mine = grouped[offsets[g]:offsets[g + 1]].tolist()
        assert sorted(mine) == sorted(s for f, s in zip(firsts.tolist(), seconds.tolist()) if f == g)


@given(batches=st.lists(st.lists(st.tuples(st.integers(0, 11), st.integers(0, 50)), max_size=12), max_size=12),
       scale=SCALES)
def test_adjacency_spreads_values_along_every_edge_added(batches, scale):
    adjacency, oracle = Adjacency(), defaultdict(list)
    nodes = 12
    for batch in batches:  # more batches than MAX_SEGMENTS: the segments get merged
        slots = np.array([s for s, _ in batch], dtype=np.int64)
        targets = np.array([t * scale for _, t in batch], dtype=np.int64)
        smallest = adjacency.add(slots, targets, nodes)
        for slot in range(nodes):
            new = [t for s, t in zip(slots.tolist(), targets.tolist()) if s == slot]
            assert smallest[slot] == (min(new) if new else columnar.INF)
        for s, t in zip(slots.tolist(), targets.tolist()):
            oracle[s].append(t)
    chosen = np.array([0, 3, 7, 11], dtype=np.int64)
    targets, values = adjacency.spread(chosen, 100 + chosen)
    assert sorted(zip(targets.tolist(), values.tolist())) == sorted((t, 100 + s) for s in chosen.tolist() for t in oracle[s])


@given(calls=st.lists(st.lists(st.tuples(st.integers(0, 300), st.integers(-50, 50)), max_size=30), max_size=5),
       scale=SCALES)
def test_min_combiner_gives_the_minimum_per_key_call_after_call(calls, scale):
    combiner = MinCombiner()  # one combiner for every call: its scratch array must come back clean
    for pairs in calls:
        keys = np.array([k * scale for k, _ in pairs], dtype=np.int64)
        values = np.array([v for _, v in pairs], dtype=np.int64)
        got_keys, got_values = combiner.combine(keys, values)
        best: dict[int, int] = {}
        for k, v in zip(keys.tolist(), values.tolist()):
            best[k] = min(v, best.get(k, v))
        assert got_keys.tolist() == sorted(best) and got_values.tolist() == [best[k] for k in sorted(best)]


@given(values=st.lists(st.integers(-(2**40), 2**40), max_size=8))
def test_narrow_keeps_every_value(values):
    array = np.array(values, dtype=np.int64)
    (narrowed,) = narrow(array)
    assert narrowed.tolist() == values
    assert narrowed.dtype == (np.int32 if all(-(2**31) <= v < 2**31 for v in values) else np.int64)


# -- the vertex, in rounds, in this process -------------------------------------------------------


class Context:
    """The :class:`~raytide.VertexContext` of one replica here: keeps what the vertex sends and asks."""

    vertex = "label-propagation"

    def __init__(self, replica: int, parallelism: int) -> None:
        self.replica, self.parallelism = replica, parallelism
        self.sent: list[tuple[int, Any, rt.Timestamp]] = []
        self.requested: set[rt.Timestamp] = set()

    def send_by(self, output: int, message: Any, time: rt.Timestamp) -> None:
        self.sent.append((output, message, time))

    def notify_at(self, time: rt.Timestamp) -> None:
        self.requested.add(time)


def deliver(replicas: list[tuple[LabelPropagation, Context]], edge: int, batch: dict, key: str,
            time: rt.Timestamp) -> None:
    """Exchange ``batch`` by column ``key`` (owner: id modulo the replicas) and hand each part to its owner."""
    owner = np.asarray(batch[key]) % len(replicas)
    for r, (vertex, _) in enumerate(replicas):
        mine = owner == r
        if mine.any():
            vertex.on_recv(edge, {k: np.asarray(v)[mine] for k, v in batch.items()}, time)


def run_epoch(replicas: list[tuple[LabelPropagation, Context]], epoch: int, edges: np.ndarray) -> list[tuple]:
    """Edges in at ``(epoch, (0,))``; then round after round until no proposal is left. Returns the reports."""
    deliver(replicas, 0, both_directions({"src": edges[:, 0], "dst": edges[:, 1]}), "src", rt.Timestamp(epoch, (0,)))
    reports: list[tuple] = []
    for i in range(10_000):
        time = rt.Timestamp(epoch, (i,))
        for vertex, context in replicas:
            if time in context.requested:
                context.requested.remove(time)
                vertex.on_notify(time)
        sent = [s for _, context in replicas for s in context.sent]
        for _, context in replicas:
            context.sent.clear()
        reports += [r for output, message, _ in sent if output == 1 for r in message]
        proposals = [message for output, message, _ in sent if output == 0]
        if not proposals:
            return reports
        for message in proposals:
            deliver(replicas, 1, message, "node", rt.Timestamp(epoch, (i + 1,)))
    raise AssertionError("label propagation did not reach a fixed point")


@settings(deadline=None, max_examples=60)
# Epoch 1 joins two old components by an edge between nodes that are not their minimum:
# only the labels known nodes offer over their new edges can carry 0 over to 1 and 6.
@example(graph=[(0, 5), (1, 6), (5, 6)], cuts=[2], parallelism=2, scale=1)
@example(graph=[(0, 5), (1, 6), (5, 6)], cuts=[2], parallelism=1, scale=10**12 + 7)
@given(graph=st.lists(st.tuples(st.integers(0, 40), st.integers(0, 40)), max_size=60),
       cuts=st.lists(st.integers(0, 60), max_size=3), parallelism=st.integers(1, 3), scale=SCALES)
def test_label_propagation_reaches_union_find_epoch_after_epoch(graph, cuts, parallelism, scale):
    replicas = []
    for r in range(parallelism):
        vertex, context = LabelPropagation(), Context(r, parallelism)
        vertex.bind(context)
        replicas.append((vertex, context))
    edges = np.array(graph, dtype=np.int64).reshape(-1, 2)
    bounds = [0, *sorted(cuts), len(edges)]
    chunks: list[tuple[np.ndarray, np.ndarray]] = []
    for epoch, (lo, hi) in enumerate(itertools.pairwise(bounds)):
        changes, _ = split_reports(run_epoch(replicas, epoch, edges[lo:hi] * scale))
        chunks += changes
        seen = edges[:hi]
        union = components_union_find(41, seen)
        nodes, labels = latest_labels(chunks)
        present = np.unique(seen)
        assert nodes.tolist() == (present * scale).tolist()
        assert labels.tolist() == (union[present] * scale).tolist()


def test_label_propagation_refuses_an_earlier_epoch_after_a_later_one():
    vertex = LabelPropagation()
    vertex.bind(Context(0, 1))
    vertex.on_recv(0, {"src": np.array([1, 2]), "dst": np.array([2, 1])}, rt.Timestamp(1, (0,)))
    vertex.on_notify(rt.Timestamp(1, (0,)))
    vertex.on_recv(1, {"node": np.array([2]), "label": np.array([1])}, rt.Timestamp(0, (3,)))
    with pytest.raises(ProgressError, match=r"'label-propagation' replica 0: .* feed the epochs one after another"):
        vertex.on_notify(rt.Timestamp(0, (3,)))
