"""The driver's side of a job's inputs: each input's current epoch, records spread over the
input's replicas, and a bounded window of unacknowledged calls per replica.

Records pushed from the driver are cut into batches of at most ``batch_size`` and dealt
to the input's replicas in turn; the turn carries over from one push to the next, so
many small pushes (or the small epochs of ``rt.run(inputs=...)``) spread as evenly as
one large push. Object refs of batches are dealt the same way. Each call waits, before
it is sent, until its replica has fewer than ``max_inflight`` calls unanswered
(backpressure from the job to the driver).
"""

from __future__ import annotations

import collections
import collections.abc
import itertools
import operator
import threading
from collections.abc import Callable
from typing import Any

import ray

from raytide.actors.protocol import Marker
from raytide.actors.wire import pack, unpicklable
from raytide.core.batches import BATCH_KINDS, batch_length, not_a_batch, split_batch, to_records
from raytide.errors import GraphError, RecordError

#: How long one wait for a full window lasts before the job's failure is checked again.
WINDOW_POLL = 1.0


def as_epoch(name: str, epoch: Any) -> int:
    """``epoch`` as an int: ints and integer-like values (NumPy integers, anything with
    ``__index__``) are accepted; anything else raises a GraphError naming the input."""
    try:
        return operator.index(epoch)
    except TypeError:
        raise GraphError(f"input {name!r}: epoch {epoch!r} is not an integer (got {type(epoch).__name__})") from None


class InputFeeds:
    """Epochs, locks, turns and windows of every input of one job."""

    def __init__(self, flow_name: str, replicas: dict[str, list[Any]], max_inflight: int, batch_size: int,
                 raise_if_failed: Callable[[], None]) -> None:
        """``replicas``: per input, the actor handles of its replicas in replica order."""
        self.flow_name, self.replicas = flow_name, replicas
        self.max_inflight, self.batch_size = max_inflight, batch_size
        self.raise_if_failed = raise_if_failed
        self.epochs: dict[str, int | None] = dict.fromkeys(replicas, 0)
        self.locks = {name: threading.Lock() for name in replicas}
        self.turns = dict.fromkeys(replicas, 0)
        self.windows: dict[Any, collections.deque] = collections.defaultdict(collections.deque)

    def check(self, name: str) -> None:
        """Raise a GraphError naming the job's inputs if ``name`` is not one of them."""
        if name not in self.replicas:
            raise GraphError(f"{name!r} is not an input of dataflow {self.flow_name!r}; inputs: {list(self.replicas)}")

    def push(self, name: str, records: Any, epoch: Any = None) -> None:
        """Send ``records`` into input ``name`` at ``epoch`` (default: its current epoch).

        Every batch is pickled before the first is sent, so a push that fails (a record
        that does not pickle) sends nothing.
        """
        self.check(name)
        with self.locks[name]:
            at = self._check_epoch(name, self.epochs[name] if epoch is None else epoch)
            pieces = split_batch(pushed_batch(name, at, records), self.batch_size)
            payloads = [_packed(name, at, piece, offset) for piece, offset in zip(pieces, _offsets(pieces))]
            self._move_to(name, at)
            for payload in payloads:
                self._submit(self._next_replica(name), "push", name, *payload, at)

    def push_refs(self, name: str, refs: list, epoch: Any) -> None:
        """Send object refs of batches into input ``name``; the replicas read them."""
        self.check(name)
        with self.locks[name]:
            epoch = self._move_to(name, epoch)
            dealt: dict[int, list] = collections.defaultdict(list)
            for ref in refs:
                dealt[self._next_index(name)].append(ref)
            for index, mine in sorted(dealt.items()):
                self._submit(self.replicas[name][index], "push_refs", name, mine, epoch)

    def advance(self, name: str, epoch: Any) -> None:
        """No more records will come into input ``name`` before ``epoch``."""
        self.check(name)
        with self.locks[name]:
            self._move_to(name, epoch)

    def close(self, name: str) -> None:
        """No more records will come into input ``name``."""
        self.check(name)
        with self.locks[name]:
            if self.epochs[name] is not None:
                self._send_advance(name, None)

    def hand_over(self, name: str) -> None:
        """The input's replicas read it themselves from now on (a parallel source)."""
        with self.locks[name]:
            self.epochs[name] = None

    def inject_marker(self, marker: Marker) -> None:
        """Send ``marker`` to every input replica, behind what was pushed before."""
        for name, replicas in self.replicas.items():
            with self.locks[name]:
                for replica in replicas:
                    self._submit(replica, "inject_marker", marker)

    def open_inputs(self) -> dict[str, int]:
        """The inputs still open, with their current epoch."""
        return {name: epoch for name, epoch in self.epochs.items() if epoch is not None}

    def _check_epoch(self, name: str, epoch: Any) -> int:
        """``epoch`` as an int, if the input is open and not past it."""
        current = self.epochs[name]
        if current is None:
            raise GraphError(f"input {name!r} is closed; it cannot take epoch {epoch!r}")
        epoch = as_epoch(name, epoch)
        if epoch < current:
            raise GraphError(f"input {name!r} is at epoch {current}; epoch {epoch} is in its past")
        return epoch

    def _move_to(self, name: str, epoch: Any) -> int:
        """Check ``epoch`` against the input's and advance the input to it if it is later."""
        epoch = self._check_epoch(name, epoch)
        if epoch != self.epochs[name]:
            self._send_advance(name, epoch)
        return epoch

    def _send_advance(self, name: str, epoch: int | None) -> None:
        for replica in self.replicas[name]:
            self._submit(replica, "advance", name, epoch)
        self.epochs[name] = epoch

    def _next_index(self, name: str) -> int:
        index = self.turns[name]
        self.turns[name] = (index + 1) % len(self.replicas[name])
        return index

    def _next_replica(self, name: str) -> Any:
        return self.replicas[name][self._next_index(name)]

    def _submit(self, actor: Any, method: str, *args: Any) -> None:
        window = self.windows[actor]
        while len(window) >= self.max_inflight:
            self.raise_if_failed()
            ready, _ = ray.wait([window[0]], timeout=WINDOW_POLL)
            if ready:
                ray.get(window.popleft())
        window.append(getattr(actor, method).remote(*args))


def pushed_batch(name: str, epoch: int, records: Any) -> Any:
    """What ``job.push`` was given, as a batch: a batch as it is, another iterable (a tuple,
    a range, a generator) as a list; a string, None or a non-iterable raises a RecordError."""
    if not_a_batch(records) is None:
        return records
    if isinstance(records, (str, bytes)) or not isinstance(records, collections.abc.Iterable):
        raise RecordError(f"input {name!r} epoch {epoch}: push got {not_a_batch(records)}, not records; "
                          f"a push takes {BATCH_KINDS}, or any other iterable of records")
    return list(records)


def _offsets(pieces: list) -> list[int]:
    """The index of each piece's first record in the whole push."""
    return list(itertools.accumulate((batch_length(piece) for piece in pieces[:-1]), initial=0))


def _packed(name: str, epoch: int, piece: Any, offset: int) -> tuple[Any, bool]:
    """``pack(piece)``, or a RecordError naming the input, the epoch and the first record that does not pickle."""
    try:
        return pack(piece)
    except Exception as error:
        raise unpicklable(to_records(piece), error, f"input {name!r} epoch {epoch}", offset,
                          "; nothing of this push was sent") from error
