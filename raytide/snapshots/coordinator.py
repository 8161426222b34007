"""The snapshot coordinator as a pure state machine: when to take snapshot k, which replicas
have acknowledged it, when it is complete, and when it is given up.

A shell (the in-process runtime, or the coordinator actor on Ray) feeds
:class:`CoordinatorCore` the clock and the replicas' acknowledgements and performs what it
returns. One snapshot is taken at a time (as Flink's default of one concurrent
checkpoint): a trigger while one is being taken does nothing, so a slow snapshot delays
the next instead of piling up behind it. The flow of snapshot ``k``::

    coordinator ──Trigger(k)──▶ shell injects barrier k at every input replica
    replica ──Acknowledgement(k, parts, summary)──▶ coordinator   (after its local snapshot
                                                                    is complete and written)
    coordinator ──Commit(k, parts, summaries)──▶ shell writes the manifest (last, atomically),
                                                  applies retention, then calls committed(k)

A snapshot that has not completed ``timeout`` seconds after its trigger is abandoned
with a reason (:class:`Abandon`), as is the one in flight when a recovery starts a new
incarnation (:meth:`CoordinatorCore.reset`); acknowledgements of another incarnation or
snapshot are ignored, so late Ray calls from before a rollback do no harm. Nothing here
blocks the job: a snapshot that cannot complete costs its timeout, never progress.

A snapshot abandoned for a failure (its timeout, a part that could not be written) leaves its barriers on their way to the replicas that had
not acknowledged it (a slow replica, or one behind a long queue). The next periodic snapshot
waits until each of them has acknowledged it late (or failed to write it): otherwise a replica
slower than the interval would get a barrier more per snapshot than it can take, its queue of
barriers would grow for ever and its data, queued behind them, would never be reached (a
livelock the simulator found). So the interval stretches to what the slowest replica can keep
up with; a recovery or rescale (a new incarnation) clears the wait.

>>> core = CoordinatorCore(["a/0", "b/0"], first_id=1, interval=1.0, timeout=10.0)
>>> core.due(now=0.0), core.trigger(now=0.0, delivered={"out": 3})
(True, Trigger(snapshot_id=1, incarnation=0, hold=False, delivered={'out': 3}, committed=None))
>>> core.acknowledge(Acknowledgement("a/0", 1, 0, (), {"size": 3}), now=0.2) is None
True
>>> commit = core.acknowledge(Acknowledgement("b/0", 1, 0, (), None), now=0.3)
>>> commit.snapshot_id, sorted(commit.summaries), commit.delivered
(1, ['a/0', 'b/0'], {'out': 3})
>>> core.committed(1, now=0.4)
>>> core.due(now=0.5), core.due(now=1.5)
(False, True)
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Any

from raytide.errors import SnapshotError
from raytide.snapshots.store import PartInfo


@dataclass(frozen=True)
class Trigger:
    """Effect: inject barrier ``snapshot_id`` at every input replica of incarnation
    ``incarnation``: a rescale's cut if ``hold``, carrying ``delivered``, what the driver had
    been handed when it was triggered, and ``committed``, the last snapshot committed then
    (replicas trim their upstream logs to its marks, :mod:`raytide.engine.numbered_channels`)."""

    snapshot_id: int
    incarnation: int
    hold: bool = False
    delivered: dict[str, int] = field(default_factory=dict)
    committed: int | None = None


@dataclass(frozen=True)
class Acknowledgement:
    """A replica's local snapshot ``snapshot_id`` is complete and written.

    Attributes:
        replica: which replica.
        snapshot_id, incarnation: what it acknowledges (others are ignored).
        parts: the files it wrote, as the store returned them.
        summary: what recovery needs without reading the parts (the replica's
            capabilities, its inputs' positions, its kept output records); opaque here.
    """

    replica: Hashable
    snapshot_id: int
    incarnation: int
    parts: tuple[PartInfo, ...]
    summary: Any


@dataclass(frozen=True)
class Commit:
    """Effect: every replica acknowledged ``snapshot_id``; write its manifest with these
    parts and summaries and ``delivered`` (what the driver had at the trigger), then apply
    retention and call :meth:`CoordinatorCore.committed`. A rescale's cut (``hold``) is
    written nowhere: hand the replicas' reports over and call :meth:`CoordinatorCore.held`."""

    snapshot_id: int
    incarnation: int
    parts: tuple[PartInfo, ...]
    summaries: dict[Hashable, Any]
    duration: float
    hold: bool = False
    delivered: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Abandon:
    """Effect: snapshot ``snapshot_id`` will not complete (its parts may be deleted); why."""

    snapshot_id: int
    reason: str


@dataclass
class SnapshotStats:
    """What the coordinator saw, for ``job.stats()``."""

    committed: int = 0
    abandoned: int = 0
    last_duration: float | None = None
    last_size: int | None = None
    last_id: int | None = None
    abandoned_reasons: list[str] = field(default_factory=list)
    #: Snapshots abandoned since the last commit (not those a recovery's or rescale's reset
    #: abandoned), when the first of them was, and why the last one was: a store that cannot
    #: be written, a replica that does not answer. The driver says so (raytide.driver.snapshot_health).
    failed_in_a_row: int = 0
    failing_since: float | None = None
    last_failure: str | None = None

    def failing(self, now: float) -> dict[str, object] | None:
        """The failures since the last commit (None: none): how many, for how long, the last reason."""
        if not self.failed_in_a_row:
            return None
        assert self.failing_since is not None
        return {"in_a_row": self.failed_in_a_row, "for_s": round(now - self.failing_since, 3),
                "last": self.last_failure}


@dataclass
class _InFlight:
    snapshot_id: int
    started: float
    hold: bool
    delivered: dict[str, int]
    acks: dict[Hashable, Acknowledgement] = field(default_factory=dict)
    complete: bool = False


class CoordinatorCore:
    """Snapshots of one job, one at a time.

    Args:
        replicas: every replica that must acknowledge a snapshot.
        first_id: the id of the first snapshot (the store's next free id).
        interval: seconds between the end of one snapshot and the next trigger
            (None: only on demand, :meth:`trigger` called by the user).
        timeout: seconds after its trigger at which a snapshot is abandoned.
        incarnation: the job's incarnation (recoveries start new ones).
    """

    def __init__(self, replicas: Iterable[Hashable], first_id: int, interval: float | None, timeout: float,
                 incarnation: int = 0) -> None:
        self.replicas = frozenset(replicas)
        if not self.replicas:
            raise SnapshotError("a snapshot coordinator needs at least one replica to acknowledge snapshots")
        self.next_id, self.interval, self.timeout, self.incarnation = first_id, interval, timeout, incarnation
        self.in_flight: _InFlight | None = None
        self.last_end: float | None = None
        self.stats = SnapshotStats()
        #: The last snapshot abandoned for its timeout, and the replicas yet to acknowledge it.
        self.behind_id, self.behind = 0, set[Hashable]()

    def due(self, now: float) -> bool:
        """Whether a periodic snapshot should be triggered now."""
        if self.interval is None or self.in_flight is not None or self.behind:
            return False
        return self.last_end is None or now - self.last_end >= self.interval

    def trigger(self, now: float, delivered: dict[str, int] | None = None, hold: bool = False) -> Trigger | None:
        """Start the next snapshot (a rescale's cut, with ``hold``), recording ``delivered``
        (what the driver had been handed); None while one is being taken."""
        if self.in_flight is not None:
            return None
        self.in_flight = _InFlight(self.next_id, now, hold, dict(delivered or {}))
        self.next_id += 1
        return Trigger(self.in_flight.snapshot_id, self.incarnation, hold, self.in_flight.delivered, self.stats.last_id)

    def cut_refused(self, incarnation: int) -> str | None:
        """Why a rescale's cut asked for in ``incarnation`` is not to be taken (None: it is):
        the job has moved on to a later incarnation (a recovery started while the request
        travelled, or while it waited for the snapshot in flight). Taken there, the cut's
        markers would reach replicas being restored and it would wait out its timeout."""
        if incarnation == self.incarnation:
            return None
        return f"it was asked for in incarnation {incarnation}, and the job is in incarnation {self.incarnation} now"

    def acknowledge(self, ack: Acknowledgement, now: float) -> Commit | None:
        """A replica's acknowledgement; the :class:`Commit` once every replica has sent one.

        Raises:
            SnapshotError: a replica that is not one of this job's acknowledged.
        """
        self._caught_up(ack.incarnation, ack.snapshot_id, ack.replica)
        flight = self.in_flight
        if ack.incarnation != self.incarnation or flight is None or ack.snapshot_id != flight.snapshot_id:
            return None  # from before a rollback, or of an abandoned snapshot
        if ack.replica not in self.replicas:
            raise SnapshotError(f"replica {ack.replica} acknowledged snapshot {ack.snapshot_id} but is not one of "
                                f"this job's replicas ({sorted(map(str, self.replicas))})")
        if flight.complete or ack.replica in flight.acks:
            return None  # a repeated acknowledgement (a retried call) changes nothing
        flight.acks[ack.replica] = ack
        if len(flight.acks) < len(self.replicas):
            return None
        flight.complete = True
        parts = tuple(part for a in flight.acks.values() for part in a.parts)
        return Commit(flight.snapshot_id, self.incarnation, parts,
                      {key: a.summary for key, a in flight.acks.items()}, now - flight.started, flight.hold,
                      flight.delivered)

    def committed(self, snapshot_id: int, now: float) -> None:
        """The shell wrote the manifest of ``snapshot_id``."""
        flight = self._end(snapshot_id, now, "committed")
        self.stats.committed += 1
        self.stats.failed_in_a_row, self.stats.failing_since = 0, None
        self.stats.last_id = snapshot_id
        self.stats.last_duration = now - flight.started
        self.stats.last_size = sum(part.size for a in flight.acks.values() for part in a.parts)

    def held(self, snapshot_id: int, now: float) -> None:
        """The complete snapshot in flight was a rescale's cut (every replica holds its state
        there, and hands it over in place): nothing is written, and it counts as no commit."""
        self._end(snapshot_id, now, "used as a rescale cut")

    def _end(self, snapshot_id: int, now: float, how: str) -> _InFlight:
        """The complete snapshot in flight, ``snapshot_id``, is over (``how``); the next may start."""
        flight = self.in_flight
        if flight is None or flight.snapshot_id != snapshot_id or not flight.complete:
            raise SnapshotError(f"snapshot {snapshot_id} was {how} but is not the complete one in flight "
                                f"({flight.snapshot_id if flight else 'none'})")
        self.in_flight, self.last_end = None, now
        return flight

    def tick(self, now: float) -> Abandon | None:
        """Abandon the snapshot in flight if it has outlived its timeout (not one every replica
        acknowledged: its commit is being written)."""
        flight = self.in_flight
        if flight is None or flight.complete or now - flight.started < self.timeout:
            return None
        return self._abandon(f"not complete {self.timeout:g} s after it started: {self.waiting_for()}", now)

    def _caught_up(self, incarnation: int, snapshot_id: int, replica: Hashable) -> None:
        """``replica`` of ``incarnation`` got as far as barrier ``snapshot_id``: it is no longer
        behind the last snapshot abandoned for its timeout, if it got that far."""
        if incarnation == self.incarnation and snapshot_id >= self.behind_id:
            self.behind.discard(replica)

    def holding_cut(self, cut_id: int) -> bool:
        """Whether rescale cut ``cut_id`` is in flight and not complete yet."""
        flight = self.in_flight
        return flight is not None and flight.hold and flight.snapshot_id == cut_id and not flight.complete

    def waiting_for(self) -> str:
        """What the snapshot in flight still waits for: the replicas that have not acknowledged
        it (the first five named), or its manifest."""
        assert self.in_flight is not None
        missing = sorted(map(str, self.replicas - self.in_flight.acks.keys()))
        return f"still waiting for {len(missing)} replicas ({', '.join(missing[:5])})" if missing \
            else "its manifest was not written"

    def write_failed(self, replica: Hashable, incarnation: int, snapshot_id: int, reason: str,
                     now: float) -> Abandon | None:
        """``replica`` could not write its part of ``snapshot_id``: abandon it, if it is the one in flight."""
        flight = self.in_flight
        abandon = None
        if incarnation == self.incarnation and flight is not None and flight.snapshot_id == snapshot_id:
            abandon = self.fail(reason, now)
        self._caught_up(incarnation, snapshot_id, replica)
        return abandon

    def fail(self, reason: str, now: float) -> Abandon | None:
        """Abandon the snapshot in flight (writing it failed, say)."""
        return self._abandon(reason, now) if self.in_flight is not None else None

    def lose(self, replica: Hashable, now: float) -> tuple[Abandon | None, int]:
        """``replica`` is recovered alone (docs/recovery.md, "A replica recovered alone"):
        abandon the snapshot in flight (its replacement passes that barrier on without taking
        it), unless every part is in (its commit is being written). Not a failure, and the
        replacement is not waited for; the survivors that have not acknowledged it still hold
        the next one back until their barriers come in, as after a timeout. Returns the
        abandonment and the last id triggered (the replacement takes no barrier up to it)."""
        flight = self.in_flight
        if flight is None or flight.complete:
            return None, self.next_id - 1
        abandoned = self._abandon(f"replica {replica} is recovered alone", now, failure=False)
        self.behind_id, self.behind = flight.snapshot_id, set(self.replicas - flight.acks.keys() - {replica})
        return abandoned, self.next_id - 1

    def reset(self, incarnation: int, now: float) -> Abandon | None:
        """A recovery started incarnation ``incarnation``: abandon the snapshot in flight."""
        if incarnation <= self.incarnation:
            raise SnapshotError(f"incarnation {incarnation} does not follow {self.incarnation}")
        self.incarnation = incarnation
        self.behind = set()  # the barriers on their way belong to the incarnation gone
        if self.in_flight is None:
            return None
        return self._abandon(f"a recovery or rescale started incarnation {incarnation}", now, failure=False)

    def reconfigure(self, replicas: Iterable[Hashable], incarnation: int, first_id: int, now: float) -> Abandon | None:
        """A rescale started ``incarnation`` with ``replicas``; the next snapshot's id is at
        least ``first_id`` (the rescale wrote one itself). Abandons the snapshot in flight."""
        abandoned = self.reset(incarnation, now)
        self.replicas = frozenset(replicas)
        self.follow(first_id)
        return abandoned

    def follow(self, free_id: int) -> None:
        """The next snapshot's id is at least ``free_id``, the store's next free one: a
        recovery or a rescale may have written a snapshot itself (laid out for new widths)."""
        self.next_id = max(self.next_id, free_id)

    def _abandon(self, reason: str, now: float, failure: bool = True) -> Abandon:
        """Abandon the snapshot in flight; a ``failure`` (not a reset's) counts in the failures in a row."""
        assert self.in_flight is not None
        flight = self.in_flight
        abandoned = Abandon(flight.snapshot_id, reason)
        self.in_flight, self.last_end = None, now
        stats = self.stats
        if failure:  # the barriers of this snapshot still on their way hold the next one back
            self.behind_id, self.behind = abandoned.snapshot_id, set(self.replicas - flight.acks.keys())
            if not stats.failed_in_a_row:
                stats.failing_since = now
            stats.failed_in_a_row, stats.last_failure = stats.failed_in_a_row + 1, f"snapshot {abandoned.snapshot_id}: {reason}"
        self.stats.abandoned += 1
        self.stats.abandoned_reasons = [*self.stats.abandoned_reasons[-9:], f"{abandoned.snapshot_id}: {reason}"]
        return abandoned
