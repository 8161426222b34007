"""Shared arrangements: ``Collection.arrange_by_key(key)``, one trace read by several operators.

Differential dataflow's ``arrange_by_key``: the collection is exchanged by ``key`` once and
held once per replica (:class:`~raytide.differential.SharedArrangement`); every ``join``,
``reduce``, ``count`` or ``distinct`` given the :class:`Arranged` reads that trace instead
of keeping a copy::

    by_customer = orders.arrange_by_key(lambda o: o[1])
    with_region = by_customer.join(customers, lambda c: c[0])   # (customer, (order, customer_row))
    per_customer = by_customer.count()                          # (customer, orders)
    flagged = flags.join(by_customer, lambda f: f[0])           # (customer, (flag, order))

All of them are one vertex (:class:`ArrangedReaders`): input 0 is the arranged
collection, then one input per reading join (its other collection, exchanged by its key),
one output per reader. Each reader added replaces the vertex with one more port, in its
place in the dataflow. Its state is the one trace plus each reader's own (a join's other
side, a reduction's output), saved, compacted, counted in ``job.stats()`` and moved by key
once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

from raytide.core.collection_ops import (
    RoutingKey,
    _Keyed,
    _trace_counters,
    count_logic,
    distinct_logic,
    identity,
    located,
    records_logic,
    summing_logic,
)
from raytide.core.logical import Channel, InputEdge, KeyFn, LogicalVertex
from raytide.differential import Join, Logic, Reduction, SharedArrangement
from raytide.errors import GraphError
from raytide.progress.timestamps import Timestamp

#: How a reader reads the arrangement: ``("join", side, other_key)`` or ``("reduce", logic)``.
ReaderSpec = tuple[Any, ...]


class ArrangedReaders(_Keyed):
    """The vertex of an arrangement and its readers: one trace, each reader's output on its own port."""

    def __init__(self, key_of: KeyFn, readers: tuple[ReaderSpec, ...]) -> None:
        super().__init__()
        self.arrangement = SharedArrangement()
        self.keys: list[KeyFn] = [key_of]  # per input port, the key its updates are arranged by
        self.joins: list[int] = []  # per input port after the first, the output of its join
        for output, spec in enumerate(readers):
            if spec[0] == "join":
                self.arrangement.join(spec[1])
                self.keys.append(spec[2])
                self.joins.append(output)
            else:
                self.arrangement.reduce(spec[1])

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        updates = self._keyed(self.keys[edge], message, time)
        if edge:
            output = self.joins[edge - 1]
            reader = self.arrangement.readers[output]
            assert isinstance(reader, Join)
            self._send_changes(output, reader.receive(reader.owned[0], time, updates))
            return
        before = self.arrangement.times()
        for output, answer in enumerate(self.arrangement.receive(time, updates)):
            if isinstance(answer, dict):
                self._send_changes(output, answer)
        self._notify_new(before)

    def _send_changes(self, output: int, changes: dict[Timestamp, list]) -> None:
        for when in sorted(changes, key=Timestamp.sort_key):
            self.send_by(output, changes[when], when)

    def _notify_new(self, before: set[Timestamp]) -> None:
        """Ask for the notifications of the reductions' times that were not due ``before`` (the
        time being run, no longer due, keeps its notification: it is the one delivered now)."""
        for time in self.arrangement.times() - before:
            self.notify_at(time)

    def run(self, time: Timestamp) -> None:
        before = self.arrangement.times()
        for output, reader in enumerate(self.arrangement.readers):
            if isinstance(reader, Reduction):
                with located(self, time):
                    changes, _ = reader.run(time)
                if changes:
                    self.send_by(output, changes, time)
        self._notify_new(before)

    def compact(self, done: int) -> None:
        self.arrangement.compact(done)

    def statistics(self) -> dict[str, int]:
        return {**_trace_counters(*self.arrangement.traces()), "shared_updates": self.arrangement.trace.size}

    def snapshot(self) -> Any:
        return self._saved(self.arrangement)

    def restore(self, state: Any) -> None:
        self.arrangement = SharedArrangement.of(self._restored(state))

    def take_keys(self, moving: Callable[[Hashable], bool]) -> Any:
        return self._taken(self.arrangement, moving)

    def put_keys(self, state: Any) -> None:
        self._put(self.arrangement, state)


