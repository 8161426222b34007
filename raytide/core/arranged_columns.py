"""Shared columnar arrangements: a collection with named columns arranged by a key column once,
read by every join of it by that column, found without being asked for.

``a.join(b, "k")`` arranges ``a`` by ``k``; a later join of ``a`` by ``k`` (``a.join(c, "k")``
or ``c.join(a, "k")``) reads that arrangement instead of keeping a copy: both joins are one
vertex (:class:`~raytide.core.collection_columns.JoinColumns`), whose port 0 is ``a`` and
port ``1 + j`` join ``j``'s other side, and whose output ``j`` is join ``j``'s. Column names,
unlike key functions, can be compared, so the runtime finds the arrangement itself, as
differential dataflow's ``arrange_by_key`` would have it shared when asked. A join of a
collection not arranged yet with one that is reads the one that is. ``arrange_by_key(column)``
gives the arrangement by name (:class:`ArrangedColumns`), for a join to read it explicitly.

A join given its own ``name=``, or a ``parallelism=`` other than the arrangement's, places
its own vertex (a vertex has one name and one width), which later joins then find.
"""

from __future__ import annotations

from typing import Any

from raytide.core.collection_columns import JoinColumns
from raytide.core.column_join import JoinSpec
from raytide.core.logical import Channel, InputEdge, LogicalVertex
from raytide.errors import GraphError


class ArrangedColumns:
    """A collection with named columns arranged by a key column (see the module): ``join``
    reads it; ``collection`` is the collection arranged."""

    def __init__(self, collection: Any, key: str, name: str, parallelism: int | None) -> None:
        self.names = collection._named("join", key)
        self.collection, self.key, self.name, self.parallelism = collection, key, name, parallelism
        self.source = collection._sources()[0]
        self._specs: list[JoinSpec] = []
        self._ports: list[tuple[InputEdge, ...]] = [self._edges(self.source, key)]

    def remember(self) -> ArrangedColumns:
        """Keep it in its dataflow for later joins to find (done once it is placed, or asked for)."""
        self.collection.flow._arrangements[(self.source.vertex, self.source.port, self.key)] = self
        return self

    def __repr__(self) -> str:
        return f"ArrangedColumns({self.name!r} by {self.key!r}, {len(self._specs)} joins)"

    @classmethod
    def found(cls, collection: Any, key: str, name: str | None, parallelism: int | None) -> ArrangedColumns | None:
        """The arrangement of ``collection`` by ``key`` a join named ``name`` of width
        ``parallelism`` reads, if one was made (None: none, or the join places its own)."""
        source = collection._sources()[0]
        made = collection.flow._arrangements.get((source.vertex, source.port, key))
        if made is None or name is not None or made.parallelism != parallelism:
            return None
        return made

    def join(self, other: Any, other_key: str | None = None, *, side: int = 0) -> Any:
        """The join by column name (``Collection.join``) of the arranged collection with ``other``
        by its column ``other_key`` (the arrangement's key by default), reading the arrangement;
        ``side=1`` puts the arranged collection on the right (``other.join(arranged, key)``)."""
        other_key = other_key or self.key
        if isinstance(other, ArrangedColumns):
            raise GraphError(f"join of arrangement {self.name!r} with arrangement {other.name!r}: one vertex holds "
                             "an arrangement, so give one side as a collection (arranged.collection)")
        if not hasattr(other, "_named") or not isinstance(other_key, str):
            raise GraphError(f"join with arrangement {self.name!r} by column {self.key!r}: takes a collection with "
                             f"named columns and a column name, got {other!r} and {other_key!r}")
        own = other._named("join", other_key)
        if side == 0:
            spec = JoinSpec(self.names, own, self.key, other_key, arranged_left=True)
        else:
            spec = JoinSpec(own, self.names, other_key, self.key, arranged_left=False)
        try:
            names = spec.output_names
        except ValueError as error:
            raise GraphError(f"join by column {spec.left_key!r} with arrangement {self.name!r}: {error}") from None
        return type(self.collection)(columns=self._place(spec, self._edges(other._sources()[0], other_key)), names=names)

    def _edges(self, source: Any, key: str) -> tuple[InputEdge, ...]:
        return (InputEdge(source.vertex, source.port, Channel("exchange", key)),)

    def _place(self, spec: JoinSpec, port: tuple[InputEdge, ...]) -> Any:
        """The vertex placed again with join ``spec``'s port and output; the stream of that output."""
        names, key, specs, ports, flow = self.names, self.key, (*self._specs, spec), [*self._ports, port], self.collection.flow
        vertex = LogicalVertex(self.name, lambda: JoinColumns(names, key, specs), tuple(ports), len(specs), 0,
                               parallelism=self.parallelism)
        (flow._add if len(specs) == 1 else flow._place)(vertex)  # a first placement must not take a name in use
        self._specs, self._ports = list(specs), ports
        self.remember()
        return type(self.source)(flow, self.name, len(specs) - 1, None)
