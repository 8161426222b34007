"""Built-in vertices, written against the public :class:`~raytide.Vertex` API like user code.

The ``Dataflow`` builder composes them: ``map``, ``flat_map``, ``filter`` and ``inspect``
are a :class:`BatchFunction`; per-epoch aggregations are a :class:`KeyedReduce` that
combines before the exchange, then another that merges after it; ``stateful_map`` and
``join`` keep keyed state. Every stateful one splits its state by key (``take_keys``) and
takes in another replica's (``put_keys``), for a change of parallelism.
"""

from __future__ import annotations

import inspect
import itertools
import operator
from collections import Counter, defaultdict
from collections.abc import Callable, Hashable, Iterable
from types import FunctionType
from typing import Any, TypeVar

from raytide.core.batches import batch_length, to_records
from raytide.core.epochs import Phase, check_epoch_order
from raytide.core.split_text import SplitText, WordTally
from raytide.core.vertex import Vertex
from raytide.errors import RescaleError
from raytide.progress.timestamps import Timestamp

BatchFn = Callable[[Any], Any]
_T = TypeVar("_T")


#: How many distinct keys a combiner holds per timestamp before it sends them on early.
COMBINER_MAX_KEYS = 65_536


class BatchFunction(Vertex):
    """A stateless vertex applying ``fn`` to each incoming batch and sending what it returns."""

    takes_lazy_batches = True  # every batch function reads its batch through raytide.core.batches

    def __init__(self, fn: BatchFn) -> None:
        self.fn = fn

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        out = self.fn(message)
        if out is not None and batch_length(out):
            self.send_by(0, out, time)


def _per_time(vertex: Vertex, state: dict[Timestamp, Any], time: Timestamp, new: Callable[[], Any]) -> Any:
    """``state[time]``, created with ``new()`` on first use together with a notification
    at ``time`` (where the vertex finishes, or drops, what it kept for that time)."""
    value = state.get(time)
    if value is None:
        value = state[time] = new()
        vertex.notify_at(time)
    return value


def _given(value: _T) -> Callable[[], _T]:
    """A factory that makes nothing new: ``value`` becomes a time's state as it is."""
    return lambda: value


def _drop_time(vertex: Vertex, state: dict[Timestamp, Any], time: Timestamp) -> None:
    """Forget ``time``, whose state all moved to other replicas, with its notification."""
    del state[time]
    vertex.cancel_notify(time)


def _take_from(held: dict, moving: Callable[[Hashable], bool], taken: dict) -> dict:
    """Move the entries of ``held`` whose key ``moving`` selects into ``taken``; returns ``taken``."""
    for key in [key for key in held if moving(key)]:
        taken[key] = held.pop(key)
    return taken


def _refuse_shared_keys(vertex: Vertex, held: Iterable[Hashable], incoming: Iterable[Hashable], where: str) -> None:
    """A key's state lives on one replica (its input is exchanged by that key), so state of
    a key this replica holds too means the replicas disagreed on who owns it."""
    mine = set(held)
    for key in incoming:
        if key in mine:
            raise RescaleError(f"vertex {vertex._label()!r}: the state of key {key!r}{where} is held by two replicas, "
                               "but a key's state lives on one replica")


class Ingress(Vertex):
    """Enters a loop context: appends a loop counter 0 to each batch's timestamp."""

    takes_lazy_batches = True  # passes batches on as they are

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        self.send_by(0, message, Timestamp(time.epoch, time.counters + (0,)))


class Egress(Vertex):
    """Leaves a loop context: drops the last loop counter."""

    takes_lazy_batches = True  # passes batches on as they are

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        self.send_by(0, message, Timestamp(time.epoch, time.counters[:-1]))


class Feedback(Vertex):
    """Carries records to the next iteration (last counter + 1), dropping those past ``bound``."""

    takes_lazy_batches = True  # passes batches on as they are

    def __init__(self, bound: int | None) -> None:
        self.bound = bound

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        following = time.counters[-1] + 1
        if self.bound is None or following <= self.bound:
            self.send_by(0, message, Timestamp(time.epoch, time.counters[:-1] + (following,)))


