"""The store fenced by the job's incarnation: a recovery records the incarnation it starts in
the store (:func:`enter_incarnation`) before any coordinator of it may commit, and every commit
and retention goes through the store as its incarnation writes it
(:meth:`~raytide.snapshots.store.SnapshotStore.at`), so a coordinator declared dead and replaced
but still running (cut off from Ray, not from the store) can neither commit a snapshot of its
dead incarnation nor delete what a recovery restores.

The record is a *mark*: a claim file of the driver's own lease at the incarnation
(:class:`~raytide.snapshots.lease.Fence` ``incarnation``), made by the code that makes a
takeover's claim, so the generation fence's rules and guarantees carry over unchanged
(docs/recovery.md, "Leases and fencing")::

    driver ──create mark gen-<G>-inc-<n>──▶ _lease/   then check for a greater claim
    driver ──list committed snapshots──▶ write fenced_after into the mark
    zombie coordinator (incarnation < n) ──check──▶ sees the mark: StoreFencedError, nothing written
    reader ──manifest of incarnation < n, id > fenced_after──▶ ignored (a late commit of a zombie)
"""

from __future__ import annotations

import logging
import time

from raytide.snapshots.lease import LeaseRecord
from raytide.snapshots.lease_store import settle, this_holder
from raytide.snapshots.store import SnapshotStore

logger = logging.getLogger(__name__)


def newest_committed(store: SnapshotStore) -> int:
    """The id of ``store``'s newest committed snapshot (-1: none): a claim's or a mark's ``fenced_after``."""
    return max((manifest.snapshot_id for manifest in store.committed()), default=-1)


def enter_incarnation(store: SnapshotStore, incarnation: int, job: str) -> SnapshotStore:
    """A recovery of job ``job`` starts ``incarnation``: record it in ``store`` (the driver's,
    before any coordinator of that incarnation may commit) and return ``store`` following it.

    The record is a *mark*: a claim file of the driver's own fence at ``incarnation``, made as a
    takeover's claim is (created, checked for a greater claim, then ``fenced_after`` written
    from a listing made after it: :func:`~raytide.snapshots.lease_store.settle`), so the rules that fence an older generation
    fence the commits and deletes of the job's older incarnations, by the same code: a write
    begun after the mark is refused, a manifest written after its listing is ignored. A store
    without a fence (no lease: the in-process runtime's, tools) writes no mark. A store that
    cannot be written logs a warning and goes on unmarked: its snapshots fail anyway until it
    can be written again (a recovery is never failed for it).

    Raises:
        StoreFencedError: another driver took the store over meanwhile (the job stops).
    """
    entered = store.at(incarnation)
    fence = entered.fence
    if fence is None:
        return entered
    try:
        now = time.time()
        record = LeaseRecord(fence, this_holder(job), now, now, 0.0)
        store.leases.create(record)  # False only if this incarnation was marked already: settled again
        store.leases.check(fence, f"marking incarnation {incarnation} of job {job!r}", incarnations=True)
        settle(store.leases, record, lambda: newest_committed(store), time.time)
    except (OSError, ValueError) as error:  # pyarrow's errors (ArrowInvalid is a ValueError)
        logger.warning("job %r: could not record incarnation %d in snapshot store %r (%r): a coordinator of an "
                       "earlier incarnation still running could commit there", job, incarnation, store.uri, error)
    return entered
