"""The snapshot coordinator actor: a thin Ray shell around
:class:`~raytide.snapshots.coordinator.CoordinatorCore`.

Message flow (fire and forget unless marked *waits*)::

    coordinator ──inject_marker(incarnation, barrier k)──▶ every input replica
    replica's writer thread ──acknowledge(ack) / write_failed──▶ coordinator
    coordinator: writes the job part and the manifest (last), applies retention
    driver ──sync(delivered)──▶ coordinator        (*waits* a moment: returns the commits since,
                                                    and the snapshots failed since the last)
    driver ──snapshot_now(timeout)──▶ coordinator  (*waits* until committed: job.snapshot())
    driver ──hold_now(n, timeout)──▶ coordinator   (*waits* until every replica holds at a
                                                    rescale's cut: replica ──acknowledge──▶ coordinator)
    driver ──start()──▶ coordinator                 (the replicas are connected: snapshots begin)
    driver ──restart(incarnation, inputs, recovery time, plan)──▶ coordinator   (a recovery)

The coordinator waits for nobody: a snapshot that cannot complete is abandoned at its
timeout. It is the role of a pooled host (:class:`~raytide.actors.hosts.CoordinatorHost`),
which answers ``ping`` and ``watch`` for it. Its own thread ticks the clock (periodic
triggers, timeouts) until the host is reset; calls run on a few threads
(``max_concurrency``) under one lock, so that ``snapshot_now`` can wait
while acknowledgements come in; while a snapshot or cut asked for now waits, the clock
triggers no periodic one, so the one asked for is the next. With ``interval="auto"`` the interval is the
utilization model's T* (:class:`~raytide.snapshots.interval.IntervalTuner`) from the
measured snapshot durations, recovery times and failures.
"""

from __future__ import annotations

import collections
import threading
import time
from typing import Any

from raytide.errors import SnapshotError, StoreFencedError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import Marker, MarkerKind, ReplicaKey
from raytide.snapshots.config import Recovery
from raytide.snapshots.coordinator import Abandon, Acknowledgement, Commit, CoordinatorCore
from raytide.snapshots.interval import IntervalTuner
from raytide.snapshots.recovery import Committed, commit_snapshot
from raytide.snapshots.replica_state import CutAnswer
from raytide.snapshots.store import store_of

#: Seconds between two ticks of the coordinator's clock: how late a snapshot may start, or
#: a timeout be noticed (each tick costs the job a little CPU).
TICK = 0.05


