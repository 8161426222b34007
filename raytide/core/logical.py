"""The logical graph's parts, as a compiled plan keeps them: vertices, the edges into them
and the channels along those edges.

Apart from the builder (:mod:`raytide.core.dataflow`), which makes them, so that a process
that only runs a plan (a vertex host unpickling it) does not import the builder.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Literal

from raytide.core.vertex import Vertex
from raytide.progress.summaries import PathSummary

KeyFn = Callable[[Any], Hashable]
#: An exchange partitions by a key function, or by the name of an integer column (vectorised).
ExchangeKey = KeyFn | str
VertexFactory = Callable[[], Vertex]
Role = Literal["vertex", "input", "output", "probe", "feedback"]


@dataclass(frozen=True)
class Channel:
    """How records travel along an edge between the replicas of two vertices.

    ``pipeline`` keeps replica ``i``'s output at replica ``i`` (round robin when the
    parallelism differs), ``exchange`` routes each record by ``key`` through key groups
    (``key`` may name an integer column: columnar batches are then split with NumPy),
    ``broadcast`` sends every batch to every replica.
    """

    kind: Literal["pipeline", "exchange", "broadcast"] = "pipeline"
    key: ExchangeKey | None = None


@dataclass(frozen=True)
class InputEdge:
    """An edge into a vertex: from ``source``'s output port ``output``, over ``channel``."""

    source: str
    output: int
    channel: Channel


@dataclass(frozen=True)
class LogicalVertex:
    """A vertex of the logical graph, before it is expanded into replicas; immutable.

    ``inputs[port]`` holds the edges into input ``port`` (several for a concat, none for
    a feedback whose cycle is not closed yet).
    """

    name: str
    factory: VertexFactory | None
    inputs: tuple[tuple[InputEdge, ...], ...]
    outputs: int
    depth: int = 0
    summaries: tuple[PathSummary, ...] = ()
    parallelism: int | None = None
    role: Role = "vertex"
    chain: bool = True
    terminal: bool = False
    #: Whether the vertex may ask for notifications (False for a per-batch function): only
    #: then is it sent epoch tokens (``raytide.engine.epoch_tokens``), a hint for speed alone.
    notifies: bool = True
    #: Whether every notification it asks for is delivered or cancelled once the input it is
    #: fused behind moves past that notification's epoch (a combiner ships its partial
    #: results then): a chain of such vertices never owes an epoch token.
    settles_with_input: bool = False
    #: An input's :class:`~raytide.windows.event_time.EventTime`, if it assigns records to epochs by their time.
    event_time: Any = None

    def output_summary(self, port: int) -> PathSummary:
        """What a path through the vertex to output ``port`` does to a timestamp."""
        return self.summaries[port] if self.summaries else PathSummary.identity()