class _PerTimeAggregate(Vertex):
    """Per-timestamp accumulators by key, emitted as ``(key, value)`` pairs when the timestamp completes.

    As a *combiner* (before an exchange, ``max_keys`` set) it emits partial results
    earlier, which the merging vertex after the exchange folds together: once it holds
    ``max_keys`` keys for a timestamp, so its memory stays bounded; as soon as records
    of a later timestamp arrive, the point at which a reader that has moved on to its next
    epoch is done with the previous one; and when the input it is fused behind moves on
    or closes (:meth:`on_input_epoch`), so a reader's last epoch leaves without waiting for
    the other readers. The pending notification is what lets it send at those earlier
    times. Subclasses fold a message into an accumulator in ``on_recv``; when two replicas'
    accumulators of one time meet (:meth:`put_keys`), a key held by both (a combiner's
    partial results) folds with ``reducer``.
    """

    takes_lazy_batches = True  # subclasses read their batches through raytide.core.batches

    def __init__(self, max_keys: int | None, reducer: Callable[[Any, Any], Any]) -> None:
        self.max_keys, self.reducer = max_keys, reducer
        self.state: dict[Timestamp, dict[Hashable, Any]] = {}

    def _accumulator(self, time: Timestamp, new: Callable[[], dict]) -> dict:
        """The accumulator of ``time``; a combiner first ships what it holds for earlier times."""
        self._ship_partials(lambda held: held.less_than(time))
        return _per_time(self, self.state, time, new)

    def on_input_epoch(self, epoch: int | None) -> None:
        """A combiner behind a reader ships what it holds for the epochs the reader has left;
        nothing more comes here at those epochs, so it cancels their notifications (the merge
        after the exchange then waits for the progress tracker only once, not twice)."""
        for time in self._ship_partials(lambda held: epoch is None or held.epoch < epoch):
            self.cancel_notify(time)

    def _ship_partials(self, done: Callable[[Timestamp], bool]) -> list[Timestamp]:
        """As a combiner, send the partial results of every time ``done`` selects (its notification
        is still pending); returns those times."""
        if self.max_keys is None:
            return []
        shipped = [t for t in self.state if done(t)]
        for time in shipped:
            self.on_notify(time)
        return shipped

    def _gather(self, time: Timestamp) -> None:
        """Bring into the accumulator of ``time`` what a subclass holds for it elsewhere (nothing by default)."""

    def _bound(self, acc: dict, time: Timestamp) -> None:
        if self.max_keys is not None and len(acc) >= self.max_keys:
            self.send_by(0, list(acc.items()), time)
            acc.clear()

    def on_notify(self, time: Timestamp) -> None:
        self._gather(time)
        acc = self.state.pop(time, None)
        if acc:
            self.send_by(0, list(acc.items()), time)

    def snapshot(self) -> Any:
        self._gather_all()
        return self.state

    def restore(self, state: Any) -> None:
        self.state = state

    def take_keys(self, moving: Callable[[Hashable], bool]) -> dict[Timestamp, dict[Hashable, Any]]:
        """The accumulators of the moving keys, per time; a time left without keys goes, with
        its notification."""
        self._gather_all()
        taken = {}
        for time, acc in list(self.state.items()):
            part = _take_from(acc, moving, type(acc)())  # a dict, or a KeyedCount's Counter
            if part:
                taken[time] = part
            if not acc:
                _drop_time(self, self.state, time)
        return taken

    def put_keys(self, state: dict[Timestamp, dict[Hashable, Any]]) -> None:
        """Adopt another replica's accumulators (a new time with its notification); a key
        both hold at a time folds with ``reducer``."""
        for time, partial in state.items():
            acc = _per_time(self, self.state, time, _given(partial))
            if acc is not partial:
                _fold(acc, partial.items(), self.reducer)

    def _gather_all(self) -> None:
        """Bring everything held for every time into its accumulator (before it is read whole)."""
        for time in self.state:
            self._gather(time)


class KeyedReduce(_PerTimeAggregate):
    """Per-timestamp reduction by key: ``reducer(acc, value)`` over ``(key_of(r), value_of(r))``.

    Emits ``(key, reduced)`` pairs; as a combiner (``max_keys`` set) the reducer must be
    associative and commutative, since the merging vertex folds partial results together.
    """

    def __init__(
        self,
        key_of: Callable[[Any], Hashable],
        value_of: Callable[[Any], Any],
        reducer: Callable[[Any, Any], Any],
        max_keys: int | None = None,
    ) -> None:
        super().__init__(max_keys, reducer)
        self.key_of, self.value_of = key_of, value_of

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        acc = self._accumulator(time, dict)
        records = to_records(message)
        _fold(acc, zip(map(self.key_of, records), map(self.value_of, records)), self.reducer)  # getters called in C
        self._bound(acc, time)