class CoordinatorActor:
    """Takes the job's snapshots; see the module docstring."""

    def __init__(self, plan: PhysicalPlan, recovery: Recovery, inputs: dict[ReplicaKey, Any], incarnation: int,
                 first_id: int) -> None:
        """It takes no periodic snapshot until :meth:`start` (the replicas are connected) or
        :meth:`restart` (they are restored)."""
        self.plan, self.recovery = plan, recovery
        self.store = store_of(recovery)
        keys = plan.replica_keys()
        self.tuner = IntervalTuner(min_interval=0.2, initial_interval=1.0) if recovery.interval == "auto" else None
        interval = self.tuner.interval() if self.tuner else recovery.interval
        assert not isinstance(interval, str)
        self.core = CoordinatorCore(keys, max(first_id, self.store.next_id()), interval, recovery.timeout,
                                    incarnation)
        self.core.last_end = time.monotonic()
        self.inputs = inputs
        self.delivered: dict[str, int] = {}
        #: The commits the driver has not learnt of yet; ``seen`` of them before
        self.commits: list[Committed] = []
        self.seen = 0
        self.abandoned: collections.deque[str] = collections.deque(maxlen=5)  # the last reasons (the count is in stats)
        self.last_alignment: float | None = None  # the longest a replica aligned for the last snapshot
        self.last_complete: dict[str, int | None] = {}  # per output, its last epoch complete in the last snapshot
        self.held: dict[int, dict[Any, Any]] = {}  # per rescale cut complete: every replica's HeldReport
        self.recent_commits: collections.deque[int] = collections.deque(maxlen=64)  # the ids last committed
        self.taking_now = 0  # calls of _take_now under way: the clock triggers no periodic snapshot meanwhile
        self.lock = threading.Condition()
        self.last_tick = time.monotonic()
        self.paused = True
        #: Between a recovery's :meth:`pause` and its :meth:`restart` (or :meth:`start`): the replicas
        #: are being replaced and restored, and ``inputs`` are still the old ones, so no snapshot may start.
        self.recovering = False
        self.closed = threading.Event()
        self.thread = threading.Thread(target=self._clock, name="raytide-coordinator-clock", daemon=True)
        self.thread.start()

    def close(self) -> None:
        """Stop the clock: the job is over and its host goes back to the pool
        (:class:`~raytide.actors.hosts.CoordinatorHost`). A call already under way may
        still finish."""
        self.closed.set()
        self.thread.join(timeout=2 * TICK)

    def _clock(self) -> None:
        while not self.closed.wait(TICK):
            with self.lock:
                self._tick(time.monotonic())

    def _tick(self, now: float) -> None:
        """One tick of the clock (called with the lock held): timeouts, and a periodic
        snapshot if one is due, unless a snapshot or cut asked for now is being taken (the
        next one is that one; a periodic one triggered while it waited would take its turn)."""
        if self.tuner is not None:
            self.tuner.record_elapsed(now - self.last_tick)
            self.core.interval = self.tuner.interval()
        self.last_tick = now
        self._abandoned(self.core.tick(now))
        if not self.paused and not self.taking_now and self.core.due(now):
            self._trigger(now)

    def _trigger(self, now: float, hold: bool = False) -> int | None:
        trigger = self.core.trigger(now, self.delivered, hold)
        if trigger is None:
            return None
        marker = Marker(trigger.snapshot_id, MarkerKind.HOLD if hold else MarkerKind.SNAPSHOT, trigger.delivered,
                        trigger.committed)
        for handle in self.inputs.values():
            handle.inject_marker.remote(trigger.incarnation, marker)
        return trigger.snapshot_id

    def _abandoned(self, abandon: Abandon | None) -> None:
        if abandon is not None:
            self.abandoned.append(f"snapshot {abandon.snapshot_id}: {abandon.reason}")
            self.lock.notify_all()

    def acknowledge(self, ack: Acknowledgement) -> None:
        """A replica's local snapshot is written (or it holds at a rescale's cut); the last
        one commits the snapshot (or completes the cut)."""
        with self.lock:
            commit = self.core.acknowledge(ack, time.monotonic())
            if commit is not None and commit.hold:
                self.core.held(commit.snapshot_id, time.monotonic())
                self.held[commit.snapshot_id] = commit.summaries
                self.lock.notify_all()
            elif commit is not None:
                self._commit(commit)

    def write_failed(self, replica: ReplicaKey, incarnation: int, snapshot_id: int, reason: str) -> None:
        """``replica`` could not write its part: the snapshot in flight is abandoned."""
        with self.lock:
            self._abandoned(self.core.write_failed(replica, incarnation, snapshot_id, reason, time.monotonic()))

    def _commit(self, commit: Commit) -> None:
        try:
            complete = commit_snapshot(self.store, self.plan, commit, commit.delivered, self.recovery.retain)
        except Exception as error:  # the store failed: this snapshot is lost, the job goes on
            # another driver has the store, or a recovery replaced this coordinator (it still runs: a zombie)
            self.paused = self.paused or isinstance(error, StoreFencedError)
            self._abandoned(self.core.fail(f"committing it failed: {error!r}", time.monotonic()))
            return
        self.core.committed(commit.snapshot_id, time.monotonic())
        if self.tuner is not None and self.core.stats.last_duration is not None:
            self.tuner.record_checkpoint(self.core.stats.last_duration)
        self.last_alignment = max((summary.alignment_s for summary in commit.summaries.values()), default=0.0)
        self.last_complete = complete
        positions = {key: summary.positions for key, summary in commit.summaries.items() if summary.positions}
        self.commits.append(Committed(commit.snapshot_id, positions, complete))  # type: ignore[arg-type]
        self.recent_commits.append(commit.snapshot_id)
        self.lock.notify_all()

    def sync(self, delivered: dict[str, int], seen: int) -> tuple[list[Committed], dict[str, Any] | None]:
        """The driver's state: the last epoch of each output it was handed (barriers carry it,
        so output replicas drop what the driver has); returns the commits after the first
        ``seen``, and forgets those before (the driver has them), and the snapshots failed
        since the last commit (:meth:`~raytide.snapshots.coordinator.SnapshotStats.failing`)."""
        with self.lock:
            self.delivered = dict(delivered)
            del self.commits[: max(0, seen - self.seen)]
            self.seen = max(self.seen, seen)
            return self.commits[seen - self.seen:], self.core.stats.failing(time.monotonic())

    def snapshot_now(self, timeout: float, delivered: dict[str, int], pause: bool = False) -> int:
        """Take a snapshot now (after the one in flight, if any) and wait until it is committed; its id.

        ``delivered`` is what the driver has been handed, exactly: a savepoint
        (``job.stop()``) records it, and the driver takes no more events until it is committed.
        ``pause``: take no periodic snapshot after it until :meth:`start` or :meth:`restart`
        (a rescale's cut: the next snapshot is the rescaled job's).

        Raises:
            SnapshotError: it was abandoned, or not committed within ``timeout`` seconds.
        """
        with self.lock:
            snapshot_id = self._take_now(timeout, delivered, hold=False)
            if snapshot_id is None:
                waited = "a recovery did not restart the snapshots" if self.recovering else \
                    "the snapshot in flight did not complete"
                raise SnapshotError(f"{waited} within {timeout:g} s; abandoned so far: {list(self.abandoned)[-3:]}")
            self.paused = self.paused or pause
            return snapshot_id

    def hold_now(self, incarnation: int, timeout: float, delivered: dict[str, int]) -> CutAnswer:
        """A rescale's cut, asked for in ``incarnation``: every replica aligns on a marker,
        holds its state there and runs nothing more (:mod:`raytide.rescale.widths`). Waits
        until all hold; answers with each replica's :class:`~raytide.snapshots.replica_state.HeldReport`
        (:class:`~raytide.snapshots.replica_state.CutAnswer`). Nothing is written, and no
        periodic snapshot is taken after it until :meth:`start`, :meth:`restart` or
        :meth:`reconfigure`. A cut not complete in time is abandoned at once: replies that come
        later do not complete it. A cut of an incarnation the job has left (a recovery started
        since it was asked for) is not taken at all, and one a recovery abandons ends the wait
        at once: the answer says why (``missed``), never an error nobody would read.
        """
        with self.lock:
            stale = self.core.cut_refused(incarnation)
            if stale is not None:
                return CutAnswer(missed=f"rescale cut not taken: {stale}")
            self.paused = True
            try:
                cut_id = self._take_now(timeout, delivered, hold=True, incarnation=incarnation)
            except SnapshotError as error:
                return CutAnswer(missed=str(error))
            return CutAnswer(cut_id, self.held.pop(cut_id)) if cut_id is not None else CutAnswer()

    def _take_now(self, timeout: float, delivered: dict[str, int], hold: bool, incarnation: int | None = None) -> int | None:
        """Trigger a snapshot (or rescale cut) after the one in flight and wait until it is
        committed (or held); its id (None: the one in flight did not complete within
        ``timeout``, so none was triggered). Called with the lock held.

        Raises:
            SnapshotError: the one triggered was abandoned, or not complete in time; or the
                job left ``incarnation`` (if given) while the one in flight ended.
        """
        deadline = time.monotonic() + timeout
        what = "rescale cut" if hold else "snapshot"
        self.taking_now += 1
        try:
            self.lock.wait_for(lambda: self._may_start() or self._refused(incarnation) is not None, timeout)
            stale = self._refused(incarnation)  # refused at once, not after the recovery under way
            if stale is not None:
                raise SnapshotError(f"{what} not taken: {stale}")
            self.delivered = dict(delivered)
            snapshot_id = self._trigger(time.monotonic(), hold) if self._may_start() else None
            if snapshot_id is None:
                return None
            done = self.lock.wait_for(lambda: not self._in_flight(snapshot_id), max(0.0, deadline - time.monotonic()))
        finally:
            self.taking_now -= 1
        if hold and self.core.holding_cut(snapshot_id):  # not held in time: given up here and now
            self._abandoned(self.core.fail(f"rescale cut not complete within {timeout:g} s: "
                                           f"{self.core.waiting_for()}", time.monotonic()))
            done = True  # the reason is the one just given
        if (snapshot_id not in self.held) if hold else (snapshot_id not in self.recent_commits):
            why = next((reason for reason in reversed(self.abandoned) if reason.startswith(f"snapshot {snapshot_id}:")),
                       None) if done else None
            late = f"not complete within {timeout:g} s" + (f": {self.core.waiting_for()}" if self._in_flight(snapshot_id) else "")
            raise SnapshotError(f"{what} {snapshot_id} was not {'held' if hold else 'committed'}: {why or late}")
        return snapshot_id

    def _refused(self, incarnation: int | None) -> str | None:
        """Why a cut asked for in ``incarnation`` may not be taken (None: it may, or no incarnation was named)."""
        return None if incarnation is None else self.core.cut_refused(incarnation)

    def _may_start(self) -> bool:
        """Whether a snapshot asked for now may start: none is in flight, and no recovery is under
        way. During one its markers would go to the old input replicas (a dead one's lost, a
        survivor's dropped, or taken before its restore wipes it), and the restart, in the
        incarnation the pause began, would not abandon it: it would never complete."""
        return self.core.in_flight is None and not self.recovering

    def _in_flight(self, snapshot_id: int) -> bool:
        flight = self.core.in_flight
        return flight is not None and flight.snapshot_id == snapshot_id

    def start(self, inputs: dict[ReplicaKey, Any] | None = None) -> None:
        """The job's replicas are connected (or restored by a rescale, whose input replicas
        are ``inputs``): take periodic snapshots from now (a barrier that reached a replica
        before it knew its peers could not be forwarded)."""
        with self.lock:
            if inputs is not None:
                self.inputs = inputs
            self.paused = self.recovering = False
            self.core.last_end = time.monotonic()
            self.lock.notify_all()  # a snapshot asked for during a recovery starts now

    def restart(self, incarnation: int, inputs: dict[ReplicaKey, Any], recovery_seconds: float | None,
                plan: PhysicalPlan) -> None:
        """A recovery started ``incarnation`` (and took ``recovery_seconds``, if known) with ``plan``'s
        replicas: the next snapshots wait for those, whatever an earlier incarnation widened to (a join
        withdrawn after a death: its ``widen`` back may run after the recovery's :meth:`pause`, which
        drops it, and a cut would wait for a replica that left)."""
        with self.lock:
            if incarnation != self.core.incarnation:  # a coordinator started by this recovery is at it already
                self._abandoned(self.core.reset(incarnation, time.monotonic()))
            self._follow(plan)
            self.inputs, self.paused, self.recovering = inputs, False, False
            self.core.last_end = time.monotonic()
            self.core.follow(self.store.next_id())
            self.lock.notify_all()  # a snapshot asked for during the recovery starts now, at the restored inputs
            if self.tuner is not None:
                self.tuner.record_failure()
                if recovery_seconds is not None:
                    self.tuner.record_recovery(recovery_seconds)

    def pause(self, incarnation: int) -> None:
        """A recovery starts ``incarnation``: abandon the snapshot in flight and take none until
        :meth:`restart` (none may commit while the replicas are restored from an older one)."""
        with self.lock:
            if incarnation > self.core.incarnation:
                self._abandoned(self.core.reset(incarnation, time.monotonic()))
            self.paused = self.recovering = True

    def lose(self, incarnation: int, replica: ReplicaKey) -> int:
        """``replica`` is being recovered alone in ``incarnation``: abandon the snapshot in flight
        unless it is committing, and take none until :meth:`start` (the replacement is restored
        from the last commit, which none may follow meanwhile); returns the last id triggered,
        whose barrier the replacement passes on without taking (:meth:`CoordinatorCore.lose`)."""
        with self.lock:
            if incarnation != self.core.incarnation:
                raise SnapshotError(f"replica {replica} is recovered alone in incarnation {incarnation}, "
                                    f"but the coordinator is in {self.core.incarnation}")
            abandoned, quiet_through = self.core.lose(replica, time.monotonic())
            self._abandoned(abandoned)
            self.paused = self.recovering = True  # a snapshot asked for meanwhile starts at start()
            return quiet_through

    def reconfigure(self, plan: PhysicalPlan, incarnation: int) -> None:
        """A rescale starts ``incarnation`` with ``plan``'s replicas; snapshots stay paused until
        :meth:`restart` (the replicas are restored), and their ids follow the rescaled snapshot's."""
        with self.lock:
            self.plan = plan
            self._abandoned(self.core.reconfigure(plan.replica_keys(), incarnation, self.store.next_id(),
                                                  time.monotonic()))
            self.paused = True

    def widen(self, incarnation: int, plan: PhysicalPlan) -> None:
        """A growing stepped rescale joined replicas to ``incarnation`` (no new one; snapshots paused
        meanwhile): the next snapshots wait for ``plan``'s replicas, the joined ones included."""
        with self.lock:
            if incarnation == self.core.incarnation:
                self._follow(plan)

    def _follow(self, plan: PhysicalPlan) -> None:
        """Snapshot ``plan``'s replicas from now (called with the lock held)."""
        self.plan = plan
        self.core.replicas = frozenset(plan.replica_keys())

    def stats(self) -> dict[str, Any]:
        """Snapshots taken, their last id, duration and size and the epochs complete in it (per output,
        ``last_complete``: -1 none, None all), what was abandoned, the interval in use, and the id of the
        one being taken (None: none is)."""
        with self.lock:
            stats = self.core.stats
            return {"committed": stats.committed, "abandoned": stats.abandoned, "last_id": stats.last_id,
                    "last_duration_s": stats.last_duration, "last_size_bytes": stats.last_size,
                    "last_alignment_s": self.last_alignment, "last_complete": dict(self.last_complete),
                    "abandoned_reasons": list(self.abandoned), "interval_s": self.core.interval,
                    "failing": stats.failing(time.monotonic()),
                    "in_flight": None if self.core.in_flight is None else self.core.in_flight.snapshot_id}
