"""Collections: multisets that change by additions and deletions, with operators kept up to date.

Differential dataflow's model on the timely core. A :class:`Collection` is a stream of
updates ``(record, diff)``: at every time, the collection holds each record as many times
as the diffs of its updates so far add up to. Every operator turns changes in into
changes out, with work in proportion to what changed::

    edges = flow.collection("edges")                       # pushed as ((u, v), +1) / ((u, v), -1)
    degree = edges.map(lambda e: e[0]).count(lambda u: u)  # (node, degree), kept up to date
    degree.output("degree")                                # per epoch: the changes ((node, d), diff)

``join`` is incremental across all epochs (a record of epoch 5 meets one of epoch 4);
``reduce``, ``count`` and ``distinct`` re-run only for the keys whose records changed;
``iterate`` runs a body to its fixpoint over collections, retractions included, and
after an epoch's changes redoes only what they reach. Outputs are the consolidated changes
of each epoch; :func:`raytide.accumulate` folds them into the collection's contents.

Records must be hashable (tuples, not lists). Keys of one keyed operator must be of one
type. State is keyed state: it is saved in snapshots, recovered exactly once, restored at
other widths and rescaled live like any other (docs/collections.md).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, overload

from raytide.core.arranged import Arranged
from raytide.core.arranged_columns import ArrangedColumns
from raytide.core.collection_columns import DistinctColumns, FoldSums, NamedColumns, SumColumns
from raytide.core.collection_ops import (
    Consolidate,
    LinearSum,
    RoutingKey,
    count_logic,
    distinct_logic,
    identity,
    records_logic,
    summing_logic,
)
from raytide.core.columnar_flow import AnyStream
from raytide.core.logical import Channel, InputEdge, LogicalVertex
from raytide.differential import DIFF, canonical, update_columns, update_records
from raytide.errors import GraphError

#: Per loop, the streams of enclosing scopes already entered into it (entered once, read by all).
_ENTERED: weakref.WeakKeyDictionary[Any, dict[tuple[str, int], AnyStream]] = weakref.WeakKeyDictionary()


class Collection:
    """A collection of records changing over time: one or more streams of ``(record, diff)`` updates.

    A union (``concat``) is kept as the list of its streams rather than placed as a vertex:
    record-by-record operators apply to each (fused into the actor that makes it), and a
    keyed operator reads all of them on one input port, so a union costs no hop.
    """

    def __init__(self, *streams: AnyStream, consolidated: bool = False, columns: AnyStream | None = None,
                 names: tuple[str, ...] | None = None) -> None:
        if not streams and columns is None:
            raise GraphError("a collection needs at least one stream")
        self._streams: tuple[AnyStream, ...] | None = streams or None
        #: A stream of its updates as column batches or as pairs (an input's, a vectorised operator's).
        self._columns = columns
        #: Whether each time's updates come consolidated already (a reduction's output does).
        self.consolidated = consolidated and len(streams) <= 1
        #: The names of its records' fields, if ``columns`` carries them as those columns (``with_columns``).
        self.names = names

    def __repr__(self) -> str:
        return f"Collection({', '.join(repr(s.vertex) for s in self._sources())})"

    def _sources(self) -> tuple[AnyStream, ...]:
        """The streams the collection is made of, placing nothing."""
        return (self._columns,) if self._columns is not None else self.streams

    @property
    def streams(self) -> tuple[AnyStream, ...]:
        """The collection as streams of ``(record, diff)`` pairs (column batches read as pairs
        behind the stream that makes them, placed when first asked for)."""
        if self._streams is None:
            source: AnyStream = self._columns
            place = source.vertex if source.port == 0 else f"{source.vertex}.{source.port}"  # a shared join's outputs
            self._streams = (source._per_batch("records", update_records, name=f"{place}.records"),)
        return self._streams

    @property
    def flow(self) -> Any:
        """The dataflow the collection is in."""
        return self._sources()[0].flow

    @property
    def scope(self) -> Any:
        """The loop the collection is in (None: the top level)."""
        return self._sources()[0].scope

    @property
    def stream(self) -> AnyStream:
        """The collection as one stream of updates (a union placed as a ``concat`` vertex)."""
        first, *rest = self.streams
        return first.concat(*rest) if rest else first

    def update_columns(self, names: Sequence[str], *, name: str | None = None) -> AnyStream:
        """The collection's updates as column batches: columns ``names`` (a record's fields, in
        order) and ``diff`` (:func:`raytide.differential.update_columns`), for vectorised operators.
        Updates pushed as columns stay columns."""
        fields = tuple(names)
        made = [stream._per_batch("update_columns", lambda batch: update_columns(batch, fields), name=_nth(name, index))
                for index, stream in enumerate(self._sources())]
        first, *rest = made
        return first.concat(*rest) if rest else first

    def with_columns(self, *names: str, name: str | None = None) -> Collection:
        """The same collection, its records tuples of the fields ``names`` carried as columns of
        those names (and ``diff``): what ``join`` and ``sum`` by column name read, vectorised.

        Pushed column batches are renamed in their order; ``(record, diff)`` pairs are converted
        (each record a tuple of ``len(names)`` fields, or a value when there is one name).
        """
        if not names or len(set(names)) != len(names) or not all(isinstance(n, str) for n in names) or DIFF in names:
            raise GraphError(f"with_columns on collection {self._sources()[0].vertex!r}: give distinct column names "
                             f"(strings, not {DIFF!r}), got {names!r}")
        made = [stream._then("columns", lambda: NamedColumns(names), name=_nth(name, index), notifies=False)
                for index, stream in enumerate(self._sources())]
        first, *rest = made
        return Collection(columns=first.concat(*rest) if rest else first, names=tuple(names))

    def _each(self, make: Callable[[AnyStream, str | None], AnyStream], name: str | None) -> Collection:
        """``make(stream, name)`` applied to each stream of the union (``name``, ``name.1``, ...)."""
        return Collection(*(make(stream, _nth(name, index)) for index, stream in enumerate(self.streams)))

    # -- record by record ------------------------------------------------------------

    def map(self, fn: Callable[[Any], Hashable], *, name: str | None = None) -> Collection:
        """Each record ``r`` becomes ``fn(r)``, with its diff."""
        return self._each(lambda stream, vname: stream.map(lambda update: (fn(update[0]), update[1]), name=vname), name)

    def flat_map(self, fn: Callable[[Any], Iterable[Hashable]], *, name: str | None = None) -> Collection:
        """Each record ``r`` becomes the records of ``fn(r)``, each with ``r``'s diff."""
        return self._each(lambda stream, vname: stream.flat_map(
            lambda update: [(out, update[1]) for out in fn(update[0])], name=vname), name)

    def filter(self, predicate: Callable[[Any], bool], *, name: str | None = None) -> Collection:
        """The records for which ``predicate`` is true."""
        return self._each(lambda stream, vname: stream.filter(lambda update: predicate(update[0]), name=vname), name)

    def negate(self, *, name: str | None = None) -> Collection:
        """Every copy taken away: the collection whose sum with this one is empty."""
        return self._each(lambda stream, vname: stream.map(_negated, name=vname), name)

    def concat(self, *others: Collection, name: str | None = None) -> Collection:
        """The multiset sum of this collection and ``others`` (no vertex: see the class)."""
        streams = [stream for other in others for stream in self._aligned(other, "concat").streams]
        return Collection(*self.streams, *streams)

    def consolidate(self, *, name: str | None = None) -> Collection:
        """The same collection, each time's updates summed per record and zeros dropped."""
        return self._keyed("consolidate", Consolidate, [(self, _record_key)], name, None)

    # -- keyed ---------------------------------------------------------------------

    def reduce(self, key: Callable[[Any], Hashable], fn: Callable[[Hashable, list], Iterable[Hashable]], *,
               name: str | None = None, parallelism: int | None = None) -> Collection:
        """Per key, the records ``fn(key, records)`` returns, kept up to date as the key's records change.

        ``fn`` gets the key's current records (a record repeated by its count) whenever they
        change, and must depend on them as a multiset only: the first calls on each replica
        are checked by calling it again on the records in reverse order.
        """
        return self._reduce(key, records_logic(fn), "reduce", name, parallelism)

    def count(self, key: Callable[[Any], Hashable] | str, *, name: str | None = None,
              parallelism: int | None = None) -> Collection:
        """``(key, n)``: how many records (copies counted) each key has, kept up to date.

        On a collection with named columns (:meth:`with_columns`), ``key`` may name an integer
        column (top level only): the count is then vectorised, a linear sum of the copies as
        ``sum`` by column is, its output records ``(key, n)`` in columns ``key`` and ``count``.
        """
        if isinstance(key, str):
            return self._fold_columns("count", key, None, name, parallelism)
        return self._reduce(key, count_logic, "count", name, parallelism)

    def sum(self, key: Callable[[Any], Hashable] | str, value: Callable[[Any], Any] | str | None = None, *,
            name: str | None = None, parallelism: int | None = None) -> Collection:
        """``(key, total)``: the sum of ``value(record)`` (the record itself by default) over each
        key's records, copies counted, kept up to date; a key whose records are all gone leaves.

        At top level it is linear (:class:`~raytide.differential.Sums`): an epoch costs its
        changes, not the groups they touch, and integer totals are exact (float totals are
        running sums). Inside a loop it is a ``reduce`` (exact, ``math.fsum`` for floats).

        On a collection with named columns (:meth:`with_columns`), ``key`` and ``value`` may
        name columns (an integer key column, a numeric value column; top level only): the sum
        is then vectorised, its output records ``(key, total)`` in columns ``key`` and
        ``total``, integer totals in int64.
        """
        if isinstance(key, str):
            return self._sum_columns(key, value, name, parallelism)
        if isinstance(value, str):
            raise GraphError(f"sum: value names column {value!r}, so key must name a column too, got {key!r}")
        value_of = value or identity
        if self.scope is not None:
            return self._reduce(key, summing_logic(value_of), "sum", name, parallelism)
        made = self._keyed("sum", lambda: LinearSum(key, value_of), [(self, RoutingKey(key))], name, parallelism)
        return Collection(*made.streams, consolidated=True)

    def _sum_columns(self, key: str, value: Any, name: str | None, parallelism: int | None) -> Collection:
        """``sum`` by column names: :class:`~raytide.core.collection_columns.SumColumns`."""
        if not isinstance(value, str):
            raise GraphError(f"sum by column {key!r}: value must name a column too, got {value!r}")
        return self._fold_columns("sum", key, value, name, parallelism)

    def _fold_columns(self, label: str, key: str, value: str | None, name: str | None,
                      parallelism: int | None) -> Collection:
        """A sum of ``value`` (a count: None) per key column, vectorised: folded where the
        changes are sent from (:class:`~raytide.core.collection_columns.FoldSums`), added by
        :class:`~raytide.core.collection_columns.SumColumns`."""
        self._named(label, key, *([value] if value is not None else []))
        vname = name or self.flow._fresh(label, list(self._sources()), None)
        folds = self._sources()[0]._then("fold", lambda: FoldSums(key, value), name=f"{vname}.fold", notifies=False)
        made = self._keyed_columns(label, lambda: SumColumns(key, value), [(Collection(columns=folds), key)], vname,
                                   parallelism)
        return Collection(columns=made, names=(key, "total" if value is not None else "count"), consolidated=True)

    def _named(self, operator: str, *columns: str) -> tuple[str, ...]:
        """This collection's column names, which must hold ``columns``, at top level."""
        where = f"{operator} by column {columns[0]!r} on collection {self._sources()[0].vertex!r}"
        if self.names is None:
            raise GraphError(f"{where}: the collection has no named columns (name them with .with_columns(...))")
        if self.scope is not None:
            raise GraphError(f"{where}: by column name only at top level; inside a loop use a key function")
        missing = [column for column in columns if column not in self.names]
        if missing:
            raise GraphError(f"{where}: no column {missing[0]!r} among {self.names}")
        return self.names

    def distinct(self, *, name: str | None = None, parallelism: int | None = None) -> Collection:
        """Each record once, whatever its count, as long as it has a copy.

        On a collection with named columns (:meth:`with_columns`) at top level it is
        vectorised (:class:`~raytide.core.collection_columns.DistinctColumns`): the columns
        must hold integers, and its output has the same columns.
        """
        names = self.names
        if names is not None and self.scope is None:
            made = self._keyed_columns("distinct", lambda: DistinctColumns(names), [(self, names[0])], name, parallelism)
            return Collection(columns=made, names=names, consolidated=True)
        return self._reduce(identity, distinct_logic, "distinct", name, parallelism)

    def _reduce(self, key: Callable[[Any], Hashable], logic: Any, label: str, name: str | None,
                parallelism: int | None) -> Collection:
        """A reduction by ``key``: a reader of the collection's arrangement by that very key
        function, found or made here (named as the reduction's vertex was before)."""
        arranged = Arranged.found(self, key, name, parallelism)
        if arranged is None:
            arranged = Arranged(self, key, name or self.flow._fresh(label, list(self.streams), self.scope), parallelism)
        return arranged._reduce(logic)

    def join(self, other: Collection, key: Callable[[Any], Hashable] | str,
             other_key: Callable[[Any], Hashable] | str | None = None, *, name: str | None = None,
             parallelism: int | None = None) -> Collection:
        """``(k, (left, right))`` for every pair of records with equal keys, across all epochs.

        The pair's diff is the product of theirs; it comes at the later of their times.

        On collections with named columns (:meth:`with_columns`), ``key`` and ``other_key`` may
        name integer key columns (top level only): the join is then vectorised, each epoch's
        changes joined at once, and its records are flat, the left's fields then the right's
        but its key (``(order, customer, amount)`` joined with ``(customer, region)`` on
        ``customer`` gives ``(order, customer, amount, region)``), with named columns too.

        Joins share arrangements without being asked: the first join of a collection by a key
        (a column, or a function object) arranges it, and every later join of it by the same
        key, on either side, reads that arrangement (:meth:`arrange_by_key`), unless given a
        ``name`` of its own or another ``parallelism``.
        """
        if isinstance(other, Arranged):
            return self._join_arranged(other, key, other_key)
        if isinstance(other, ArrangedColumns):
            return self._join_arranged_columns(other, key, other_key)
        if isinstance(key, str):
            return self._join_columns(other, key, other_key or key, name, parallelism)
        if isinstance(other_key, str):
            raise GraphError(f"join: other_key names column {other_key!r}, so key must name a column too, got {key!r}")
        right, right_key = self._aligned(other, "join"), other_key or key
        mine, theirs = Arranged.found(self, key, name, parallelism), Arranged.found(right, right_key, name, parallelism)
        if mine is None and theirs is not None:
            return theirs.join(self, key, side=1)
        if mine is None:  # named as a join of its two sides was before arrangements were found
            mine = Arranged(self, key, name or self.flow._fresh("join", [*self.streams, *right.streams], self.scope),
                            parallelism)
        return mine.join(right, right_key)

    def _join_arranged(self, other: Arranged, key: Any, other_key: Any) -> Collection:
        """``join`` with an arrangement: this collection read by ``other``'s vertex, the arranged records second."""
        if isinstance(key, str) or other_key is not None:
            raise GraphError(f"join with arrangement {other.name!r}: give this collection's key function only "
                             f"(the arrangement's key is its own), got key={key!r}, other_key={other_key!r}")
        return other.join(self, key, side=1)

    @overload
    def arrange_by_key(self, key: str, *, name: str | None = None, parallelism: int | None = None) -> ArrangedColumns:
        ...

    @overload
    def arrange_by_key(self, key: Callable[[Any], Hashable], *, name: str | None = None,
                       parallelism: int | None = None) -> Arranged:
        ...

    def arrange_by_key(self, key: Callable[[Any], Hashable] | str, *, name: str | None = None,
                       parallelism: int | None = None) -> Arranged | ArrangedColumns:
        """The collection arranged by ``key`` once, for every operator given it (differential's
        shared arrangement, :mod:`raytide.core.arranged`): ``arranged.join(other, other_key)``,
        ``other.join(arranged, key)``, ``arranged.reduce(fn)``, ``.count()`` and ``.distinct()``
        all read one trace per replica, held, saved, compacted and rescaled once.

        With named columns (:meth:`with_columns`), ``key`` may name an integer key column: the
        arrangement's joins are then vectorised (:mod:`raytide.core.arranged_columns`), and every
        join of this collection by that column reads it, asked for or not."""
        if isinstance(key, str) and self.names is None:
            raise GraphError(f"arrange_by_key on collection {self._sources()[0].vertex!r}: the key must be a function "
                             f"of a record, got {key!r} (a key column needs named columns: .with_columns(...))")
        if isinstance(key, str):
            found = ArrangedColumns.found(self, key, name, parallelism)
            return found or ArrangedColumns(self, key, name or self.flow._fresh("arrange", [self._sources()[0]], None),
                                            parallelism).remember()
        return Arranged(self, key, name, parallelism).remember()

    def _join_arranged_columns(self, other: ArrangedColumns, key: Any, other_key: Any) -> Collection:
        """``join`` with a column arrangement: this collection's column ``key`` against the arrangement's."""
        if not isinstance(key, str) or other_key not in (None, other.key):
            raise GraphError(f"join with arrangement {other.name!r}: give this collection's key column only (the "
                             f"arrangement's key is {other.key!r}), got key={key!r}, other_key={other_key!r}")
        return other.join(self, key, side=1)

    def _join_columns(self, other: Collection, key: str, other_key: Any, name: str | None,
                      parallelism: int | None) -> Collection:
        """``join`` by column names, reading an arrangement of either side by its key column if
        one was made (:mod:`raytide.core.arranged_columns`), else arranging this one."""
        if not isinstance(other, Collection) or not isinstance(other_key, str):
            raise GraphError(f"join by column {key!r}: takes a collection with named columns and a column name "
                             f"other_key, got {other!r} and {other_key!r}")
        self._named("join", key)
        other._named("join", other_key)
        mine = ArrangedColumns.found(self, key, name, parallelism)
        theirs = ArrangedColumns.found(other, other_key, name, parallelism)
        if mine is None and theirs is not None:
            return theirs.join(self, key, side=1)
        if mine is None:  # named as a join of its two sides was before arrangements were found
            mine = ArrangedColumns(self, key, name or self.flow._fresh("join", [self._sources()[0], other._sources()[0]],
                                                                        None), parallelism)
        return mine.join(other, other_key)

    def _keyed_columns(self, label: str, factory: Callable[[], Any], ports: list[tuple[Collection, str]],
                       name: str | None, parallelism: int | None) -> AnyStream:
        """One vertex reading each collection's column batches on a port of its own, exchanged by a key column."""
        sources = [collection._sources()[0] for collection, _ in ports]
        vname = name or self.flow._fresh(label, sources, None)
        edges = tuple((InputEdge(source.vertex, source.port, Channel("exchange", key)),)
                      for source, (_, key) in zip(sources, ports))
        self.flow._add(LogicalVertex(vname, factory, edges, 1, 0, parallelism=parallelism))
        return type(sources[0])(self.flow, vname, 0, None)

    def _keyed(self, label: str, factory: Callable[[], Any], ports: list[tuple[Collection, Any]], name: str | None,
               parallelism: int | None) -> Collection:
        """One vertex reading each collection of ``ports`` on a port of its own, every stream of it
        exchanged by that port's key."""
        streams = [stream for collection, _ in ports for stream in collection.streams]
        vname = name or self.flow._fresh(label, streams, self.scope)
        edges = tuple(tuple(InputEdge(s.vertex, s.port, Channel("exchange", key)) for s in collection.streams)
                      for collection, key in ports)
        self.flow._add(LogicalVertex(vname, factory, edges, 1, self.streams[0].depth, parallelism=parallelism))
        return Collection(type(self.streams[0])(self.flow, vname, 0, self.scope))

    # -- iteration -----------------------------------------------------------------

    def iterate(self, body: Callable[[Collection], Collection], *, max_iterations: int | None = None,
                name: str | None = None) -> Collection:
        """The fixpoint of ``body``: starting from this collection, ``body`` applied until nothing changes.

        ``body`` gets the collection of the current iteration (inside a new loop) and
        returns the next one. Collections of enclosing scopes used in it (``join`` with an
        edge list, say) enter the loop by themselves. After each epoch's changes the
        fixpoint is brought up to date, not recomputed: only what those changes reach is
        redone, iteration by iteration. Loops nest. With ``max_iterations``, the result
        after that many applications (if no fixpoint came sooner).

        The next iteration's collection is the result: what goes round is the result's
        updates and this collection's taken back, each on a feedback edge of its own (fused
        into the actor that makes it). If the body does not end with a ``reduce``, ``count``
        or ``distinct`` (whose output is consolidated), its result is consolidated first, so
        that updates that cancel stop there. Without ``max_iterations`` the loop's output is
        read behind the feedback edge (the same updates, the iteration counter dropped alike),
        so that the feedback is the result's only consumer and runs in its actor.
        """
        loop = self.flow._new_loop("iterate", name, self.scope, list(self.streams))
        entered = Collection(*(_enter(stream, loop) for stream in self.streams))
        taken_back = [loop.feedback(max_iterations=max_iterations) for _ in entered.streams]
        for back, stream in zip(taken_back, entered.negate().streams):
            back.connect(stream)
        results = loop.feedback(max_iterations=max_iterations)
        result = body(Collection(*entered.streams, *(back.stream for back in taken_back), results.stream))
        if not isinstance(result, Collection) or result.scope is not loop:
            raise GraphError(f"iterate {loop.name!r}: the body must return a Collection inside its loop, "
                             f"got {result!r}")
        going_round = result if result.consolidated else result.consolidate()
        results.connect(going_round.streams[0])
        if max_iterations is None:  # the same updates, one iteration on: the loop's output (its counter goes)
            return Collection(loop.leave(results.stream))
        return Collection(*(loop.leave(stream) for stream in going_round.streams))  # the last would be dropped

    # -- leaving -------------------------------------------------------------------

    def output(self, name: str) -> None:
        """Deliver the collection's changes as output ``name``: per epoch, consolidated ``(record, diff)``."""
        made = self if self.consolidated else self.consolidate(name=f"{name}.consolidate")
        made.streams[0].output(name)

    def _aligned(self, other: Any, operator: str) -> Collection:
        """``other`` in this collection's scope: entered into the loops it is outside of."""
        if not isinstance(other, Collection):
            raise GraphError(f"{operator} on collection {self._sources()[0].vertex!r} takes collections, got {other!r}"
                             " (a stream becomes a collection with stream.as_collection())")
        scope, path = self.scope, []
        while scope is not other.scope:
            if scope is None:
                raise GraphError(f"{operator}: collection {other._sources()[0].vertex!r} is inside a loop that "
                                 f"{self._sources()[0].vertex!r} is not in; leave the loop first")
            path.append(scope)
            scope = scope.parent
        streams = other.streams
        for loop in reversed(path):
            streams = tuple(_enter(stream, loop) for stream in streams)
        return Collection(*streams, consolidated=other.consolidated)


def _enter(stream: AnyStream, loop: Any) -> AnyStream:
    """``stream`` entered into ``loop`` (its parent's stream), once per loop."""
    entered = _ENTERED.setdefault(loop, {})
    place = (stream.vertex, stream.port)
    if place not in entered:
        entered[place] = loop.enter(stream)
    return entered[place]


def _nth(name: str | None, index: int) -> str | None:
    """The name of the vertex placed for stream ``index`` of a union: ``name``, ``name.1``, ..."""
    return name if name is None or index == 0 else f"{name}.{index}"


def _negated(update: tuple) -> tuple:
    return (update[0], -update[1])


def _record_key(update: tuple) -> Hashable:
    return canonical(update[0])

