"""A replica recovered alone in the in-process runtime, with the engine's own cores
(``LocalRecovery(alone=True)``; docs/recovery.md, "A replica recovered alone").

When the deaths noticed at once are of one replica only, no recovery or rescale is under way
and :func:`~raytide.supervisor.alone.recovered_how` says ``"alone"`` (``decide``'s rule, and the
replica is not an input's, whose capability the figures do not count and whose replay is the
driver's call log, nor a node's progress relay, whose death loses what it gathered of the
others' progress; the Ray driver asks the same function), the
driver does, in one turn of its own:

1. the coordinator abandons the snapshot in flight (it may need the lost replica's part),
   unless every part is in and its commit is being written (the lost replica's part is a
   part of that cut as much as the others');
2. it reads the last committed snapshot and puts a fresh core in the lost replica's place,
   restored from its part (:meth:`~raytide.engine.replica.ReplicaCore.replace_alone`): its
   state, its numbered channels' positions and marks, and its progress figures unless the
   job's incarnation started from that snapshot; its messages to the progress actor numbered
   past its lost incarnation's, the snapshots up to the abandoned one passed on, not taken;
3. the progress core sets what its tracker counts of the replica's numbered traffic to the
   restored figures (:meth:`~raytide.engine.progress_core.ProgressCore.replace`), drops what
   the lost incarnation still sends it and pushes the replacement its statuses;
4. what was on its way to the lost replica is dropped, and each replica that sends to it
   replays its upstream log from the restored positions, markers included
   (:meth:`~raytide.engine.replica.ReplicaCore.replay_to`).

Every other replica keeps its state and runs on meanwhile; what the replacement sends again
its receivers drop by number. Anything else goes to the whole-job recovery, as before.
"""

from __future__ import annotations

from raytide.engine.outbox import receivers
from raytide.physical.protocol import ReplicaKey
from raytide.rescale.reshard import latest_restore_point
from raytide.snapshots.recovery import part_name
from raytide.supervisor.alone import GENERATION, recovered_how
from raytide.testing.outcome import COORDINATOR, PROGRESS
from raytide.testing.world import World


def alone_candidate(world: World) -> ReplicaKey | None:
    """The one lost replica to recover alone now, or None: the whole job rolls back (see the module docstring)."""
    recovery = world.recovery
    if recovery is None or not recovery.alone or recovery.zombie or world.progress is None:
        return None
    lost = [key for key in world.dead if key in world.replicas]
    others = [name for name, actor in ((PROGRESS, world.progress), (COORDINATOR, world.coordinator)) if actor is None]
    rescaling = world.rescaling is not None and not world.rescaling.over
    keys = world.replica_keys()
    relays = set() if world.mail.nodes is None else {world.mail.via(key, keys) for key in keys}
    return lost[0] if recovered_how(world.plan, lost, others, rescaling, relays).kind == "alone" else None


def recover_alone(world: World, key: ReplicaKey) -> str | None:
    """Recover replica ``key`` alone (the module docstring's steps); or, before the progress core
    or any sender is touched, why a sender's log cannot replay (past its cap: the caller rolls
    the whole job back, as the Ray driver does on a sender's refusal)."""
    assert world.recovery is not None and world.progress is not None
    if world.coordinator is not None:  # a complete one commits
        world.coordinator.lose(key, world.result.steps)
    store = world.recovery.store.at(world.incarnation)
    point = latest_restore_point(world.plan, store, world.recovery.retain, world.first_id, world.started_from)
    data = None if point.snapshot_id is None else store.read_part(point.snapshot_id, part_name(key))
    figures = point.snapshot_id is not None and point.snapshot_id != world.result.replacements.base_snapshot
    world.result.replacements.generations[key] += 1
    first = world.result.replacements.generations[key] * GENERATION
    world.mail.drop_inbound(key)
    core = world._fresh(key)
    world.waiting.discard(key)
    world._guard(key, core.replace_alone, data, figures, first, world.last_snapshot_id)
    locations, figures_restored, positions = core.alone_restored()
    senders = [sender for sender in world.replica_keys() if sender != key and key in receivers(world.plan, sender)]
    refused = [why for sender in senders if (why := world.replicas[sender].refusal(key, positions)) is not None]
    if refused:
        return "; ".join(refused)
    world._perform(world.progress.replace(key, figures_restored, first, locations))
    world._guard(key, core.resume)
    for sender in senders:
        world._guard(sender, world.replicas[sender].replay_to, key, positions, point.snapshot_id or 0)
    world.result.alone.append(key)
    return None
