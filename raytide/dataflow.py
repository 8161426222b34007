"""The logical dataflow: a pure description of vertices and edges, built with a fluent API.

>>> import raytide as rt
>>> flow = rt.Dataflow("wordcount")
>>> counts = flow.input("lines").flat_map(str.split).count_by_key(lambda w: w)
>>> counts.output("counts")
>>> [v.name for v in flow.vertices.values()]
['lines', 'flat_map_1', 'count_by_key_2.combine', 'count_by_key_2', 'counts']

Building runs no engine code: ``rt.run`` compiles the description into actors. Every
operator returns a new :class:`Stream`; vertices with several inputs or outputs are
placed with :meth:`Dataflow.vertex`.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable, Iterable, Literal, Optional, Sequence, Union

from raytide.actors.batches import BatchFormat, to_format, to_records
from raytide.actors.vertex import Vertex
from raytide.errors import GraphError
from raytide.operators import (
    BatchFunction,
    EpochJoin,
    KeyedReduce,
    StatefulMap,
    count_combiner,
    pair_key,
    pair_value,
    sum_merger,
)
from raytide.progress.summaries import PathSummary

KeyFn = Callable[[Any], Hashable]
VertexFactory = Callable[[], Vertex]
Role = Literal["vertex", "input", "output", "probe"]

#: How many distinct keys a combiner holds per timestamp before it sends them on early.
COMBINER_MAX_KEYS = 65_536


@dataclass(frozen=True)
class Channel:
    """How records travel along an edge between the replicas of two vertices.

    ``pipeline`` keeps replica ``i``'s output at replica ``i`` (round robin when the
    parallelism differs), ``exchange`` routes each record by ``key`` through key groups,
    ``broadcast`` sends every batch to every replica.
    """

    kind: Literal["pipeline", "exchange", "broadcast"] = "pipeline"
    key: Optional[KeyFn] = None


@dataclass(frozen=True)
class InputEdge:
    """An edge into a vertex: from ``source``'s output port ``output``, over ``channel``."""

    source: str
    output: int
    channel: Channel


@dataclass
class LogicalVertex:
    """A vertex of the logical graph, before it is expanded into replicas."""

    name: str
    factory: Optional[VertexFactory]
    inputs: list[list[InputEdge]]
    outputs: int
    depth: int = 0
    summaries: tuple[PathSummary, ...] = ()
    parallelism: Optional[int] = None
    role: Role = "vertex"
    chain: bool = True
    terminal: bool = False

    def output_summary(self, port: int) -> PathSummary:
        return self.summaries[port] if self.summaries else PathSummary.identity()


@dataclass
class Dataflow:
    """A named dataflow: inputs, operators and outputs, with a default parallelism.

    Args:
        name: the job name; actors are named ``name/vertex/replica``.
        parallelism: default number of replicas per vertex (``rt.run`` may override it).
    """

    name: str
    parallelism: Optional[int] = None
    vertices: dict[str, LogicalVertex] = field(default_factory=dict)
    _ids: Iterable[int] = field(default_factory=lambda: itertools.count(1), repr=False)

    def input(self, name: str, parallelism: Optional[int] = None) -> Stream:
        """A driver-fed or source-fed input; records arrive in epochs."""
        self._add(LogicalVertex(name, None, [], 1, parallelism=parallelism, role="input"))
        return Stream(self, name, 0, 0)

    def vertex(
        self,
        factory: Union[type[Vertex], VertexFactory],
        inputs: Sequence[Stream],
        outputs: int = 1,
        *,
        exchange: Optional[Sequence[Optional[KeyFn]]] = None,
        name: Optional[str] = None,
        parallelism: Optional[int] = None,
    ) -> list[Stream]:
        """Place a vertex with several inputs and outputs; returns one stream per output.

        Args:
            factory: the :class:`Vertex` subclass (or a zero-argument callable making one);
                one object is created per replica.
            inputs: input ``i`` of the vertex receives stream ``inputs[i]``.
            outputs: number of output ports.
            exchange: per input, a key function to partition that input by, or None to
                keep it local.
            name: the vertex name (unique in the dataflow).
            parallelism: number of replicas (default: the dataflow's).
        """
        exchange = list(exchange) if exchange is not None else [None] * len(inputs)
        if len(exchange) != len(inputs):
            raise GraphError(f"vertex {name or factory!r}: {len(inputs)} inputs but {len(exchange)} exchange keys")
        depth = self._common_depth(inputs, name or getattr(factory, "__name__", "vertex"))
        edges = [
            [InputEdge(s.vertex, s.port, Channel("exchange", key) if key else Channel())] for s, key in zip(inputs, exchange)
        ]
        vname = self._add(LogicalVertex(name or self._fresh(_label(factory)), factory, edges, outputs, depth, parallelism=parallelism))
        return [Stream(self, vname, port, depth) for port in range(outputs)]

    def _fresh(self, label: str) -> str:
        return f"{label}_{next(self._ids)}"  # type: ignore[call-overload]

    def _add(self, vertex: LogicalVertex) -> str:
        if vertex.name in self.vertices:
            raise GraphError(f"dataflow {self.name!r} already has a vertex named {vertex.name!r}")
        for port_edges in vertex.inputs:
            for edge in port_edges:
                if edge.source not in self.vertices:
                    raise GraphError(f"vertex {vertex.name!r} reads from {edge.source!r}, which is not in dataflow {self.name!r}")
        self.vertices[vertex.name] = vertex
        return vertex.name

    @staticmethod
    def _common_depth(streams: Sequence[Stream], what: str) -> int:
        depths = {s.depth for s in streams}
        if len(depths) > 1:
            raise GraphError(f"{what}: its inputs come from different loop contexts; leave or enter loops first")
        return depths.pop() if depths else 0

    def outputs(self) -> list[str]:
        """Names of the dataflow's outputs."""
        return [v.name for v in self.vertices.values() if v.role == "output"]

    def inputs(self) -> list[str]:
        """Names of the dataflow's inputs."""
        return [v.name for v in self.vertices.values() if v.role == "input"]