class Arranged:
    """A collection arranged by a key, once, for every operator given it (``Collection.arrange_by_key``).

    Its readers' results are collections in the arranged collection's scope; a collection
    of an enclosing scope given to its ``join`` is entered into it.
    """

    def __init__(self, collection: Any, key: KeyFn, name: str | None, parallelism: int | None) -> None:
        if not callable(key):
            raise GraphError(f"arrange_by_key on collection {collection!r}: the key must be a function of a record, "
                             f"got {key!r}")
        self.collection, self.key, self.parallelism = collection, key, parallelism
        self.routing = RoutingKey(key)
        self.name = name or collection.flow._fresh("arrange", list(collection.streams), collection.scope)
        self._readers: list[ReaderSpec] = []
        self._ports: list[tuple[InputEdge, ...]] = [self._edges(collection, self.routing)]

    def remember(self) -> Arranged:
        """Keep it in its dataflow for later operators to find (done once it is placed, or asked for)."""
        place = _place_of(self.collection, self.key)
        if place is not None:
            self.collection.flow._arrangements[place] = self
        return self

    def __repr__(self) -> str:
        return f"Arranged({self.name!r}, {len(self._readers)} readers)"

    @classmethod
    def found(cls, collection: Any, key: KeyFn, name: str | None, parallelism: int | None) -> Arranged | None:
        """The arrangement of ``collection`` by the very function ``key`` an operator named
        ``name`` of width ``parallelism`` reads, if one was made (None: none, or the operator
        places its own: a vertex has one name and one width)."""
        place = _place_of(collection, key)
        made = None if place is None else collection.flow._arrangements.get(place)
        if made is None or name is not None or made.parallelism != parallelism:
            return None
        return made

    def join(self, other: Any, other_key: KeyFn | None = None, *, side: int = 0) -> Any:
        """``(k, (record, other_record))`` for every pair with equal keys, across all epochs, reading
        the arrangement (``other_key``: ``other``'s key, the arrangement's by default).
        ``side=1`` puts the arranged record second (what ``other.join(arranged, key)`` gives)."""
        if isinstance(other_key, str):
            raise GraphError(f"join with arrangement {self.name!r}: other_key names column {other_key!r}; an "
                             "arrangement is by a key function (by column name, join the collections)")
        if isinstance(other, Arranged):
            raise GraphError(f"join of arrangement {self.name!r} with arrangement {other.name!r}: one vertex holds "
                             "an arrangement, so give one side as a collection (arranged.collection)")
        try:
            right = self.collection._aligned(other, "join")
        except GraphError as error:
            raise GraphError(f"join with arrangement {self.name!r}: {error} (an arrangement is read in the loop it is "
                             "made in: inside a loop, arrange a collection of the loop)") from None
        return self._read(("join", side, other_key or self.key), consolidated=False,
                          port=self._edges(right, RoutingKey(other_key or self.key, agreeing=self.routing)))

    def reduce(self, fn: Callable[[Hashable, list], Iterable[Hashable]]) -> Any:
        """``Collection.reduce`` by the arrangement's key, reading it: ``fn(key, records)``'s records."""
        return self._reduce(records_logic(fn))

    def count(self) -> Any:
        """``(key, n)``: how many records (copies counted) each key of the arrangement has."""
        return self._reduce(count_logic)

    def sum(self, value: Callable[[Any], Any] | None = None) -> Any:
        """``(key, total)``: the sum of ``value(record)`` (the record itself by default) over each
        key's records, copies counted, read from the arrangement (exact, as ``sum`` in a loop)."""
        return self._reduce(summing_logic(value or identity))

    def distinct(self) -> Any:
        """Each record of the arranged collection once while it has a copy."""
        return self._reduce(distinct_logic)

    def _reduce(self, logic: Logic) -> Any:
        return self._read(("reduce", logic), consolidated=True)

    def _edges(self, collection: Any, key: RoutingKey) -> tuple[InputEdge, ...]:
        return tuple(InputEdge(s.vertex, s.port, Channel("exchange", key)) for s in collection.streams)

    def _read(self, spec: ReaderSpec, consolidated: bool, port: tuple[InputEdge, ...] | None = None) -> Any:
        """A new reader (a join's other collection on ``port``): the vertex placed again with its
        port and output; the reader's result."""
        readers, ports = (*self._readers, spec), [*self._ports, *([port] if port is not None else [])]
        key, flow = self.key, self.collection.flow
        vertex = LogicalVertex(self.name, lambda: ArrangedReaders(key, readers), tuple(ports), len(readers),
                               self.collection.streams[0].depth, parallelism=self.parallelism)
        (flow._add if len(readers) == 1 else flow._place)(vertex)  # a first placement must not take a name in use
        self._readers, self._ports = list(readers), ports
        self.remember()
        stream = type(self.collection.streams[0])(flow, self.name, len(readers) - 1, self.collection.scope)
        return type(self.collection)(stream, consolidated=consolidated)


def _place_of(collection: Any, key: KeyFn) -> tuple | None:
    """Where an arrangement of ``collection`` by ``key`` is kept in its dataflow: its streams
    and the key function itself (None: a key that cannot be hashed is never found)."""
    try:
        hash(key)
    except TypeError:
        return None
    return (tuple((stream.vertex, stream.port) for stream in collection.streams), key)
