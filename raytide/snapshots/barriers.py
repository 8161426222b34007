"""Barrier alignment for asynchronous barrier snapshotting (ABS), as a pure state machine.

This module is the per-vertex half of the snapshot protocol of Carbone et al.,
"Lightweight Asynchronous Snapshots for Distributed Dataflows" (the algorithm
behind Flink's checkpoints). It does no I/O: a vertex actor feeds a
`BarrierAligner` the events it sees (a record or a barrier arriving on an input
channel, or, at a source, the coordinator's request to snapshot) and carries
out the effects it gets back, in order. The same object therefore runs
unchanged inside a Ray actor and inside a seeded in-process simulator.

The protocol
============

Every input channel is FIFO (Ray keeps the order of calls from one caller to
one actor while the actor runs them one at a time; anything that reorders a
channel breaks this protocol). The coordinator starts snapshot ``k`` by asking
every source to `BarrierAligner.inject` it: the source snapshots its state
(its read offset) and forwards a barrier ``k`` on every output. Barriers then
travel in-band, behind the records sent before them and ahead of the records
sent after them.

Alignment (regular channels). When barrier ``k`` arrives on a regular input
channel the vertex *blocks* that channel: its later records are held back
(`Decision.BUFFER`) in FIFO order, while the channels whose barrier has not
come yet keep flowing (`Decision.DELIVER`). When barrier ``k`` has arrived on
every regular channel the vertex is *aligned*: it takes its local snapshot
(`TakeSnapshot`), forwards barrier ``k`` on every output, back edges included
(`ForwardBarrier`), and unblocks, delivering each channel's held records in
order (`Release`). The local state then reflects exactly the records that every
upstream vertex sent before its own snapshot ``k``: nothing sent before a
barrier is missed and nothing sent after it is included, so in an acyclic
graph no record is in flight in the cut and the vertex's snapshot is complete
at once (`SnapshotComplete` with an empty log).

Back edges (cycles). On a cycle, barrier ``k`` comes back on the back edge only
after this vertex has forwarded it, so waiting for it would deadlock. Back
edges are therefore never blocked and alignment ignores them. Records that
arrive on a back edge after the local snapshot but before that edge's barrier
``k`` were sent before the sender's snapshot and are processed after ours: they
are in flight in the cut. They are delivered as usual and also logged
(`Decision.DELIVER_AND_LOG`). Once barrier ``k`` has arrived on every back
edge, the vertex's snapshot ``k`` is complete: the state taken at
`TakeSnapshot` plus that log, reported by `SnapshotComplete`.

Recovery from a globally complete snapshot ``k``: restore every vertex from its
`TakeSnapshot` state, put each logged back-edge record back into its channel
ahead of any new traffic, and rewind every source to its recorded offset.

Overlapping snapshots are handled. Barrier ``k + 1`` may arrive before snapshot
``k`` has completed, and the rule is:

* At most one snapshot is being aligned at a time. A barrier that arrives on a
  channel that is still blocked waits in that channel's buffer, in order with
  its records, and is processed when the channel is released; the channel then
  blocks again at once for the new snapshot.
* Any number of snapshots may wait for their back-edge barriers at once. A
  back-edge record is logged for every such snapshot whose barrier has not come
  on that edge yet. Snapshots complete in the order of their ids.
* Snapshot ids must increase, but need not be consecutive. What is refused,
  with a `raytide.errors.SnapshotError` naming the vertex, the channel and the
  snapshot id: a barrier on a channel that is not an input; a barrier on a
  channel whose id is not above the last one that channel brought (a duplicate
  or older barrier); a regular channel that brings a different snapshot's
  barrier while snapshot ``k`` is aligning (it skipped one); a back-edge barrier
  for a snapshot that is not the oldest one waiting on that edge (for example
  one that arrives before the local snapshot, which means the edge is not
  really a back edge). After a `SnapshotError` the aligner must be discarded.

Records are kept by reference while buffered or logged; the caller must not
mutate them afterwards.

A worked example
================

A join with two regular inputs aligns snapshot 1:

>>> join = BarrierAligner("join", inputs=["left", "right"])
>>> join.on_barrier("left", 1)
[]
>>> join.on_record("left", "a").name  # after left's barrier: held back
'BUFFER'
>>> join.on_record("right", "b").name  # before right's barrier: part of snapshot 1
'DELIVER'
>>> for effect in join.on_barrier("right", 1):
...     print(effect)
TakeSnapshot(snapshot_id=1)
ForwardBarrier(snapshot_id=1)
SnapshotComplete(snapshot_id=1, logged={})
Release(channel='left', records=('a',))

The head of a loop has a regular input and a feedback (back) edge:

>>> head = BarrierAligner("head", inputs=["in", "feedback"], back_edges=["feedback"])
>>> head.on_record("feedback", "x").name  # before the local snapshot: in the state
'DELIVER'
>>> head.on_barrier("in", 1)
[TakeSnapshot(snapshot_id=1), ForwardBarrier(snapshot_id=1)]
>>> head.on_record("feedback", "y").name  # in flight in the cut
'DELIVER_AND_LOG'
>>> head.on_barrier("feedback", 1)
[SnapshotComplete(snapshot_id=1, logged={'feedback': ('y',)})]
>>> head.on_record("feedback", "z").name  # after the barrier: in the next snapshot's state
'DELIVER'

A source has no inputs; the coordinator injects the barrier there:

>>> BarrierAligner("numbers").inject(1)
[TakeSnapshot(snapshot_id=1), ForwardBarrier(snapshot_id=1), SnapshotComplete(snapshot_id=1, logged={})]
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from raytide.errors import SnapshotError

ChannelKey = Hashable
"""An input channel's id: any hashable value, unique among one vertex's inputs."""


class Decision(enum.Enum):
    """What the vertex must do with a record that just arrived (`BarrierAligner.on_record`)."""

    DELIVER = "deliver"
    """Process the record now."""
    BUFFER = "buffer"
    """Do not process it: the channel is blocked; the aligner keeps it and hands it back in a `Release`."""
    DELIVER_AND_LOG = "deliver_and_log"
    """Process it now; the aligner also logged it for the snapshots waiting on this back edge."""


@dataclass(frozen=True)
class TakeSnapshot:
    """Snapshot the vertex's state now, before processing anything else.

    Attributes:
        snapshot_id: The snapshot the state belongs to.
    """

    snapshot_id: int


@dataclass(frozen=True)
class ForwardBarrier:
    """Send barrier ``snapshot_id`` on every output channel, back edges included, before any further record.

    Attributes:
        snapshot_id: The snapshot whose barrier to send.
    """

    snapshot_id: int


@dataclass(frozen=True)
class Release:
    """Process these records, which were held back while ``channel`` was blocked, now and in this order.

    Attributes:
        channel: The input channel the records came on.
        records: The held-back records, oldest first; never empty.
    """

    channel: ChannelKey
    records: tuple[Any, ...]


@dataclass(frozen=True)
class SnapshotComplete:
    """The vertex's part of snapshot ``snapshot_id`` is complete; acknowledge it to the coordinator.

    The vertex's snapshot is the state taken at the matching `TakeSnapshot` plus ``logged``.

    Attributes:
        snapshot_id: The completed snapshot.
        logged: For every back-edge input, the records that arrived on it between the local
            snapshot and its barrier, oldest first; empty for a vertex without back edges.
    """

    snapshot_id: int
    logged: Mapping[ChannelKey, tuple[Any, ...]]


Effect = TakeSnapshot | ForwardBarrier | Release | SnapshotComplete
"""An action the vertex must carry out; effects are returned as lists, to be carried out in order."""


@dataclass(frozen=True)
class _QueuedBarrier:
    """A barrier that arrived on a blocked channel and waits there behind the records before it."""

    snapshot_id: int


@dataclass
class _WaitingSnapshot:
    """A snapshot whose local state is taken and which waits for barriers on back edges."""

    awaiting: set[ChannelKey]
    log: dict[ChannelKey, list[Any]]


class BarrierAligner:
    """The barrier-alignment state machine of one vertex (replica); see the module docstring.

    Args:
        vertex: The vertex's name, used in error messages.
        inputs: Every input channel of the vertex, back edges included; empty for a source.
        back_edges: The input channels that close a cycle through this vertex.

    Raises:
        SnapshotError: If ``inputs`` repeats a channel, ``back_edges`` is not a subset of
            ``inputs``, or every input is a back edge (such a vertex could never align).
    """

    def __init__(self, vertex: str, inputs: Iterable[ChannelKey] = (), back_edges: Iterable[ChannelKey] = ()) -> None:
        self._vertex = vertex
        self._inputs = tuple(inputs)
        self._back_edges = tuple(dict.fromkeys(back_edges))
        self._check_channels()
        self._regular = tuple(c for c in self._inputs if c not in self._back_edges)
        self._last_barrier: dict[ChannelKey, int] = {}
        self._last_snapshot: int | None = None
        self._aligning: int | None = None
        self._blocked: dict[ChannelKey, deque[Any]] = {}
        self._waiting: dict[int, _WaitingSnapshot] = {}

    @property
    def vertex(self) -> str:
        """The vertex's name."""
        return self._vertex

    @property
    def inputs(self) -> tuple[ChannelKey, ...]:
        """Every input channel, back edges included, in the order given."""
        return self._inputs

    @property
    def back_edges(self) -> tuple[ChannelKey, ...]:
        """The back-edge input channels, in the order given."""
        return self._back_edges

    @property
    def aligning(self) -> int | None:
        """The snapshot being aligned (some regular channel blocked for it), or None."""
        return self._aligning

    @property
    def blocked(self) -> frozenset[ChannelKey]:
        """The input channels currently blocked; their records are being held back."""
        return frozenset(self._blocked)

    @property
    def waiting(self) -> tuple[int, ...]:
        """The snapshots taken locally that still wait for barriers on back edges, oldest first."""
        return tuple(self._waiting)

    def on_record(self, channel: ChannelKey, record: Any) -> Decision:
        """Account for a record that arrived on ``channel``.

        Args:
            channel: The input channel the record came on.
            record: The record; kept by reference if buffered or logged.

        Returns:
            Whether to process the record now, and whether it was logged or held back.

        Raises:
            SnapshotError: If ``channel`` is not an input of this vertex.
        """
        self._check_input(channel, "a record")
        if channel in self._blocked:
            self._blocked[channel].append(record)
            return Decision.BUFFER
        logs = [w.log[channel] for w in self._waiting.values() if channel in w.awaiting]
        for log in logs:
            log.append(record)
        return Decision.DELIVER_AND_LOG if logs else Decision.DELIVER

    def buffered(self) -> list[Any]:
        """The records held back on blocked channels (they are not processed yet), in order per channel."""
        return [record for queue in self._blocked.values() for record in queue if not isinstance(record, _QueuedBarrier)]

    def on_barrier(self, channel: ChannelKey, snapshot_id: int) -> list[Effect]:
        """Account for barrier ``snapshot_id`` arriving on ``channel``.

        Args:
            channel: The input channel the barrier came on.
            snapshot_id: The barrier's snapshot.

        Returns:
            The effects to carry out, in order; often none.

        Raises:
            SnapshotError: If the barrier breaks the protocol (see the module docstring).
        """
        self._check_input(channel, f"barrier {snapshot_id}")
        self._check_increasing(channel, snapshot_id)
        if channel in self._blocked:
            self._blocked[channel].append(_QueuedBarrier(snapshot_id))
            return []
        if channel in self._back_edges:
            if not self._early_on_back_edge(channel, snapshot_id):
                return self._on_back_edge_barrier(channel, snapshot_id)
        self._block(channel, snapshot_id)
        if sum(c in self._blocked for c in self._regular) < len(self._regular):
            return []
        return self._align(snapshot_id)

    def _early_on_back_edge(self, channel: ChannelKey, snapshot_id: int) -> bool:
        """Whether barrier ``snapshot_id`` came round a back edge before this vertex took that snapshot.

        That happens when the back edge is exchanged: another replica of the cycle aligned
        first and its barrier arrives here from the feedback. What the channel brings after
        it was sent after that replica's snapshot, so it must wait for this one's: the
        channel is blocked like a regular one (without counting towards the alignment,
        which its barrier cannot hold up) and its barrier is already in for the snapshot.
        """
        return self._last_snapshot is None or snapshot_id > self._last_snapshot

    def inject(self, snapshot_id: int) -> list[Effect]:
        """Start snapshot ``snapshot_id`` at a source, as the coordinator asks.

        The source's snapshot is its state (its read offset) at this moment.

        Args:
            snapshot_id: The new snapshot; above every snapshot injected here before.

        Returns:
            `TakeSnapshot`, `ForwardBarrier` and `SnapshotComplete` for ``snapshot_id``.

        Raises:
            SnapshotError: If this vertex has inputs, or ``snapshot_id`` does not increase.
        """
        if self._inputs:
            raise SnapshotError(
                f"vertex {self._vertex!r}: snapshot {snapshot_id} injected, but only a source "
                f"(a vertex without inputs) takes injected barriers"
            )
        if self._last_snapshot is not None and snapshot_id <= self._last_snapshot:
            raise SnapshotError(
                f"vertex {self._vertex!r}: snapshot {snapshot_id} injected after snapshot "
                f"{self._last_snapshot}; snapshot ids must increase"
            )
        return self._align(snapshot_id)

    def _check_channels(self) -> None:
        if len(set(self._inputs)) != len(self._inputs):
            raise SnapshotError(f"vertex {self._vertex!r}: input channels repeat: {self._inputs!r}")
        strangers = [c for c in self._back_edges if c not in self._inputs]
        if strangers:
            raise SnapshotError(f"vertex {self._vertex!r}: back edges {strangers!r} are not input channels")
        if self._inputs and len(self._back_edges) == len(self._inputs):
            raise SnapshotError(
                f"vertex {self._vertex!r}: every input is a back edge, so no barrier could ever reach it"
            )

    def _check_input(self, channel: ChannelKey, what: str) -> None:
        if channel not in self._inputs:
            raise SnapshotError(f"vertex {self._vertex!r}: {what} on channel {channel!r}, which is not an input")

    def _check_increasing(self, channel: ChannelKey, snapshot_id: int) -> None:
        last = self._last_barrier.get(channel)
        if last is not None and snapshot_id <= last:
            kind = "duplicate" if snapshot_id == last else "older"
            raise SnapshotError(
                f"vertex {self._vertex!r}: {kind} barrier {snapshot_id} on channel {channel!r}, "
                f"which already brought barrier {last}"
            )
        self._last_barrier[channel] = snapshot_id

    def _block(self, channel: ChannelKey, snapshot_id: int) -> None:
        if self._aligning is None:
            self._aligning = snapshot_id
        elif snapshot_id != self._aligning:
            raise SnapshotError(
                f"vertex {self._vertex!r}: barrier {snapshot_id} on channel {channel!r} while aligning "
                f"snapshot {self._aligning}; the channel skipped barrier {self._aligning}"
            )
        self._blocked[channel] = deque()

    def _align(self, snapshot_id: int) -> list[Effect]:
        """Every regular channel brought ``snapshot_id``: snapshot, forward, and unblock."""
        effects: list[Effect] = [TakeSnapshot(snapshot_id), ForwardBarrier(snapshot_id)]
        self._last_snapshot = snapshot_id
        self._aligning = None
        awaiting = set(self._back_edges) - set(self._blocked)  # a blocked back edge brought its barrier early
        if awaiting:
            self._waiting[snapshot_id] = _WaitingSnapshot(awaiting, {c: [] for c in self._back_edges})
        else:
            effects.append(SnapshotComplete(snapshot_id, {c: () for c in self._back_edges}))
        backlogs, self._blocked = self._blocked, {}
        for channel in self._inputs:
            if channel in backlogs:
                effects.extend(self._release(channel, backlogs[channel]))
        return effects

    def _release(self, channel: ChannelKey, backlog: deque[Any]) -> list[Effect]:
        """Hand back a released channel's records up to the next queued barrier, if any.

        A queued barrier blocks the channel again at once, keeping the rest of the backlog.
        That cannot complete the next alignment: the channel whose barrier completed this
        one was never blocked, so it holds no queued barrier.
        """
        records = []
        while backlog and not isinstance(backlog[0], _QueuedBarrier):
            records.append(backlog.popleft())
        if backlog:
            self._block(channel, backlog.popleft().snapshot_id)
            self._blocked[channel].extend(backlog)
        return [Release(channel, tuple(records))] if records else []

    def _on_back_edge_barrier(self, channel: ChannelKey, snapshot_id: int) -> list[Effect]:
        expected = next((sid for sid, w in self._waiting.items() if channel in w.awaiting), None)
        if snapshot_id != expected:
            reason = (
                "no local snapshot waits for that edge (is it really a back edge?)"
                if expected is None
                else f"the oldest local snapshot waiting for that edge is {expected}"
            )
            raise SnapshotError(
                f"vertex {self._vertex!r}: barrier {snapshot_id} on back edge {channel!r}, but {reason}"
            )
        waiting = self._waiting[snapshot_id]
        waiting.awaiting.remove(channel)
        if waiting.awaiting:
            return []
        del self._waiting[snapshot_id]
        return [SnapshotComplete(snapshot_id, {c: tuple(waiting.log[c]) for c in self._back_edges})]
