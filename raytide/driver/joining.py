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

A shrink's retiring switch is the mirror (docs/rescaling.md, "The retiring switch on Ray"): after the
plan's last hand-over a retiring replica ``r`` owns no key group at any epoch, and no record can still
reach it (records route by their epoch; its hand-overs waited until nothing before their steps could
come), so it leaves the running job, the snapshots still paused::

    driver ─retire─▶ each r (VertexActor.retire, polled): nothing left (no step, no notification pending,
        nothing queued), all it held back shipped to the progress actor; answers how many messages it sent
    driver ─widen(the plan at width q)─▶ every other replica: no marker or epoch token to r from now on, the
        links to r closed, a stepped exchange routing by the plan's final table narrowed to q
    driver ─widen(plan)─▶ the coordinator (settled: the next snapshots wait for the q replicas alone)
    driver ─leave(r, its count)─▶ progress actor (polled): once all r sent is applied, r is pushed nothing more
    driver: r's host back to the pool (JobPlacement.retire); the snapshots resume (raytide.driver.stepped)

Where that cannot hold (:func:`~raytide.engine.joining.retire_refusal`, relays, ``RAYTIDE_STEPPED_JOIN=0``,
or a retiring replica that still has something left within :data:`RETIRE_WAIT_S`), the short switch
retires them as before. A death meanwhile: every other replica and the coordinator are given the old plan
back, the job recovers (in the old widths: the placement changes last) and the rescale is made by the
whole-job path.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

import ray

from raytide.driver.recovery import JobRecovery, Steps
from raytide.driver.rescale import Supervision
from raytide.driver.steps_left import STEP_POLL
from raytide.engine.joining import join_refusal, retire_refusal
from raytide.errors import RescaleError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ReplicaKey

__all__ = ["JOIN_ENV", "RETIRE_WAIT_S", "join", "refusal", "retire"]

#: The driver's environment setting that turns the join off (``0``).
JOIN_ENV = "RAYTIDE_STEPPED_JOIN"
#: How long a retiring replica may have something left (a notification pending) before the short switch retires it.
RETIRE_WAIT_S = 5.0


def refusal(recovery: JobRecovery, new: PhysicalPlan, vertex: str) -> str | None:
    """Why the job cannot join ``vertex``'s new replicas in place, or retire its retiring ones (None: it
    can); ``RAYTIDE_STEPPED_JOIN=0`` in the driver's environment turns both off (the short switch of
    before, to compare)."""
    placement = recovery.placement
    if os.environ.get(JOIN_ENV, "1") == "0":
        return f"the switch in place is turned off ({JOIN_ENV}=0)"
    if placement.relay_of:
        return "the job relays its progress per node (the relays are chosen for each placement)"
    if new.width(vertex) < placement.plan.width(vertex):
        return retire_refusal(placement.plan, new, vertex)
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


def retire(recovery: JobRecovery, supervision: Supervision, new: PhysicalPlan, vertex: str, steps: Steps,
           deadline: float) -> tuple[str | None, bool]:
    """Retire ``vertex``'s replicas beyond ``new``'s width, emptied by the plan's steps, from the running
    job (the module docstring), its snapshots paused; ``(None, False)`` if they left, else why not and
    whether a death was the cause (then the job recovered in its old widths, from before the plan:
    the caller rescales by the whole-job path; else it retires them by the short switch)."""
    placement, incarnation, old = recovery.placement, recovery.incarnation, recovery.placement.plan
    staying = set(new.replica_keys())
    keys = [key for key in old.replica_keys() if key not in staying]
    narrowing: list = []  # the coordinator's widen, once sent
    try:
        sent, why = steps.time("the retiring replicas ship their progress", _emptied, recovery, keys, deadline)
        if why is not None:
            return why, False
        narrowing = [recovery.coordinator.widen.remote(incarnation, new)] if recovery.coordinator is not None else []
        steps.time("narrow every replica", recovery.wait, [
            *[peer.widen.remote(incarnation, new, {}) for other, peer in placement.peers.items() if other not in keys],
            *narrowing], "every replica and the coordinator narrowing past the retiring replicas")
        steps.time("the progress actor lets them go", _unsubscribed, recovery, sent, deadline)
        cause = died = supervision.watch(0)
    except ray.exceptions.RayActorError as error:  # a retiring replica's, or one the driver notices next
        died = f"an actor died while {len(keys)} replicas of {vertex!r} retired: {type(error).__name__}"
        cause = supervision.watch(0)
    if died is None:
        steps.time("the retiring hosts back to the pool", placement.retire, new)
        recovery.watch()
        return None, False
    _withdraw(recovery, old, keys, narrowing)
    if cause is not None:
        supervision.recover(recovery.after_death(cause))
    return f"a death during the retirement ({died})", True


