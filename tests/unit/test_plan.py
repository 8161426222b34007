"""Chaining: which vertices share an actor."""

from __future__ import annotations

import raytide as rt
from raytide.physical.plan import compile_plan


def chains(flow: rt.Dataflow) -> set[tuple[str, ...]]:
    return {c.vertices for c in compile_plan(flow, 2).chains}


def test_a_vertex_with_two_outputs_keeps_both_single_consumers_including_the_loop_feedback():
    flow = rt.Dataflow("tree")
    loop = flow.loop("loop")
    back = loop.feedback(name="back")
    rounds, reports = flow.vertex(rt.Vertex, [loop.enter(flow.input("x"), name="enter"), back.stream], outputs=2,
                                  exchange=[None, lambda r: r], name="body")
    back.connect(rounds)
    loop.leave(reports, name="leave").output("out")
    assert chains(flow) == {("x", "enter"), ("body", "leave", "out", "back")}


def test_a_stream_read_twice_is_not_fused_into_either_reader():
    flow = rt.Dataflow("fanout")
    s = flow.input("x").map(str, name="m")
    s.map(len, name="a").output("oa")
    s.map(len, name="b").output("ob")
    assert chains(flow) == {("x", "m"), ("a", "oa"), ("b", "ob")}
