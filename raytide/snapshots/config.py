"""``rt.Recovery``: how a job takes snapshots and recovers from failures.

Security: snapshot state is pickled (user state may hold any Python object), so restoring
from a store that someone else can write runs their code. Keep the store private to the
job, or give a ``signing_key``: manifests are then signed with HMAC-SHA256, parts are
checked against the SHA-256 the signed manifest records, and a snapshot whose signature
does not verify is refused (:mod:`raytide.snapshots.store`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from raytide.core.arguments import non_negative_int, positive_int
from raytide.errors import ArgumentError
from raytide.snapshots.lease import DEFAULT_LEASE, Fence

#: The seconds a snapshot may take before it is abandoned, unless given.
DEFAULT_SNAPSHOT_TIMEOUT = 60.0

#: Seconds without an event, with work pending, before the driver pings every actor of a job
#: with recovery; and seconds each has to answer (see ``Recovery.stall_timeout``).
DEFAULT_STALL_TIMEOUT = 10.0
DEFAULT_PING_TIMEOUT = 10.0

#: When the driver hands out a completed output epoch: at once, or once a committed
#: snapshot holds it (:mod:`raytide.engine.output_gate`).
OutputCommit = Literal["epoch", "snapshot"]


@dataclass(frozen=True)
class Recovery:
    """Snapshots and recovery for ``rt.run(..., recovery=rt.Recovery(...))``.

    Args:
        store: where snapshots go: a local path or any URI ``pyarrow.fs`` understands
            (``s3://bucket/prefix``); on a cluster, one every node reaches.
        interval: seconds between the end of a snapshot and the next; None for snapshots
            only on demand (``job.snapshot()``); ``"auto"`` for the utilization model's
            optimal interval from measured snapshot and recovery times and failure rate
            (:mod:`raytide.snapshots.interval`).
        retain: committed snapshots kept (older ones are deleted), at least 1.
        max_restarts: recoveries allowed before the job fails with
            :class:`~raytide.RecoveryError`.
        signing_key: sign manifests with HMAC-SHA256 under this key and refuse any that
            does not verify (see the module docstring on security).
        timeout: seconds after which a snapshot that has not completed is abandoned
            (the job goes on; the next one is taken at the next interval). With
            ``output_commit="snapshot"``, snapshots that keep failing (a store that cannot
            be written) for longer than this fail the job: its output waits for a commit
            (:mod:`raytide.driver.snapshot_health`).
        output_commit: ``"epoch"`` (the default) hands out an output epoch as soon as it
            completes: the lowest latency, and exactly-once for a dataflow that computes an
            epoch the same way every time (the built-in aggregations, joins and loops do;
            ``stateful_map`` does when its outputs do not depend on the order in which a
            key's records of one epoch arrive). ``"snapshot"`` holds a completed epoch
            until a committed snapshot holds it complete, so a recovery never computes it
            again: exactly-once also for code whose output depends on arrival order, the
            clock or chance, at the cost of up to an interval of added latency.
        lease: seconds a job's hold on its store lasts unless renewed (its driver renews it
            every third of that while the job runs). Another driver is refused the store
            while the lease is live, and takes it over once it lapses (the holder died, or
            was paused or cut off that long), after which every write of the old job is
            refused (fencing: :mod:`raytide.snapshots.lease`). Shorter: a dead driver's
            store is free sooner; longer: a paused driver keeps its store longer.
        stall_timeout: seconds a job may go without an event (an output epoch, its end) while
            it has not finished before its driver pings every actor (:mod:`raytide.supervisor.stalls`).
        ping_timeout: seconds an actor has to answer that ping; one that does not (its process
            stopped, or cut off while Ray still counts it alive) is declared failed, killed and
            recovered from, as a death Ray reports is. Shorter bounds find a stopped actor
            sooner; an actor too slow to answer a ping in time is recovered from needlessly.
        alone: recover one lost replica alone where the rule allows it (the default; docs/recovery.md,
            "A replica recovered alone"): the replicas number every send to another replica, keep
            the sends into a replica that may be recovered alone (pickled, as sent) in an upstream
            log until a snapshot commits past them, and drop what they receive twice; one dead
            replica where that holds is replaced alone, the others keeping their state; any other
            death rolls the whole job back, and its record in ``job.stats()["recoveries"]`` says
            why (an input replica, a stage that notifies, ...). ``rt.run`` turns it off for a plan
            none of whose replicas the rule recovers alone, which then pays nothing; elsewhere its
            cost on the steady path is within the noise of ``bench alone_cost`` (docs/recovery.md,
            "What it costs"). ``False``: every death rolls the whole job back, nothing numbered.
            The logs keep what was sent since the last commit: with ``interval=None`` they grow
            until a snapshot, or to their cap (past it, a death there rolls the whole job back).
        upstream_log_cap: the most messages a replica's upstream log keeps over its channels
            (None: 65,536, :data:`raytide.engine.upstream_log.CAP`) before it drops them all and
            numbers on: a replay from before the drop is refused, so a death there rolls the
            whole job back, its record saying so. Lower: less memory for a job far behind its feed, whose snapshots commit late;
            higher: such a job's replicas stay recoverable alone longer. Only with ``alone``.
        fence: set by ``rt.run``, not by users: the lease generation the job holds, which
            every store write of the job checks.
        logged: set by ``rt.run``, not by users: with ``alone``, the chains into whose replicas
            sends are kept in upstream logs (None: every one), the others' only numbered
            (:func:`~raytide.supervisor.alone.logged_chains`).
    """

    store: str
    interval: float | Literal["auto"] | None = 1.0
    retain: int = 3
    max_restarts: int = 3
    signing_key: bytes | None = None
    timeout: float = DEFAULT_SNAPSHOT_TIMEOUT
    output_commit: OutputCommit = "epoch"
    lease: float = DEFAULT_LEASE
    stall_timeout: float = DEFAULT_STALL_TIMEOUT
    ping_timeout: float = DEFAULT_PING_TIMEOUT
    alone: bool = True
    upstream_log_cap: int | None = None
    fence: Fence | None = field(default=None, repr=False, compare=False)
    logged: frozenset[str] | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.store, str) or not self.store:
            raise ArgumentError(f"Recovery store must be a path or URI string, not {self.store!r}")
        interval = self.interval
        if not (interval is None or interval == "auto" or _positive_number(interval)):
            raise ArgumentError(f"Recovery interval must be seconds above 0, None or 'auto', not {interval!r}")
        if non_negative_int(self.retain, "Recovery retain") < 1:
            raise ArgumentError(f"Recovery retain must keep at least 1 snapshot, not {self.retain!r}")
        non_negative_int(self.max_restarts, "Recovery max_restarts")
        if self.signing_key is not None and not (isinstance(self.signing_key, bytes) and self.signing_key):
            raise ArgumentError("Recovery signing_key must be non-empty bytes or None")
        if not _positive_number(self.timeout):
            raise ArgumentError(f"Recovery timeout must be seconds above 0, not {self.timeout!r}")
        if self.output_commit not in ("epoch", "snapshot"):
            raise ArgumentError(f"Recovery output_commit must be 'epoch' or 'snapshot', not {self.output_commit!r}")
        if not _positive_number(self.lease):
            raise ArgumentError(f"Recovery lease must be seconds above 0, not {self.lease!r}")
        for bound in ("stall_timeout", "ping_timeout"):
            if not _positive_number(getattr(self, bound)):
                raise ArgumentError(f"Recovery {bound} must be seconds above 0, not {getattr(self, bound)!r}")
        if not isinstance(self.alone, bool):
            raise ArgumentError(f"Recovery alone must be True or False, not {self.alone!r}")
        if self.upstream_log_cap is not None:
            positive_int(self.upstream_log_cap, "Recovery upstream_log_cap (the most messages a replica's log keeps)")
        if self.fence is not None and not isinstance(self.fence, Fence):
            raise ArgumentError(f"Recovery fence is set by rt.run, not {self.fence!r}")
        if self.logged is not None and not isinstance(self.logged, frozenset):
            raise ArgumentError(f"Recovery logged is set by rt.run, not {self.logged!r}")


def _positive_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0
