"""The vertices of ``Collection``: thin shells around the pure cores of :mod:`raytide.differential`.

Every batch they get and send is a list of updates ``(record, diff)``, but for the input's
check, which passes a column batch of updates on as it is
(:mod:`raytide.differential.columns`). The keyed ones keep
traces, compacted once an epoch is over everywhere before them: at top level that is the
notification of the epoch's time; inside a loop, of :func:`~raytide.differential.epoch_done`
(every iteration of the epoch), which each asks for once per epoch it sees.
"""

from __future__ import annotations

import contextlib
import math
import operator
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from raytide.core.batches import to_records
from raytide.core.logical import KeyFn
from raytide.core.vertex import Vertex
from raytide.differential import (
    EPOCH_DONE,
    Logic,
    Sums,
    Trace,
    canonical,
    check_updates,
    checked_update_columns,
    consolidate,
    epoch_done,
    is_update_columns,
)
from raytide.errors import RecordError
from raytide.progress.timestamps import Timestamp


class CheckUpdates(Vertex):
    """Behind a collection's input: passes its batches on as updates (a column batch of
    updates as columns), refusing anything else."""

    takes_lazy_batches = False

    def __init__(self, collection: str) -> None:
        self.collection = collection

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        what = f"collection {self.collection!r}"
        with located(self, time):
            if is_update_columns(message):
                self.send_by(0, checked_update_columns(message, what), time)
                return
            updates = check_updates(to_records(message), what)
        self.send_by(0, updates, time)


class _FoldedPerTime(Vertex):
    """A vertex that folds each time's updates per key until the time's notification:
    ``pending[time][key]``, split and merged by routing key in a rescale."""

    def __init__(self) -> None:
        self.pending: dict[Timestamp, dict[Hashable, Any]] = {}

    def _folded(self, time: Timestamp) -> dict[Hashable, Any]:
        """What is folded at ``time`` so far (new: its notification asked for)."""
        folded = self.pending.get(time)
        if folded is None:
            folded = self.pending[time] = {}
            self.notify_at(time)
        return folded

    def _take_pending(self, moving: Callable[[Hashable], bool]) -> dict[Timestamp, dict[Hashable, Any]]:
        """The moving keys' folds, removed; a time left with none loses its notification."""
        taken = {}
        for time, folded in list(self.pending.items()):
            taken[time] = {key: value for key, value in folded.items() if moving(canonical(key))}
            for key in taken[time]:
                del folded[key]
            if not folded:
                del self.pending[time]
                self.cancel_notify(time)
        return taken

    def _put_pending(self, taken: dict[Timestamp, dict[Hashable, Any]],
                     merge: Callable[[Any, Any], Any] | None = None) -> None:
        """Another replica's folds, each at its time (a key folded here too is ``merge``d)."""
        for time, folded in taken.items():
            mine = self._folded(time)
            for key, value in folded.items():
                mine[key] = value if merge is None or key not in mine else merge(mine[key], value)


class Consolidate(_FoldedPerTime):
    """Per time, the updates with equal records summed and zeros dropped (exchanged by record)."""

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        sums = self._folded(time)
        for record, diff in message:
            sums[record] = sums.get(record, 0) + diff

    def on_notify(self, time: Timestamp) -> None:
        changes = [(record, diff) for record, diff in self.pending.pop(time, {}).items() if diff]
        if changes:
            self.send_by(0, changes, time)

    def snapshot(self) -> Any:
        return self.pending

    def restore(self, state: Any) -> None:
        self.pending = state

    def take_keys(self, moving: Callable[[Hashable], bool]) -> Any:
        return self._take_pending(moving)

    def put_keys(self, state: Any) -> None:
        self._put_pending(state, operator.add)


