"""Which recovery a death calls for: the lost replica recovered alone, or the whole job rolled
back to its last committed snapshot (docs/recovery.md, "A replica recovered alone").

Recovering a replica alone restores its part of the last committed snapshot, has its upstream
senders replay what it received since (:mod:`raytide.engine.upstream_log`) and lets its
downstream receivers drop what it sends again by sequence numbers
(:mod:`raytide.engine.dedup`). Dropping by number is sound only if the replacement sends the
same messages in the same order as the replica it replaces did. The rule (:func:`decide`):
a replica is recovered alone only where its outputs are a deterministic function of the
replayed input, in order:

* exactly one replica died, and nothing else (the progress actor, the coordinator: their
  state is the whole job's), and no rescale is under way;
* no vertex of its chain sits inside a loop: its rounds depend on the progress of the
  others' rounds, not on its input alone;
* its chain has no output vertex (an output's records kept for the driver are restored
  with the progress actor, which only a whole-job recovery restarts) and no input with
  event time (its clock combines the watermarks of every replica);
* its chain takes at most one input channel (an input replica is fed by the driver's call
  log, replayed in order): with several, the order in which it took their messages is not
  logged, and a replay may interleave them otherwise;
* no vertex of its chain asks for notifications: what a vertex sends at a notification
  interleaves with what it sends on receiving later epochs in an order the progress actor's
  timing decides, which is not logged either.

Everywhere else the whole job rolls back, as before, and the recovery's record says why.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Literal

from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ReplicaKey
from raytide.snapshots.config import Recovery

#: A replacement recovered alone numbers its messages to the progress actor from its generation
#: (1 for the first replacement of a replica, 2 for the next, ...) times this: past anything its
#: lost incarnations sent (:meth:`~raytide.engine.progress_core.ProgressCore.replace`).
GENERATION = 1 << 40


@dataclass(frozen=True)
class RecoveryKind:
    """Which recovery to run (``"alone"``: the lost replica only; ``"job"``: every replica
    rolled back), and ``why``, for the recovery's record in ``job.stats()["recoveries"]``."""

    kind: Literal["alone", "job"]
    why: str


def decide(plan: PhysicalPlan, lost: Sequence[ReplicaKey], others: Sequence[str] = (),
           rescaling: bool = False) -> RecoveryKind:
    """The recovery for the death of replicas ``lost`` and of the job's other actors
    ``others`` (named: ``"the progress actor"``, ``"the snapshot coordinator"``), with a rescale under way or
    not (see the module docstring for the rule)."""
    if others:
        return RecoveryKind("job", f"{' and '.join(others)} died: its state is the whole job's")
    if rescaling:
        return RecoveryKind("job", "a rescale was under way: its cut and hand-over span every replica")
    if len(lost) != 1:
        names = ", ".join(f"{key.chain}[{key.replica}]" for key in lost) or "none"
        return RecoveryKind("job", f"{len(lost)} replicas died at once ({names}): only one is recovered alone")
    return _one_replica(plan, lost[0])


