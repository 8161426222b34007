"""The driver's side of a stream input (:mod:`raytide.sources.stream`): each batch dealt in one
call per input replica, then held by a committed snapshot before its producer may record it.

Message flow for batch ``e`` (the feed runs on a thread of its own; the producer, Spark say,
waits in its callback for ``held``)::

    producer ──(e, refs)──▶ feed ──push_refs(share, e, then=e+1)──▶ every input replica
                            feed ◀──────── the calls are answered (the batch is taken)
                            feed ──snapshot_now──▶ coordinator ──markers──▶ replicas ... commit
                            feed ◀── sync: the commit's positions ≥ the batch's (pumped here)
    producer ◀──held(e)──── feed

Nothing waits on the feed: the replicas and the coordinator answer without it, and the
producer has no other batch to give until ``held`` (a micro-batch query runs one batch at a
time). A replica that dies meanwhile is recovered as usual (the driver sends its calls
again); the feed then takes snapshots until one holds the batch.

A driver started again restores the latest snapshot at a batch boundary
(:func:`restore_id`): the one the last ``held`` came from, or a later one.

A stream with event time goes the same way, each replica's call a share for its clock
(``push_stream``, :mod:`raytide.sources.clocked_stream`, which draws that flow), its boundary
the replicas' common batch count rather than their epoch.
"""

from __future__ import annotations

import logging
import pickle
import threading
import time
from collections.abc import Callable, Collection

import ray

from raytide.driver.inputs import InputFeeds
from raytide.errors import JobTimeout, SnapshotError
from raytide.snapshots.recovery import JOB_PART, input_epochs
from raytide.snapshots.store import SnapshotStore
from raytide.sources.base import BlockRefs
from raytide.sources.clocked_stream import boundary_batch
from raytide.sources.stream import StreamReader, boundary_epoch

logger = logging.getLogger(__name__)

#: Longest one wait for a snapshot lasts before the feed checks the time left.
SNAPSHOT_WAIT = 30.0
#: How long the feed waits for a sync between two checks.
SYNC_POLL = 0.02


class StreamFeed:
    """Feeds one stream input of a job from its reader, batch by batch (see the module docstring)."""

    def __init__(self, name: str, reader: StreamReader, inputs: InputFeeds, snapshot: Callable[[float], int],
                 pump: Callable[[float], None], hold_timeout: float) -> None:
        """``snapshot(timeout)``: take a snapshot and wait until it commits (its id);
        ``pump(timeout)``: take the job's events, syncing with the coordinator;
        ``hold_timeout``: longest a batch may take from its arrival to being held."""
        self.name, self.reader, self.inputs = name, reader, inputs
        self.snapshot, self.pump, self.hold_timeout = snapshot, pump, hold_timeout
        self.stopping = False
        self.ended = threading.Event()
        #: What the feed is doing, for a timeout's message (a stream job that stalls says where).
        self.doing = "starting its reader"

    def run(self) -> bool:
        """Feed every batch the reader yields; returns whether the stream ended by itself (then
        the input is closed), rather than being stopped (then it stays open for a savepoint)."""
        try:
            self.reader.seek(self.inputs.continue_stream(self.name))
            self.doing = "waiting for its producer's first batch"
            for epoch, batch in self.reader:
                if not isinstance(batch, BlockRefs):
                    raise TypeError(f"a stream reader yields BlockRefs, not {type(batch).__name__}")
                deadline = time.monotonic() + self.hold_timeout
                self.doing = f"dealing batch {epoch} to the input replicas"
                marks, calls = self.inputs.push_batch(self.name, list(batch.refs), epoch)
                self._wait_taken(calls, epoch, deadline)
                self._hold(marks, epoch, deadline)
                self.reader.held(epoch)
                self.doing = f"waiting for its producer's batch after {epoch} (batch {epoch} is held)"
            self.doing = "ended"
            return not self.stopping
        finally:
            self.ended.set()

    def describe(self) -> str:
        """What the feed, and its producer, are doing."""
        producer = self.reader.describe()
        return f"{self.doing}; its producer: {producer}" if producer else self.doing

    def stop(self) -> None:
        """Stop the producer; the batch in hand, if any, is still held before the feed ends."""
        self.stopping = True
        self.reader.stop()

    def _wait_taken(self, calls: list, epoch: int, deadline: float) -> None:
        """Wait until every input replica has taken its call of batch ``epoch``, so the next
        snapshot is at the batch's end, and hand their answers to the inputs (with event time,
        they tell idle replicas). A replica that died will get it again from a recovery."""
        try:
            self.inputs.taken(self.name, ray.get(calls, timeout=max(0.0, deadline - time.monotonic())))
        except ray.exceptions.GetTimeoutError as error:
            raise JobTimeout(f"stream input {self.name!r}: the input replicas did not take batch {epoch} within "
                             f"{self.hold_timeout:g} s") from error
        except ray.exceptions.RayError:
            logger.info("stream input %r: a replica died while taking batch %d; a recovery sends it again",
                        self.name, epoch)

    def _hold(self, marks: dict[int, int], epoch: int, deadline: float) -> None:
        """Take snapshots until a committed one holds batch ``epoch`` (every replica at ``marks``)."""
        why = "no snapshot was committed"
        tried = 0
        while not self.inputs.holds(self.name, marks):
            self.doing = f"taking snapshots until one holds batch {epoch}" + (f" ({tried} did not: {why})" if tried else "")
            tried += 1
            left = deadline - time.monotonic()
            if left <= 0:
                raise JobTimeout(f"stream input {self.name!r}: batch {epoch} was not held by a committed snapshot "
                                 f"within {self.hold_timeout:g} s ({why})")
            try:
                snapshot_id = self.snapshot(min(left, SNAPSHOT_WAIT))
            except (SnapshotError, ray.exceptions.RayActorError) as error:  # abandoned, or the coordinator died:
                why = str(error)  # the job's pump notices a death and recovers; then try again
                self.pump(SYNC_POLL)
                continue
            while self.inputs.committed_id < snapshot_id and time.monotonic() < deadline:
                self.pump(SYNC_POLL)


