"""Chaining: which vertices share an actor."""

from __future__ import annotations

import raytide as rt
from raytide.engine.outbox import readers_own
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


def test_a_stream_read_twice_is_fused_into_each_reader_of_its_width():
    """Each pipelined reader of the same width joins the writer's chain (a process fewer per
    reader and replica); a reader through an exchange, or of another width, does not."""
    flow = rt.Dataflow("fanout")
    s = flow.input("x").map(str, name="m")
    s.map(len, name="a").output("oa")
    s.map(len, name="b").output("ob")
    s.map(len, name="c", parallelism=3).output("oc")
    s.unary(rt.Vertex, exchange=len, name="d").output("od")
    assert chains(flow) == {("x", "m", "a", "oa", "b", "ob"), ("c",), ("oc",), ("d", "od")}


def test_a_fused_reader_of_a_stream_read_twice_gets_a_copy_unless_it_reads_last_of_fused_readers_alone():
    """:func:`readers_own`: the batch itself goes to the routers, or, if every reader is fused,
    to the last; every other fused reader gets a copy."""
    router = object()
    assert readers_own([None]) == [False] and readers_own([router, router]) == [False, False]
    assert readers_own([None, None, None]) == [True, True, False]
    assert readers_own([None, router, None]) == [True, False, True]
