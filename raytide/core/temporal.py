"""Joins across time in a dataflow: :meth:`Stream.interval_join` and :meth:`Stream.join_latest`.

Both are keyed state that lives across epochs, thin vertices around the pure algorithms of
:mod:`raytide.windows.joins`; each input is exchanged by its key, so a key's state lives on
one replica, and splits and merges by key when the vertex's parallelism changes.

>>> import raytide as rt
>>> from raytide.testing.local import LocalJob
>>> flow = rt.Dataflow("temporal")
>>> views, buys = flow.input("views"), flow.input("buys")
>>> views.interval_join(buys, lambda r: r[0], 0, 1).output("bought_soon")
>>> run = LocalJob(flow, {"views": [[("ann", "v0")], [("bob", "v1")]], "buys": [[], [("ann", "b1")]]}).run()
>>> {epoch: records for epoch, records in run.outputs["bought_soon"].items() if records}
{1: [('ann', ('ann', 'v0'), ('ann', 'b1'))]}
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any

from raytide.core.batches import to_records
from raytide.core.columnar_flow import AnyStream
from raytide.core.logical import KeyFn
from raytide.core.vertex import Vertex
from raytide.errors import ArgumentError, GraphError
from raytide.progress.timestamps import Timestamp
from raytide.windows.joins import (
    IntervalState,
    LatestState,
    add,
    add_record,
    add_update,
    expire,
    merge_interval,
    merge_latest,
    settle,
    split_interval,
    split_latest,
)


def _ends_of(state: IntervalState) -> set[int]:
    return set(state.ends)


class _Ends(Vertex):
    """A join whose keyed state needs one notification per epoch it must settle: it asks for new
    ones and withdraws those no longer needed, as the window vertex does, and splits and merges
    its state by key with the functions its class names."""

    def __init__(self, state: Any, wanted: Callable[[Any], set[int]],
                 split: Callable[[Any, Callable[[Hashable], bool]], Any], merge: Callable[[Any, Any], None]) -> None:
        """``wanted(state)``: the epochs it needs notifications at; ``split(state, moving)`` takes
        the moving keys off; ``merge(state, part)`` adds a part another replica split off."""
        self.state, self.asked = state, set[int]()
        self.wanted, self.split, self.merge = wanted, split, merge

    def _ask(self) -> None:
        wanted = self.wanted(self.state)
        for epoch in [epoch for epoch in self.asked if epoch not in wanted]:
            self.asked.discard(epoch)
            self.cancel_notify(Timestamp(epoch))
        for epoch in [epoch for epoch in wanted if epoch not in self.asked]:
            self.asked.add(epoch)
            self.notify_at(Timestamp(epoch))

    def snapshot(self) -> Any:
        return self.state

    def restore(self, state: Any) -> None:
        """Put back the state; its notifications are restored with the replica's."""
        self.state = state
        self.asked = set(self.wanted(state))

    def take_keys(self, moving: Callable[[Hashable], bool]) -> Any:
        taken = self.split(self.state, moving)
        self._ask()
        return taken

    def put_keys(self, state: Any) -> None:
        self.merge(self.state, state)
        self._ask()


class IntervalJoin(_Ends):
    """Emits ``(key, left, right)`` for records of equal keys whose epochs ``a`` (input 0) and
    ``b`` (input 1) have ``lower <= b - a <= upper``, at epoch ``max(a, b)``; a record leaves
    the state at the notification of the epoch after which it can match nothing more."""

    takes_lazy_batches = True  # reads its batches through raytide.core.batches

    def __init__(self, keys: tuple[KeyFn, KeyFn], lower: int, upper: int) -> None:
        super().__init__(IntervalState(lower, upper), _ends_of, split_interval, merge_interval)
        self.keys = keys

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        key_of, out = self.keys[edge], []
        for record in to_records(message):
            out.extend(add(self.state, edge, key_of(record), time.epoch, record))
        for epoch in sorted({epoch for epoch, _ in out}):
            self.send_by(0, [match for at, match in out if at == epoch], Timestamp(epoch))
        self._ask()

    def on_notify(self, time: Timestamp) -> None:
        self.asked.discard(time.epoch)
        expire(self.state, time.epoch)
        self._ask()


class LatestJoin(_Ends):
    """Input 0's records of epoch ``t``, each with the value of its key in input 1's table as of
    ``t`` (:func:`~raytide.windows.joins.settle`), emitted at ``t`` once ``t`` is complete."""

    takes_lazy_batches = True  # reads its batches through raytide.core.batches

    def __init__(self, keys: tuple[KeyFn, KeyFn]) -> None:
        super().__init__(LatestState(), LatestState.epochs, split_latest, merge_latest)
        self.keys = keys

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        key_of, put = self.keys[edge], add_record if edge == 0 else add_update
        for record in to_records(message):
            put(self.state, time.epoch, key_of(record), record)
        self._ask()

    def on_notify(self, time: Timestamp) -> None:
        self.asked.discard(time.epoch)
        out = settle(self.state, time.epoch)
        if out:
            self.send_by(0, out, time)


def _checked(what: str, stream: AnyStream, other: AnyStream, key: KeyFn, other_key: KeyFn | None) -> tuple[KeyFn, KeyFn]:
    """The two key functions, after checking that both streams are outside loops.

    Raises:
        ArgumentError: a key that is not a function. GraphError: a stream inside a loop.
    """
    for given in (key, other_key):
        if given is not None and not callable(given):
            raise ArgumentError(f"{what}(key): key must be a function of a record, not {given!r}")
    for one in (stream, other):
        if one.scope is not None:
            raise GraphError(f"{what} over {one.vertex!r}: the stream is inside loop {one.scope.name!r}, where epochs "
                             "go round iteration after iteration; join before the loop or after it leaves")
    return key, other_key or key


def interval_joined(stream: AnyStream, other: AnyStream, key: KeyFn, lower: int, upper: int, other_key: KeyFn | None,
                    name: str | None, parallelism: int | None) -> AnyStream:
    """See :meth:`Stream.interval_join`; the bounds are checked before anything is built."""
    keys = _checked("interval_join", stream, other, key, other_key)
    IntervalState(lower, upper)  # raises on bad bounds, before the vertex is placed
    vname = name or stream.flow._fresh("interval_join", [stream, other], None)
    return stream.flow.vertex(lambda: IntervalJoin(keys, lower, upper), [stream, other], 1, exchange=list(keys),
                              name=vname, parallelism=parallelism)[0]


def latest_joined(stream: AnyStream, table: AnyStream, key: KeyFn, table_key: KeyFn | None, name: str | None,
                  parallelism: int | None) -> AnyStream:
    """See :meth:`Stream.join_latest`."""
    keys = _checked("join_latest", stream, table, key, table_key)
    vname = name or stream.flow._fresh("join_latest", [stream, table], None)
    return stream.flow.vertex(lambda: LatestJoin(keys), [stream, table], 1, exchange=list(keys), name=vname,
                              parallelism=parallelism)[0]
