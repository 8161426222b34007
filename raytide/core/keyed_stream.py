"""The keyed operators of a stream: per epoch (``count_by_key``, ``reduce_by_key``,
``stateful_map``, ``join``, windows, interval and latest joins) and columnar keyed state
(``keyed_columns``, ``iterate_columns``): each places its vertices (a combiner before the
exchange where it can) and hands the work to the module that keeps it.

:class:`KeyedOperators` is a base of :class:`~raytide.core.dataflow.Stream`; its methods
are the stream's.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any, Self

import numpy as np

from raytide.core.columnar import StateColumn
from raytide.core.columnar_flow import iterate_columns, keyed_columns
from raytide.core.logical import Channel, KeyFn
from raytide.core.operators import (
    COMBINER_MAX_KEYS,
    EpochJoin,
    KeyedCount,
    KeyedMerge,
    KeyedReduce,
    StatefulMap,
    pair_key,
)
from raytide.core.placing import PlacedStream
from raytide.core.step import Step
from raytide.core.temporal import interval_joined, latest_joined
from raytide.core.windowing import WindowedStream, WindowSpec, windowed


class KeyedOperators(PlacedStream):
    """A stream's keyed operators (:class:`~raytide.core.dataflow.Stream` has them)."""

    # -- keyed, per epoch ------------------------------------------------------------

    def count_by_key(self, key: KeyFn, *, name: str | None = None, parallelism: int | None = None) -> Self:
        """Per timestamp, ``(key, count)`` records; counts are combined before the exchange.

        Two vertices: ``name + ".combine"`` counts before the exchange, ``name`` after it.
        """
        vname = name or self.flow._fresh("count_by_key", [self], self.scope)
        partial = self._then("", lambda: KeyedCount(key, COMBINER_MAX_KEYS), name=f"{vname}.combine",
                             settles_with_input=True)
        return partial._then("", lambda: KeyedMerge(operator.add), Channel("exchange", pair_key), vname, parallelism)

    def reduce_by_key(self, key: KeyFn, reducer: Callable[[Any, Any], Any], *,
                      value: Callable[[Any], Any] = lambda r: r, name: str | None = None,
                      parallelism: int | None = None) -> Self:
        """Per timestamp, ``(key, reducer(...reducer(v1, v2)..., vn))``; ``reducer`` must be associative
        and commutative.

        Two vertices: ``name + ".combine"`` reduces before the exchange, ``name`` after it.
        """
        vname = name or self.flow._fresh("reduce_by_key", [self], self.scope)
        partial = self._then("", lambda: KeyedReduce(key, value, reducer, COMBINER_MAX_KEYS),
                             name=f"{vname}.combine", settles_with_input=True)
        return partial._then("", lambda: KeyedMerge(reducer), Channel("exchange", pair_key), vname, parallelism)

    def stateful_map(self, key: KeyFn, fn: Callable[[Any, Any], tuple[Any, Any]], *, name: str | None = None,
                     parallelism: int | None = None) -> Self:
        """Keyed state that lives across epochs: ``fn(state, record) -> (new_state, output)``, emits
        ``(key, output)``."""
        return self._then("stateful_map", lambda: StatefulMap(key, fn), Channel("exchange", key), name, parallelism)

    def join(self, other: Self, key: KeyFn, other_key: KeyFn | None = None, *, name: str | None = None,
             parallelism: int | None = None) -> Self:
        """Per-epoch inner join with ``other``: ``(key, this_record, other_record)`` for equal keys."""
        right = other_key or key
        streams = [self, other]
        vname = name or self.flow._fresh("join", streams, self.flow._common_scope(streams, "join"))
        return self.flow.vertex(lambda: EpochJoin(key, right), streams, 1, exchange=[key, right],
                                name=vname, parallelism=parallelism)[0]

    def window(self, key: KeyFn | str, spec: WindowSpec, *, name: str | None = None,
               parallelism: int | None = None) -> WindowedStream:
        """Keyed windows over epochs (``rt.Tumbling``, ``rt.Sliding``, ``rt.Session``): then ``.count()``,
        ``.reduce(fn)`` or ``.aggregate(...)``, one ``(key, start, end, value)`` per key and window (docs/windows.md)."""
        return windowed(self, key, spec, name, parallelism)

    def interval_join(self, other: Self, key: KeyFn, lower: float, upper: float, *, other_key: KeyFn | None = None,
                      name: str | None = None, parallelism: int | None = None) -> Self:
        """``(key, this_record, other_record)`` for equal keys whose times differ by ``lower <= other's - this one's
        <= upper``, at the later of their epochs; state leaves once the frontier passes (docs/windows.md). On
        event-time inputs a time is the record's own timestamp and the bounds are seconds; else epochs, and integers."""
        return interval_joined(self, other, key, lower, upper, other_key, name, parallelism)

    def join_latest(self, table: Self, key: KeyFn, *, table_key: KeyFn | None = None, name: str | None = None,
                    parallelism: int | None = None) -> Self:
        """``(key, record, value)``: each record with the latest value of its key in ``table``'s updates as of its
        epoch (that epoch's updates first; ``None`` if none yet; docs/windows.md)."""
        return latest_joined(self, table, key, table_key, name, parallelism)

    # -- columnar keyed state ---------------------------------------------------------

    def keyed_columns(self, step: Callable[[Step], Any], *, key: str, state: Mapping[str, StateColumn],
                      combine: Mapping[str, np.ufunc] | None = None, arranged: Self | None = None,
                      arrange_key: str = "key", outputs: int = 1, exchange: bool = True, name: str | None = None,
                      parallelism: int | None = None) -> Self | list[Self]:
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
                        repeatable_rounds: bool = False, diff: str | None = None) -> Self | list[Self]:
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