class LinearSum(_FoldedPerTime):
    """Per key, ``(key, total)`` of ``value(record)`` over its records, at top level
    (:class:`~raytide.differential.Sums`): each time's changes folded per key, applied at
    its notification (times complete in order), no group kept."""

    def __init__(self, key_of: KeyFn, value_of: Callable[[Any], Any]) -> None:
        super().__init__()
        self.key_of, self.value_of = key_of, value_of
        self.sums = Sums()

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        folded = self._folded(time)
        for record, diff in message:
            change = folded.setdefault(self.key_of(record), [0, 0])
            change[0] += diff
            change[1] += self.value_of(record) * diff

    def on_notify(self, time: Timestamp) -> None:
        with located(self, time):
            changes = self.sums.apply(self.pending.pop(time, {}))
        if changes:
            self.send_by(0, changes, time)

    def statistics(self) -> dict[str, int]:
        return {"arranged_updates": len(self.sums.held)}

    def snapshot(self) -> Any:
        return {"sums": self.sums, "pending": self.pending}

    def restore(self, state: Any) -> None:
        self.sums, self.pending = state["sums"], state["pending"]

    def take_keys(self, moving: Callable[[Hashable], bool]) -> Any:
        return {"sums": self.sums.take(lambda key: moving(canonical(key))), "pending": self._take_pending(moving)}

    def put_keys(self, state: Any) -> None:
        self.sums.put(state["sums"])
        self._put_pending(state["pending"])


class _Keyed(Vertex):
    """A keyed differential operator, its traces compacted once each epoch is over."""

    def __init__(self) -> None:
        self.depth = 0
        self.epochs: set[int] = set()  # epochs whose compaction is awaited

    def _keyed(self, key_of: KeyFn, message: list, time: Timestamp) -> list[tuple[Hashable, Any, int]]:
        """The batch as ``(key, record, diff)``; asks for the epoch's compaction the first time it comes."""
        self.depth = len(time.counters)
        if time.epoch not in self.epochs:
            self.epochs.add(time.epoch)
            self.notify_at(epoch_done(time.epoch, self.depth))
        return [(key_of(record), record, diff) for record, diff in message]

    def on_notify(self, time: Timestamp) -> None:
        if time.counters and time.counters[0] == EPOCH_DONE:
            self.epochs.discard(time.epoch)
            self.compact(time.epoch)
            return
        self.run(time)
        if not time.counters:
            self.epochs.discard(time.epoch)
            self.compact(time.epoch)

    def run(self, time: Timestamp) -> None:
        """``time`` is complete (a notification of data, not of an epoch's end)."""

    def compact(self, done: int) -> None:
        """Every time of epochs ``<= done`` is complete."""

    def _retime(self, before: set[Timestamp], after: set[Timestamp]) -> None:
        """The notifications follow the times the state is due at, ``before`` and ``after`` a
        change of it (keys moved out or in): cancelled where no longer due, asked where new."""
        for time in before - after:
            self.cancel_notify(time)
        for time in after - before:
            self.notify_at(time)

    def _taken(self, core: Any, moving: Callable[[Hashable], bool]) -> Any:
        """The state of ``core``'s keys for which ``moving`` is true, taken out of it; its
        notifications follow what is left due."""
        before = core.times()
        taken = core.take(lambda key: moving(canonical(key)))
        self._retime(before, core.times())
        return taken

    def _put(self, core: Any, state: Any) -> None:
        """Keys another replica's :meth:`_taken` gave, added to ``core``; its notifications follow."""
        before = core.times()
        core.put(state)
        self._retime(before, core.times())

    def _saved(self, core: Any) -> Any:
        return {"core": core, "depth": self.depth, "epochs": self.epochs}

    def _restored(self, state: Any) -> Any:
        self.depth, self.epochs = state["depth"], state["epochs"]
        return state["core"]


class RoutingKey:
    """The exchange key of a keyed collection operator: ``canonical(key(record))`` of an update.

    It runs where the updates are sent from, and refuses keys of another kind than the first
    it met there (numbers are one kind, ``1 == 1.0``; a tuple is one kind per length): ``1``
    and ``"1"`` would never meet. The engine names the operator, the sending replica and the
    time. The two inputs of a join share what they met (``agreeing``).
    """

    def __init__(self, key: KeyFn, agreeing: RoutingKey | None = None) -> None:
        self.key = key
        self.first: list[str] = agreeing.first if agreeing is not None else []  # the first kind met, shared
        self.met: set[Hashable] = set()  # the signatures of keys met: a type, or (tuple, length)

    def __call__(self, update: tuple) -> Hashable:
        key = self.key(update[0])
        signature = (tuple, len(key)) if type(key) is tuple else type(key)
        if signature not in self.met:
            self._check(key, signature)
        return canonical(key)

    def _check(self, key: Hashable, signature: Hashable) -> None:
        kind = _kind(key)
        if not self.first:
            self.first.append(kind)
        if kind != self.first[0]:
            raise TypeError(f"key {key!r} is a {kind}, earlier keys were of kind {self.first[0]}: "
                            "the keys of one operator must be of one type (1 and '1' never meet)")
        self.met.add(signature)