class KeyedCount(_PerTimeAggregate):
    """Counts records per key and timestamp (combiner side): ``(key, count)`` pairs.

    Counting is :meth:`Counter.update`, a loop in C; when the key is the record itself
    (:func:`is_identity`) not even the key function is called per record, and the words
    of a :class:`SplitText` (``flat_map(str.split)``) are counted in Arrow by a
    :class:`WordTally` per timestamp, which adds its counts to the accumulator once it
    is full and whenever the accumulator is read.
    """

    def __init__(self, key_of: Callable[[Any], Hashable], max_keys: int | None = None) -> None:
        super().__init__(max_keys, operator.add)  # two replicas' counts of a key add up
        self.key_of = key_of
        self.counts_records = is_identity(key_of)
        self.tallies: dict[Timestamp, WordTally] = {}

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        acc = _counter(self._accumulator(time, Counter))
        if not (self.counts_records and isinstance(message, SplitText) and self._tally(time, message)):
            records = to_records(message)
            acc.update(records if self.counts_records else map(self.key_of, records))
        self._bound(acc, time)

    def _tally(self, time: Timestamp, text: SplitText) -> bool:
        """Hand the words of ``text`` to the tally of ``time``; False when the tally refuses them."""
        tally = self.tallies.get(time)
        if tally is None:
            tally = self.tallies[time] = WordTally()
        if not tally.add(text):
            return False
        if tally.full:
            self._gather(time)
        return True

    def _gather(self, time: Timestamp) -> None:
        tally = self.tallies.pop(time, None)
        if tally is not None:
            tally.count_into(_counter(self.state[time]))

    def restore(self, state: Any) -> None:
        super().restore(state)
        self.tallies = {}


def _counter(acc: dict) -> Counter:
    """``acc`` as the Counter it is: every accumulator of a :class:`CountByKey` is created as one."""
    assert isinstance(acc, Counter), f"a CountByKey accumulator is a Counter, not {type(acc).__name__}"
    return acc


class KeyedMerge(_PerTimeAggregate):
    """The vertex after a combiner's exchange: folds partial ``(key, value)`` pairs per timestamp.

    A combiner sends each key at most once per message, so a message becomes a dict in
    one call in C. The first partial of a timestamp is kept as it is; a later one is folded
    into the larger of the two with ``reducer``, which combining already requires to be
    associative and commutative.
    """

    def __init__(self, reducer: Callable[[Any, Any], Any]) -> None:
        super().__init__(None, reducer)

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        records = to_records(message)
        partial = dict(records)
        if len(partial) != len(records):
            raise ValueError(f"a partial result at {time} holds a key twice; the vertex before the exchange "
                             "must send each key at most once per message (as a combiner does)")
        acc = _per_time(self, self.state, time, lambda: partial)
        if acc is partial:
            return
        if len(partial) > len(acc):
            self.state[time], acc, partial = partial, partial, acc
        _fold(acc, partial.items(), self.reducer)


def _fold(acc: dict, pairs: Iterable[tuple[Hashable, Any]], reducer: Callable[[Any, Any], Any]) -> None:
    """Fold ``(key, value)`` pairs into ``acc`` with ``reducer``; a new key takes its value as it is."""
    for key, value in pairs:
        acc[key] = reducer(acc[key], value) if key in acc else value


def _identity(record: Any) -> Any:
    return record


_VARIADIC = inspect.CO_VARARGS | inspect.CO_VARKEYWORDS


def is_identity(fn: Callable[[Any], Any]) -> bool:
    """Whether ``fn`` is a plain function returning its one argument, like ``lambda w: w``.

    Told from the bytecode (the same instructions as a one-argument function returning
    it, and no other parameters), so a per-record key that changes nothing costs no call.
    """
    if not isinstance(fn, FunctionType):
        return False
    code, reference = fn.__code__, _identity.__code__
    return (code.co_code == reference.co_code and code.co_argcount == 1
            and code.co_kwonlyargcount == 0 and not code.co_flags & _VARIADIC)


def flat_map_batch(fn: Callable[[Any], Iterable[Any]]) -> BatchFn:
    """The batch function of ``flat_map(fn)``: every record's outputs, in order, in one batch.

    ``fn`` is called per record from C (``map`` and ``chain``, a quarter faster than a
    nested comprehension), into a list. ``str.split`` is recognised: a batch of strings
    becomes a :class:`SplitText` of the records joined by a space, which holds the same
    words in the same order (a space is whitespace too, so no word spans two records).
    Split at once in one call, the words lie contiguously in memory, and counting them
    runs about a third faster than over words interleaved with one small list per record;
    a count by the word itself does not split them in Python at all.
    """
    flatten = itertools.chain.from_iterable

    def per_record(batch: Any) -> list:
        return list(flatten(map(fn, to_records(batch))))

    if fn is not str.split:
        return per_record

    def split_words(batch: Any) -> SplitText | list:
        records = to_records(batch)
        try:
            return SplitText(" ".join(records))
        except TypeError:  # a record that is not a str: str.split raises its own error for it
            return per_record(records)

    return split_words


#: The key of a ``(key, value)`` pair: a getter in C, since it runs once per record.
pair_key = operator.itemgetter(0)


