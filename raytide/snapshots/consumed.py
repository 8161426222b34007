"""The store's record of what a job's consumers have had, for a driver that starts again.

A snapshot records the epochs the driver had been handed when it was taken; a consumer
goes on taking epochs after that. So that a new driver restored from that snapshot
(``restore=``) does not hand out again what the consumer already had, the driver writes,
before it hands its consumer the next epoch, what counts as delivered
(:meth:`~raytide.engine.delivery.Deliveries.durable`) to one small record in the store,
naming the run that wrote it. A restored run reads it back only if that run is the one it
continues (:meth:`ConsumedRecord.after`).

Kept by the Ray driver (:class:`~raytide.driver.recovery.JobRecovery`) and by the
in-process runtime, whose simulated driver crashes run this code.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from raytide.physical.plan import PhysicalPlan
from raytide.snapshots.recovery import RestorePoint, restore_point
from raytide.snapshots.store import SnapshotStore

#: The record's name in the store.
CONSUMED = "consumed"
#: What a run restarted on a store with no committed snapshot restores (a job with stream
#: inputs, ``restore="latest"``, whose producer runs its batches again from the first): the
#: very start, going on from what the run before it, which began there too, had handed its
#: consumers.
START = "start"


class ConsumedRecord:
    """Writes and reads the store's record of what a job's consumers have had."""

    def __init__(self, store: SnapshotStore) -> None:
        self.store = store
        self.written: dict[str, int] | None = None  # as last written by this run (None: not yet)

    def write(self, marks: dict[str, int], run_first: int, started_from: int | None) -> None:
        """Record ``marks`` (per output, the last epoch delivered), if they changed, as written
        by the run whose own snapshots start at id ``run_first`` and which started from
        snapshot ``started_from`` (None: from the beginning)."""
        if marks != self.written:
            self.store.write_record(CONSUMED, {"run_first": run_first, "started_from": started_from,
                                               "delivered": marks})
            self.written = dict(marks)

    def after(self, snapshot_id: int | None) -> dict[str, int]:
        """Per output, the last epoch consumed by the run that took snapshot ``snapshot_id``
        or started from it (None: by a run that started from the very start, as the one
        reading it does: :data:`START`); empty if another run wrote the record last (a
        restore of an older run's snapshot hands out what that run's snapshot says)."""
        record = self.store.read_record(CONSUMED)
        if record is None:
            return {}
        if snapshot_id is None:
            continues = record["started_from"] is None
        else:
            continues = record["run_first"] <= snapshot_id or record["started_from"] == snapshot_id
        if not continues:
            return {}
        return {str(name): int(epoch) for name, epoch in record["delivered"].items()}


def starting_point(plan: PhysicalPlan, store: SnapshotStore, restore: int | str) -> RestorePoint:
    """Where a run restored with ``restore`` (a committed snapshot's id, or :data:`START`) begins."""
    return restore_point(plan, None) if restore == START else restore_point(plan, store, int(restore))


class DriverOutputs(Protocol):
    """A driver's outputs as :func:`continue_from` sees them (the Ray driver's
    ``OutputCollector``, the in-process runtime's ``LocalOutputs``)."""

    def resume_after(self, delivered: Mapping[str, int]) -> None: ...

    def release(self, complete: Mapping[str, int | None]) -> None: ...

    def durable(self) -> dict[str, int]: ...


def continue_from(outputs: DriverOutputs, record: ConsumedRecord, point: RestorePoint, run_first: int) -> None:
    """A run (its own snapshots from id ``run_first``) starts where committed snapshot ``point``
    of an earlier run left off (``restore=``), or at the very start after a run that left no
    committed snapshot (``point.snapshot_id`` None: :data:`START`): what that run handed out,
    as the snapshot says and as its consumers had it since (the record), is not handed out
    again; what the snapshot holds complete is final (released, never computed again); and
    the record is this run's from now on."""
    outputs.resume_after(point.delivered)
    outputs.resume_after(record.after(point.snapshot_id))
    outputs.release(point.complete)
    record.write(outputs.durable(), run_first, point.snapshot_id)