def restore_id(store: SnapshotStore, wanted: int | str, streams: list[str], clocked: Collection[str] = ()) -> int | None:
    """The snapshot a job with stream inputs ``streams`` (of which ``clocked`` have event time)
    restores for ``restore=wanted``: the latest committed one at a batch boundary of every
    stream (``"latest"``; None if the store has none at all: no batch was held yet, so the job
    starts at the very start, and the query runs its batches again from the first: ``rt.run``
    then restores :data:`~raytide.snapshots.consumed.START`), or snapshot ``wanted`` if it is at one.

    Raises:
        SnapshotError: no such snapshot; the message says why.
    """
    candidates = [m.snapshot_id for m in store.committed()] if wanted == "latest" else [int(wanted)]
    if not candidates:
        return None
    for snapshot_id in reversed(candidates):
        at = stream_boundaries(store, snapshot_id, streams, clocked)
        if all(boundary is not None for boundary, _ in at.values()):
            return snapshot_id
        if wanted != "latest":
            raise SnapshotError(f"snapshot {snapshot_id} cut stream inputs between the calls of one batch (their "
                                f"replicas were at {dict(what for _, what in at.values())}); restore 'latest' or a "
                                f"snapshot at a batch end")
    raise SnapshotError(f"the store {store.uri!r} has no committed snapshot at a batch boundary of the stream inputs "
                        f"{streams} (of {len(candidates)} committed)")


def stream_boundaries(store: SnapshotStore, snapshot_id: int, streams: list[str],
                      clocked: Collection[str] = ()) -> dict[str, tuple[int | None, tuple[str, str]]]:
    """Per stream input, the batch boundary snapshot ``snapshot_id`` is at (None: none), with
    where its replicas were, for a message. Read from the summaries of its ``job`` part: each
    replica's epoch (None: closed), and for a stream with event time each replica's command
    count, its next batch id (:func:`~raytide.sources.clocked_stream.boundary_batch`)."""
    summaries = pickle.loads(store.read_part(snapshot_id, JOB_PART))
    epochs = stream_epochs(store, snapshot_id, streams, summaries)
    found: dict[str, tuple[int | None, tuple[str, str]]] = {}
    for name, at in epochs.items():
        if name in clocked:
            counts = [summary.positions[name] for _, summary in sorted(summaries.items(), key=lambda kv: kv[0].replica)
                      if name in summary.positions]
            found[name] = boundary_batch(counts, at), (name, f"batch counts {counts}, epochs {at}")
        else:
            found[name] = boundary_epoch(at), (name, f"epochs {at}")
    return found


def stream_epochs(store: SnapshotStore, snapshot_id: int, streams: list[str],
                  summaries: dict | None = None) -> dict[str, list[int | None]]:
    """Per stream input, the epoch each of its replicas was at in snapshot ``snapshot_id``
    (None: closed), in replica order, read from the summaries of its ``job`` part (or ``summaries``, read already)."""
    epochs = input_epochs(summaries if summaries is not None else pickle.loads(store.read_part(snapshot_id, JOB_PART)))
    return {name: [epochs[key] for key in sorted(key for key in epochs if key[0] == name)] for name in streams}
