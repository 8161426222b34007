"""Which widths a rescale asks for: the vertices named, and those that must keep their width."""

from __future__ import annotations

import pytest

import raytide as rt
from raytide.errors import ArgumentError, GraphError, RescaleError
from raytide.physical.plan import compile_plan
from raytide.physical.protocol import ReplicaKey
from raytide.rescale.layout import check_splittable, hosted_positions
from raytide.rescale.widths import new_widths, width_groups


def groups_flow() -> rt.Dataflow:
    flow = rt.Dataflow("groups")
    words = flow.input("lines").flat_map(str.split, name="split")
    counted = words.count_by_key(lambda w: w, name="count")
    counted.map(lambda kv: kv, name="after").output("out")
    words.exchange(lambda w: len(w), name="by_length").filter(bool, name="kept").output("lengths")
    return flow


def plan(chaining: bool = True):
    return compile_plan(groups_flow(), 2, chaining)


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


class Tally(rt.Vertex):
    """Keeps state (it overrides ``snapshot``) but cannot split it by key."""

    def __init__(self) -> None:
        self.total = 0

    def on_recv(self, edge, message, time) -> None:
        self.total += len(message)

    def snapshot(self):
        return self.total

    def restore(self, state) -> None:
        self.total = state


def test_a_vertex_that_cannot_split_its_state_is_refused_before_the_cut():
    flow = rt.Dataflow("unsplittable")
    flow.input("lines").unary(Tally, exchange=len, name="tally").output("out")
    before = compile_plan(flow, 1)
    old = {name: before.width(name) for name in before.vertices}
    with pytest.raises(RescaleError, match="vertex 'tally' keeps state .* take_keys/put_keys"):
        check_splittable(compile_plan(flow, 1, widths=new_widths(before, {"tally": 2})), old)
    check_splittable(compile_plan(flow, 1, widths=new_widths(before, {"lines": 1})), old)  # nothing changes
    p = plan()
    check_splittable(compile_plan(groups_flow(), 2, widths=new_widths(p, {"count": 3})), {n: 2 for n in p.vertices})


def test_the_inputs_positions_follow_them_to_the_replicas_that_host_them_after_a_rescale():
    p = plan()
    after = compile_plan(groups_flow(), 2, widths=new_widths(p, {"split": 3}))
    moved = hosted_positions(after, {ReplicaKey(p.chain_of("lines").name, r): {"lines": 10 + r} for r in range(2)})
    assert moved == {ReplicaKey(after.chain_of("lines").name, r): {"lines": 10 + r} for r in range(2)}
