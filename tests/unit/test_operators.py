"""Built-in operator helpers that change how user functions are called: they must never change what they compute."""

from __future__ import annotations

import operator
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raytide.core.batches import to_records
from raytide.core.operators import KeyedMerge, KeyedReduce, flat_map_batch, is_identity
from raytide.progress.timestamps import Timestamp
from tests.unit.harness import bound, complete

Y = "a global"
SAMPLES = ["w", 0, (1, 2), None, ["list"]]


def expressions() -> st.SearchStrategy[str]:
    """Small Python expressions over the parameter ``x``, a default ``d`` and the global ``Y``."""
    atoms = st.sampled_from(["x", "d", "Y", "0", "(x)", "x[0]", "None"])
    return st.recursive(atoms, lambda inner: st.one_of(
        st.builds("({} if {} else {})".format, inner, inner, inner),
        st.builds("[{}][0]".format, inner),
        st.builds("({}, {})[0]".format, inner, inner),
    ), max_leaves=4)


@given(body=expressions(), params=st.sampled_from(["x", "x, d=1", "x, *rest", "x, **kw", "x, *, d=1", "*x"]))
def test_a_function_taken_for_the_identity_returns_its_argument_itself(body, params):
    fn = eval(f"lambda {params}: {body}", {"Y": Y})
    if is_identity(fn):
        for value in SAMPLES:
            assert fn(value) is value


@pytest.mark.parametrize("source", ["lambda w: w", "lambda record: (record)", "def f(x):\n    return x"])
def test_plain_identity_functions_are_recognised(source):
    namespace: dict = {}
    exec(source if source.startswith("def") else f"f = {source}", namespace)
    assert is_identity(namespace["f"])


@pytest.mark.parametrize("fn", [str, str.lower, lambda w: w.lower(), lambda w, d=0: w, lambda *a: a[0], print])
def test_anything_else_is_not(fn):
    assert not is_identity(fn)


#: Every character str.split() treats as whitespace, some of which only it does (\x1c-\x1f).
WHITESPACE = [chr(c) for c in range(0x110000) if chr(c).isspace()]
texts = st.text(alphabet=st.one_of(st.sampled_from(WHITESPACE), st.sampled_from("ab\u00e9\u4e2d"),
                                   st.characters(blacklist_categories=("Cs",))), max_size=12)


class Line(str):
    """A str subclass: records need not be exact strs."""


def per_record_split(records: list) -> list:
    return [word for record in records for word in str.split(record)]


@given(st.lists(st.one_of(texts, texts.map(Line)), max_size=20))
def test_flat_map_of_str_split_gives_each_records_words_in_order(records):
    assert to_records(flat_map_batch(str.split)(records)) == per_record_split(records)


@pytest.mark.parametrize("bad", [None, b"bytes", 3])
def test_flat_map_of_str_split_on_a_record_that_is_not_a_str_raises_what_str_split_raises(bad):
    records = ["a b", bad, "c"]
    with pytest.raises(TypeError) as expected:
        per_record_split(records)
    with pytest.raises(TypeError) as got:
        flat_map_batch(str.split)(records)
    assert str(got.value) == str(expected.value)


@given(st.lists(texts, max_size=10))
def test_flat_map_of_any_other_function_calls_it_per_record(records):
    assert flat_map_batch(lambda r: r.split(" "))(records) == [w for r in records for w in r.split(" ")]


# Partial counts as a combiner sends them: each message a time and distinct keys.
partials = st.lists(st.tuples(st.integers(0, 2), st.dictionaries(st.sampled_from("abcdefg"), st.integers(1, 9), min_size=1)),
                    max_size=12)


@given(messages=partials)
def test_merging_partials_sums_each_keys_values_per_time_whatever_their_order_and_sizes(messages):
    merge, context = bound(KeyedMerge(operator.add))
    expected: dict[int, Counter] = {}
    for epoch, partial in messages:
        merge.on_recv(0, list(partial.items()), Timestamp(epoch))
        expected.setdefault(epoch, Counter()).update(partial)
    assert sorted(context.notifications, key=tuple) == [Timestamp(e) for e in sorted(expected)], "one notification per time"
    for time in context.notifications:
        merge.on_notify(time)
    assert {time.epoch: dict(pairs) for time, pairs in context.sent} == {e: dict(c) for e, c in expected.items()}
    assert all(len(pairs) == len(dict(pairs)) for _, pairs in context.sent), "each key once per time"


def test_a_partial_holding_a_key_twice_is_refused_not_silently_merged():
    merge, _ = bound(KeyedMerge(operator.add))
    with pytest.raises(ValueError, match="holds a key twice"):
        merge.on_recv(0, [("a", 1), ("a", 2)], Timestamp(3))


# Records of a per-epoch reduction, already cut into the batches the combiner receives, in
# arrival order: ``(epoch, [(key, value), ...])``. Epochs may come back (another reader's).
reduction_batches = st.lists(
    st.tuples(st.integers(0, 2), st.lists(st.tuples(st.sampled_from("abcdefgh"), st.integers(-5, 9)), min_size=1, max_size=6)),
    max_size=10,
)


@given(batches=reduction_batches, max_keys=st.integers(1, 4))
def test_a_combiner_with_few_keys_ships_early_and_the_merged_partials_are_each_keys_sum(batches, max_keys):
    combiner, context = bound(KeyedReduce(lambda kv: kv[0], lambda kv: kv[1], operator.add, max_keys))
    for epoch, records in batches:
        combiner.on_recv(0, records, Timestamp(epoch))
        assert all(len(held) < max_keys for held in combiner.state.values()), "never holds max_keys keys after a batch"
    complete(combiner, context)
    merged: dict[int, Counter] = {}
    for time, pairs in context.sent:
        assert len(pairs) == len(dict(pairs)), "a partial holds each key once"
        merged.setdefault(time.epoch, Counter()).update(dict(pairs))
    expected: dict[int, Counter] = {}
    for epoch, records in batches:
        for key, value in records:
            expected.setdefault(epoch, Counter())[key] += value
    assert {e: dict(c) for e, c in merged.items()} == {e: dict(c) for e, c in expected.items()}


def test_a_combiner_holding_more_than_max_keys_keys_sends_them_before_its_time_completes():
    combiner, context = bound(KeyedReduce(lambda kv: kv[0], lambda kv: kv[1], operator.add, max_keys=3))
    combiner.on_recv(0, [("a", 1), ("b", 2), ("a", 3)], Timestamp(0))
    assert context.sent == [], "two keys: nothing to ship yet"
    combiner.on_recv(0, [("c", 4), ("a", 5)], Timestamp(0))
    assert context.sent == [(Timestamp(0), [("a", 9), ("b", 2), ("c", 4)])]
    combiner.on_recv(0, [("a", 10)], Timestamp(0))
    complete(combiner, context)
    assert context.sent[1:] == [(Timestamp(0), [("a", 10)])], "the rest at the notification, not added twice"
