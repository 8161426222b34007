"""A growing stepped rescale's switch without a new incarnation, on Ray (issue 74;
docs/rescaling.md, "A growing switch without a new incarnation"): the new replicas join the
running job, owning nothing, while every other replica goes on::

    driver: the snapshots paused (raytide.driver.stepped), the new hosts leased from the warm pool
    driver ─take(plan at width q, incarnation n, replica b) + connect─▶ each new replica b
    b ─its locations─▶ driver ─join(b, its handle, the locations it reads)─▶ progress actor: pushes b
        its statuses and counts b's messages from then on (b holds no pointstamp yet)
    driver ─widen(the plan at width q, the handles of the b it sends to)─▶ every replica of the job:
        markers and epoch tokens reach the b's; the data keeps its tables (no b owns a group yet)
    driver ─widen(plan)─▶ the coordinator: the next snapshots wait for the b's too
    then the plan's install and its steps (raytide.driver.stepped): the b's get their groups there

Where the width is read by more than the senders' markers and tokens
(:func:`~raytide.engine.joining.join_refusal`), or the job relays its progress per node (the
relays' fan-outs are chosen per placement), the driver switches with a new incarnation as
before, and the record says why. A death during the join (a call failing, or one the driver
notices): the hosts joined go back to the pool, every replica is given the old plan back (before
the recovery's restore, which builds its core from it: one caller's calls arrive in order), the
job recovers in the old widths if a replica of it died, and the rescale is made by the whole-job
path.
"""

from __future__ import annotations

import os

import ray

from raytide.driver.recovery import JobRecovery, Steps
from raytide.driver.rescale import Supervision
from raytide.engine.joining import join_refusal
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ReplicaKey

__all__ = ["JOIN_ENV", "join", "refusal"]

#: The driver's environment setting that turns the join off (``0``).
JOIN_ENV = "RAYTIDE_STEPPED_JOIN"


def refusal(recovery: JobRecovery, new: PhysicalPlan, vertex: str) -> str | None:
    """Why the job cannot join ``vertex``'s new replicas in place (None: it can); ``RAYTIDE_STEPPED_JOIN=0``
    in the driver's environment turns the join off (the short switch of before, to compare)."""
    placement = recovery.placement
    if os.environ.get(JOIN_ENV, "1") == "0":
        return f"the join is turned off ({JOIN_ENV}=0)"
    if placement.relay_of:
        return "the job relays its progress per node (the relays are chosen for each placement)"
    return join_refusal(placement.plan, new, vertex)


def join(recovery: JobRecovery, supervision: Supervision, new: PhysicalPlan, vertex: str, steps: Steps) -> str | None:
    """Join ``vertex``'s new replicas of ``new`` to the running job (the module docstring), its
    snapshots paused; None if joined, else why not (a refusal, or a death: then the job is in
    its old widths, recovered if a replica of it died, and the caller switches as before)."""
    why = refusal(recovery, new, vertex)
    if why is not None:
        return why
    placement, incarnation, old = recovery.placement, recovery.incarnation, recovery.placement.plan
    fresh = steps.time("lease the joining hosts", placement.add_hosts, new)
    keys: list[ReplicaKey] = []
    widening: list = []  # the coordinator's widen, once sent
    try:
        keys, refs = placement.admit(new, fresh, incarnation, recovery.coordinator)
        answers = steps.time("the joining replicas take their roles", recovery.wait, refs, "the joining replicas' roles")
        subscriptions = dict(zip(keys, answers[len(keys):]))
        widening = [recovery.coordinator.widen.remote(incarnation, new)] if recovery.coordinator is not None else []
        steps.time("join them and widen every replica", recovery.wait, [
            *[placement.progress.join.remote(incarnation, key, placement.peers[key], locations)
              for key, locations in subscriptions.items()],
            *[peer.widen.remote(incarnation, new, {key: placement.peers[key] for key in keys if key in placement.peers_of(other)})
              for other, peer in placement.peers.items() if other not in keys], *widening],
            "the progress actor joining the new replicas, every replica and the coordinator widening to them")
        cause = died = supervision.watch(0)
    except ray.exceptions.RayActorError as error:  # a joining host's, or one the driver notices next
        died = f"an actor died while {len(keys)} replicas of {vertex!r} joined: {type(error).__name__}"
        cause = supervision.watch(0)
    if died is None:
        recovery.watch()  # the joined hosts' deaths too
        return None
    _withdraw(recovery, old, keys, widening)
    if cause is not None:
        supervision.recover(recovery.after_death(cause))
    return f"a death during the join ({died})"


def _withdraw(recovery: JobRecovery, old: PhysicalPlan, keys: list[ReplicaKey], widening: list) -> None:
    """Undo a join that met a death: every replica and the coordinator given ``old`` back, the hosts of
    ``keys`` back to the pool. A replica's calls run in turn, so its ``widen`` back is sent and not waited
    for (it comes before the recovery's restore, which builds its core from the plan). The coordinator's
    run on several threads: its ``widen`` back is sent once its widening (``widening``) has ended, and
    waited for, so neither can run after the other nor after a recovery's pause (which drops a ``widen``
    of the incarnation it leaves): either would leave the next cut waiting for a replica that left
    (:meth:`~raytide.driver.coordination.JobSnapshots.settle`; a dead coordinator is replaced by the
    recovery, from the placement's plan)."""
    placement = recovery.placement
    for other, peer in placement.peers.items():
        if other not in keys:
            peer.widen.remote(recovery.incarnation, old, {})
    placement.withdraw(old, keys)
    for widened in widening:
        recovery.settle(widened, "the coordinator widening to the joining replicas")
        recovery.settle(recovery.coordinator.widen.remote(recovery.incarnation, old),
                        "the coordinator given the old replicas back after a death met the join")
