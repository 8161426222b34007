"""Batches on the wire: what is packed comes back equal, and unpacking leaves the garbage collector as it found it."""

from __future__ import annotations

import gc
import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from raytide.physical.wire import OUT_OF_BAND_BYTES, pack, pack_records, packed_size, unpack, unpack_records

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


def test_a_large_buffer_travels_beside_the_blob_and_is_not_copied_back():
    array = np.arange(OUT_OF_BAND_BYTES // 8, dtype=np.int64)  # exactly the threshold
    packed = pack_records([("big", array), ("small", 1)])
    assert isinstance(packed, tuple), "the array's data went into the blob"
    blob, buffers = packed
    assert len(blob) < 1024 and packed_size(packed) == len(blob) + array.nbytes
    [(key, back), small] = unpack_records(packed)
    assert key == "big" and small == ("small", 1)
    assert np.array_equal(back, array) and np.shares_memory(back, array)


def test_a_buffer_below_the_threshold_stays_in_the_blob():
    array = np.arange(OUT_OF_BAND_BYTES - 1, dtype=np.uint8)
    payload, packed = pack([array])
    assert isinstance(payload, bytes) and packed_size(payload) == len(payload) > array.nbytes
    [back] = unpack(payload, packed)
    assert np.array_equal(back, array) and back.flags.writeable
