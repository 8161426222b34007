"""The dataflow builder: stable vertex ids, the restore check, immutable vertices and the
builder's errors, each checked for what its message must name."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

import raytide as rt
from raytide.core.dataflow import LogicalVertex
from raytide.progress import Timestamp

ROOT = Path(__file__).resolve().parents[2]

# -- stable ids ----------------------------------------------------------------------


def build_wordcount() -> rt.Dataflow:
    """A program with a fan-out, siblings of one label, a join, a loop and a probe."""
    flow = rt.Dataflow("wordcount")
    words = flow.input("lines").flat_map(str.split)
    words.count_by_key(lambda w: w).output("counts")
    long, short = words.filter(lambda w: len(w) > 3), words.filter(lambda w: len(w) <= 3)
    long.join(short, len).probe()
    words.map(len).iterate(lambda s: s.map(lambda n: n // 2).filter(bool)).output("halvings")
    return flow


def test_default_ids_are_the_same_in_every_process():
    """No Python hash() (salted per process) and no id(): other hash seeds give the same ids."""
    here = build_wordcount().vertex_ids()
    script = "from tests.unit.test_dataflow import build_wordcount; print(build_wordcount().vertex_ids())"
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True,
                             check=True)
        assert out.stdout.strip() == repr(here)


def test_default_ids_are_readable_and_distinct_among_siblings():
    flow = rt.Dataflow("f")
    s = flow.input("x")
    a, b = s.map(str), s.map(repr)
    loop = flow.loop()
    inside = loop.enter(s)
    assert a.vertex != b.vertex
    assert a.vertex.startswith("map_") and b.vertex.startswith("map_")
    assert inside.vertex.startswith(f"{loop.name}.enter_") and loop.name.startswith("loop_")
    assert a.vertex == build_siblings()[0] and b.vertex == build_siblings()[1]


def build_siblings() -> list[str]:
    flow = rt.Dataflow("f")
    s = flow.input("x")
    return [s.map(str).vertex, s.map(repr).vertex]


#: One step of a random program: (operator, index of the stream it reads, index of a second stream).
Step = tuple[str, int, int]
OPERATORS: dict[str, Callable[[rt.Stream, rt.Stream], rt.Stream]] = {
    "map": lambda s, _: s.map(str),
    "filter": lambda s, _: s.filter(bool),
    "exchange": lambda s, _: s.exchange(hash),
    "count_by_key": lambda s, _: s.count_by_key(str),
    "concat": lambda s, t: s.concat(t),
    "join": lambda s, t: s.join(t, str),
    "iterate": lambda s, _: s.iterate(lambda r: r.filter(bool), max_iterations=3),
}
steps = st.tuples(st.sampled_from(sorted(OPERATORS)), st.integers(0, 30), st.integers(0, 30))


Placed = tuple[str, tuple[str, ...]]  # (operator, ids of the streams it read)


def build(program: list[Step], unread: Step | None = None, at: int = 0) -> tuple[rt.Dataflow, list[Placed]]:
    """Build ``program``, and ``unread`` before step ``at`` with an output no later step reads.

    Returns the dataflow and what each step (``unread`` included) was placed on.
    """
    flow = rt.Dataflow("random")
    streams, placed = [flow.input("a"), flow.input("b")], []

    def place(step: Step) -> rt.Stream:
        op, i, j = step
        s, t = streams[i % len(streams)], streams[j % len(streams)]
        placed.append((op, (s.vertex, t.vertex) if op in ("concat", "join") else (s.vertex,)))
        return OPERATORS[op](s, t)

    for index, step in enumerate(program + [None]):
        if unread is not None and index == at:
            place(unread)
        if step is not None:
            streams.append(place(step))
    return flow, placed


@given(st.lists(steps, max_size=12), steps, st.integers(0, 12))
def test_adding_an_unrelated_operator_renames_no_existing_vertex(program, extra, where):
    """Insert an operator anywhere, reading anything, that nothing reads: every old id stays.

    The one exception is by design: a sibling (same operator, same inputs) built *later*
    than the inserted one shifts its rank, so the inserted operator is not such a sibling.
    """
    where = min(where, len(program))
    before, placed = build(program)
    after, placed_after = build(program, unread=extra, at=where)
    assume(placed_after[where] not in placed[where:])
    assert set(before.vertex_ids()) <= set(after.vertex_ids())
    assert len(after.vertex_ids()) > len(before.vertex_ids())


def test_a_nested_loop_keeps_its_id_when_a_loop_is_added_elsewhere():
    """Loops read no stream: the loop they are in tells nested ones apart from the others."""

    def program(extra_loop: bool) -> list[str]:
        flow = rt.Dataflow("nested")
        if extra_loop:
            flow.loop().enter(flow.input("y")).filter(bool)
        outer = flow.loop("outer")
        inner = outer.loop()
        inner.enter(outer.enter(flow.input("x"))).map(str)
        return flow.vertex_ids()

    assert set(program(extra_loop=False)) <= set(program(extra_loop=True))


#: Every way to place a vertex that takes ``name=``, and the ids it then has.
NAMED: dict[str, Callable[[rt.Dataflow, rt.Stream, str], object]] = {
    "map": lambda f, s, n: s.map(str, name=n),
    "flat_map": lambda f, s, n: s.flat_map(list, name=n),
    "filter": lambda f, s, n: s.filter(bool, name=n),
    "map_batches": lambda f, s, n: s.map_batches(len, name=n),
    "inspect": lambda f, s, n: s.inspect(print, name=n),
    "exchange": lambda f, s, n: s.exchange(hash, name=n),
    "broadcast": lambda f, s, n: s.broadcast(name=n),
    "concat": lambda f, s, n: s.concat(s, name=n),
    "count_by_key": lambda f, s, n: s.count_by_key(str, name=n),
    "reduce_by_key": lambda f, s, n: s.reduce_by_key(str, max, name=n),
    "stateful_map": lambda f, s, n: s.stateful_map(str, lambda st_, r: (st_, r), name=n),
    "join": lambda f, s, n: s.join(s, str, name=n),
    "unary": lambda f, s, n: s.unary(rt.Vertex, name=n),
    "vertex": lambda f, s, n: f.vertex(rt.Vertex, [s, s], 2, name=n),
    "probe": lambda f, s, n: s.probe(n),
    "output": lambda f, s, n: s.output(n),
    "input": lambda f, s, n: f.input(n),
    "enter": lambda f, s, n: f.loop().enter(s, name=n),
    "leave": lambda f, s, n: _round_trip(f.loop(), s, n),
    "feedback": lambda f, s, n: f.loop().feedback(name=n),
}


def _round_trip(loop: rt.Loop, stream: rt.Stream, name: str) -> rt.Stream:
    return loop.leave(loop.enter(stream), name=name)


@pytest.mark.parametrize("kind", sorted(NAMED))
def test_every_operator_takes_its_id_from_name_and_refuses_a_duplicate(kind):
    flow = rt.Dataflow("named")
    s = flow.input("x")
    NAMED[kind](flow, s, "mine")
    assert "mine" in flow.vertex_ids()
    if kind in ("count_by_key", "reduce_by_key"):
        assert "mine.combine" in flow.vertex_ids()
    with pytest.raises(rt.GraphError, match=r"dataflow 'named' already has a vertex named 'mine(\.combine)?'"):
        NAMED[kind](flow, s, "mine")


@pytest.mark.parametrize("make", [
    lambda flow, outer, s: flow.loop("L"),
    lambda flow, outer, s: outer.loop("L"),
    lambda flow, outer, s: s.iterate(lambda r: r, name="L"),
])
def test_loop_names_are_unique_as_they_prefix_ids(make):
    flow = rt.Dataflow("loops")
    outer, s = flow.loop("outer"), flow.input("x")
    make(flow, outer, s)
    with pytest.raises(rt.GraphError, match="dataflow 'loops' already has a loop named 'L'"):
        make(flow, outer, s)


def test_named_iterate_names_its_loop_vertices_after_it():
    flow = rt.Dataflow("it")
    flow.input("x").iterate(lambda r: r.filter(bool), name="halve").output("out")
    loop_vertices = [v for v in flow.vertex_ids() if v.startswith("halve.")]
    assert sorted(v.split("_")[0] for v in loop_vertices) == ["halve.enter", "halve.feedback", "halve.leave"]


# -- restoring into a dataflow -------------------------------------------------------

names = st.sets(st.sampled_from(["a", "b", "c", "d", "e"]))


@given(names, names)
def test_restore_ids_must_match_exactly_and_the_error_names_the_difference(saved, current):
    flow = rt.Dataflow("job")
    for name in sorted(current):
        flow.input(name)
    if saved == current:
        flow.check_restore_ids(saved)
        return
    with pytest.raises(rt.GraphError) as error:
        flow.check_restore_ids(iter(sorted(saved)))
    message = str(error.value)
    assert "'job'" in message
    assert f"missing: {sorted(saved - current)}" in message
    assert f"unexpected: {sorted(current - saved)}" in message


def test_a_renamed_vertex_fails_the_restore_and_name_pins_it():
    def program(extra_upstream: bool, pinned: bool) -> rt.Dataflow:
        flow = rt.Dataflow("job")
        s = flow.input("x")
        if extra_upstream:
            s = s.filter(bool, name="new_filter")
        s.count_by_key(str, name="counts" if pinned else None).output("out")
        return flow

    saved = program(extra_upstream=False, pinned=False).vertex_ids()
    with pytest.raises(rt.GraphError, match=r"missing: \['count_by_key_.*unexpected: \['count_by_key_"):
        program(extra_upstream=True, pinned=False).check_restore_ids(saved + ["new_filter"])
    pinned = program(extra_upstream=False, pinned=True).vertex_ids()
    program(extra_upstream=True, pinned=True).check_restore_ids(pinned + ["new_filter"])


# -- vertices are immutable ------------------------------------------------------------


def test_logical_vertices_are_frozen_and_connect_replaces_the_feedback_vertex():
    flow = rt.Dataflow("f")
    loop = flow.loop("L")
    back = loop.feedback(name="back")
    rounds = loop.enter(flow.input("x")).concat(back.stream)
    unconnected = flow.vertices["back"]
    back.connect(rounds)
    connected = flow.vertices["back"]
    assert unconnected.inputs == ((),), "connect must not change a vertex already handed out"
    assert connected is not unconnected and connected.inputs[0][0].source == rounds.vertex
    assert all(isinstance(port, tuple) for v in flow.vertices.values() for port in v.inputs)
    with pytest.raises(dataclasses.FrozenInstanceError):
        connected.parallelism = 3  # type: ignore[misc]
    assert isinstance(connected, LogicalVertex)


# -- the builder's errors ----------------------------------------------------------------


def test_a_wrong_number_of_exchange_keys_names_the_vertex_and_both_counts():
    flow = rt.Dataflow("f")
    s = flow.input("x")
    with pytest.raises(rt.GraphError, match="vertex 'pair' of dataflow 'f': 2 inputs but 1 exchange keys"):
        flow.vertex(rt.Vertex, [s, s], exchange=[str], name="pair")
    with pytest.raises(rt.GraphError, match="vertex 'vertex' of dataflow 'f': 1 inputs but 3 exchange keys"):
        flow.vertex(rt.Vertex, [s], exchange=[str, None, str])


def test_a_feedback_connected_twice_names_the_feedback_the_loop_and_the_first_stream():
    flow = rt.Dataflow("f")
    loop = flow.loop("L")
    back = loop.feedback(name="back")
    rounds = loop.enter(flow.input("x")).concat(back.stream, name="rounds")
    back.connect(rounds)
    again = rounds.map(str, name="again")
    with pytest.raises(rt.GraphError, match=r"feedback of loop 'L' \('back'\) is already connected .*'rounds'.*again"):
        back.connect(again)


@pytest.mark.parametrize("bad", [0, -3])
def test_max_iterations_below_one_is_refused_naming_the_loop_and_the_value(bad):
    flow = rt.Dataflow("f")
    with pytest.raises(rt.GraphError, match=f"loop 'L': max_iterations must be at least 1, got {bad}"):
        flow.loop("L").feedback(max_iterations=bad)


@pytest.mark.parametrize(("max_iterations", "survives"), [(None, range(6)), (3, [0, 1]), (2, [0]), (1, [])])
def test_max_iterations_bounds_the_feedback_summary(max_iterations, survives):
    """The summary progress tracking uses must drop what the feedback vertex drops, also for 1."""
    flow = rt.Dataflow("f")
    back = flow.loop("L").feedback(max_iterations=max_iterations, name="back")
    summary = flow.vertices["back"].output_summary(0)
    for counter in range(6):
        result = summary.results_in(Timestamp(0, (counter,)))
        assert (result is not None) == (counter in survives), (max_iterations, counter, result)
    assert back.stream.depth == 1


def test_streams_from_different_loop_contexts_are_refused_naming_both():
    flow = rt.Dataflow("f")
    outside = flow.input("x")
    inside = flow.loop("L").enter(outside)
    with pytest.raises(rt.GraphError, match="concat: its inputs come from different loop contexts "
                                            r"\(loop 'L', the top level\)"):
        outside.concat(inside)
    with pytest.raises(rt.GraphError, match="join: .*different loop contexts"):
        outside.join(inside, str)
    with pytest.raises(rt.GraphError, match="pair: its inputs come from different loop contexts"):
        flow.vertex(rt.Vertex, [outside, inside], name="pair")


def test_an_output_inside_a_loop_is_refused_naming_the_output_and_the_loop():
    flow = rt.Dataflow("f")
    inside = flow.loop("L").enter(flow.input("x"))
    with pytest.raises(rt.GraphError, match="output 'out' reads a stream inside loop 'L'"):
        inside.output("out")


def test_enter_leave_and_connect_from_the_wrong_scope_are_refused_naming_both_scopes():
    flow = rt.Dataflow("f")
    outer = flow.loop("outer")
    inner = outer.loop("inner")
    top = flow.input("x")
    in_outer = outer.enter(top)
    with pytest.raises(rt.GraphError, match="loop 'inner' can only enter streams of loop 'outer'; "
                                            "this one is in the top level"):
        inner.enter(top)
    with pytest.raises(rt.GraphError, match="loop 'outer' can only leave with a stream inside it; "
                                            "this one is in the top level"):
        outer.leave(top)
    back = inner.feedback(name="back")
    with pytest.raises(rt.GraphError, match=r"feedback of loop 'inner' \('back'\) takes a stream inside that loop; "
                                            "this one is in loop 'outer'"):
        back.connect(in_outer)


def test_reading_a_stream_of_another_dataflow_is_refused():
    other = rt.Dataflow("other").input("elsewhere")
    flow = rt.Dataflow("f")
    with pytest.raises(rt.GraphError, match="reads from 'elsewhere', which is not in dataflow 'f'"):
        flow.vertex(rt.Vertex, [other], name="v")
