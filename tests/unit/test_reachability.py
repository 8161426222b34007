"""Minimal path summaries against exploration of concrete timestamps; graph validation errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.errors import GraphError
from raytide.progress import GraphBuilder, Location, PathSummary, Timestamp
from raytide.progress.reachability import components
from tests.oracles import ReachabilityOracle
from tests.strategies import random_graph, timestamps


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.data())
def test_could_result_in_matches_exploration(seed, data):
    rg = random_graph(seed)
    graph = rg.graph
    oracle = ReachabilityOracle(rg, cap=4)
    for _ in range(20):
        a = data.draw(st.sampled_from(graph.locations))
        b = data.draw(st.sampled_from(graph.locations))
        ta = data.draw(timestamps(graph.depth(a), max_epoch=2, max_counter=3))
        tb = data.draw(timestamps(graph.depth(b), max_epoch=2, max_counter=3))
        assert graph.could_result_in(a, ta, b, tb) == oracle.could_result_in((a, ta), (b, tb)), (a, ta, b, tb)


def test_random_graphs_have_multi_output_vertices_and_bounded_loops():
    """The generator reaches what the properties above are meant to cover."""
    graphs = [random_graph(seed) for seed in range(200)]
    from_second_port = sum(any(output > 0 for _, output, _, _ in rg.edges) for rg in graphs)
    bounded = sum(any(s.bound is not None for v in rg.vertices.values() for s in v.summaries) for rg in graphs)
    nested = sum(any(v.depth == 2 for v in rg.vertices.values()) for rg in graphs)
    assert min(from_second_port, bounded, nested) >= 20, (from_second_port, bounded, nested)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000))
def test_summaries_are_antichains_and_every_cycle_advances(seed):
    graph = random_graph(seed).graph
    for source in graph.locations:
        for target, chain in graph.reached_from(source).items():
            members = chain.elements()
            assert all(not a.less_equal(b) for a in members for b in members if a != b)
            if source == target:
                assert PathSummary.identity() in members
                assert all(s == PathSummary.identity() or s.strictly_advances() for s in members)


def pipeline(*names: str) -> GraphBuilder:
    b = GraphBuilder()
    for i, name in enumerate(names):
        b.add_vertex(name, inputs=0 if i == 0 else 2)
    for a, c in zip(names, names[1:]):
        b.add_edge(a, 0, c, 0)
    return b


def test_cycle_outside_a_loop_is_rejected_with_its_vertices():
    b = pipeline("src", "a", "b")
    b.add_edge("b", 0, "a", 1)
    with pytest.raises(GraphError, match=r"cycle .*a.*b.* loop context"):
        b.build()


def test_leaving_and_reentering_a_loop_without_outer_feedback_is_rejected():
    b = GraphBuilder()
    b.add_vertex("src", inputs=0)
    b.add_vertex("enter", inputs=2, summaries=[PathSummary.ingress()])
    b.add_vertex("body", depth=1)
    b.add_vertex("leave", depth=1, summaries=[PathSummary.egress()])
    for edge in [("src", 0, "enter", 0), ("enter", 0, "body", 0), ("body", 0, "leave", 0), ("leave", 0, "enter", 1)]:
        b.add_edge(*edge)
    with pytest.raises(GraphError, match="does not advance"):
        b.build()


def test_depth_mismatch_is_rejected():
    b = GraphBuilder()
    b.add_vertex("src", inputs=0)
    b.add_vertex("inner", depth=1)
    b.add_edge("src", 0, "inner", 0)
    with pytest.raises(GraphError, match="enter and leave loops explicitly"):
        b.build()


def test_unknown_vertex_and_port_are_rejected():
    b = pipeline("src", "a")
    b.add_edge("a", 0, "nowhere", 0)
    with pytest.raises(GraphError, match="unknown vertex 'nowhere'"):
        b.build()
    b = pipeline("src", "a")
    b.add_edge("a", 3, "a", 0)
    with pytest.raises(GraphError, match="no output port 3"):
        b.build()


def test_nested_loop_summaries():
    b = GraphBuilder()
    b.add_vertex("src", inputs=0)
    b.add_vertex("enter1", summaries=[PathSummary.ingress()])
    b.add_vertex("outer", inputs=2, depth=1)
    b.add_vertex("enter2", depth=1, summaries=[PathSummary.ingress()])
    b.add_vertex("inner", inputs=2, depth=2)
    b.add_vertex("back2", depth=2, summaries=[PathSummary.feedback()])
    b.add_vertex("leave2", depth=2, summaries=[PathSummary.egress()])
    b.add_vertex("back1", depth=1, summaries=[PathSummary.feedback()])
    edges = [
        ("src", 0, "enter1", 0), ("enter1", 0, "outer", 0), ("outer", 0, "enter2", 0), ("enter2", 0, "inner", 0),
        ("inner", 0, "back2", 0), ("back2", 0, "inner", 1), ("inner", 0, "leave2", 0), ("leave2", 0, "back1", 0),
        ("back1", 0, "outer", 1),
    ]
    for edge in edges:
        b.add_edge(*edge)
    g = b.build()
    inner, outer = Location.of_vertex("inner"), Location.of_vertex("outer")
    assert set(g.summaries(inner, Location.of_input("inner", 1)).elements()) == {PathSummary.feedback()}
    assert g.could_result_in(inner, Timestamp(0, (2, 5)), Location.of_input("outer", 1), Timestamp(0, (3,)))
    assert not g.could_result_in(inner, Timestamp(0, (2, 5)), Location.of_input("outer", 1), Timestamp(0, (2,)))
    assert g.could_result_in(outer, Timestamp(0, (2,)), Location.of_input("inner", 1), Timestamp(0, (2, 1)))


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000))
def test_components_are_the_mutually_reachable_locations_in_edge_order(seed):
    graph = random_graph(seed).graph
    found = components(graph.location_edges, graph.locations)
    reached = {source: reachable_locations(graph, source) for source in graph.locations}
    assert sorted(map(str, (loc for component in found for loc in component))) == sorted(map(str, graph.locations))
    for component in found:
        for a in component:
            assert {b for b in graph.locations if a in reached[b] and b in reached[a]} == set(component)
    position = {loc: i for i, component in enumerate(found) for loc in component}
    assert all(position[a] <= position[b] for a, out in graph.location_edges.items() for b, _ in out)


def reachable_locations(graph, source: Location) -> set[Location]:
    """Every location a path of edges leads to from ``source``, itself included (breadth first)."""
    seen, frontier = {source}, [source]
    while frontier:
        frontier = [b for a in frontier for b, _ in graph.location_edges[a] if b not in seen]
        seen.update(frontier)
    return seen