def _emptied(recovery: JobRecovery, keys: list[ReplicaKey], deadline: float) -> tuple[dict[ReplicaKey, int], str | None]:
    """Ask each retiring replica of ``keys`` to ship its progress (``VertexActor.retire``) until each has
    nothing left; per replica the number of messages it sent, and None, or why one could not within
    :data:`RETIRE_WAIT_S` (or by ``deadline``)."""
    peers = recovery.placement.peers
    emptied, left = _polled(recovery, lambda key: peers[key].retire.remote(recovery.incarnation), keys,
                            lambda answer: answer[0] is None, min(deadline, time.monotonic() + RETIRE_WAIT_S),
                            "the retiring replicas shipping their progress")
    sent = {key: count for key, (_, count) in emptied.items()}
    if left:
        key, (reason, _) = next(iter(left.items()))
        return sent, f"retiring replica {key} has {reason} {RETIRE_WAIT_S:g} s after its last step"
    return sent, None


def _unsubscribed(recovery: JobRecovery, sent: dict[ReplicaKey, int], deadline: float) -> None:
    """The progress actor stops counting each retiring replica once it applied all the replica sent
    (``ProgressActor.leave``, asked again until it has: nothing there waits).

    Raises:
        RescaleError: not by ``deadline``, naming the replicas.
    """
    progress = recovery.placement.progress
    _, left = _polled(recovery, lambda key: progress.leave.remote(recovery.incarnation, key, sent[key]), list(sent),
                      bool, deadline, "the progress actor letting the retiring replicas go")
    if left:
        raise RescaleError(f"job {recovery.placement.name!r}: the progress actor has not applied every message "
                           f"of the retiring replicas {sorted(map(str, left))} by the rescale's deadline")


def _polled(recovery: JobRecovery, call: Callable[[ReplicaKey], Any], keys: list[ReplicaKey],
            done: Callable[[Any], bool], until: float, what: str) -> tuple[dict[ReplicaKey, Any], dict[ReplicaKey, Any]]:
    """Make ``call`` for each of ``keys`` (an actor call, its answer waited for as ``what``), and again every
    :data:`STEP_POLL` for those whose answer is not ``done`` (nothing waits at the actor: each answers at
    once), until every answer is done or ``until`` (monotonic) has passed; the done answers by key, and the
    last answers of those not done (empty once all are)."""
    answered: dict[ReplicaKey, Any] = {}
    left = list(keys)
    while True:
        answers = dict(zip(left, recovery.wait([call(key) for key in left], what)))
        answered.update({key: answer for key, answer in answers.items() if done(answer)})
        pending = {key: answer for key, answer in answers.items() if not done(answer)}
        if not pending or time.monotonic() > until:
            return answered, pending
        left = list(pending)
        time.sleep(STEP_POLL)


def _withdraw(recovery: JobRecovery, old: PhysicalPlan, keys: list[ReplicaKey], widening: list) -> None:
    """Undo a join or a retirement that met a death: every replica but those of ``keys`` and the
    coordinator given ``old`` back (with the handles of the replicas it sends to in it), the hosts of
    ``keys`` back to the pool if they had joined. A replica's calls run in turn, so its ``widen`` back is
    sent and not waited for (it comes before the recovery's restore, which builds its core from the plan).
    The coordinator's run on several threads: its ``widen`` back is sent once its widening (``widening``)
    has ended, and waited for, so neither can run after the other nor after a recovery's pause (which drops
    a ``widen`` of the incarnation it leaves): either would leave the next cut waiting for a replica that
    left, or not waiting for one still there (:meth:`~raytide.driver.coordination.JobSnapshots.settle`; a
    dead coordinator is replaced by the recovery, from the placement's plan)."""
    placement = recovery.placement
    for other, peer in placement.peers.items():
        if other not in keys:
            peer.widen.remote(recovery.incarnation, old, placement.peers_of(other))
    if placement.plan is not old:  # joined: their hosts back to the pool
        placement.retire(old)
    for widened in widening:
        recovery.settle(widened, "the coordinator following the joining or retiring replicas")
        recovery.settle(recovery.coordinator.widen.remote(recovery.incarnation, old),
                        "the coordinator given the old replicas back after a death met the switch in place")
