"""The driver's hold on its job's snapshot store (:mod:`raytide.snapshots.lease`).

``rt.run`` takes the store's lease before anything is written to it (:func:`take_store`:
refused, naming the holder, while another driver's lease is live), a thread of the
driver renews it every third of its term while the job runs, and the job's teardown
releases it (:func:`release_store`), so that the next driver takes the store at once. A
driver process that dies stops renewing: its lease lapses and the next driver takes over.

A renewal that finds the store taken over (this driver was paused, or cut off from the
store, longer than its lease) marks the job fenced: the driver fails the job with the
:class:`~raytide.errors.StoreFencedError` at its next look at the job's events
(:meth:`~raytide.driver.recovery.JobRecovery.sync`), and every write of the job to the
store is refused meanwhile, in the driver and in the actors alike (their stores carry the
fence). No actor ever waits for the lease: only this thread and ``rt.run`` touch it.
"""

from __future__ import annotations

import atexit
import dataclasses
import logging
import threading
import time
from collections.abc import Callable

from raytide.errors import SnapshotError, StoreFencedError
from raytide.snapshots.config import Recovery
from raytide.snapshots.incarnations import newest_committed
from raytide.snapshots.lease import Fence, LeaseRecord
from raytide.snapshots.lease_store import LeaseFiles, acquire, this_holder
from raytide.snapshots.store import SnapshotStore

logger = logging.getLogger(__name__)

#: The longest a release waits for a renewal under way to finish (seconds).
RELEASE_WAIT = 5.0

#: The leases this process holds, by store and fence.
_HELD: dict[tuple[str, Fence], LeaseKeeper] = {}
_HELD_LOCK = threading.Lock()
_AT_EXIT: list[bool] = []  # whether _release_all is registered to run at exit


class LeaseKeeper:
    """Renews one lease every third of its term on a thread of its own, until released or
    taken over (``fenced``: the error the job fails with)."""

    def __init__(self, files: LeaseFiles, record: LeaseRecord, clock: Callable[[], float] = time.time) -> None:
        self.files, self.record, self.clock = files, record, clock
        self.fenced: StoreFencedError | None = None
        self.released = False
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, name=f"raytide-store-lease-{record.holder.job}", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(self.record.duration / 3):
            self.renew()

    def renew(self) -> None:
        """Renew the lease once; if the store was taken over, record it and stop. A failed
        write is logged and tried again at the next renewal (the lease lapses if none succeeds)."""
        try:
            self.files.check(self.record.fence, f"renewing the store lease of job {self.record.holder.job!r}")
            record = self.record.renewed(self.clock())
            self.files.write(record)
            self.record = record
        except StoreFencedError as error:
            self.fenced = error
            self.stopped.set()
        except Exception as error:  # the store is unreachable: try again at the next renewal
            logger.warning("could not renew the lease on snapshot store %r (%r): it lapses in %.1f s unless a "
                           "renewal succeeds", self.files.uri, error, self.record.expires - self.clock())

    def release(self) -> None:
        """Stop renewing and let the next driver take the store at once (unless another took it
        over already). Done once; a release that cannot be written is logged (the lease then
        lapses by itself)."""
        if self.released:
            return
        self.released = True
        self.stopped.set()
        if self.thread.is_alive() and self.thread is not threading.current_thread():
            self.thread.join(timeout=RELEASE_WAIT)
        if self.fenced is not None:
            return
        try:
            self.files.check(self.record.fence, "releasing the store lease")
            self.files.write(dataclasses.replace(self.record, released=True, expires=self.clock()))
        except Exception as error:  # taken over meanwhile, or unreachable: it lapses by itself
            logger.warning("could not release the lease on snapshot store %r: %r", self.files.uri, error)


def take_store(recovery: Recovery, job: str) -> Recovery:
    """Check that ``recovery``'s store can be written, take its lease for job ``job`` (renewed
    from now on, until :func:`release_store`) and return ``recovery`` with the lease's fence,
    which every store of the job is opened with.

    Raises:
        StoreLeaseError: another driver holds the store (its lease is live), naming it.
        SnapshotError: the store cannot be written.
    """
    store = SnapshotStore(recovery.store, recovery.signing_key)
    store.check_writable()
    try:
        record = acquire(store.leases, this_holder(job), recovery.lease, lambda: newest_committed(store))
    except (OSError, ValueError) as error:  # pyarrow's errors (ArrowInvalid is a ValueError)
        raise SnapshotError(f"the lease on snapshot store {recovery.store!r} could not be taken "
                            f"({type(error).__name__}: {error})") from error
    keeper = LeaseKeeper(store.leases, record)
    with _HELD_LOCK:
        if not _AT_EXIT:  # registered after pyarrow's S3 finalizer (the store is open): so it runs before it
            atexit.register(_release_all)
            _AT_EXIT.append(True)
        _HELD[(recovery.store, record.fence)] = keeper
    keeper.start()
    return dataclasses.replace(recovery, fence=record.fence)


def keeper_of(recovery: Recovery) -> LeaseKeeper | None:
    """The keeper of the lease ``recovery``'s job holds in this process (None: it holds none)."""
    with _HELD_LOCK:
        return _HELD.get((recovery.store, recovery.fence)) if recovery.fence is not None else None


def release_store(recovery: Recovery | None) -> None:
    """The job of ``recovery`` is over: release its store's lease (nothing if it holds none)."""
    if recovery is None or recovery.fence is None:
        return
    with _HELD_LOCK:
        keeper = _HELD.pop((recovery.store, recovery.fence), None)
    if keeper is not None:
        keeper.release()


def _release_all() -> None:
    """A driver that exits lets the next one take its stores at once."""
    with _HELD_LOCK:
        keepers = list(_HELD.values())
        _HELD.clear()
    for keeper in keepers:
        keeper.release()