def _one_replica(plan: PhysicalPlan, key: ReplicaKey) -> RecoveryKind:
    """The rule for one lost replica ``key`` (the module docstring's last four points)."""
    where = f"replica {key.chain}[{key.replica}]"
    vertices = [plan.vertex(name) for name in plan.chain(key.chain).vertices]
    for vertex in vertices:
        if vertex.cyclic:
            return RecoveryKind("job", f"{where}: vertex {vertex.name!r} sits inside a loop (its rounds depend "
                                       f"on the other replicas' progress, not on its replayed input alone)")
        if vertex.role == "output":
            return RecoveryKind("job", f"{where}: vertex {vertex.name!r} is an output (its kept records are "
                                       f"restored with the progress actor, which only a whole-job recovery restarts)")
        if vertex.role == "input" and vertex.event_time is not None:
            return RecoveryKind("job", f"{where}: input {vertex.name!r} has event time (its clock combines "
                                       f"every replica's watermark)")
    head = vertices[0]
    channels = [] if head.role == "input" else plan.input_channels(head.name, key.replica)
    if len(channels) > 1:
        return RecoveryKind("job", f"{where}: vertex {head.name!r} takes {len(channels)} channels and the order "
                                   f"it took their messages in is not logged, so a replay may send other messages "
                                   f"under the same sequence numbers")
    notifying = [vertex.name for vertex in vertices if vertex.notifies and vertex.role != "input"]
    if notifying:
        return RecoveryKind("job", f"{where}: vertex {notifying[0]!r} asks for notifications (what it sends at "
                                   f"them interleaves with later epochs' sends in an order progress decides, "
                                   f"not logged)")
    fed = "the driver's call log" if head.role == "input" else f"channel {channels[0]}" if channels else "nothing"
    return RecoveryKind("alone", f"{where}: its outputs are a function of one input ({fed}) replayed in order")


def recovered_how(plan: PhysicalPlan, lost: Sequence[ReplicaKey], others: Sequence[str] = (), rescaling: bool = False,
                  relays: Collection[ReplicaKey] = ()) -> RecoveryKind:
    """The recovery both worlds run for these deaths with ``alone`` on (the simulator's
    :mod:`raytide.testing.solo`, the Ray driver's :mod:`raytide.driver.alone_recovery`):
    :func:`decide`'s, narrowed to what their steps carry out. An input replica's replay is the
    driver's call log (``ReplayLog``), not replayed to one replica yet; a node's progress relay
    (``relays``: the replicas that are one) loses what it gathered of the others' progress
    with it. Both go to the whole-job recovery."""
    found = decide(plan, lost, others, rescaling)
    if found.kind == "job":
        return found
    key = lost[0]
    where = f"replica {key.chain}[{key.replica}]"
    if plan.vertex(plan.chain(key.chain).vertices[0]).role == "input":
        return RecoveryKind("job", f"{where} is an input's: its replay would be the driver's call log to it alone, "
                                   f"which is not built")
    if key in relays:
        return RecoveryKind("job", f"{where} is its node's progress relay: what it gathered of the other replicas' "
                                   f"progress died with it")
    return found


def logged_chains(plan: PhysicalPlan) -> frozenset[str]:
    """The chains of ``plan`` with a replica :func:`recovered_how` may recover alone: only sends
    into their replicas are kept in upstream logs (a replay goes only to a replica recovered
    alone); sends into the others (a sink fed by several channels, an output, a stage that
    notifies, ...) are numbered for their receivers' dedup and kept nowhere. A superset of
    what a death can call for on Ray (relays and rescaled jobs go whole there), so nothing a
    replay needs is ever missing. Decided once per plan, with :func:`numbering_for`."""
    return frozenset(key.chain for key in plan.replica_keys() if recovered_how(plan, [key]).kind == "alone")


def numbering_for(plan: PhysicalPlan, recovery: Recovery) -> Recovery:
    """``recovery`` as the job started on ``plan`` runs it: with ``alone`` off where no replica of
    ``plan`` could be recovered alone (:func:`recovered_how` answers ``"job"`` for every one of
    them alone: every stage notifies, sits in a loop, takes several channels, ...). Numbering,
    upstream logs and dedup would then cost every send and keep every message of a snapshot
    interval for a replay that never comes, and the epoch tokens could not ride with the data
    (docs/recovery.md, "A replica recovered alone"). Elsewhere with ``logged``, the chains whose
    replicas' senders keep logs (:func:`logged_chains`). Decided once, on the plan the job
    starts with, so every replica of every incarnation numbers alike; a rescaled job is recovered whole."""
    if not recovery.alone:
        return recovery
    logged = logged_chains(plan)
    return dataclasses.replace(recovery, alone=bool(logged), logged=logged or None)
