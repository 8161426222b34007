"""What the driver says when a job's snapshots stop committing: a store that cannot be
written (read-only, full, unreachable) or a coordinator that does not answer (its process
stopped or starved). Neither stops the job by itself; neither goes unsaid.

* **Snapshots failing.** The coordinator counts the snapshots abandoned since the last
  commit (:meth:`~raytide.snapshots.coordinator.SnapshotStats.failing`) and the driver
  learns it at every sync. At the first failure of a streak it logs a warning naming the
  job, the store and what failed, and again when a snapshot commits; ``job.stats()
  ["snapshots"]["failing"]`` says the same meanwhile. With ``output_commit="epoch"`` the
  job runs on without new snapshots (a death meanwhile restores the last committed one).
  With ``output_commit="snapshot"`` its output waits for a commit, so once snapshots have
  failed for longer than ``Recovery(timeout=)`` the job fails with a
  :class:`~raytide.errors.SnapshotError` naming the store, rather than hold its output
  indefinitely.
* **The consumers' record** (:mod:`raytide.snapshots.consumed`) that cannot be written: a
  warning (once a streak), ``job.stats()["snapshots"]["consumed_record"]``, and the write is
  tried again at the consumer's next epoch. A driver that dies meanwhile may hand those
  epochs out again when restored.
* **The coordinator silent.** The driver keeps one ``sync`` call to the coordinator in
  flight; one that has not answered for :data:`SILENT_AFTER` seconds means the coordinator
  is stopped or starved (a dead one fails the call at once). Once the job has finished the driver
  reads no more answers: the call left in flight is no silence. The driver warns, naming the
  coordinator and its process, ``job.stats()`` answers at once with that instead of waiting
  for it, ``job.snapshot()`` fails at its timeout naming it, and the job runs on; when the
  coordinator answers again the driver says so and snapshots resume.
"""

from __future__ import annotations

import logging
from typing import Any

from raytide.errors import SnapshotError
from raytide.snapshots.config import Recovery

logger = logging.getLogger(__name__)

#: Seconds the coordinator may leave the driver's ``sync`` call unanswered before the driver
#: calls it silent (a sync takes milliseconds; a commit to a slow store holds it a little).
SILENT_AFTER = 3.0


class SnapshotHealth:
    """The driver's view of whether a job's snapshots commit; see the module docstring."""

    def __init__(self, job: str, recovery: Recovery) -> None:
        self.job, self.recovery = job, recovery
        #: The coordinator's last word on the snapshots failed since its last commit (None: none).
        self.failing: dict[str, Any] | None = None
        #: Since when (monotonic) the ``sync`` call in flight waits (None: none is in flight).
        self.sent_at: float | None = None
        self.silent_warned = False
        #: Why the consumers' record could not be written, until it is (None: it was).
        self.record_error: str | None = None

    def sent(self, now: float | None) -> None:
        """A ``sync`` call was made at ``now`` (None: the one in flight was dropped, none waits)."""
        self.sent_at = now

    def silent_for(self, now: float) -> float:
        """Seconds the ``sync`` call in flight has waited (0: none waits)."""
        return 0.0 if self.sent_at is None else now - self.sent_at

    def is_silent(self, now: float) -> bool:
        """Whether the coordinator has left the ``sync`` call unanswered for :data:`SILENT_AFTER` s."""
        return self.silent_for(now) >= SILENT_AFTER

    def waiting(self, now: float, coordinator: str) -> None:
        """The ``sync`` call has not answered yet: warn once if the coordinator is silent."""
        silent = self.silent_for(now)
        if self.is_silent(now) and not self.silent_warned:
            self.silent_warned = True
            logger.warning("job %r: %s has not answered for %.1f s (its process is stopped or starved): no snapshot is "
                           "taken meanwhile%s; the job runs on", self.job, coordinator, silent, self._held())

    def answered(self, failing: dict[str, Any] | None, now: float) -> SnapshotError | None:
        """The ``sync`` call answered with the coordinator's failures since its last commit;
        the error the job fails with (``output_commit="snapshot"``, failing too long), if any."""
        if self.silent_warned:
            self.silent_warned = False
            logger.warning("job %r: the snapshot coordinator answers again after %.1f s", self.job, self.silent_for(now))
        self.sent_at = None
        was, self.failing = self.failing, failing
        if failing is None:
            if was is not None:
                logger.warning("job %r: a snapshot committed to store %r again, after %d failed", self.job,
                               self.recovery.store, was["in_a_row"])
            return None
        if was is None:
            logger.warning("job %r: a snapshot could not be taken (store %r): %s. The job runs on without new snapshots "
                           "until one commits (a failure meanwhile restores the last committed one)%s", self.job,
                           self.recovery.store, failing["last"], self._held())
        if self.recovery.output_commit == "snapshot" and failing["for_s"] > self.recovery.timeout:
            return SnapshotError(
                f"job {self.job!r}: no snapshot could be committed to store {self.recovery.store!r} for "
                f"{failing['for_s']:.1f} s ({failing['in_a_row']} failed in a row; the last: {failing['last']}); with "
                f"output_commit='snapshot' its output waits for a commit, so the job stops rather than hold it "
                f"indefinitely (Recovery(timeout={self.recovery.timeout:g})). Fix what the last failure names (a "
                f"store that cannot be written, snapshots slower than the timeout) and run again with restore='latest'")
        return None

    def record_failed(self, error: BaseException) -> None:
        """The consumers' record could not be written (tried again at the next epoch consumed)."""
        if self.record_error is None:
            logger.warning("job %r: the record of what its consumers had could not be written to store %r (%r): a "
                           "driver restored after this one dies may hand those epochs out again", self.job,
                           self.recovery.store, error)
        self.record_error = repr(error)

    def record_written(self) -> None:
        self.record_error = None

    def stats(self) -> dict[str, Any]:
        """What ``job.stats()["snapshots"]`` adds: the consumers' record's error, if any."""
        return {"consumed_record": self.record_error} if self.record_error is not None else {}

    def silent(self, now: float, coordinator: str, waited: float = 0.0, syncing: bool = True) -> dict[str, Any] | None:
        """``job.stats()["snapshots"]`` of a silent coordinator (None: it is not silent): one that
        left the ``sync`` call unanswered (only while the driver is ``syncing``: once the job has
        finished it reads no more answers, and the call left in flight says nothing), or
        ``job.stats()``'s own call for ``waited`` seconds."""
        silent = max(self.silent_for(now) if syncing else 0.0, waited)
        if silent < SILENT_AFTER:
            return None
        return {"coordinator": f"{coordinator} has not answered for {silent:.1f} s (stopped or starved): no snapshot "
                               f"is taken meanwhile", "silent_s": round(silent, 3), "failing": self.failing,
                **self.stats()}

    def _held(self) -> str:
        return "; with output_commit='snapshot', its output waits for one" if self.recovery.output_commit == "snapshot" \
            else ""
