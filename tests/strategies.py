"""Hypothesis strategies and seeded generators: timestamps, summaries, graphs with (nested) loops."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from hypothesis import strategies as st

from raytide.progress import GraphBuilder, Location, PathSummary, ProgressGraph, Timestamp


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


@dataclass
class RandomGraph:
    """A random dataflow graph with (nested) loop contexts, and how to use it."""

    graph: ProgressGraph
    sources: list[str]
    depth_of: dict[str, int]
    feedback: dict[str, int] = field(default_factory=dict)

    def locations(self) -> list[Location]:
        return self.graph.locations


def random_graph(seed: int, max_vertices: int = 14, max_nesting: int = 2) -> RandomGraph:
    """A connected random graph: a source, scopes of DAG vertices, loops nested up to ``max_nesting``."""
    rng = random.Random(seed)
    builder = GraphBuilder()
    counter = iter(range(10_000))
    depth_of: dict[str, int] = {}
    inputs_of: dict[str, int] = {}

    def vertex(kind: str, depth: int, summary: PathSummary | None = None, inputs: int = 2, outputs: int = 1) -> str:
        name = f"{kind}{next(counter)}"
        summaries = [summary or PathSummary.identity()] * outputs
        builder.add_vertex(name, inputs=inputs, outputs=outputs, depth=depth, summaries=summaries)
        depth_of[name] = depth
        inputs_of[name] = inputs
        return name

    free_port: dict[str, int] = {}

    def connect(src: str, dst: str) -> None:
        port = free_port.get(dst, 0)
        if port >= inputs_of[dst]:
            return
        free_port[dst] = port + 1
        builder.add_edge(src, 0, dst, port)

    def scope(entry: str, depth: int, budget: int) -> str:
        current = [entry]
        while budget > 0:
            budget -= 1
            if depth < max_nesting and rng.random() < 0.3 and budget > 2:
                enter = vertex("enter", depth, PathSummary.ingress(), inputs=1)
                connect(rng.choice(current), enter)
                head = vertex("head", depth + 1)
                connect(enter, head)
                tail = scope(head, depth + 1, rng.randint(1, 3))
                back = vertex("back", depth + 1, PathSummary.feedback(), inputs=1)
                connect(tail, back)
                connect(back, head)
                leave = vertex("leave", depth + 1, PathSummary.egress(), inputs=1)
                connect(rng.choice([head, tail]), leave)
                current.append(leave)
            else:
                v = vertex("op", depth)
                for src in rng.sample(current, k=min(len(current), rng.randint(1, 2))):
                    connect(src, v)
                current.append(v)
        return current[-1]

    source = vertex("src", 0, inputs=0)
    scope(source, 0, rng.randint(2, max_vertices // 2))
    return RandomGraph(builder.build(), [source], depth_of)
