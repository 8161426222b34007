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

import operator
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from raytide.core.batches import BatchFormat, checked_batch, to_format, to_records
from raytide.core.collection import Collection
from raytide.core.collection_ops import CheckUpdates
from raytide.core.columnar import StateColumn
from raytide.core.columnar_flow import iterate_columns, keyed_columns
from raytide.core.logical import Channel, ExchangeKey, InputEdge, KeyFn, LogicalVertex, VertexFactory
from raytide.core.naming import VertexIds
from raytide.core.operators import (
    COMBINER_MAX_KEYS,
    BatchFunction,
    Egress,
    EpochJoin,
    Feedback,
    Ingress,
    KeyedCount,
    KeyedMerge,
    KeyedReduce,
    StatefulMap,
    flat_map_batch,
    pair_key,
)
from raytide.core.step import Step
from raytide.core.temporal import interval_joined, latest_joined
from raytide.core.vertex import Vertex
from raytide.core.windowing import SplitLate, WindowedStream, WindowSpec, windowed
from raytide.errors import GraphError
from raytide.progress.summaries import PathSummary
from raytide.windows.event_time import EventTime, checked_event_time, late_input

#: The channel of an edge that names none: replica ``i`` to replica ``i``.
PIPELINE = Channel()


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
class Stream:
    """A stream of timestamped batches: output port ``port`` of vertex ``vertex``."""

    flow: Dataflow
    vertex: str
    port: int
    scope: Loop | None = None

    @property
    def depth(self) -> int:
        """How many loop contexts the stream is inside."""
        return self.scope.depth if self.scope else 0

    # -- placing vertices ------------------------------------------------------------

    def unary(
        self,
        factory: type[Vertex] | VertexFactory,
        *,
        exchange: ExchangeKey | None = None,
        name: str | None = None,
        parallelism: int | None = None,
    ) -> Stream:
        """Place a one-input, one-output vertex; ``exchange`` partitions its input by key."""
        return self.flow.vertex(factory, [self], 1, exchange=[exchange], name=name, parallelism=parallelism)[0]

    def _then(self, label: str, factory: VertexFactory, channel: Channel = PIPELINE, name: str | None = None,
              parallelism: int | None = None, terminal: bool = False, notifies: bool = True,
              settles_with_input: bool = False) -> Stream:
        vname = name or self.flow._fresh(label, [self], self.scope)
        vertex = LogicalVertex(vname, factory, ((InputEdge(self.vertex, self.port, channel),),), 1, self.depth,
                               parallelism=parallelism, terminal=terminal, notifies=notifies,
                               settles_with_input=settles_with_input)
        self.flow._add(vertex)
        return Stream(self.flow, vname, 0, self.scope)

    def _per_batch(self, label: str, fn: Callable[[Any], Any], channel: Channel = PIPELINE, name: str | None = None,
                   parallelism: int | None = None, terminal: bool = False) -> Stream:
        """A :class:`BatchFunction` vertex running ``fn`` on each batch (it never asks for a notification)."""
        return self._then(label, lambda: BatchFunction(fn), channel, name, parallelism, terminal, notifies=False)

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

    # -- keyed, per epoch ------------------------------------------------------------

    def count_by_key(self, key: KeyFn, *, name: str | None = None, parallelism: int | None = None) -> Stream:
        """Per timestamp, ``(key, count)`` records; counts are combined before the exchange.

        Two vertices: ``name + ".combine"`` counts before the exchange, ``name`` after it.
        """
        vname = name or self.flow._fresh("count_by_key", [self], self.scope)
        partial = self._then("", lambda: KeyedCount(key, COMBINER_MAX_KEYS), name=f"{vname}.combine",
                             settles_with_input=True)
        return partial._then("", lambda: KeyedMerge(operator.add), Channel("exchange", pair_key), vname, parallelism)

    def reduce_by_key(self, key: KeyFn, reducer: Callable[[Any, Any], Any], *,
                      value: Callable[[Any], Any] = lambda r: r, name: str | None = None,
                      parallelism: int | None = None) -> Stream:
        """Per timestamp, ``(key, reducer(...reducer(v1, v2)..., vn))``; ``reducer`` must be associative
        and commutative.

        Two vertices: ``name + ".combine"`` reduces before the exchange, ``name`` after it.
        """
        vname = name or self.flow._fresh("reduce_by_key", [self], self.scope)
        partial = self._then("", lambda: KeyedReduce(key, value, reducer, COMBINER_MAX_KEYS),
                             name=f"{vname}.combine", settles_with_input=True)
        return partial._then("", lambda: KeyedMerge(reducer), Channel("exchange", pair_key), vname, parallelism)

    def stateful_map(self, key: KeyFn, fn: Callable[[Any, Any], tuple[Any, Any]], *, name: str | None = None,
                     parallelism: int | None = None) -> Stream:
        """Keyed state that lives across epochs: ``fn(state, record) -> (new_state, output)``, emits
        ``(key, output)``."""
        return self._then("stateful_map", lambda: StatefulMap(key, fn), Channel("exchange", key), name, parallelism)

    def join(self, other: Stream, key: KeyFn, other_key: KeyFn | None = None, *, name: str | None = None,
             parallelism: int | None = None) -> Stream:
        """Per-epoch inner join with ``other``: ``(key, this_record, other_record)`` for equal keys."""
        right = other_key or key
        streams = [self, other]
        vname = name or self.flow._fresh("join", streams, Dataflow._common_scope(streams, "join"))
        return self.flow.vertex(lambda: EpochJoin(key, right), streams, 1, exchange=[key, right],
                                name=vname, parallelism=parallelism)[0]

    def window(self, key: KeyFn | str, spec: WindowSpec, *, name: str | None = None,
               parallelism: int | None = None) -> WindowedStream:
        """Keyed windows over epochs (``rt.Tumbling``, ``rt.Sliding``, ``rt.Session``): then ``.count()``,
        ``.reduce(fn)`` or ``.aggregate(...)``, one ``(key, start, end, value)`` per key and window (docs/windows.md)."""
        return windowed(self, key, spec, name, parallelism)

    def interval_join(self, other: Stream, key: KeyFn, lower: float, upper: float, *, other_key: KeyFn | None = None,
                      name: str | None = None, parallelism: int | None = None) -> Stream:
        """``(key, this_record, other_record)`` for equal keys whose times differ by ``lower <= other's - this one's
        <= upper``, at the later of their epochs; state leaves once the frontier passes (docs/windows.md). On
        event-time inputs a time is the record's own timestamp and the bounds are seconds; else epochs, and integers."""
        return interval_joined(self, other, key, lower, upper, other_key, name, parallelism)

    def join_latest(self, table: Stream, key: KeyFn, *, table_key: KeyFn | None = None, name: str | None = None,
                    parallelism: int | None = None) -> Stream:
        """``(key, record, value)``: each record with the latest value of its key in ``table``'s updates as of its
        epoch (that epoch's updates first; ``None`` if none yet; docs/windows.md)."""
        return latest_joined(self, table, key, table_key, name, parallelism)

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

    # -- columnar keyed state ---------------------------------------------------------

    def keyed_columns(self, step: Callable[[Step], Any], *, key: str, state: Mapping[str, StateColumn],
                      combine: Mapping[str, np.ufunc] | None = None, arranged: Stream | None = None,
                      arrange_key: str = "key", outputs: int = 1, exchange: bool = True, name: str | None = None,
                      parallelism: int | None = None) -> Stream | list[Stream]:
        """Columnar keyed state: ``step(s)`` runs once per replica and timestamp over that time's batches.

        Batches are dicts of NumPy columns; they are exchanged by the integer column ``key``
        and, with ``combine`` (``{column: ufunc}``, associative ufuncs such as
        ``np.minimum``), folded to one row per key. ``state`` gives each state column's
        ``(dtype, initial value)`` (a scalar, or a function of the new keys); the columns
        live across epochs. ``arranged`` rows (exchanged by ``arrange_key``) stay, indexed
        by key, for every later step (``s.arrangement(1)``). ``step`` returns a batch, or a
        tuple of ``outputs`` batches (see :class:`~raytide.core.step.Step`). ``exchange=False``
        keeps each replica's rows where they are (when they are partitioned by ``key`` already).
        """
        made = keyed_columns(self, step, key, state, combine, arranged, arrange_key, outputs, exchange, name,
                             parallelism)
        return made[0] if outputs == 1 else made

    def iterate_columns(self, step: Callable[[Step], Any], *, key: str, state: Mapping[str, StateColumn],
                        combine: Mapping[str, np.ufunc] | None = None, arrange: str | None = None,
                        outputs: int = 1, name: str | None = None,
                        finish: Callable[[Step], Any] | None = None,
                        repeatable_rounds: bool = False, diff: str | None = None) -> Stream | list[Stream]:
        """A loop around columnar keyed state (Pregel-like): iterate until no update is left.

        This stream enters the loop once per epoch: arranged by column ``arrange`` (rows that
        stay visible at every later iteration and epoch, ``s.arrangement()``, and arrive as
        ``s.added``), or, without ``arrange``, as the first updates. ``step`` returns a
        tuple ``(next_round, out_1, ..., out_outputs)``: ``next_round``'s rows (keyed by
        ``key``, combined with ``combine`` before the exchange) are the updates of the next
        iteration; the other batches leave the loop, as the returned streams. ``state`` and
        ``combine`` are as in :meth:`keyed_columns`. Every replica runs the step at the
        first round of each epoch with input. Epochs may be pushed without waiting: they go
        through the loop one after another, each from the state the ones before it left
        (the step's ``iteration`` counts from the epoch's first round; docs/iteration.md).

        ``finish``, if given, runs at every replica once an epoch's rounds are over (no
        replica sent anything to a next round), with no updates, and returns the batches
        ``(out_1, ..., out_outputs)`` that leave the loop for the epoch (a per-epoch result
        sent once rather than a change per round; the step then returns None for them). A
        replica that took keys in a live rescale after it finished runs it again: it should
        send what changed since its last call (flag the rows the step changes in a state
        column, and clear the flags).

        ``repeatable_rounds``: say True if running a round again for keys that already ran it
        changes nothing (their updates were used; a min-label propagation then finds nothing
        lower, where PageRank, which resets and adds, would count twice). A live rescale, or
        a restore at another parallelism, can catch the replicas at different rounds of an
        epoch, and the replica that takes keys from both runs the earlier round for all of
        them. Without it, such a rescale is refused while an epoch is in the loop (the job
        goes on as it was; try again between epochs).

        ``diff``: the arranged rows carry a multiplicity in this column (a collection's
        updates): the arrangement nets them and drops what cancels (``s.arrangement()``
        gives net rows; a negative diff takes rows back).
        """
        made = iterate_columns(self, step, key, state, combine, arrange, outputs, name, finish, repeatable_rounds,
                               diff)
        return made[0] if outputs == 1 else made

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