class StatefulMap(Vertex):
    """Keyed state across epochs: ``fn(state, record) -> (new_state, output)`` per record.

    The state of a key starts as ``None``; returning ``None`` as the new state forgets
    the key. Emits ``(key, output)`` at the record's timestamp. Records are applied one
    timestamp at a time, in timestamp order, once their timestamp is complete (at its
    notification), so the state a record sees does not depend on which input replica or
    reader happened to deliver first; within a timestamp, one key's records are applied
    in arrival order. Inside a loop, a notification of an earlier epoch after one of a later
    epoch (two epochs in the loop at once, which its state would mix) is refused with a
    :class:`~raytide.errors.ProgressError` (:mod:`raytide.core.epochs`).
    """

    takes_lazy_batches = True  # reads its batches through raytide.core.batches

    def __init__(self, key: Callable[[Any], Hashable], fn: Callable[[Any, Any], tuple[Any, Any]]) -> None:
        self.key, self.fn = key, fn
        self.state: dict[Hashable, Any] = {}
        self.waiting: dict[Timestamp, list] = {}
        self.phase: Phase | None = None

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        _per_time(self, self.waiting, time, list).extend(to_records(message))

    def on_notify(self, time: Timestamp) -> None:
        self.phase = check_epoch_order(self, self.phase, time)  # inside a loop: never two epochs mixed
        out = []
        for record in self.waiting.pop(time, ()):
            k = self.key(record)
            new_state, output = self.fn(self.state.get(k), record)
            if new_state is None:
                self.state.pop(k, None)
            else:
                self.state[k] = new_state
            out.append((k, output))
        if out:
            self.send_by(0, out, time)

    def snapshot(self) -> Any:
        return {"state": self.state, "waiting": self.waiting}

    def restore(self, state: Any) -> None:
        self.state, self.waiting = state["state"], state["waiting"]

    def take_keys(self, moving: Callable[[Hashable], bool]) -> Any:
        """The state of the moving keys and, per time, their records waiting for it (in
        arrival order); a time left without records goes, with its notification."""
        waiting = {}
        for time, records in list(self.waiting.items()):
            going = [moving(self.key(record)) for record in records]
            if any(going):
                waiting[time] = [record for record, goes in zip(records, going) if goes]
                staying = [record for record, goes in zip(records, going) if not goes]
                if staying:
                    self.waiting[time] = staying
                else:
                    _drop_time(self, self.waiting, time)
        return {"state": _take_from(self.state, moving, {}), "waiting": waiting}

    def put_keys(self, state: Any) -> None:
        """Adopt another replica's keys; a key's state lives on one replica, so a key this one
        holds too is refused. Waiting records join those of their time (a new time with its
        notification)."""
        _refuse_shared_keys(self, self.state, state["state"], "")
        self.state.update(state["state"])
        for time, records in state["waiting"].items():
            _per_time(self, self.waiting, time, list).extend(records)


class EpochJoin(Vertex):
    """Per-timestamp inner join of two keyed inputs: emits ``(key, left, right)``.

    A symmetric hash join: each record is matched against what the other side has
    delivered at the same timestamp so far, so results flow before the epoch ends;
    the state of a timestamp is dropped when it completes.
    """

    def __init__(self, left_key: Callable[[Any], Hashable], right_key: Callable[[Any], Hashable]) -> None:
        self.keys = (left_key, right_key)
        self.sides: dict[Timestamp, tuple[dict, dict]] = {}

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        sides = _per_time(self, self.sides, time, lambda: (defaultdict(list), defaultdict(list)))
        mine, other = sides[edge], sides[1 - edge]
        key_of, out = self.keys[edge], []
        for record in message:
            k = key_of(record)
            mine[k].append(record)
            for match in other.get(k, ()):
                out.append((k, record, match) if edge == 0 else (k, match, record))
        if out:
            self.send_by(0, out, time)

    def on_notify(self, time: Timestamp) -> None:
        self.sides.pop(time, None)

    def snapshot(self) -> Any:
        return self.sides

    def restore(self, state: Any) -> None:
        self.sides = state

    def take_keys(self, moving: Callable[[Hashable], bool]) -> dict[Timestamp, tuple[dict, dict]]:
        """Both sides' records of the moving keys, per time; a time left without records goes,
        with its notification."""
        taken = {}
        for time, (left, right) in list(self.sides.items()):
            part = (_take_from(left, moving, defaultdict(list)), _take_from(right, moving, defaultdict(list)))
            if any(part):
                taken[time] = part
            if not (left or right):
                _drop_time(self, self.sides, time)
        return taken

    def put_keys(self, state: dict[Timestamp, tuple[dict, dict]]) -> None:
        """Adopt another replica's records (a new time with its notification). A key at a
        time is refused if this replica holds it too: the records of the two were never
        matched against each other."""
        for time, part in state.items():
            held = _per_time(self, self.sides, time, _given(part))
            if held is part:
                continue
            _refuse_shared_keys(self, itertools.chain(*held), itertools.chain(*part), f" at {time}")
            for mine, theirs in zip(held, part):
                mine.update(theirs)
