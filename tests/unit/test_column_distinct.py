"""``distinct`` by columns (``core/column_distinct.py``) against brute force: random epochs of
insertions and deletions, half the rows moved to another core at random points; after each
epoch the changes sent add up to each present row once, and only the present rows are held."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

from raytide.core.column_distinct import DistinctRows
from raytide.errors import RecordError


def moved(rows: DistinctRows) -> DistinctRows:
    """The rows taken by the parity of their first field and put into a fresh core."""
    fresh = DistinctRows(rows.names)
    fresh.put(rows.take(lambda key: key % 2 == 0))
    fresh.put(rows.take(lambda key: True))
    assert rows.held == 0
    return fresh


def test_distinct_rows_equal_the_rows_present_after_every_epoch():
    rng = random.Random(1)
    for trial in range(200):
        rows, present, shown = DistinctRows(("a", "b")), Counter(), Counter()
        for epoch in range(6):
            updates = []
            for _ in range(rng.randint(1, 8)):
                if +present and rng.random() < 0.4:
                    record = rng.choice(sorted(present.elements()))
                    updates.append((record, -1))
                else:
                    record = (rng.randrange(3), rng.randrange(-2, 3))
                    updates.append((record, 1))
                present[record] += updates[-1][1]
            if rng.random() < 0.3:
                rows = moved(rows)
            changes = rows.apply({"a": np.array([r[0] for r, _ in updates]), "b": np.array([r[1] for r, _ in updates]),
                                  "diff": np.array([d for _, d in updates])})
            for a, b, diff in zip(*(changes[name].tolist() for name in ("a", "b", "diff"))) if changes else ():
                shown[(a, b)] += diff
            assert +shown == Counter(dict.fromkeys(+present, 1)) and rows.held == len(+present), (trial, epoch)


def test_distinct_rows_refuse_what_they_cannot_hold():
    rows = DistinctRows(("a",))
    with pytest.raises(RecordError, match="column 'a' holds <U1 values .* takes integer columns"):
        rows.apply({"a": np.array(["x"]), "diff": np.array([1])})
    with pytest.raises(RecordError, match=r"row \(3,\) would have -1 copies"):
        rows.apply({"a": np.array([3]), "diff": np.array([-1])})
