"""A replica recovered alone on Ray (``rt.Recovery(alone=True)``; docs/recovery.md, "A replica
recovered alone"): the steps the simulator takes in :mod:`raytide.testing.solo`, on the same
cores, as calls to the job's actors. The driver's supervisor asks :meth:`AloneOnRay.recover`
first at a death; where :func:`~raytide.driver.recovery_runtime.ray_kind` says ``"job"``, or a
step meets another death or runs out of time, the whole-job recovery runs as before::

    driver ── a warm host: take, connect (the lost replica's role, its receivers)     ┐ sent, not
    driver ──lose(n, key)──▶ coordinator: abandon the snapshot in flight, take none  ┘ waited for
    driver waits for lose only, then reads L, the last committed snapshot
    driver ──restore_alone(n, L, figures?, first, quiet)──▶ replacement: R           ┐ sent together,
    driver ──replace(n, key, handle, R, first)──▶ progress actor (runs once R is in) ┘ one wait, with
             R: its locations, restored figures, channel positions                      take's and connect's
    driver ──resume(n)──▶ replacement                                                ┐ sent together,
    driver ──replay_to(n, key, handle, positions, L)──▶ each replica sending to it    ┘ one wait
             (one whose log dropped what the replay needs past its cap answers why, sending nothing:
              the whole job rolls back, its record saying so)
    driver ──start()──▶ coordinator: snapshots again                        waited for

The replacement sends the progress actor nothing before its ``replace`` has run: it runs
only what its senders replay to it and its ``resume``, both sent once ``replace`` answered.

The job's incarnation does not change: the survivors run on throughout, keep their state and
processes; a sender's calls to the dead handle were dropped (its log keeps them) until its
``replay_to``, which sends the log from the restored positions and then the new handle gets
what follows. Every wait has :data:`~raytide.driver.coordination.RECOVERY_TIMEOUT`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any

import ray

from raytide.driver.coordination import JobSnapshots, RecoveryRecord, Steps
from raytide.driver.recovery_runtime import DEATHS, RayRecovery, ray_kind
from raytide.engine.outbox import receivers
from raytide.engine.upstream_log import ReplayRefused
from raytide.errors import JobTimeout
from raytide.physical.protocol import ReplicaKey
from raytide.snapshots.recovery import RestorePoint
from raytide.supervisor.alone import GENERATION

logger = logging.getLogger(__name__)


@dataclass
class AloneOnRay:
    """One recovery alone of the job whose snapshot state is ``snapshots`` (see the module docstring)."""

    snapshots: JobSnapshots
    steps: Steps = field(default_factory=Steps)
    started: float = field(default_factory=time.monotonic)

    def recover(self, cause: str) -> bool:
        """Recover the death of ``cause`` alone if the rule allows it; whether it did (False: the
        caller runs the whole-job recovery, which finds the dead again and records why).

        Raises:
            RaytideError: the restart budget is spent, or the replacement's ``restore()`` raised.
        """
        snapshots = self.snapshots
        dead = self.steps.time("find the dead", self._dead)
        found = ray_kind(snapshots, dead)
        if found.kind != "alone":
            return False
        key: ReplicaKey = dead[0]
        snapshots.budget.spend(cause)
        try:
            point, name = self._replace(key)
        except (*DEATHS, JobTimeout, ReplayRefused) as error:
            snapshots.budget.causes.pop()  # the whole-job recovery that takes over spends it
            snapshots.alone_refused = str(error) if isinstance(error, ReplayRefused) else None
            logger.warning("job %r: replica %s was not recovered alone (%r); the whole job rolls back",
                           snapshots.placement.name, key, error)
            return False
        seconds = time.monotonic() - self.started
        snapshots.records.append(RecoveryRecord(snapshots.incarnation, cause, 1, point.snapshot_id, [name], seconds,
                                                time.time(), self.steps.seconds, "alone", found.why))
        logger.warning("job %r: replica %s recovered alone from snapshot %s in %.2f s", snapshots.placement.name, key,
                       point.snapshot_id, seconds)
        return True

    def _dead(self) -> list[Any]:
        """The job's actors that died, as their watches say (a pending ``watch`` call fails the
        moment its actor dies: the liveness check dropped those it found, the others are looked
        at now, without waiting), with those the stall rule declared; if they name none (the
        death came by another path, the progress actor's poll), the pings of the whole-job
        recovery (:meth:`RayRecovery.find_dead`, which waits up to its ``PING_TIMEOUT`` for busy actors)."""
        liveness = self.snapshots.placement.liveness
        pending = list(liveness.watches.values())
        ended = set(ray.wait(pending, num_returns=len(pending), timeout=0)[0]) if pending else set()
        dead = [key for key in liveness.actors if key not in liveness.watches or liveness.watches[key] in ended]
        dead = list(dict.fromkeys([*dead, *liveness.declared]))
        return dead or RayRecovery(self.snapshots).find_dead()

    def _replace(self, key: ReplicaKey) -> tuple[RestorePoint, str]:
        """The steps (see the module docstring); the snapshot restored and the replaced host's name.

        A call waits only for what it needs: the coordinator's ``lose`` runs while a host takes
        the role; the replacement's ``restore_alone`` is sent behind its ``take`` and ``connect``
        (one caller's calls run in order on a host) and the progress actor's ``replace`` is handed
        its answer as a Ray dependency, all waited for at once; ``resume`` and the replays go
        out together."""
        snapshots, steps = self.snapshots, self.steps
        placement, incarnation, coordinator = snapshots.placement, snapshots.incarnation, snapshots.coordinator
        losing = coordinator.lose.remote(incarnation, key)
        [name], taking = steps.time("replace them", placement.replacing, [key], coordinator)
        snapshots.watch()
        quiet = steps.time("pause the coordinator", snapshots.wait, [losing],
                           f"the snapshot coordinator abandoning its snapshot for replica {key}")[0]
        point = steps.time("read the snapshot", snapshots.latest_point)
        first = GENERATION * (1 + sum(record.kind == "alone" and name in record.replaced for record in snapshots.records))
        handle = placement.peers[key]
        restoring = handle.restore_alone.remote(incarnation, point.snapshot_id,
                                                point.snapshot_id not in (None, self._base()), first, quiet)
        restored = steps.time("restore the replicas", snapshots.wait, [restoring, placement.progress.replace.remote(
            incarnation, key, handle, restoring, first), *taking],
            f"replica {key}'s host taking its role and restoring it alone, and the progress actor taking it")[0]
        if isinstance(restored, BaseException):
            raise restored
        positions = restored[2]
        senders = [sender for sender in placement.peers if sender != key and key in receivers(placement.plan, sender)]
        refused = steps.time("resume and replay", snapshots.wait, [handle.resume.remote(incarnation), *(
            placement.peers[sender].replay_to.remote(incarnation, key, handle, positions, point.snapshot_id or 0)
            for sender in senders)], f"resuming replica {key}, the replicas sending to it replaying their logs to it")[1:]
        if any(refused):  # a log dropped (past its cap) what the replay needs: nothing of it was sent
            raise ReplayRefused("; ".join(answer for answer in refused if answer))
        snapshots.settle(coordinator.start.remote(), "the snapshot coordinator starting again after the recovery alone")
        return point, name

    def _base(self) -> int | None:
        """The snapshot this incarnation was restored from (its progress figures count from 0
        there, not from the snapshot's): the last whole-job recovery's, else the one the run started from."""
        jobs = [record.snapshot_id for record in self.snapshots.records if record.kind == "job"]
        return jobs[-1] if jobs else self.snapshots.started_from
