"""Keyed windows over epochs in a dataflow: :meth:`Stream.window` and :class:`WindowedStream`.

``stream.window(key, spec)`` names the key and the window spec (``rt.Tumbling``,
``rt.Sliding``, ``rt.Session``, :mod:`raytide.windows.specs`); ``.count()``, ``.reduce(fn)``
or ``.aggregate(out=(column, ufunc), ...)`` then place two vertices: a combiner fused
behind the stream folds each epoch's records into one partial result per key (the per-epoch
combiners of ``count_by_key`` and ``reduce_by_key``, or NumPy's for ``aggregate`` by an
integer column), and a :class:`KeyedWindows` after an exchange by key folds the partials
into the key's windows (:mod:`raytide.windows.pending`). Each window is emitted once, as
``(key, start, end, value)``, at the notification of ``Timestamp(end - 1)``: once every
epoch of the window is complete.

>>> import raytide as rt
>>> from raytide.testing.local import LocalJob
>>> flow = rt.Dataflow("clicks")
>>> flow.input("users").window(lambda user: user, rt.Tumbling(2)).count().output("per_two_epochs")
>>> run = LocalJob(flow, {"users": [["ann", "bob"], ["ann"], ["bob"]]}, parallelism=2).run()
>>> {epoch: sorted(records) for epoch, records in run.outputs["per_two_epochs"].items() if records}
{1: [('ann', 0, 2, 2), ('bob', 0, 2, 1)], 3: [('bob', 2, 4, 1)]}

Window state is keyed state: it is in snapshots, splits by key when the vertex's parallelism
changes (pending windows with their notifications), and merges on the replica that adopts
it. Windows over epochs are refused inside a loop (:func:`windowed`).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from raytide.core.batches import to_format, to_records
from raytide.core.columnar_flow import AnyStream
from raytide.core.combine import check_combiners, combine_by_key
from raytide.core.logical import Channel, ExchangeKey
from raytide.core.operators import COMBINER_MAX_KEYS, KeyedCount, KeyedReduce, pair_key
from raytide.core.vertex import Vertex
from raytide.errors import ArgumentError, GraphError, RecordError
from raytide.progress.timestamps import Timestamp
from raytide.windows.event_time import LateRecords
from raytide.windows.pending import Fold, Pending, add, close, merge, split
from raytide.windows.specs import Session, Sliding, Tumbling, WindowSpec


class SplitLate(Vertex):
    """Fused behind an event-time input with a ``late_output`` (``<input>.split``): the late
    records a source's reader sends into the input (:class:`LateRecords`) go to port 1, the
    late output; every other batch goes on down the stream, port 0 (docs/windows.md)."""

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        self.send_by(1 if isinstance(message, LateRecords) else 0, message, time)


class KeyedWindows(Vertex):
    """Folds ``(key, partial)`` pairs into the key's windows; emits each window once, as
    ``(key, start, end, finish(accumulator))``, at the notification of ``Timestamp(end - 1)``.

    Its input is exchanged by key, so a key's windows live on one replica. It asks for one
    notification per end that some key has an open window at (``self.asked``), and withdraws
    one whose windows all left (merged into a longer session, or moved to another replica).
    """

    takes_lazy_batches = True  # reads its batches through raytide.core.batches

    def __init__(self, spec: WindowSpec, fold: Fold, finish: Callable[[Any], Any] | None = None) -> None:
        self.spec, self.fold, self.finish = spec, fold, finish
        self.pending = Pending()
        self.asked: set[int] = set()

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        for key, value in to_records(message):
            add(self.pending, self.spec, key, time.epoch, value, self.fold)
        self._ask()

    def on_notify(self, time: Timestamp) -> None:
        end = time.epoch + 1
        self.asked.discard(end)
        finish = self.finish
        out = [(key, start, stop, finish(acc) if finish else acc)
               for key, start, stop, acc in close(self.pending, end)]
        if out:
            self.send_by(0, out, time)

    def _ask(self) -> None:
        """Ask for the notification of every end with windows, and withdraw those without."""
        held = self.pending.ends
        for end in [end for end in self.asked if end not in held]:
            self.asked.discard(end)
            self.cancel_notify(Timestamp(end - 1))
        for end in [end for end in held if end not in self.asked]:
            self.asked.add(end)
            self.notify_at(Timestamp(end - 1))

    def snapshot(self) -> Any:
        return self.pending

    def restore(self, state: Any) -> None:
        """Put back the windows; their notifications are restored with the replica's."""
        self.pending = state if state is not None else Pending()
        self.asked = set(self.pending.ends)

    def take_keys(self, moving: Callable[[Hashable], bool]) -> Pending:
        """The open windows of the moving keys; an end left without windows loses its notification."""
        taken = split(self.pending, moving)
        self._ask()
        return taken

    def put_keys(self, state: Pending) -> None:
        """Adopt another replica's open windows, asking for the notifications of their ends."""
        merge(self.pending, state, self.spec, self.fold)
        self._ask()


