"""Which widths a rescale asks for: the vertices named, and those that must keep their width."""

from __future__ import annotations

import pytest

import raytide as rt
from raytide.actors.plan import compile_plan
from raytide.actors.rescale import new_widths, width_groups
from raytide.errors import ArgumentError, GraphError, RescaleError


def plan(chaining: bool = True):
    flow = rt.Dataflow("groups")
    words = flow.input("lines").flat_map(str.split, name="split")
    counted = words.count_by_key(lambda w: w, name="count")
    counted.map(lambda kv: kv, name="after").output("out")
    words.exchange(lambda w: len(w), name="by_length").filter(bool, name="kept").output("lengths")
    return compile_plan(flow, 2, chaining)


@pytest.mark.parametrize("chaining", [True, False])
def test_a_vertex_read_replica_by_replica_moves_with_the_one_it_reads(chaining):
    groups = width_groups(plan(chaining))
    assert groups["count"] == {"count", "after", "out"}
    assert groups["by_length"] == {"by_length", "kept", "lengths"}
    assert groups["split"] == {"split", "count.combine"}  # the combiner reads split over a pipeline
    assert groups["lines"] == {"lines"}  # an input has no keys: what follows it can leave it


def test_new_widths_expand_over_the_group_and_leave_the_rest():
    p = plan()
    widths = new_widths(p, {"after": 3})
    assert {name for name, width in widths.items() if width == 3} == {"count", "after", "out"}
    assert widths["split"] == widths["lines"] == 2


@pytest.mark.parametrize(("asked", "error", "message"), [
    ({"nope": 2}, GraphError, "no vertex 'nope'"),
    ({"lines": 3}, RescaleError, "input 'lines' cannot change its parallelism"),
    ({"count": 3, "out": 4}, RescaleError, "must keep one width"),
    ({"count": 0}, ArgumentError, "parallelism of vertex 'count'"),
])
def test_a_rescale_that_cannot_be_made_is_refused_and_says_why(asked, error, message):
    with pytest.raises(error, match=message):
        new_widths(plan(), asked)
