"""The tree of progress relays on a cluster, both ways: which nodes' relays forward their
messages to a group's relay, and how the progress actor's status pushes go down the same
tree.

Up (:mod:`raytide.actors.progress_relay`): a replica sends its messages to its node's
relay; on more than :data:`RELAY_FANIN` nodes, a node's relay forwards to its group's
relay (:func:`relay_groups`), which calls the progress actor. Down: a push is one Ray
call the progress actor makes, and a round of a wide stage pushes to every replica of it
(at 64 nodes x 8 replicas of a keyed pipeline, 128 a round, 0.2 ms of the actor's time
each). With relays, the progress actor makes one call per relay at the top of the tree
that it pushes through instead (``fan_out``), carrying a :class:`PushBundle`: the pushes
for the replicas that relay delivers to, and a bundle for each relay below it::

    progress actor ──fan_out(bundle)──▶ group's relay ──fan_out(bundle)──▶ node's relay ──on_progress──▶ replica
                                              └──on_progress──▶ a replica of its own node

Why a replica still takes its pushes in the order the progress actor made them: a
replica's pushes all travel the one path :func:`push_paths` gives it (the tree changes
only with a new incarnation, whose pushes the old one's replicas drop), every hop is one
caller's calls to one actor, and a relay delivers its bundles one at a time, in turn (its
host's ``fan_out`` concurrency group has one thread). A relay's death is its host's: the
job recovers, and what it was to deliver belongs to the rolled-back incarnation.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import NamedTuple, TypeVar

from raytide.physical.protocol import ReplicaKey, StatusPush

#: How many nodes' relays forward to one group's relay, when a job has more nodes than
#: this: the progress actor then takes calls from at most one relay per group. Eight
#: callers of eight nodes each keep 64 nodes at eight calls a cycle, for one more hop.
RELAY_FANIN = 8

Relay = TypeVar("Relay", bound=Hashable)

#: Each replica's relays, from the progress actor down: its group's relay (if its node's
#: relay has one), then its node's relay.
Paths = Mapping[ReplicaKey, tuple[ReplicaKey, ...]]


def relay_groups(relays: Sequence[Relay], fanin: int | None = None) -> dict[Relay, Relay]:
    """Where each node's relay of ``relays`` (in the nodes' order) forwards, if not to the
    progress actor: with more than ``fanin`` relays (:data:`RELAY_FANIN` if None), each run
    of ``fanin`` forwards to its first, which forwards, with its own node's, to the progress
    actor. One level is enough: ``fanin`` squared nodes (64) still leave the progress actor
    ``fanin`` callers."""
    fanin = fanin or RELAY_FANIN
    if len(relays) <= fanin:
        return {}
    return {relay: relays[index - index % fanin] for index, relay in enumerate(relays) if index % fanin}


def push_paths(relay_of: Mapping[ReplicaKey, ReplicaKey], upstreams: Mapping[ReplicaKey, ReplicaKey]) -> dict[
        ReplicaKey, tuple[ReplicaKey, ...]]:
    """Each replica's path down the tree, from ``relay_of`` (each replica's node's relay) and
    ``upstreams`` (each node's relay's group's relay, where it has one)."""
    return {key: (upstreams[relay], relay) if relay in upstreams else (relay,) for key, relay in relay_of.items()}


def delivers_to(relay: ReplicaKey, relay_of: Mapping[ReplicaKey, ReplicaKey],
                upstreams: Mapping[ReplicaKey, ReplicaKey]) -> frozenset[ReplicaKey]:
    """Whom the host of replica ``relay`` calls as a relay (``fan_out``): the replicas of its
    node (``relay_of``, itself among them) and the nodes' relays that forward to it
    (``upstreams``); nobody if it is no relay."""
    return frozenset(key for key, of in relay_of.items() if of == relay) | frozenset(
        below for below, up in upstreams.items() if up == relay)


class PushBundle(NamedTuple):
    """What one relay delivers of a propagation's pushes: ``pushes`` to replicas (its node's),
    in the order they were made, and a bundle for each relay below it (``via``)."""

    pushes: list[tuple[ReplicaKey, StatusPush]]
    via: dict[ReplicaKey, PushBundle]


def bundled(pushes: Iterable[tuple[ReplicaKey, StatusPush]], paths: Paths) -> tuple[
        list[tuple[ReplicaKey, StatusPush]], dict[ReplicaKey, PushBundle]]:
    """The progress actor's ``pushes`` as it sends them: those to replicas without a path,
    each in a call of its own, and a bundle per relay at the top of the others' paths."""
    direct: list[tuple[ReplicaKey, StatusPush]] = []
    top: dict[ReplicaKey, PushBundle] = {}
    for key, push in pushes:
        path = paths.get(key)
        if not path:
            direct.append((key, push))
            continue
        bundle = top.setdefault(path[0], PushBundle([], {}))
        for relay in path[1:]:
            bundle = bundle.via.setdefault(relay, PushBundle([], {}))
        bundle.pushes.append((key, push))
    return direct, top