@dataclass(frozen=True)
class WindowedStream:
    """A stream with a key and a window spec: say what to compute per key and window.

    Each method places the window's vertices (see :mod:`raytide.core.windowing`) and returns
    the stream of ``(key, window_start, window_end, value)`` records, one per key and window
    with records, sent at ``Timestamp(window_end - 1)``.
    """

    stream: AnyStream
    key: ExchangeKey
    spec: WindowSpec
    name: str | None = None
    parallelism: int | None = None

    def count(self) -> AnyStream:
        """The number of records of each key and window."""
        return self._place("window_count", lambda: KeyedCount(self._key_of(), COMBINER_MAX_KEYS), operator.add)

    def reduce(self, fn: Callable[[Any, Any], Any]) -> AnyStream:
        """``fn(...fn(r1, r2)..., rn)`` over the records of each key and window; ``fn`` must be
        associative and commutative (records fold in any order and grouping, partial results
        before the exchange) and must not modify its arguments."""
        if not callable(fn):
            raise ArgumentError(f"WindowedStream.reduce(fn): fn must be a function of two records, not {fn!r}")
        key_of = self._key_of()
        return self._place("window_reduce", lambda: KeyedReduce(key_of, _record, fn, COMBINER_MAX_KEYS), fn)

    def aggregate(self, **outputs: tuple[str, np.ufunc]) -> AnyStream:
        """Vectorised folds of columns: ``aggregate(total=("bytes", np.add), peak=("bytes", np.maximum))``.

        Records are rows of columnar batches (dicts of NumPy columns, or dict records); each
        output ``name=(column, ufunc)`` folds ``column`` with an associative and commutative
        NumPy ufunc (``raytide.core.combine.ASSOCIATIVE``). The value of a window is a dict
        ``{name: folded}``. With an integer column for key, each batch is folded by key in
        NumPy before the exchange.
        """
        names, columns, ufuncs = _outputs(outputs)
        fold = _TupleFold(ufuncs)
        finish = _Named(names)
        if isinstance(self.key, str):
            combine = _ColumnPartials(self.key, columns, ufuncs)
            return self._place("window_aggregate", None, fold, finish, per_batch=combine)
        key_of, value_of = self.key, operator.itemgetter(*columns)
        value = value_of if len(columns) > 1 else (lambda row: (value_of(row),))
        return self._place("window_aggregate", lambda: KeyedReduce(key_of, value, fold, COMBINER_MAX_KEYS),
                           fold, finish)

    def _key_of(self) -> Callable[[Any], Hashable]:
        """The key of a record: the key function, or the value of the integer column as an int."""
        return _ColumnKey(self.key) if isinstance(self.key, str) else self.key

    def _place(self, label: str, combiner: Callable[[], Vertex] | None, fold: Fold,
               finish: Callable[[Any], Any] | None = None, per_batch: Callable[[Any], Any] | None = None) -> AnyStream:
        """The combiner fused behind the stream (a vertex, or a function per batch), then the
        :class:`KeyedWindows` after an exchange by the partials' key."""
        stream, spec = self.stream, self.spec
        vname = self.name or stream.flow._fresh(label, [stream], stream.scope)
        if per_batch is not None:
            partial = stream._per_batch("", per_batch, name=f"{vname}.combine")
        else:
            partial = stream._then("", combiner, name=f"{vname}.combine", settles_with_input=True)
        return partial._then("", lambda: KeyedWindows(spec, fold, finish), Channel("exchange", pair_key), vname,
                             self.parallelism)