def _kind(key: Hashable) -> str:
    """What kind of key ``key`` is: numbers are one kind (1 == 1.0), tuples one per length."""
    if isinstance(key, tuple):
        return f"tuple of {len(key)}"
    routed = canonical(key)
    return "number" if isinstance(routed, int) or (isinstance(routed, tuple) and routed[:1] == ("float",)) \
        else type(key).__name__


@contextlib.contextmanager
def located(vertex: Vertex, time: Timestamp) -> Iterator[None]:
    """Bad data found by the pure cores, named with where it was found."""
    try:
        yield
    except RecordError as error:
        raise RecordError(f"vertex {vertex.name!r} replica {vertex.replica} at {time}: {error}") from error


def _trace_counters(*traces: Trace) -> dict[str, int]:
    """``arranged_updates``: what the operator's traces hold now; ``compacted_away``: what
    compaction merged or cancelled so far."""
    return {"arranged_updates": sum(trace.size for trace in traces),
            "compacted_away": sum(trace.compacted_away for trace in traces)}


def _in_order(records: dict[Any, int]) -> list[Any]:
    """The records in a fixed order: their own, or by ``repr`` where they do not compare (mixed types)."""
    try:
        return sorted(records)
    except TypeError:
        return sorted(records, key=repr)


def identity(record: Any) -> Any:
    """A record's key where the record is its own key (``distinct``), its value where it is its own (``sum``)."""
    return record


def count_logic(key: Hashable, contents: dict[Any, int]) -> dict[Any, int]:
    """``count``'s logic: ``(key, n)``, the key's records with their copies counted."""
    return {(key, sum(contents.values())): 1}


def distinct_logic(key: Hashable, contents: dict[Any, int]) -> dict[Any, int]:
    """``distinct``'s logic: each of the key's records once (the key itself where it is the record)."""
    return dict.fromkeys(contents, 1)


def summing_logic(value_of: Callable[[Any], Any]) -> Logic:
    """``sum``'s logic as a reduction: ``(key, total)`` of ``value_of`` over the key's records,
    copies counted (exact: integers summed as they are, other numbers with ``math.fsum``)."""
    def total(key: Hashable, contents: dict[Any, int]) -> dict[Any, int]:
        values = [value_of(record) * copies for record, copies in contents.items()]
        exact = all(isinstance(v, int) for v in values)
        return {(key, sum(values) if exact else math.fsum(values)): 1}

    return total


def records_logic(fn: Callable[[Hashable, list], Any], checks: int = 64) -> Logic:
    """``fn(key, records) -> records`` as a :data:`~raytide.differential.Logic` over contents.

    ``fn`` gets the key's records, each repeated by its copies, in a fixed order (their own
    order, or by ``repr`` where they do not compare). It must depend on them as a multiset: the first ``checks`` calls run it a
    second time on the records in reverse order and refuse a different result.
    """
    calls = 0

    def logic(key: Hashable, contents: dict[Any, int]) -> dict[Any, int]:
        nonlocal calls
        records = [record for record in _in_order(contents) for _ in range(contents[record])]
        out = dict(consolidate((record, 1) for record in fn(key, records)))
        if calls < checks:
            calls += 1
            again = dict(consolidate((record, 1) for record in fn(key, records[::-1])))
            if again != out:
                raise RecordError(f"the reduce function is not deterministic on a multiset: for key {key!r} it "
                                  f"returned {sorted(out, key=repr)!r}, and {sorted(again, key=repr)!r} for the same "
                                  "records in reverse order (its result must depend only on the records and their counts)")
        return out

    return logic
