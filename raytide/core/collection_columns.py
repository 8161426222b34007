"""The vertices of collections with named columns: thin shells around :mod:`raytide.core.column_join`.

``Collection.with_columns(names)`` reads a collection's updates as column batches with the
record fields ``names`` and ``diff`` (:class:`NamedColumns`, fused behind the stream that
makes them); a join or a sum by column name then exchanges them by an integer key column
(NumPy, no call per update) and keeps its state columnar. Both gather each epoch's batches
per input port and run at the epoch's notification (top level only: epochs complete in
order), sending one column batch of the output's changes. A sum's changes are folded per
key before they are sent (:class:`FoldSums`), so it gets a row per key and sender.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from raytide.core.arrangement import Rows
from raytide.core.collection_ops import located
from raytide.core.column_distinct import DistinctRows
from raytide.core.column_join import ArrangedJoins, ColumnSums, JoinSpec, folded_sums
from raytide.core.keyindex import concat
from raytide.core.step import keys_moving
from raytide.core.vertex import Vertex
from raytide.differential import update_columns
from raytide.progress.timestamps import Timestamp

__all__ = ["DistinctColumns", "FoldSums", "JoinColumns", "NamedColumns", "SumColumns"]


class NamedColumns(Vertex):
    """A collection's batches (column batches or ``(record, diff)`` pairs) as the columns
    ``names`` and ``diff`` (:func:`~raytide.differential.update_columns`)."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = tuple(names)

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        with located(self, time):
            columns = update_columns(message, self.names)
        self.send_by(0, columns, time)


class FoldSums(Vertex):
    """Each batch's changes folded per key before they are sent to the sum (a combiner, fused
    behind the stream that makes them): :func:`~raytide.core.column_join.folded_sums`."""

    def __init__(self, key: str, value: str | None) -> None:
        self.key, self.value = key, value

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        rows = {name: np.asarray(values) for name, values in message.items()}
        with located(self, time):
            folded = folded_sums(rows, self.key, self.value)
        if len(folded[self.key]):
            self.send_by(0, folded, time)


class _PerEpoch(Vertex):
    """A vertex that gathers each time's column batches per port until the time's
    notification; ``port_keys[port]`` names the key column each port is exchanged by."""

    port_keys: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.pending: dict[Timestamp, dict[int, list[Rows]]] = {}

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        rows = {name: np.asarray(values) for name, values in message.items()}
        if len(rows[self.port_keys[edge]]):
            self._inbox(time).setdefault(edge, []).append(rows)

    def _inbox(self, time: Timestamp) -> dict[int, list[Rows]]:
        inbox = self.pending.get(time)
        if inbox is None:
            inbox = self.pending[time] = {}
            self.notify_at(time)
        return inbox

    def _gathered(self, time: Timestamp) -> list[Rows | None]:
        """Each port's batches of ``time``, as one batch (None: none), removed."""
        inbox = self.pending.pop(time, {})
        return [_joined(inbox[port]) if port in inbox else None for port in range(len(self.port_keys))]

    def _take_pending(self, moving: Callable[[Hashable], bool]) -> dict[Timestamp, dict[int, list[Rows]]]:
        """The moving keys' pending rows, removed; a time left with none loses its notification."""
        taken: dict[Timestamp, dict[int, list[Rows]]] = {}
        for time, inbox in list(self.pending.items()):
            for port, batches in list(inbox.items()):
                rows = _joined(batches)
                going = keys_moving(rows[self.port_keys[port]], moving)
                if going.any():
                    taken.setdefault(time, {})[port] = [{name: values[going] for name, values in rows.items()}]
                inbox[port] = [{name: values[~going] for name, values in rows.items()}]
                if going.all():
                    del inbox[port]
            if not inbox:
                del self.pending[time]
                self.cancel_notify(time)
        return taken

    def _put_pending(self, taken: dict[Timestamp, dict[int, list[Rows]]]) -> None:
        """Another replica's pending rows, each at its time."""
        for time, inbox in taken.items():
            mine = self._inbox(time)
            for port, batches in inbox.items():
                mine.setdefault(port, []).extend(batches)


