"""Snapshot and restore of every built-in stateful vertex: a vertex restored from a snapshot
taken anywhere in a run, fed the rest, computes what plain Python computes from all of it.

The snapshot goes through pickle, as saved state would, and the fresh vertex takes over the
pending notifications, which the framework (not the vertex) keeps.
"""

from __future__ import annotations

import operator
import pickle
from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.core.operators import EpochJoin, KeyedCount, KeyedMerge, KeyedReduce, StatefulMap, flat_map_batch
from raytide.core.split_text import TALLY_MIN_CHARS
from raytide.core.vertex import Vertex
from raytide.progress.timestamps import Timestamp
from tests.unit.harness import RecordingContext, bound, complete

#: Per epoch, the messages a vertex receives: ``(input port, batch)``.
Epochs = list[list[tuple[int, Any]]]


def run(factory: Callable[[], Vertex], epochs: Epochs, cut: int | None) -> dict[int, list]:
    """Feed ``epochs`` to a vertex, completing each epoch after its messages; at message number
    ``cut`` (if any) the vertex is snapshotted and replaced by a fresh one restored from it."""
    vertex, context = bound(factory())
    position = 0
    for epoch, messages in enumerate(epochs):
        for port, batch in messages:
            if position == cut:
                vertex, context = restored(factory, vertex, context)
            vertex.on_recv(port, batch, Timestamp(epoch))
            position += 1
        complete(vertex, context, Timestamp(epoch))
    return context.pairs_by_epoch()


def restored(factory: Callable[[], Vertex], old: Vertex, context: RecordingContext) -> tuple[Vertex, RecordingContext]:
    state = pickle.loads(pickle.dumps(old.snapshot()))
    fresh, following = bound(factory(), RecordingContext(context.notifications))
    following.sent = context.sent
    fresh.restore(state)
    return fresh, following


def cuts(epochs: Epochs) -> st.SearchStrategy[int]:
    """Any point between two messages, the very start included."""
    return st.integers(0, max(0, sum(map(len, epochs)) - 1))


def summed(result: dict[int, list]) -> dict[int, dict]:
    """``(key, value)`` partials added up per epoch and key."""
    out: dict[int, Counter] = {}
    for epoch, pairs in result.items():
        for key, value in pairs:
            out.setdefault(epoch, Counter())[key] += value
    return {epoch: dict(counter) for epoch, counter in out.items()}


def multisets(result: dict[int, list]) -> dict[int, Counter]:
    return {epoch: Counter(records) for epoch, records in result.items() if records}


keys = st.sampled_from("abcde")
pairs = st.lists(st.tuples(keys, st.integers(-3, 9)), min_size=1, max_size=5)
epochs_of_pairs = st.lists(st.lists(pairs.map(lambda batch: (0, batch)), max_size=4), min_size=1, max_size=4)


# --------------------------------------------------------------------------- stateful_map


def running_total(state: int | None, record: tuple[str, int]) -> tuple[int | None, int]:
    """The key's total so far; a total of 0 forgets the key (returns None as the new state)."""
    total = (state or 0) + record[1]
    return (total or None), total


@given(st.data(), epochs_of_pairs)
def test_stateful_map_restored_anywhere_keeps_each_keys_total_across_epochs(data, epochs):
    cut = data.draw(cuts(epochs))
    expected: dict[int, Counter] = {}
    totals: Counter = Counter()
    for epoch, messages in enumerate(epochs):
        for _, batch in messages:
            for key, value in batch:
                totals[key] += value
                expected.setdefault(epoch, Counter())[(key, totals[key])] += 1
    assert multisets(run(lambda: StatefulMap(operator.itemgetter(0), running_total), epochs, cut)) == expected


# --------------------------------------------------------------------------- join


@given(st.data(), st.lists(st.lists(st.tuples(st.integers(0, 1), pairs), max_size=5), min_size=1, max_size=3))
def test_a_join_restored_anywhere_matches_every_pair_of_its_epoch(data, epochs):
    cut = data.draw(cuts(epochs))
    expected: dict[int, Counter] = {}
    for epoch, messages in enumerate(epochs):
        left = [r for port, batch in messages if port == 0 for r in batch]
        right = [r for port, batch in messages if port == 1 for r in batch]
        matches = Counter((a[0], a, b) for a in left for b in right if a[0] == b[0])
        if matches:
            expected[epoch] = matches
    key = operator.itemgetter(0)
    assert multisets(run(lambda: EpochJoin(key, key), epochs, cut)) == expected


# --------------------------------------------------------------------------- per-epoch aggregations


def reference_sums(epochs: Epochs) -> dict[int, dict]:
    return summed({e: [pair for _, batch in messages for pair in batch] for e, messages in enumerate(epochs)})


@given(st.data(), epochs_of_pairs, st.sampled_from([None, 2]))
def test_a_keyed_reduce_restored_anywhere_sums_each_key_per_epoch(data, epochs, max_keys):
    cut = data.draw(cuts(epochs))
    factory = lambda: KeyedReduce(operator.itemgetter(0), operator.itemgetter(1), operator.add, max_keys)  # noqa: E731
    assert summed(run(factory, epochs, cut)) == reference_sums(epochs)


# Partials as a combiner sends them: each key at most once per message.
partial_messages = st.dictionaries(keys, st.integers(1, 9), min_size=1).map(lambda d: (0, list(d.items())))


@given(st.data(), st.lists(st.lists(partial_messages, max_size=4), min_size=1, max_size=4))
def test_a_merge_restored_anywhere_adds_up_the_partials_of_each_epoch(data, epochs):
    cut = data.draw(cuts(epochs))
    assert summed(run(lambda: KeyedMerge(operator.add), epochs, cut)) == reference_sums(epochs)


# Word batches as flat_map(str.split) makes them: long texts are counted by the Arrow tally,
# which the snapshot must fold into the counts it saves.
LONG = TALLY_MIN_CHARS // 6 + 1  # copies of a line of at least 6 characters and a space
word_batches = st.one_of(
    st.lists(st.sampled_from(["ox", "yak", "emu"]), min_size=1, max_size=5),
    st.tuples(st.sampled_from(["ox yak", "emu ox ox"]), st.integers(LONG, 2 * LONG)).map(
        lambda line_times: flat_map_batch(str.split)([line_times[0]] * line_times[1])),
)


@settings(deadline=None)  # the first long batch imports pyarrow
@given(st.data(), st.lists(st.lists(word_batches.map(lambda batch: (0, batch)), max_size=4), min_size=1, max_size=3),
       st.sampled_from([None, 2]))
def test_a_word_count_restored_anywhere_counts_every_word_of_its_epoch(data, epochs, max_keys):
    cut = data.draw(cuts(epochs))
    expected: dict[int, dict] = {}
    for epoch, messages in enumerate(epochs):
        words = Counter(w for _, batch in messages for w in (batch if isinstance(batch, list) else batch.records()))
        if words:
            expected[epoch] = dict(words)
    assert summed(run(lambda: KeyedCount(lambda w: w, max_keys), epochs, cut)) == expected


def test_long_word_batches_are_counted_by_the_tally():
    """The case above reaches the tally that its snapshot must fold in."""
    counter, context = bound(KeyedCount(lambda w: w))
    counter.on_recv(0, flat_map_batch(str.split)(["ox yak"] * LONG), Timestamp(0))
    assert counter.tallies and not counter.state[Timestamp(0)], "held in the tally, not yet in the counts"
