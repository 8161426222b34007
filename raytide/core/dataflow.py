"""The logical dataflow: a pure description of vertices and edges, built with a fluent API.

>>> import raytide as rt
>>> flow = rt.Dataflow("wordcount")
>>> counts = flow.input("lines").flat_map(str.split).count_by_key(lambda w: w)
>>> counts.output("counts")
>>> flow.vertex_ids()
['lines', 'flat_map_207128', 'count_by_key_a25a9d.combine', 'count_by_key_a25a9d', 'counts']

Building runs no engine code: ``rt.run`` compiles the description into actors. Every
operator returns a new :class:`Stream`; vertices with several inputs or outputs are
placed with :meth:`Dataflow.vertex`.

Vertex ids are stable: an operator given no ``name=`` gets its label plus a hash of where
it sits in the program (its inputs, its loop, its rank among like siblings; see
:mod:`raytide.core.naming`), so the same program builds the same ids in every process and
adding an operator elsewhere renames nothing. Snapshot state is keyed by these ids;
``name=`` pins an id even when the program upstream changes (Flink's ``uid()``), and
:meth:`Dataflow.check_restore_ids` refuses a restore whose ids do not match.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from raytide.core.batches import BatchFormat, checked_batch, to_format, to_records
from raytide.core.collection import Collection
from raytide.core.collection_ops import CheckUpdates
from raytide.core.keyed_stream import KeyedOperators
from raytide.core.logical import Channel, ExchangeKey, InputEdge, LogicalVertex, VertexFactory
from raytide.core.naming import VertexIds
from raytide.core.operators import (
    BatchFunction,
    Egress,
    Feedback,
    Ingress,
    flat_map_batch,
)
from raytide.core.placing import PIPELINE as PIPELINE  # its home moved; the name stays
from raytide.core.vertex import Vertex
from raytide.core.windowing import SplitLate
from raytide.errors import GraphError
from raytide.progress.summaries import PathSummary
from raytide.windows.event_time import EventTime, checked_event_time, late_input


@dataclass
class Dataflow:
    """A named dataflow: inputs, operators and outputs, with a default parallelism.

    Args:
        name: the job name; actors are named ``name/vertex/replica``.
        parallelism: default number of replicas per vertex (``rt.run`` may override it).
    """

    name: str
    parallelism: int | None = None
    vertices: dict[str, LogicalVertex] = field(default_factory=dict)
    _ids: VertexIds = field(default_factory=VertexIds, repr=False)
    _loops: set[str] = field(default_factory=set, repr=False)
    #: Column arrangements made, by (stream, port, key column), for later joins to find
    #: (:mod:`raytide.core.arranged_columns`).
    _arrangements: dict[tuple[str, int, str], Any] = field(default_factory=dict, repr=False, compare=False)

    def input(self, name: str, parallelism: int | None = None, *, event_time: EventTime | None = None) -> Stream:
        """A driver-fed or source-fed input; records arrive in epochs, or go to epochs by their own time with
        ``event_time=rt.EventTime(...)`` (its ``late_output`` is an output of late records; docs/windows.md)."""
        spec = checked_event_time(name, event_time)
        self._add(LogicalVertex(name, None, (), 1, parallelism=parallelism, role="input", event_time=spec))
        if spec is None or spec.late_output is None:
            return Stream(self, name, 0)
        split = self.vertex(SplitLate, [Stream(self, name, 0)], 2, name=f"{name}.split", parallelism=parallelism)
        self.input(late_input(name), 1).concat(split[1], name=f"{name}.late.all").output(spec.late_output)
        return split[0]  # a source's reader sends late records into the input itself (sources/event_time.py)

    def collection(self, name: str, parallelism: int | None = None) -> Collection:
        """An input of updates ``(record, diff)`` (``+1`` adds a copy, ``-1`` removes one): a
        :class:`~raytide.core.collection.Collection` that changes by additions and deletions.
        A push may also be a column batch of updates: record columns and a ``diff`` column
        (``{"src": us, "dst": vs, "diff": ds}`` is the updates ``((u, v), d)``)."""
        stream = self.input(name, parallelism)
        return Collection(columns=stream._then("", lambda: CheckUpdates(name), name=f"{name}.updates", notifies=False))

    def vertex(
        self,
        factory: type[Vertex] | VertexFactory,
        inputs: Sequence[Stream],
        outputs: int = 1,
        *,
        exchange: Sequence[ExchangeKey | None] | None = None,
        name: str | None = None,
        parallelism: int | None = None,
    ) -> list[Stream]:
        """Place a vertex with several inputs and outputs; returns one stream per output.

        Args:
            factory: the :class:`Vertex` subclass (or a zero-argument callable making one);
                one object is created per replica.
            inputs: input ``i`` of the vertex receives stream ``inputs[i]``.
            outputs: number of output ports.
            exchange: per input, a key function (or integer column name) to partition that
                input by, ``"broadcast"`` to give every replica all of it, or None to keep
                it local.
            name: the vertex id (unique in the dataflow); by default a stable one.
            parallelism: number of replicas (default: the dataflow's).
        """
        label = _label(factory)
        keys = list(exchange) if exchange is not None else [None] * len(inputs)
        if len(keys) != len(inputs):
            raise GraphError(f"vertex {name or label!r} of dataflow {self.name!r}: "
                             f"{len(inputs)} inputs but {len(keys)} exchange keys")
        scope = self._common_scope(inputs, name or label)
        edges = tuple((InputEdge(s.vertex, s.port, _channel(key)),) for s, key in zip(inputs, keys))
        vname = name or self._fresh(label, inputs, scope)
        notifies = not (isinstance(factory, type) and issubclass(factory, Vertex) and factory.on_notify is Vertex.on_notify)
        self._add(LogicalVertex(vname, factory, edges, outputs, scope.depth if scope else 0, parallelism=parallelism,
                                notifies=notifies))
        return [Stream(self, vname, port, scope) for port in range(outputs)]

    def vertex_ids(self) -> list[str]:
        """The ids of all vertices, in the order they were built (what snapshots are keyed by)."""
        return list(self.vertices)

    def check_restore_ids(self, saved: Iterable[str]) -> None:
        """Refuse to restore state saved under vertex ids ``saved`` unless they are exactly this dataflow's.

        Raises:
            GraphError: naming the saved ids this dataflow lacks and the ids of this
                dataflow the saved state does not know.
        """
        saved_ids, ours = set(saved), set(self.vertices)
        missing, unexpected = sorted(saved_ids - ours), sorted(ours - saved_ids)
        if missing or unexpected:
            raise GraphError(
                f"cannot restore into dataflow {self.name!r}: the saved state has vertices it lacks "
                f"(missing: {missing}) and it has vertices the saved state does not know (unexpected: "
                f"{unexpected}); pin the ids of the saved program with name= on its operators"
            )

    def _fresh(self, label: str, inputs: Sequence[Stream], scope: Loop | None) -> str:
        """The stable default id of a vertex ``label`` reading ``inputs`` inside ``scope``."""
        edges = [(s.vertex, s.port) for s in inputs]
        return self._ids.allocate(label, edges, scope.name if scope else None, taken=self.vertices)

    def _add(self, vertex: LogicalVertex) -> str:
        if vertex.name in self.vertices:
            raise GraphError(f"dataflow {self.name!r} already has a vertex named {vertex.name!r}")
        for port_edges in vertex.inputs:
            for edge in port_edges:
                self._check_source(vertex.name, edge)
        self.vertices[vertex.name] = vertex
        return vertex.name

    def _place(self, vertex: LogicalVertex) -> None:
        """Add ``vertex``, or put it in the place of the one of its name (a shared arrangement's
        vertex grows a port and an output per reader, :mod:`raytide.core.arranged`)."""
        if vertex.name not in self.vertices:
            self._add(vertex)
            return
        for port_edges in vertex.inputs:
            for edge in port_edges:
                self._check_source(vertex.name, edge)
        self.vertices[vertex.name] = vertex

    def _check_source(self, vertex: str, edge: InputEdge) -> None:
        if edge.source not in self.vertices:
            raise GraphError(f"vertex {vertex!r} reads from {edge.source!r}, which is not in dataflow {self.name!r}")

    def _connect_feedback(self, vertex: str, edge: InputEdge) -> None:
        """Give feedback vertex ``vertex`` its one input edge (replacing the immutable vertex)."""
        self._check_source(vertex, edge)
        self.vertices[vertex] = replace(self.vertices[vertex], inputs=((edge,),))

    def _new_loop(self, label: str, name: str | None, parent: Loop | None, inputs: Sequence[Stream] = ()) -> Loop:
        lname = name or self._fresh(label, inputs, parent)
        if lname in self._loops:
            raise GraphError(f"dataflow {self.name!r} already has a loop named {lname!r}")
        self._loops.add(lname)
        return Loop(self, lname, parent)

    @staticmethod
    def _common_scope(streams: Sequence[Stream], what: str) -> Loop | None:
        scopes = {id(s.scope): s.scope for s in streams}
        if len(scopes) > 1:
            names = sorted(_scope_name(sc) for sc in scopes.values())
            raise GraphError(f"{what}: its inputs come from different loop contexts ({', '.join(names)}); "
                             "use loop.enter(stream) or loop.leave(stream) to move a stream between them")
        return next(iter(scopes.values())) if scopes else None

    def loop(self, name: str | None = None) -> Loop:
        """A loop context: streams entering it gain a loop counter (see :class:`Loop`)."""
        return self._new_loop("loop", name, None)

    def outputs(self) -> list[str]:
        """Names of the dataflow's outputs."""
        return [v.name for v in self.vertices.values() if v.role == "output"]

    def inputs(self) -> list[str]:
        """Names of the dataflow's inputs."""
        return [v.name for v in self.vertices.values() if v.role == "input"]


def _channel(key: ExchangeKey | None) -> Channel:
    """The channel of an input of :meth:`Dataflow.vertex`: by key, broadcast, or local."""
    if key == "broadcast":
        return Channel("broadcast")
    return Channel("exchange", key) if key else Channel()


def _label(factory: Any) -> str:
    return getattr(factory, "__name__", type(factory).__name__).lower()


@dataclass(frozen=True)
class Stream(KeyedOperators):
    """A stream of timestamped batches: output port ``port`` of vertex ``vertex``.

    Its place and how a vertex is placed after it are :class:`~raytide.core.placing.PlacedStream`'s,
    its keyed operators :class:`~raytide.core.keyed_stream.KeyedOperators`'; the rest are here.
    """

    flow: Dataflow
    vertex: str
    port: int
    scope: Loop | None = None

    # -- per-record operators --------------------------------------------------------

    def map(self, fn: Callable[[Any], Any], *, name: str | None = None, parallelism: int | None = None) -> Stream:
        """One output record per input record."""
        return self._per_batch("map", lambda batch: list(map(fn, to_records(batch))), name=name,
                               parallelism=parallelism)

    def flat_map(self, fn: Callable[[Any], Iterable[Any]], *, name: str | None = None,
                 parallelism: int | None = None) -> Stream:
        """Any number of output records per input record."""
        return self._per_batch("flat_map", flat_map_batch(fn), name=name, parallelism=parallelism)

    def filter(self, predicate: Callable[[Any], bool], *, name: str | None = None,
               parallelism: int | None = None) -> Stream:
        """The records for which ``predicate`` is true."""
        return self._per_batch("filter", lambda batch: list(filter(predicate, to_records(batch))), name=name,
                               parallelism=parallelism)

    def map_batches(self, fn: Callable[[Any], Any], *, batch_format: BatchFormat = "default",
                    name: str | None = None, parallelism: int | None = None) -> Stream:
        """Vectorised: ``fn`` gets a whole batch (NumPy array, dict of arrays or Arrow table) and returns one.

        It must return a batch (:data:`~raytide.core.batches.BATCH_KINDS`); anything else,
        None or a string included, fails the job naming the vertex and the epoch.
        """
        def apply(batch: Any) -> Any:
            return checked_batch(fn(to_format(batch, batch_format)), "the map_batches function")

        return self._per_batch("map_batches", apply, name=name, parallelism=parallelism)

    def inspect(self, fn: Callable[[Any], None], *, name: str | None = None) -> Stream:
        """Call ``fn`` on every record (for side effects such as logging); pass records on."""

        def each(batch: Any) -> Any:
            for record in to_records(batch):
                fn(record)
            return batch

        return self._per_batch("inspect", each, name=name, terminal=True)

    # -- partitioning ----------------------------------------------------------------

    def exchange(self, key: ExchangeKey, *, name: str | None = None, parallelism: int | None = None) -> Stream:
        """Repartition: records with equal keys go to the same replica downstream."""
        return self._per_batch("exchange", _identity, Channel("exchange", key), name, parallelism)

    def broadcast(self, *, name: str | None = None, parallelism: int | None = None) -> Stream:
        """Every replica downstream receives every record."""
        return self._per_batch("broadcast", _identity, Channel("broadcast"), name, parallelism)

    def concat(self, *others: Stream, name: str | None = None) -> Stream:
        """The union of this stream and ``others`` (same loop context)."""
        streams = (self, *others)
        scope = Dataflow._common_scope(streams, name or "concat")
        vname = name or self.flow._fresh("concat", streams, scope)
        edges = (tuple(InputEdge(s.vertex, s.port, Channel()) for s in streams),)
        self.flow._add(LogicalVertex(vname, lambda: BatchFunction(_identity), edges, 1, self.depth, notifies=False))
        return Stream(self.flow, vname, 0, scope)

    # -- iteration -------------------------------------------------------------------

    def iterate(self, body: Callable[[Stream], Stream | tuple[Stream, Stream]], *,
                max_iterations: int | None = None, name: str | None = None) -> Stream:
        """Apply ``body`` round after round until it emits nothing (or ``max_iterations`` rounds).

        ``body`` gets the stream of the current round (inside a new loop context, called
        ``name``) and returns the stream for the next round, or a pair ``(next_round,
        output)``. What it returns as output (by default the next round itself) leaves
        the loop and is the result: every record of every round, timestamped with its epoch.
        """
        loop = self.flow._new_loop("iterate", name, self.scope, [self])
        back = loop.feedback(max_iterations=max_iterations)
        rounds = loop.enter(self).concat(back.stream)
        result = body(rounds)
        following, output = result if isinstance(result, tuple) else (result, result)
        back.connect(following)
        return loop.leave(output)
    def as_collection(self) -> Collection:
        """This stream as a collection: each record an update ``(record, +1)``."""
        return Collection(self.map(lambda record: (record, 1), name=self.flow._fresh("as_collection", [self], self.scope)))

    # -- leaving the dataflow --------------------------------------------------------

    def output(self, name: str) -> None:
        """Deliver this stream to the driver as output ``name`` (``job.collect(name)``)."""
        if self.scope is not None:
            raise GraphError(f"output {name!r} reads a stream inside loop {self.scope.name!r}: "
                             f"leave the loop first with loop.leave(stream)")
        self.flow._add(LogicalVertex(name, None, ((InputEdge(self.vertex, self.port, Channel()),),), 0, role="output"))

    def probe(self, name: str | None = None) -> Probe:
        """A probe: ``job.frontier(probe)`` tells how far this stream has progressed."""
        vname = name or self.flow._fresh("probe", [self], self.scope)
        self.flow._add(LogicalVertex(vname, None, ((InputEdge(self.vertex, self.port, Channel()),),), 0, self.depth,
                                     role="probe"))
        return Probe(vname)


@dataclass(eq=False)
class Loop:
    """A loop context: inside it timestamps carry one more loop counter (the iteration).

    >>> import raytide as rt
    >>> flow = rt.Dataflow("halving")
    >>> loop = flow.loop()
    >>> back = loop.feedback()
    >>> numbers = loop.enter(flow.input("numbers")).concat(back.stream)
    >>> halved = numbers.map(lambda x: x // 2)
    >>> back.connect(halved.filter(lambda x: x > 0))
    >>> loop.leave(halved).output("out")

    Streams enter with :meth:`enter` (iteration 0), go round through a :class:`FeedbackHandle`
    (iteration + 1) and leave with :meth:`leave`. Loops nest: :meth:`loop` makes a loop
    inside this one, whose timestamps are ``(epoch, (i, j))``. Loop names are unique in a
    dataflow; the ids of the enter, leave and feedback vertices start with the loop's name.
    """

    flow: Dataflow
    name: str
    parent: Loop | None

    @property
    def depth(self) -> int:
        """The number of loop counters of timestamps inside this loop."""
        return (self.parent.depth if self.parent else 0) + 1

    def loop(self, name: str | None = None) -> Loop:
        """A loop nested inside this one."""
        return self.flow._new_loop("loop", name, self)

    def enter(self, stream: Stream, *, name: str | None = None) -> Stream:
        """``stream`` (from the enclosing scope) inside the loop, at iteration 0."""
        if stream.scope is not self.parent:
            raise GraphError(f"loop {self.name!r} can only enter streams of {_scope_name(self.parent)}; "
                             f"this one is in {_scope_name(stream.scope)}")
        vname = name or self.flow._fresh(f"{self.name}.enter", [stream], stream.scope)
        self.flow._add(LogicalVertex(vname, Ingress, ((InputEdge(stream.vertex, stream.port, Channel()),),), 1,
                                     stream.depth, summaries=(PathSummary.ingress(),)))
        return Stream(self.flow, vname, 0, self)

    def leave(self, stream: Stream, *, name: str | None = None) -> Stream:
        """``stream`` (from inside the loop) back in the enclosing scope, without its counter."""
        if stream.scope is not self:
            raise GraphError(f"loop {self.name!r} can only leave with a stream inside it; "
                             f"this one is in {_scope_name(stream.scope)}")
        vname = name or self.flow._fresh(f"{self.name}.leave", [stream], self)
        self.flow._add(LogicalVertex(vname, Egress, ((InputEdge(stream.vertex, stream.port, Channel()),),), 1,
                                     self.depth, summaries=(PathSummary.egress(),)))
        return Stream(self.flow, vname, 0, self.parent)

    def feedback(self, *, max_iterations: int | None = None, name: str | None = None) -> FeedbackHandle:
        """A stream of the next iteration's records; close the cycle with ``handle.connect(stream)``.

        Args:
            max_iterations: records are dropped once they would start iteration
                ``max_iterations`` (so the loop body sees iterations ``0 .. max_iterations - 1``;
                with 1, the feedback drops everything).
        """
        if max_iterations is not None and max_iterations < 1:
            raise GraphError(f"loop {self.name!r}: max_iterations must be at least 1, got {max_iterations}")
        bound = None if max_iterations is None else max_iterations - 1
        vname = name or self.flow._fresh(f"{self.name}.feedback", [], self)
        self.flow._add(LogicalVertex(vname, lambda: Feedback(bound), ((),), 1, self.depth,
                                     summaries=(PathSummary.feedback(bound),), role="feedback"))
        return FeedbackHandle(self, vname)


@dataclass(frozen=True)
class FeedbackHandle:
    """The back edge of a loop: ``stream`` is usable at once, ``connect`` closes the cycle."""

    loop: Loop
    vertex: str

    @property
    def stream(self) -> Stream:
        """The records fed back, at the next iteration."""
        return Stream(self.loop.flow, self.vertex, 0, self.loop)

    def connect(self, stream: Stream) -> None:
        """Feed ``stream`` (inside the loop) back to the loop's next iteration; once only."""
        if stream.scope is not self.loop:
            raise GraphError(f"the feedback of loop {self.loop.name!r} ({self.vertex!r}) takes a stream inside "
                             f"that loop; this one is in {_scope_name(stream.scope)}")
        (connected,) = self.loop.flow.vertices[self.vertex].inputs
        if connected:
            raise GraphError(f"the feedback of loop {self.loop.name!r} ({self.vertex!r}) is already connected "
                             f"(to {connected[0].source!r}); it can take {stream.vertex!r} only instead, not as well")
        self.loop.flow._connect_feedback(self.vertex, InputEdge(stream.vertex, stream.port, Channel()))


def _scope_name(scope: Loop | None) -> str:
    return f"loop {scope.name!r}" if scope else "the top level"


@dataclass(frozen=True)
class Probe:
    """Names a probe vertex; ask the job how far the probed stream has progressed."""

    vertex: str


def _identity(batch: Any) -> Any:
    return batch