def windowed(stream: AnyStream, key: ExchangeKey, spec: WindowSpec, name: str | None,
             parallelism: int | None) -> WindowedStream:
    """See :meth:`Stream.window`: ``key`` and ``spec`` checked before anything is built.

    Windows are refused inside a loop: there an epoch's records go round iteration after
    iteration, and a window over epochs would fold the iterations of different epochs (or
    need a window per iteration, which no loop so far has asked for). Window before the loop
    or after it leaves.

    Raises:
        ArgumentError: ``spec`` is not a window spec, or ``key`` neither a function nor a column name.
        GraphError: ``stream`` is inside a loop.
    """
    if not isinstance(spec, (Tumbling, Sliding, Session)):
        raise ArgumentError(f"window(key, spec): spec must be rt.Tumbling(size), rt.Sliding(size, every) or "
                            f"rt.Session(gap), not {spec!r} ({type(spec).__name__})")
    if not (callable(key) or isinstance(key, str)):
        raise ArgumentError(f"window(key, spec): key must be a function of a record or the name of an integer "
                            f"column, not {key!r} ({type(key).__name__})")
    if stream.scope is not None:
        raise GraphError(f"window over {stream.vertex!r}: the stream is inside loop {stream.scope.name!r}, where "
                         "windows over epochs would fold different epochs' iterations; window the stream before it "
                         "enters the loop or after it leaves")
    return WindowedStream(stream, key, spec, name, parallelism)


def _record(record: Any) -> Any:
    return record


def _outputs(outputs: dict[str, tuple[str, np.ufunc]]) -> tuple[tuple[str, ...], tuple[str, ...], tuple[np.ufunc, ...]]:
    """``aggregate``'s outputs as names, source columns and ufuncs, each checked.

    Raises:
        ArgumentError: no output, or one that is not a ``(column, ufunc)`` pair.
        GraphError: a ufunc that is not associative and commutative (``check_combiners``).
    """
    if not outputs:
        raise ArgumentError("WindowedStream.aggregate(): give at least one output, as name=(column, ufunc)")
    for name, given in outputs.items():
        if not (isinstance(given, tuple) and len(given) == 2 and isinstance(given[0], str)):
            raise ArgumentError(f"WindowedStream.aggregate({name}=...): each output must be a (column, ufunc) "
                                f"pair, not {given!r}")
    check_combiners({name: ufunc for name, (_, ufunc) in outputs.items()}, "WindowedStream.aggregate")
    return tuple(outputs), tuple(column for column, _ in outputs.values()), tuple(u for _, u in outputs.values())


class _ColumnKey:
    """The key of a row by an integer column, as a Python int (the same key, and key group,
    whether the row came from a list of dicts or a columnar batch)."""

    def __init__(self, column: str) -> None:
        self.column = column

    def __call__(self, row: Any) -> int:
        return operator.index(row[self.column])


class _TupleFold:
    """Folds two tuples of column values position by position, each with its ufunc."""

    def __init__(self, ufuncs: tuple[np.ufunc, ...]) -> None:
        self.ufuncs = ufuncs

    def __call__(self, a: tuple, b: tuple) -> tuple:
        return tuple(ufunc(x, y) for ufunc, x, y in zip(self.ufuncs, a, b))


class _Named:
    """A window's folded tuple as ``{name: value}``, NumPy scalars made Python's."""

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = names

    def __call__(self, folded: tuple) -> dict[str, Any]:
        return {name: value.item() if isinstance(value, np.generic) else value
                for name, value in zip(self.names, folded)}


class _ColumnPartials:
    """``aggregate``'s combiner by an integer column: each batch folded by key with NumPy
    (:func:`~raytide.core.combine.combine_by_key`), as ``(key, values)`` pairs."""

    def __init__(self, key: str, columns: tuple[str, ...], ufuncs: tuple[np.ufunc, ...]) -> None:
        self.key, self.columns, self.ufuncs = key, columns, ufuncs

    def __call__(self, batch: Any) -> list[tuple[int, tuple]]:
        if isinstance(batch, list) and not batch:
            return []
        data = to_format(batch, "numpy")
        keys = np.asarray(data[self.key])
        if keys.dtype.kind not in "iu":
            raise RecordError(f"window key column {self.key!r} must hold integers, not {keys.dtype}")
        named = [str(i) for i in range(len(self.columns))]
        keys, folded = combine_by_key(keys, {n: data[c] for n, c in zip(named, self.columns)},
                                      dict(zip(named, self.ufuncs)))
        return list(zip(keys.tolist(), zip(*(folded[n] for n in named))))
