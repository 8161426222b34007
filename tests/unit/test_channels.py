"""Exchange routing against a brute-force oracle: every record once, to the owner of its key group, in order."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.core.keygroups import KeyGroupAssignment, key_group
from raytide.core.routing import ExchangeRouter

keys = st.one_of(st.text(max_size=4), st.integers(-50, 50), st.tuples(st.text(max_size=2), st.integers(0, 3)))
records = st.lists(st.tuples(keys, st.integers()), max_size=60)


def oracle(batch: list, table: KeyGroupAssignment) -> dict[int, list]:
    """Each replica's records, in batch order, computed one record at a time."""
    parts: dict[int, list] = {}
    for record in batch:
        parts.setdefault(table.owners[key_group(record[0], table.key_groups)], []).append(record)
    return parts


@settings(max_examples=150, deadline=None)
@given(batches=st.lists(records, min_size=1, max_size=3), width=st.integers(1, 5), groups=st.sampled_from([1, 7, 128]))
def test_route_sends_each_record_once_to_the_owner_of_its_key_group_in_batch_order(batches, width, groups):
    table = KeyGroupAssignment.contiguous(min(width, groups), groups)
    router = ExchangeRouter(lambda record: record[0], table.parallelism, groups, table)
    for batch in batches + batches:  # the second pass routes keys the router has seen before
        routed = router.route(batch)
        assert [replica for replica, part in routed if not part] == [], "no empty messages"
        assert len({replica for replica, _ in routed}) == len(routed), "one message per destination"
        assert dict(routed) == oracle(batch, table)


@settings(max_examples=50, deadline=None)
@given(batch=records, moved=st.sets(st.integers(0, 15)))
def test_a_swapped_table_routes_by_the_new_owners_even_for_keys_seen_before(batch, moved):
    old = KeyGroupAssignment.contiguous(2, 16)
    new = KeyGroupAssignment(tuple(1 - owner if group in moved else owner for group, owner in enumerate(old.owners)), 2)
    router = ExchangeRouter(lambda record: record[0], 2, 16, old)
    assert dict(router.route(batch)) == oracle(batch, old)
    router.swap_table(new)
    assert dict(router.route(batch)) == oracle(batch, new)


def test_records_and_columns_keyed_by_one_column_land_on_the_same_replicas():
    ids = np.arange(-40, 60, 3)
    router = ExchangeRouter("id", 3)
    as_records = {replica: [r["id"] for r in part] for replica, part in router.route([{"id": int(i)} for i in ids])}
    as_columns = {replica: part["id"].tolist() for replica, part in router.route({"id": ids})}
    assert as_records == as_columns and sorted(sum(as_records.values(), [])) == ids.tolist()


def test_an_unhashable_key_is_a_type_error_that_names_the_type():
    router = ExchangeRouter(lambda record: record, 2)
    with pytest.raises(TypeError, match="list"):
        router.route([[1, 2]])
