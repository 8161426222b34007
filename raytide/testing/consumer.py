"""The driver's side of a simulated job's outputs, and a consumer that reads them as
``job.results`` does on Ray.

:class:`LocalOutputs` shows each completed epoch once its
:class:`~raytide.engine.output_gate.OutputGate` lets it pass (the Ray driver's own code:
:class:`~raytide.supervisor.outputs.ShownOutputs`), keeps the
:class:`~raytide.engine.delivery.Deliveries` book and writes the store's
:class:`~raytide.snapshots.consumed.ConsumedRecord`: the code the Ray driver's
:class:`~raytide.driver.outputs.OutputCollector` and ``JobRecovery`` run. With a
:class:`LocalConsumer`, the consumer takes the shown epochs one step at a time, as a
``job.results`` loop does: it is handed an epoch, acts on it at a later step (its log), and
at a later one still asks for the next one, which acknowledges the one it has (and writes
the record).
A crash of the driver (:data:`~raytide.testing.outcome.DRIVER`) can strike between any
two of those steps; the consumer's log outlives it, as a consumer's side effects do.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Callable
from dataclasses import dataclass, field

from raytide.physical.wire import as_records
from raytide.snapshots.config import OutputCommit
from raytide.snapshots.consumed import ConsumedRecord, continue_from
from raytide.snapshots.recovery import RestorePoint
from raytide.snapshots.store import SnapshotStore
from raytide.supervisor.outputs import ShownOutputs


@dataclass
class LocalConsumer:
    """A consumer of every output of a job, across the drivers that run it one after another:
    ``log`` holds ``(output, epoch, records)`` for each epoch it acted on, in order (an epoch
    handed twice, after a driver crash, may be in it twice); ``handed``, per output, the
    epoch it was handed and has not acted on yet (lost with the driver's process);
    ``asked_past``, per output, the last epoch it asked for the next one after (it has it).

    ``pace``: the chance that the consumer takes a step when it is chosen to (1: as often as
    a mailbox delivers; less: a slow consumer, whose epochs stay in its hands while snapshots
    are taken), drawn from ``rng``."""

    log: list[tuple[str, int, list]] = field(default_factory=list)
    handed: dict[str, tuple[int, list]] = field(default_factory=dict)
    asked_past: dict[str, int] = field(default_factory=dict)  # per output, the last epoch it asked for the next of
    pace: float = 1.0
    rng: random.Random = field(default_factory=random.Random)


class LocalOutputs(ShownOutputs):
    """What the simulated driver was shown of each output, and what its consumer has had: the
    Ray driver's gate, book and order of showing (:class:`~raytide.supervisor.outputs.ShownOutputs`)."""

    def __init__(self, outputs: list[str], commit: OutputCommit, shown: dict[str, dict[int, list]],
                 consumer: LocalConsumer | None = None, store: SnapshotStore | None = None) -> None:
        """``shown``: filled with each output's epochs as they are shown (the run's record);
        ``store``: the job's snapshot store, which keeps the consumed record (a job with recovery)."""
        super().__init__(outputs, commit)
        self.shown, self.consumer = shown, consumer
        self.last_shown: dict[str, int] = {}  # the simulator's own count, whatever the book says
        self.pending: dict[str, dict[int, list]] = {name: {} for name in outputs}  # shown, not handed to the consumer
        self.record = ConsumedRecord(store) if store is not None else None
        #: The run's ``(first snapshot id, snapshot started from)``, for the consumed record.
        self.run: tuple[int, int | None] = (1, None)
        if consumer is not None:
            self.book.streamed.update(outputs)

    def start(self, run_first: int, point: RestorePoint | None = None) -> None:
        """A run with recovery (its snapshots from id ``run_first``) starts: from the beginning
        (nothing is consumed yet, whatever an earlier run's record says), or where committed
        snapshot ``point`` of an earlier run left off; as ``JobRecovery`` does on Ray."""
        assert self.record is not None, "only a job with recovery keeps the record"
        self.record.store.check_writable()  # as rt.run does first (it creates the store's root)
        self.run = (run_first, None if point is None else point.snapshot_id)
        if point is None:
            self.record.write({}, *self.run)
        else:
            continue_from(self, self.record, point, run_first)

    def _keep(self, name: str, epoch: int, parts: list) -> bool:
        records = as_records([record for part in parts for record in part])
        self._count(name, epoch)
        self.shown[name][epoch] = records
        if self.consumer is not None:
            self.pending[name][epoch] = records
        return True

    def _count(self, name: str, epoch: int) -> None:
        """The simulator's own check of each hand-out, independent of the
        :class:`~raytide.engine.delivery.Deliveries` book it runs: an epoch shown again, or
        after a later one, in this run would overwrite the run's record in silence (a test
        comparing ``shown`` with a reference would not see it), so it is raised here."""
        last = self.last_shown.get(name, -1)
        if epoch <= last:
            raise AssertionError(f"simulator: output {name!r} epoch {epoch} shown after epoch {last} in one run "
                                 f"(twice or out of order), past the driver's own check")
        self.last_shown[name] = epoch

    def first_pending(self, name: str) -> int | None:
        """The earliest epoch of output ``name`` shown and not handed to the consumer yet (None: none)."""
        return min(self.pending[name], default=None)

    def durable(self) -> dict[str, int]:
        """What counts as delivered in a snapshot (:meth:`~raytide.engine.delivery.Deliveries.durable`)."""
        return self.book.durable(self.first_pending)

    def write_record(self) -> None:
        """Record what the consumer has had (as ``JobRecovery.record_consumed`` does)."""
        if self.record is not None:
            self.record.write(self.durable(), *self.run)

    def consumer_actions(self) -> list[Callable[[], None]]:
        """One step of the consumer per output it has something to do with."""
        if self.consumer is None:
            return []
        return [functools.partial(self._consume, name) for name in self.pending
                if self.book.in_hand[name] or self.pending[name]]

    def _consume(self, name: str) -> None:
        """The consumer of output ``name`` acts on the epoch it was handed, or asks for the
        next one (acknowledging the one it has), or, having none, is handed the earliest one shown."""
        consumer = self.consumer
        assert consumer is not None
        if consumer.rng.random() >= consumer.pace:
            return  # a slow consumer: not this time
        if name in consumer.handed:
            consumer.log.append((name, *consumer.handed.pop(name)))
        elif self.book.in_hand[name]:
            for epoch in list(self.book.in_hand[name]):
                self.book.acknowledge(name, epoch)
                consumer.asked_past[name] = max(epoch, consumer.asked_past.get(name, -1))
            self.write_record()
        else:
            epoch = min(self.pending[name])
            self.book.hand(name, epoch)
            consumer.handed[name] = (epoch, self.pending[name].pop(epoch))
