"""Joins across time in a dataflow: :meth:`Stream.interval_join` and :meth:`Stream.join_latest`.

Both are keyed state that lives across epochs, thin vertices around the pure algorithms of
:mod:`raytide.windows.joins`; each input is exchanged by its key, so a key's state lives on
one replica, and splits and merges by key when the vertex's parallelism changes. An interval
join's unit is found from the inputs its streams come from (:func:`event_time_of`): seconds
between the records' own timestamps on event-time inputs, epochs otherwise.

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
from raytide.errors import ArgumentError, GraphError, RecordError
from raytide.progress.timestamps import Timestamp
from raytide.windows.event_time import EventTime
from raytide.windows.joins import (
    IntervalState,
    LatestState,
    add,
    add_record,
    add_update,
    expire,
    interval_bounds,
    merge_interval,
    merge_latest,
    settle,
    split_interval,
    split_latest,
)

#: Per side of an interval join, the event time its records' timestamps are read with (None: epochs as time).
Times = tuple[EventTime | None, EventTime | None]


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
    """Emits ``(key, left, right)`` for records of equal keys whose times ``a`` (input 0) and
    ``b`` (input 1) have ``lower <= b - a <= upper``, at the later of their epochs; a time is
    the record's epoch, or its own timestamp on event-time inputs (``times``, bounds in
    seconds). A record leaves the state at the notification of the epoch after which it can
    match nothing more."""

    takes_lazy_batches = True  # reads its batches through raytide.core.batches

    def __init__(self, keys: tuple[KeyFn, KeyFn], lower: float, upper: float, times: Times = (None, None)) -> None:
        grains = (None if times[0] is None else times[0].granularity, None if times[1] is None else times[1].granularity)
        super().__init__(IntervalState(lower, upper, grains), _ends_of, split_interval, merge_interval)
        self.keys, self.times = keys, times

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        key_of, spec, out = self.keys[edge], self.times[edge], []
        for record in to_records(message):
            stamp = None if spec is None else self._stamp(spec, edge, record, time)
            out.extend(add(self.state, edge, key_of(record), time.epoch, record, stamp))
        for epoch in sorted({epoch for epoch, _ in out}):
            self.send_by(0, [match for at, match in out if at == epoch], Timestamp(epoch))
        self._ask()

    def _stamp(self, spec: EventTime, edge: int, record: Any, time: Timestamp) -> float:
        try:
            return spec.stamp(record)
        except (LookupError, TypeError, ValueError, AttributeError) as error:
            what = f"has no timestamp {spec.timestamp!r}" if isinstance(error, LookupError) else f"has a bad timestamp: {error}"
            raise RecordError(f"interval_join {self.name!r} replica {self.replica} at {time}: a record of input {edge} "
                              f"({record!r:.80}) {what}; on event-time inputs the bounds are seconds between the "
                              f"records' own timestamps, so the records must keep them") from error

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


def interval_joined(stream: AnyStream, other: AnyStream, key: KeyFn, lower: float, upper: float,
                    other_key: KeyFn | None, name: str | None, parallelism: int | None) -> AnyStream:
    """See :meth:`Stream.interval_join`; the inputs' event times and the bounds are checked
    before the vertex is placed, errors naming it."""
    keys = _checked("interval_join", stream, other, key, other_key)
    vname = name or stream.flow._fresh("interval_join", [stream, other], None)
    label = f"interval_join {vname!r} (of {stream.vertex!r} and {other.vertex!r})"
    times = (event_time_of(stream, label), event_time_of(other, label))
    if (times[0] is None) != (times[1] is None):
        timed = stream.vertex if times[0] is not None else other.vertex
        raise GraphError(f"{label}: {timed!r} comes from event-time inputs and the other stream does not: the bounds "
                         f"are seconds on event-time inputs, epochs otherwise; join two streams of one kind")
    interval_bounds(label, lower, upper, seconds=times[0] is not None)
    return stream.flow.vertex(lambda: IntervalJoin(keys, lower, upper, times), [stream, other], 1,
                              exchange=list(keys), name=vname, parallelism=parallelism)[0]


def event_time_of(stream: AnyStream, label: str) -> EventTime | None:
    """The event time of the inputs ``stream`` comes from (through any vertices): their
    ``flow.input(..., event_time=)`` spec, or None if none of them has one.

    Raises:
        GraphError: naming ``label``, when the stream comes from inputs with event time and
            inputs without, or with event times of different timestamps or granularities.
    """
    vertices, seen, todo = stream.flow.vertices, set(), [stream.vertex]
    inputs: dict[str, EventTime | None] = {}
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            vertex = vertices[name]
            if vertex.role == "input":
                inputs[name] = vertex.event_time
            todo += [edge.source for edges in vertex.inputs for edge in edges]
    kinds = {(spec.timestamp, spec.granularity) if spec is not None else None for spec in inputs.values()}
    if len(kinds) > 1:
        raise GraphError(f"{label}: {stream.vertex!r} comes from inputs of different event times ("
                         f"{', '.join(f'{n!r}: {_describe(s)}' for n, s in sorted(inputs.items()))}); join "
                         f"streams whose records all carry one timestamp")
    return next(iter(inputs.values()), None)


def _describe(spec: EventTime | None) -> str:
    return "no event time" if spec is None else f"timestamp {spec.timestamp!r} every {spec.granularity:g} s"


def latest_joined(stream: AnyStream, table: AnyStream, key: KeyFn, table_key: KeyFn | None, name: str | None,
                  parallelism: int | None) -> AnyStream:
    """See :meth:`Stream.join_latest`."""
    keys = _checked("join_latest", stream, table, key, table_key)
    vname = name or stream.flow._fresh("join_latest", [stream, table], None)
    return stream.flow.vertex(lambda: LatestJoin(keys), [stream, table], 1, exchange=list(keys), name=vname,
                              parallelism=parallelism)[0]
