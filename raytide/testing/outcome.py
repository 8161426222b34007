"""What a simulated run is given for its faults and what it gives back: the recovery
settings of the in-process runtime (steps for seconds), the crash targets, and the record
of a run (:class:`LocalRun`)."""

from __future__ import annotations

import collections
import random
from dataclasses import dataclass, field
from typing import Any

from raytide.physical.protocol import JobEvent, JobFailed, ReplicaKey, StepPlanMessage
from raytide.snapshots.blame import Replaying
from raytide.snapshots.config import OutputCommit
from raytide.snapshots.store import Manifest, PartInfo, SnapshotStore

#: Crash targets besides replicas (the driver's crash ends the run: a new driver continues it).
PROGRESS, COORDINATOR, DRIVER = "progress", "coordinator", "driver"
#: The replicas' writer threads, as one actor of the scheduler (they store and acknowledge local snapshots).
WRITERS = "writers"
Target = ReplicaKey | str


class Hang(RuntimeError):
    """A simulated job that can make no progress, or runs past its ``max_steps`` (a livelock)."""


@dataclass(frozen=True)
class LocalRecovery:
    """Snapshots and recovery in the in-process runtime, with steps for seconds.

    Attributes:
        store: where snapshots go (a real store: the simulation writes and reads files).
        interval: steps between the end of a snapshot and the next trigger.
        timeout: steps after which an incomplete snapshot is abandoned.
        retain: committed snapshots kept.
        max_restarts: recoveries allowed before the job fails.
        detection: a death is noticed up to this many steps after it happened.
        missed: the share of deaths whose notice never comes: each is found when a call to the dead
            actor fails (a peer's, the progress actor's, the coordinator's), or once the job stalls.
        zombie: a replica that dies goes on for up to this many actions, a zombie sending from its
            dead incarnation, and its writer stores what it had (:mod:`raytide.testing.zombies`).
        output_commit: when the driver takes a completed epoch (:mod:`raytide.engine.output_gate`).
        stall, ping: the stall rule's bounds (``Recovery.stall_timeout``, ``ping_timeout``) for
            frozen actors: once only frozen actors have had work for ``stall`` steps, every actor
            is pinged and one still frozen ``ping`` steps later is declared failed and killed.
            None: frozen actors are waited for. (A death, which leaves nothing to deliver, is
            found at once by the same rule with bounds 0.)
        numbered: the replicas number their sends, keep upstream logs and drop duplicates
            (:mod:`raytide.engine.numbered_channels`), restored with every snapshot.
        alone: a lost replica is recovered alone where :func:`~raytide.supervisor.alone.decide`
            allows it (:mod:`raytide.testing.solo`; numbered implied), else the job rolls back.
        upstream_log_cap: the most messages a replica's upstream log keeps (``Recovery.upstream_log_cap``; None: 65,536).
    """

    store: SnapshotStore
    interval: int = 40
    timeout: int = 3_000
    retain: int = 2
    max_restarts: int = 5
    detection: int = 5
    zombie: int = 0
    missed: float = 0.0
    output_commit: OutputCommit = "epoch"
    stall: int | None = None
    ping: int = 20
    numbered: bool = False
    alone: bool = False
    upstream_log_cap: int | None = None


class FlakyStore(SnapshotStore):
    """A real store whose writes fail now and then (a full disk, an unreachable bucket): each
    part written and each commit raises ``OSError`` with probability ``failure_rate``, as
    ``random.Random(seed)`` draws. Reads never fail."""

    def __init__(self, uri: str, failure_rate: float, seed: int) -> None:
        super().__init__(uri)
        self.failure_rate, self.rng, self.failures = failure_rate, random.Random(seed), 0

    def write_part(self, snapshot_id: int, name: str, data: bytes) -> PartInfo:
        self._maybe_fail(f"writing {name} of snapshot {snapshot_id}")
        return super().write_part(snapshot_id, name, data)

    def commit(self, snapshot_id: int, parts: list[PartInfo], metadata: dict[str, Any]) -> Manifest:
        self._maybe_fail(f"committing snapshot {snapshot_id}")
        return super().commit(snapshot_id, parts, metadata)

    def _maybe_fail(self, what: str) -> None:
        if self.rng.random() < self.failure_rate:
            self.failures += 1
            raise OSError(f"injected store failure: {what}")


@dataclass(frozen=True)
class ReplicaDied:
    """An actor (a replica, or ``"progress"``, ``"coordinator"``) was crashed by fault
    injection at ``step``; without recovery the job fails."""

    key: Target
    step: int


@dataclass
class Replacements:
    """Replicas recovered alone in a run (:mod:`raytide.testing.solo`): how often each was (a
    replacement numbers its progress messages past its lost incarnations'), and the snapshot
    the job's incarnation started from (a whole-job restore's: figures count from 0 there)."""

    generations: collections.Counter = field(default_factory=collections.Counter)
    base_snapshot: int | None = None


@dataclass
class LocalRun:
    """What a run did: records per output and epoch, every job event, the steps taken,
    the recoveries (what caused each), the snapshots committed, the rescales done, and the
    step at which its driver crashed (None: it did not)."""

    outputs: dict[str, dict[int, list]]
    events: list[JobEvent | ReplicaDied] = field(default_factory=list)
    steps: int = 0
    finished: bool = False
    recoveries: list[str] = field(default_factory=list)
    snapshots: list[int] = field(default_factory=list)
    rescales: list[tuple[int, dict[str, int], int]] = field(default_factory=list)  # (step, widths, cut id)
    refused: list[tuple[int, BaseException]] = field(default_factory=list)  # rescales not made: (step, why)
    migrations: list[tuple[int, StepPlanMessage]] = field(default_factory=list)  # stepped rescales: (step, plan)
    cut_timeouts: list[int] = field(default_factory=list)  # the steps at which a rescale's cut was abandoned at its timeout
    driver_crashed: int | None = None
    alone: list[Any] = field(default_factory=list)  # the replicas recovered alone, in order (``LocalRecovery.alone``)
    alone_refused: list[str] = field(default_factory=list)  # why recoveries alone gave up (a log past its cap)
    replacements: Replacements = field(default_factory=Replacements)
    #: What the latest recovery computes again: a user error there says so, as the driver's does.
    replaying: Replaying | None = None
    #: The first failure found so far, and how many events were looked at for it: the run
    #: asks after every step, and ``events`` only grows (a scan of all of them each time made
    #: a run of many epochs quadratic).
    _failure: Any = field(default=None, init=False, repr=False, compare=False)
    _looked_at: int = field(default=0, init=False, repr=False, compare=False)

    @property
    def failure(self) -> Any:
        """The first failure (a :class:`JobFailed` error or a :class:`ReplicaDied`), or None."""
        while self._failure is None and self._looked_at < len(self.events):
            event = self.events[self._looked_at]
            self._looked_at += 1
            if isinstance(event, JobFailed):
                self._failure = event.error if self.replaying is None else self.replaying.blame(event.error)
            elif isinstance(event, ReplicaDied):
                self._failure = event
        return self._failure
