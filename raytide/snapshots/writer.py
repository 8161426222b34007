"""A replica's snapshot writer: stores its local snapshots off the processing path.

The replica core pickles its state at the barrier (that copy is what must happen at the
cut); writing the bytes to the store, which may be S3, happens on this thread while the
replica goes on processing. Once written, the snapshot is acknowledged to the
coordinator with what the manifest needs (the part's size and SHA-256) and the replica's
summary. A write of an older incarnation (queued before a recovery) is skipped; a write
that fails is reported to the coordinator, which abandons that snapshot (the job goes on).
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import TYPE_CHECKING, Any

from raytide.physical.protocol import ReplicaKey

if TYPE_CHECKING:  # and imported where used: a vertex host imports this module, its job may have no recovery
    from raytide.snapshots.config import Recovery
    from raytide.snapshots.replica_state import LocalSnapshot
    from raytide.snapshots.store import SnapshotStore

logger = logging.getLogger(__name__)


def replica_writer(key: ReplicaKey, recovery: Recovery | None, incarnation: int) -> SnapshotWriter | None:
    """The writer of replica ``key`` of a job with ``recovery``, on the store it names, writing the
    snapshots of ``incarnation`` (None without recovery). The store's modules, its lease's and the
    coordinator's are imported here, by a job with recovery only: a vertex host does not load them
    at its start."""
    if recovery is None:
        return None
    from raytide.snapshots.store import store_of

    return SnapshotWriter(key, store_of(recovery), incarnation)


class SnapshotWriter:
    """One thread that writes a replica's local snapshots in the order they were taken."""

    def __init__(self, key: ReplicaKey, store: SnapshotStore, incarnation: int) -> None:
        """``incarnation``: the job's when the replica starts. A replica that joins a running job
        in place (a stepped growth after a recovery: incarnation 1 or later, and no restore to
        :meth:`reset` it) skipped every snapshot it took as another incarnation's, and the
        coordinator waited out each one for it."""
        self.key, self.store = key, store
        self.coordinator: Any = None
        self.incarnation = incarnation
        self.queue: queue.SimpleQueue[tuple[int, LocalSnapshot] | None] = queue.SimpleQueue()
        self.written = 0
        self.thread = threading.Thread(target=self._run, name=f"raytide-snapshot-writer-{key}", daemon=True)
        self.thread.start()

    def submit(self, incarnation: int, snapshot: LocalSnapshot) -> None:
        """Write ``snapshot`` (taken in ``incarnation``) soon; returns at once."""
        self.queue.put((incarnation, snapshot))

    def reset(self, incarnation: int, coordinator: Any) -> None:
        """A recovery started ``incarnation``: queued snapshots of older ones are not written."""
        self.incarnation, self.coordinator = incarnation, coordinator

    def read_own(self, snapshot_id: int) -> bytes:
        """This replica's part of committed snapshot ``snapshot_id`` (for its restore)."""
        from raytide.snapshots.recovery import part_name

        return self.store.read_part(snapshot_id, part_name(self.key))

    def close(self) -> None:
        """The replica's job is over (its host is reset): write nothing more, end the thread."""
        self.coordinator = None
        self.queue.put(None)

    def _run(self) -> None:
        from raytide.snapshots.coordinator import Acknowledgement
        from raytide.snapshots.recovery import part_name

        while True:
            item = self.queue.get()
            if item is None:
                return
            incarnation, snapshot = item
            coordinator = self.coordinator  # read once: close() clears it from the replica's thread meanwhile
            if incarnation != self.incarnation or coordinator is None:
                continue
            try:
                part = self.store.write_part(snapshot.snapshot_id, part_name(self.key), snapshot.data)
            except Exception as error:  # the store is unreachable or full: this snapshot cannot complete
                logger.warning("replica %s could not write snapshot %d: %r", self.key, snapshot.snapshot_id, error)
                coordinator.write_failed.remote(self.key, incarnation, snapshot.snapshot_id,
                                                     f"replica {self.key} could not write its part: {error!r}")
                continue
            self.written += 1
            coordinator.acknowledge.remote(
                Acknowledgement(self.key, snapshot.snapshot_id, incarnation, (part,), snapshot.summary))
