"""The exactly-once counter the Ray fault tests and ``bench chaos`` share (tests/delivery.py)."""

from __future__ import annotations

from collections import Counter

from tests.delivery import Delivery, count_delivery, count_outputs

EXPECTED = {0: Counter({"a": 2, "b": 1}), 2: Counter({"c": 1})}


def test_every_record_once_in_order_is_exact():
    assert count_delivery(EXPECTED, [(0, ["b", "a", "a"]), (1, []), (2, ["c"])]).exact


def test_an_epoch_handed_over_twice_counts_its_records_as_duplicated():
    assert count_delivery(EXPECTED, [(0, ["a", "a", "b"]), (2, ["c"]), (2, ["c"])]) == Delivery(duplicated=1)


def test_lost_stray_and_reordered_records_are_counted_apart():
    got = count_delivery(EXPECTED, [(2, ["c", "z"]), (0, ["a"])])
    assert got == Delivery(lost=2, unexpected=1, out_of_order=1)


def test_an_output_never_read_lost_all_its_records():
    assert count_outputs({"out": EXPECTED}, {}) == {"out": Delivery(lost=4)}
