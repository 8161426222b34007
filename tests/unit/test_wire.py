"""Batches on the wire: what is packed comes back equal, and unpacking leaves the garbage collector as it found it."""

from __future__ import annotations

import gc
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from raytide.actors.wire import pack, unpack, unpack_records

records = st.lists(st.one_of(st.tuples(st.text(), st.integers()), st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
                             st.none(), st.floats(allow_nan=False)), max_size=30)


@given(batch=records)
def test_a_list_of_records_comes_back_equal(batch):
    payload, packed = pack(batch)
    assert packed and isinstance(payload, bytes)
    assert unpack(payload, packed) == batch


def test_columnar_batches_travel_as_they_are():
    columns = {"id": np.arange(5)}
    assert pack(columns) == (columns, False)
    assert unpack(columns, False) is columns


@pytest.mark.parametrize("enabled", [True, False])
def test_unpacking_leaves_the_collector_as_it_was_even_when_unpickling_fails(enabled):
    blob, _ = pack([("a", 1)] * 1000)
    was = gc.isenabled()
    (gc.enable if enabled else gc.disable)()
    try:
        assert unpack_records(blob) == [("a", 1)] * 1000
        assert gc.isenabled() is enabled
        with pytest.raises(pickle.UnpicklingError):
            unpack_records(b"not a pickle")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_objects_unpacked_with_the_collector_paused_are_still_collected():
    class Node:
        pass

    node = Node()
    node.self = node  # a reference cycle: only the cyclic collector frees it
    blob, _ = pack([node])
    gc.collect()
    unpacked = unpack_records(blob)
    count = sum(isinstance(o, Node) for o in gc.get_objects())
    del unpacked
    gc.collect()
    assert sum(isinstance(o, Node) for o in gc.get_objects()) == count - 1
