"""Bad arguments are refused before anything runs, with an error naming the argument, the
value and what it must be (no Ray needed: the checks are pure)."""

from __future__ import annotations

import re
import threading

import numpy as np
import pytest

import raytide as rt
from raytide.core.arguments import non_negative, positive_int
from raytide.core.batches import checked_batch, not_a_batch
from raytide.driver.inputs import pushed_batch
from raytide.errors import ArgumentError, RecordError
from raytide.physical.pickled import first_unpicklable
from raytide.physical.plan import compile_plan


@pytest.mark.parametrize("value", [1, 7, np.int64(3), np.uint8(2)])
def test_positive_integers_are_taken_as_ints(value):
    assert positive_int(value, "x") == int(value) and type(positive_int(value, "x")) is int


@pytest.mark.parametrize("value", [0, -1, 2.5, "2", None, True, np.float64(2.0)])
def test_anything_else_is_refused_naming_the_argument_and_the_value(value):
    with pytest.raises(ArgumentError, match=f"batch_size must be a positive integer, not {re.escape(repr(value))}"):
        positive_int(value, "batch_size")


def test_an_argument_error_is_a_value_error_too():
    with pytest.raises(ValueError):
        non_negative(-0.5, "num_cpus")
    assert non_negative(0, "num_cpus") == 0.0 and non_negative(np.float32(0.5), "num_cpus") == 0.5
    for bad in (float("nan"), "1", True, None):
        with pytest.raises(ArgumentError, match="num_cpus must be a number of at least 0"):
            non_negative(bad, "num_cpus")


def _flow(parallelism=None, map_parallelism=None):
    flow = rt.Dataflow("args", parallelism=parallelism)
    flow.input("numbers").map(abs, name="absolute", parallelism=map_parallelism).output("out")
    return flow


@pytest.mark.parametrize("bad", [0, -2, 1.5, "3"])
def test_a_parallelism_that_is_not_a_positive_integer_is_refused_wherever_it_is_given(bad):
    with pytest.raises(ArgumentError, match="rt.run's parallelism must be a positive integer"):
        compile_plan(_flow(), bad)
    with pytest.raises(ArgumentError, match="dataflow 'args''s parallelism must be a positive integer"):
        compile_plan(_flow(parallelism=bad))
    with pytest.raises(ArgumentError, match="vertex 'absolute''s parallelism must be a positive integer"):
        compile_plan(_flow(map_parallelism=bad))


def test_valid_parallelisms_still_compile_with_the_most_specific_winning():
    plan = compile_plan(_flow(parallelism=2, map_parallelism=np.int64(3)), None, chaining=False)
    assert (plan.width("numbers"), plan.width("absolute")) == (2, 3)
    assert compile_plan(_flow(parallelism=2), 4).width("numbers") == 4


@pytest.mark.parametrize("batch", [[1, 2], np.arange(3), {"a": [1, 2], "b": np.zeros(2)}, {}])
def test_batches_are_batches(batch):
    assert not_a_batch(batch) is None and checked_batch(batch, "f") is batch


@pytest.mark.parametrize(("value", "described"), [
    ("abc", "a builtins.str"), (None, "None"), ((1, 2), "a builtins.tuple"), (b"x", "a builtins.bytes"),
    (iter([1]), "a builtins.list_iterator"), ({"a": [1, 2], "b": [1]}, "columns of different lengths"),
    ({"a": 1}, "not all columns"), ({"a": "xy"}, "not all columns"),
])
def test_what_is_not_a_batch_is_named(value, described):
    assert described in not_a_batch(value)
    with pytest.raises(TypeError, match=f"the map_batches function returned .*{described}.*a batch is a list of records"):
        checked_batch(value, "the map_batches function")


def test_a_push_takes_any_iterable_of_records_but_not_a_string_or_none():
    assert pushed_batch("words", 0, ("a", "b")) == ["a", "b"]
    assert pushed_batch("words", 0, range(3)) == [0, 1, 2]
    assert pushed_batch("words", 0, (w for w in "ab")) == ["a", "b"]
    for bad, described in [("hello", "str"), (None, "None"), (b"hi", "bytes"), (42, "int")]:
        with pytest.raises(RecordError, match=f"input 'words' epoch 4: push got .*{described}, not records"):
            pushed_batch("words", 4, bad)


def test_the_first_record_that_does_not_pickle_is_found():
    lock = threading.Lock()
    assert first_unpicklable([1, "a", (2, lock), lock]) == (2, (2, lock))
    assert first_unpicklable([1, 2])[0] == -1
