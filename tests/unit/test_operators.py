"""Built-in operator helpers that change how user functions are called: they must never change what they compute."""

from __future__ import annotations

import operator
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raytide.core.batches import to_records
from raytide.core.operators import KeyedMerge, flat_map_batch, is_identity
from raytide.progress.timestamps import Timestamp

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


class _Recording:
    """A vertex context that keeps what the vertex sends and the notifications it asks for."""

    vertex, replica, parallelism = "merge", 0, 1

    def __init__(self) -> None:
        self.sent: list[tuple[Timestamp, list]] = []
        self.notifications: list[Timestamp] = []

    def send_by(self, output: int, message: list, time: Timestamp) -> None:
        self.sent.append((time, message))

    def notify_at(self, time: Timestamp) -> None:
        self.notifications.append(time)


# Partial counts as a combiner sends them: each message a time and distinct keys.
partials = st.lists(st.tuples(st.integers(0, 2), st.dictionaries(st.sampled_from("abcdefg"), st.integers(1, 9), min_size=1)),
                    max_size=12)


@given(messages=partials)
def test_merging_partials_sums_each_keys_values_per_time_whatever_their_order_and_sizes(messages):
    merge, context = KeyedMerge(operator.add), _Recording()
    merge.bind(context)
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
    merge = KeyedMerge(operator.add)
    merge.bind(_Recording())
    with pytest.raises(ValueError, match="holds a key twice"):
        merge.on_recv(0, [("a", 1), ("a", 2)], Timestamp(3))