def _joined(batches: list[Rows]) -> Rows:
    """Batches of the same columns as one."""
    return batches[0] if len(batches) == 1 else {name: concat([b[name] for b in batches]) for name in batches[0]}


class JoinColumns(_PerEpoch):
    """A collection with named columns arranged by an integer key column, and the joins that read
    it (:class:`~raytide.core.column_join.ArrangedJoins`): port 0 the arranged collection, port
    ``1 + j`` join ``j``'s other side, output ``j`` join ``j``'s changes."""

    def __init__(self, names: Sequence[str], key: str, specs: Sequence[JoinSpec]) -> None:
        super().__init__()
        self.port_keys = (key, *(spec.own[1] for spec in specs))
        self.joins = ArrangedJoins(names, key, specs)

    def on_notify(self, time: Timestamp) -> None:
        arranged, *own = self._gathered(time)
        with located(self, time):
            changes = self.joins.run(arranged, own)
        for output, rows in enumerate(changes):
            if rows is not None:
                self.send_by(output, rows, time)

    def statistics(self) -> dict[str, int]:
        return {"arranged_updates": self.joins.held, "shared_updates": self.joins.shared,
                "compacted_away": self.joins.cancelled}

    def snapshot(self) -> Any:
        return {"sides": tuple(self.joins.rows(side) for side in range(len(self.joins.sides))), "pending": self.pending}

    def restore(self, state: Any) -> None:
        self.joins = ArrangedJoins(self.joins.names, self.joins.key, self.joins.specs)
        self.joins.put(state["sides"])
        self.pending = state["pending"]

    def take_keys(self, moving: Callable[[Hashable], bool]) -> Any:
        return {"sides": self.joins.take(moving), "pending": self._take_pending(moving)}

    def put_keys(self, state: Any) -> None:
        self.joins.put(state["sides"])
        self._put_pending(state["pending"])


class AppliedPerEpoch(_PerEpoch):
    """One port whose gathered rows a columnar core (``apply``, ``held``, ``rows``, ``take``,
    ``put``) takes at each epoch's notification; its state saved as ``saved_as``. The base of
    the collection vertices with one input and of :mod:`raytide.graph`'s connected components."""

    saved_as = "rows"

    def __init__(self, fresh: Callable[[], Any], key: str) -> None:
        super().__init__()
        self.port_keys = (key,)
        self.fresh = fresh
        self.core = fresh()

    def on_notify(self, time: Timestamp) -> None:
        (rows,) = self._gathered(time)
        with located(self, time):
            changes = None if rows is None else self.core.apply(rows)
        if changes is not None:
            self.send_by(0, changes, time)

    def statistics(self) -> dict[str, int]:
        return {"arranged_updates": self.core.held}

    def snapshot(self) -> Any:
        return {self.saved_as: self.core.rows(), "pending": self.pending}

    def restore(self, state: Any) -> None:
        self.core = self.fresh()
        self.core.put(state[self.saved_as])
        self.pending = state["pending"]

    def take_keys(self, moving: Callable[[Hashable], bool]) -> Any:
        return {self.saved_as: self.core.take(moving), "pending": self._take_pending(moving)}

    def put_keys(self, state: Any) -> None:
        self.core.put(state[self.saved_as])
        self._put_pending(state["pending"])


class SumColumns(AppliedPerEpoch):
    """``(key, total)`` of a value column per integer key column, linear (:class:`~raytide.core.column_join.ColumnSums`),
    from the folds :class:`FoldSums` sends; ``(key, count)`` without a value column."""

    saved_as = "sums"

    def __init__(self, key: str, value: str | None) -> None:
        super().__init__(functools.partial(ColumnSums, key, value), key)


class DistinctColumns(AppliedPerEpoch):
    """Each row of a collection with named integer columns once while it has a copy
    (:class:`~raytide.core.column_distinct.DistinctRows`), exchanged by its first column."""

    def __init__(self, names: Sequence[str]) -> None:
        super().__init__(functools.partial(DistinctRows, names), names[0])