def _label(factory: Any) -> str:
    return getattr(factory, "__name__", type(factory).__name__).lower()


@dataclass(frozen=True)
class Stream:
    """A stream of timestamped batches: output port ``port`` of vertex ``vertex``."""

    flow: Dataflow
    vertex: str
    port: int
    depth: int

    # -- placing vertices ------------------------------------------------------------

    def unary(
        self,
        factory: Union[type[Vertex], VertexFactory],
        *,
        exchange: Optional[KeyFn] = None,
        name: Optional[str] = None,
        parallelism: Optional[int] = None,
    ) -> Stream:
        """Place a one-input, one-output vertex; ``exchange`` partitions its input by key."""
        return self.flow.vertex(factory, [self], 1, exchange=[exchange], name=name, parallelism=parallelism)[0]

    def _then(self, label: str, factory: VertexFactory, channel: Channel = Channel(), name: Optional[str] = None,
              parallelism: Optional[int] = None, terminal: bool = False) -> Stream:
        vname = name or self.flow._fresh(label)
        vertex = LogicalVertex(vname, factory, [[InputEdge(self.vertex, self.port, channel)]], 1, self.depth,
                               parallelism=parallelism, terminal=terminal)
        self.flow._add(vertex)
        return Stream(self.flow, vname, 0, self.depth)

    # -- per-record operators --------------------------------------------------------

    def map(self, fn: Callable[[Any], Any], *, name: Optional[str] = None, parallelism: Optional[int] = None) -> Stream:
        """One output record per input record."""
        return self._then("map", lambda: BatchFunction(lambda batch: [fn(r) for r in to_records(batch)]), name=name, parallelism=parallelism)

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], *, name: Optional[str] = None,
                 parallelism: Optional[int] = None) -> Stream:
        """Any number of output records per input record."""
        return self._then("flat_map", lambda: BatchFunction(lambda batch: [o for r in to_records(batch) for o in fn(r)]),
                          name=name, parallelism=parallelism)

    def filter(self, predicate: Callable[[Any], bool], *, name: Optional[str] = None,
               parallelism: Optional[int] = None) -> Stream:
        """The records for which ``predicate`` is true."""
        return self._then("filter", lambda: BatchFunction(lambda batch: [r for r in to_records(batch) if predicate(r)]),
                          name=name, parallelism=parallelism)

    def map_batches(self, fn: Callable[[Any], Any], *, batch_format: BatchFormat = "default",
                    name: Optional[str] = None, parallelism: Optional[int] = None) -> Stream:
        """Vectorised: ``fn`` gets a whole batch (NumPy array, dict of arrays or Arrow table) and returns one."""
        return self._then("map_batches", lambda: BatchFunction(lambda batch: fn(to_format(batch, batch_format))),
                          name=name, parallelism=parallelism)

    def inspect(self, fn: Callable[[Any], None], *, name: Optional[str] = None) -> Stream:
        """Call ``fn`` on every record (for side effects such as logging); pass records on."""

        def each(batch: Any) -> Any:
            for record in to_records(batch):
                fn(record)
            return batch

        return self._then("inspect", lambda: BatchFunction(each), name=name, terminal=True)

    # -- partitioning ----------------------------------------------------------------

    def exchange(self, key: KeyFn, *, name: Optional[str] = None, parallelism: Optional[int] = None) -> Stream:
        """Repartition: records with equal keys go to the same replica downstream."""
        return self._then("exchange", lambda: BatchFunction(_identity), Channel("exchange", key), name, parallelism)

    def broadcast(self, *, name: Optional[str] = None, parallelism: Optional[int] = None) -> Stream:
        """Every replica downstream receives every record."""
        return self._then("broadcast", lambda: BatchFunction(_identity), Channel("broadcast"), name, parallelism)

    def concat(self, *others: Stream, name: Optional[str] = None) -> Stream:
        """The union of this stream and ``others`` (same loop context)."""
        streams = (self, *others)
        depth = Dataflow._common_depth(streams, "concat")
        vname = name or self.flow._fresh("concat")
        edges = [[InputEdge(s.vertex, s.port, Channel()) for s in streams]]
        self.flow._add(LogicalVertex(vname, lambda: BatchFunction(_identity), edges, 1, depth))
        return Stream(self.flow, vname, 0, depth)

    # -- keyed, per epoch ------------------------------------------------------------

    def count_by_key(self, key: KeyFn, *, name: Optional[str] = None, parallelism: Optional[int] = None) -> Stream:
        """Per timestamp, ``(key, count)`` records; counts are combined before the exchange."""
        vname = name or self.flow._fresh("count_by_key")
        partial = self._then("", lambda: count_combiner(key, COMBINER_MAX_KEYS), name=f"{vname}.combine")
        return partial._then("", sum_merger, Channel("exchange", pair_key), vname, parallelism)

    def reduce_by_key(self, key: KeyFn, reducer: Callable[[Any, Any], Any], *, value: Callable[[Any], Any] = lambda r: r,
                      name: Optional[str] = None, parallelism: Optional[int] = None) -> Stream:
        """Per timestamp, ``(key, reducer(...reducer(v1, v2)..., vn))``; ``reducer`` must be associative and commutative."""
        vname = name or self.flow._fresh("reduce_by_key")
        partial = self._then("", lambda: KeyedReduce(key, value, reducer, COMBINER_MAX_KEYS), name=f"{vname}.combine")
        return partial._then("", lambda: KeyedReduce(pair_key, pair_value, reducer), Channel("exchange", pair_key), vname, parallelism)

    def stateful_map(self, key: KeyFn, fn: Callable[[Any, Any], tuple[Any, Any]], *, name: Optional[str] = None,
                     parallelism: Optional[int] = None) -> Stream:
        """Keyed state that lives across epochs: ``fn(state, record) -> (new_state, output)``, emits ``(key, output)``."""
        return self._then("stateful_map", lambda: StatefulMap(key, fn), Channel("exchange", key), name, parallelism)

    def join(self, other: Stream, key: KeyFn, other_key: Optional[KeyFn] = None, *, name: Optional[str] = None,
             parallelism: Optional[int] = None) -> Stream:
        """Per-epoch inner join with ``other``: ``(key, this_record, other_record)`` for equal keys."""
        right = other_key or key
        return self.flow.vertex(lambda: EpochJoin(key, right), [self, other], 1, exchange=[key, right],
                                name=name or self.flow._fresh("join"), parallelism=parallelism)[0]

    # -- leaving the dataflow --------------------------------------------------------

    def output(self, name: str) -> None:
        """Deliver this stream to the driver as output ``name`` (``job.collect(name)``)."""
        if self.depth:
            raise GraphError(f"output {name!r} reads a stream inside a loop: leave the loop first")
        self.flow._add(LogicalVertex(name, None, [[InputEdge(self.vertex, self.port, Channel())]], 0, role="output"))

    def probe(self, name: Optional[str] = None) -> Probe:
        """A probe: ``job.frontier(probe)`` tells how far this stream has progressed."""
        vname = name or self.flow._fresh("probe")
        self.flow._add(LogicalVertex(vname, None, [[InputEdge(self.vertex, self.port, Channel())]], 0, self.depth, role="probe"))
        return Probe(vname)


@dataclass(frozen=True)
class Probe:
    """Names a probe vertex; ask the job how far the probed stream has progressed."""

    vertex: str


def _identity(batch: Any) -> Any:
    return batch
