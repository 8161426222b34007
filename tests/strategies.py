"""Hypothesis strategies and seeded generators: timestamps, summaries, graphs with (nested) loops."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import strategies as st

from raytide.progress import GraphBuilder, PathSummary, ProgressGraph, Timestamp


def timestamps(depth: int, max_epoch: int = 4, max_counter: int = 4) -> st.SearchStrategy[Timestamp]:
    """Timestamps with exactly ``depth`` loop counters."""
    return st.builds(
        Timestamp,
        st.integers(0, max_epoch),
        st.tuples(*[st.integers(0, max_counter)] * depth),
    )


def any_timestamps(max_depth: int = 3) -> st.SearchStrategy[Timestamp]:
    """Timestamps of any depth up to ``max_depth``."""
    return st.integers(0, max_depth).flatmap(timestamps)


def primitive_summaries() -> st.SearchStrategy[PathSummary]:
    """Ingress, egress and (possibly bounded) feedback steps."""
    return st.one_of(
        st.just(PathSummary.ingress()),
        st.just(PathSummary.egress()),
        st.just(PathSummary.feedback()),
        st.integers(1, 6).map(PathSummary.feedback),
    )


def step_sequences(max_len: int = 6) -> st.SearchStrategy[list[PathSummary]]:
    """Sequences of primitive steps (not necessarily applicable to every timestamp)."""
    return st.lists(primitive_summaries(), max_size=max_len)


def compose(steps: list[PathSummary]) -> PathSummary | None:
    """Fold ``followed_by`` over ``steps``; None when the composition drops everything."""
    summary: PathSummary | None = PathSummary.identity()
    for step in steps:
        if summary is None:
            return None
        summary = summary.followed_by(step)
    return summary


def apply_steps(steps: list[PathSummary], time: Timestamp) -> Timestamp | None:
    """Apply the steps one by one, as records travelling the path would be."""
    current: Timestamp | None = time
    for step in steps:
        if current is None:
            return None
        current = step.results_in(current)
    return current


def applicable_depth(steps: list[PathSummary]) -> int:
    """The smallest timestamp depth every step of ``steps`` can be applied at."""
    depth, needed = 0, 0
    for step in steps:
        needed = max(needed, step.pops - depth + (1 if step.increment or step.bound is not None else 0))
        depth += step.depth_change
    return needed


Port = tuple[str, int]
"""An output port: ``(vertex, port)``."""

#: Vertices a loop adds besides its body: enter, head, feedback and leave.
LOOP_SIZE = 4


@dataclass(frozen=True)
class VertexSpec:
    """A vertex exactly as the generator declared it to :meth:`GraphBuilder.add_vertex`."""

    inputs: int
    depth: int
    summaries: tuple[PathSummary, ...]


@dataclass
class RandomGraph:
    """A random dataflow graph, and what was passed to the builder to make it.

    ``vertices`` and ``edges`` are the generator's own record of its ``add_vertex`` and
    ``add_edge`` calls, so an oracle built from them shares nothing with the code that
    compiles ``graph``.
    """

    graph: ProgressGraph
    vertices: dict[str, VertexSpec] = field(default_factory=dict)
    edges: list[tuple[str, int, str, int]] = field(default_factory=list)


def random_graph(seed: int, max_vertices: int = 14, max_nesting: int = 2, bounds: tuple[int, int] = (1, 3)) -> RandomGraph:
    """A connected random graph: a source, scopes of DAG vertices, loops nested up to ``max_nesting``.

    A loop starts only while the graph has room for it under ``max_vertices``; the
    bodies of loops may still add a few operators beyond it.

    Some vertices have two outputs: ordinary ones (both identity) and loop heads, whose
    second output leaves the loop (egress). About half of the loops bound their feedback
    (``PathSummary.feedback(bound)``, a bound drawn from ``bounds``: 1 to 3 unless asked;
    0 drops every record, a loop body that runs once).
    """
    rng = random.Random(seed)
    builder = GraphBuilder()
    counter = iter(range(10_000))
    specs: dict[str, VertexSpec] = {}
    edges: list[tuple[str, int, str, int]] = []
    free_port: dict[str, int] = {}

    def vertex(kind: str, depth: int, summaries: tuple[PathSummary, ...] = (PathSummary.identity(),),
               inputs: int = 2) -> str:
        name = f"{kind}{next(counter)}"
        builder.add_vertex(name, inputs=inputs, outputs=len(summaries), depth=depth, summaries=summaries)
        specs[name] = VertexSpec(inputs, depth, summaries)
        return name

    def connect(src: Port, dst: str) -> None:
        port = free_port.get(dst, 0)
        if port >= specs[dst].inputs:
            return
        free_port[dst] = port + 1
        builder.add_edge(src[0], src[1], dst, port)
        edges.append((src[0], src[1], dst, port))

    def loop(current: list[Port], depth: int) -> None:
        """A loop context entered from ``current``; what leaves it joins ``current``."""
        enter = vertex("enter", depth, (PathSummary.ingress(),), inputs=1)
        connect(rng.choice(current), enter)
        head = vertex("head", depth + 1, (PathSummary.identity(), PathSummary.egress()))
        connect((enter, 0), head)
        tail = scope([(head, 0)], depth + 1, rng.randint(1, 3))
        bound = rng.choice([None, rng.randint(*bounds)])
        back = vertex("back", depth + 1, (PathSummary.feedback(bound),), inputs=1)
        connect(tail, back)
        connect((back, 0), head)
        leave = vertex("leave", depth + 1, (PathSummary.egress(),), inputs=1)
        connect(rng.choice([(head, 0), tail]), leave)
        current.append((leave, 0))
        if rng.random() < 0.5:
            current.append((head, 1))

    def scope(current: list[Port], depth: int, steps: int) -> Port:
        """``steps`` operators or loops at ``depth``, fed from ``current``; returns the last output."""
        for _ in range(steps):
            if depth < max_nesting and len(specs) + LOOP_SIZE <= max_vertices and rng.random() < 0.3:
                loop(current, depth)
            elif len(specs) < max_vertices or depth > 0:
                outputs = rng.choice([1, 1, 2])
                v = vertex("op", depth, (PathSummary.identity(),) * outputs)
                for src in rng.sample(current, k=min(len(current), rng.randint(1, 2))):
                    connect(src, v)
                current.extend((v, port) for port in range(outputs))
        return current[-1]

    source = vertex("src", 0, inputs=0)
    scope([(source, 0)], 0, rng.randint(2, max_vertices // 2))
    return RandomGraph(builder.build(), specs, edges)
