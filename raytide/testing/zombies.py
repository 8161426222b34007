"""Zombies in the in-process runtime: a replica that died, as far as the job knows, but goes on.

On Ray an actor the driver declared dead may still be running for a while (a partitioned
node, a process slow to exit), and what it sends then still arrives: data to its peers,
progress batches, local snapshots its writer thread stores and acknowledges. Its messages
carry its old incarnation, and every receiver must drop them once a recovery started a new
one: a replica's guard, the progress actor's, the coordinator's check of acknowledgements.

With ``LocalRecovery(zombie=n)``, a replica the simulator kills keeps its core and what was
on its way to it (:func:`rise`), and takes up to ``n`` more actions (:meth:`Zombie.act`), each
one message from one of its mailboxes, at random among the scheduler's other actions: its
sends go into the world's mailboxes tagged with its old incarnation. Its writer keeps what it
had not written, and writes and acknowledges it later (:attr:`Zombie.incarnation` lets the
world's writer tell a zombie's write from a lost one). What is sent to it after its death is
lost, as it is to any dead replica. Killed again before a recovery replaced it, a zombie ends
(:meth:`Zombie.end`, :meth:`ActorZombie.end`): its host dies too, with what it had not taken;
it never rises again from the same core (a second zombie would skip the first one's mail).
"""

from __future__ import annotations

import collections
import functools
import random
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

from raytide.engine.replica import ReplicaCore
from raytide.errors import RaytideError, SnapshotError, StoreFencedError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ReplicaKey
from raytide.snapshots.recovery import commit_snapshot
from raytide.snapshots.replica_state import LocalSnapshot
from raytide.snapshots.store import SnapshotStore
from raytide.testing.mailboxes import LocalTransport, Mailboxes

#: One message a zombie takes: its sender's incarnation (None: the driver's command, untagged),
#: the name of the core's method and its arguments, and the progress batches riding with it.
Haunt = tuple[int | None, str, tuple[Any, ...], list[Any]]


@dataclass
class Zombie:
    """A dead replica's core, still running: its mailboxes (FIFO each) and the actions it has left."""

    key: ReplicaKey
    core: ReplicaCore
    incarnation: int
    left: int
    inbox: collections.defaultdict[Hashable, collections.deque[Haunt]] = field(
        default_factory=lambda: collections.defaultdict(collections.deque))  # per sender, FIFO each
    writes: list[tuple[int, LocalSnapshot]] = field(default_factory=list)  # its writer's queue, written in order
    after_replacement: int = 0  # actions taken once a recovery replaced it (its sends must all be dropped)

    @property
    def alive(self) -> bool:
        """Whether it has anything left to do."""
        return self.left > 0 and (any(self.inbox.values()) or bool(self.writes))

    def end(self) -> None:
        """Killed again: its host dies too. It takes no more action; what it had not taken, and
        what its writer had not written, is lost with it (as with any dead actor)."""
        self.left = 0
        self.inbox.clear()
        self.writes.clear()

    def act(self, rng: random.Random, replaced: bool, store: Callable[[int, LocalSnapshot], None]) -> None:
        """Its writer ``store``-s its oldest local snapshot, or it takes the next message of one of
        its mailboxes, as the dead actor's own guard does: a message of another incarnation is
        dropped; what the core raises reaches nobody (the driver no longer listens to it).
        ``replaced``: a recovery started a newer incarnation."""
        self.left -= 1
        self.after_replacement += replaced
        queues = [queue for queue in self.inbox.values() if queue]
        if self.writes and (not queues or rng.random() < 0.5):
            store(*self.writes.pop(0))
            return
        incarnation, method, args, riders = rng.choice(queues).popleft()
        if incarnation is not None and incarnation != self.incarnation:
            return
        transport = self.core.transport
        assert isinstance(transport, LocalTransport)
        try:
            with transport.event(riders, self.core.riders_to_pass_on):
                getattr(self.core, method)(*args)
        except RaytideError:
            pass


def rise(mail: Mailboxes, key: ReplicaKey, core: ReplicaCore, incarnation: int, actions: int) -> Zombie:
    """Replica ``key`` (``core``, of ``incarnation``) just died: a zombie of it, with what was on
    its way to it and what its writer had not written taken out of ``mail`` (call before
    ``mail.drop_inbound``), for ``actions`` actions."""
    zombie = Zombie(key, core, incarnation, actions)
    zombie.writes = [(tagged, write) for tagged, write in mail.writes if write.key == key and tagged == incarnation]
    assert isinstance(core.transport, LocalTransport)
    core.transport.writer = zombie.writes
    gather(zombie, mail)
    return zombie


def gather(zombie: Zombie, mail: Mailboxes) -> None:
    """What was sent to ``zombie``'s replica since it last looked, taken out of ``mail`` into its
    inbox, behind what it had from the same sender (FIFO per sender, as on Ray): until a recovery
    replaces it, its peers, the progress actor and the driver still call the actor they know,
    which is the zombie."""
    for link, queue in list(mail.links.items()):
        if link[1] == zombie.key and queue:
            zombie.inbox[link].extend(_taken(mail, link))
    commands = {"push": "push_input", "advance": "advance_input", "marker": "inject_marker"}
    zombie.inbox["driver"].extend((None, commands[kind], tuple(args), []) for kind, *args in mail.commands.pop(zombie.key, ()))
    zombie.inbox["progress"].extend((tagged, "on_progress", tuple(push), [])
                                    for tagged, push in mail.pushes.pop(zombie.key, ()))
    zombie.inbox["coordinator"].extend((tagged, "inject_marker", (marker,), [])
                                       for tagged, marker in mail.injects.pop(zombie.key, ()))


def _taken(mail: Mailboxes, link: tuple[ReplicaKey, ReplicaKey]) -> collections.deque[Haunt]:
    """Every message on ``link``, with the progress batches riding with each, as the core's events."""
    taken: collections.deque[Haunt] = collections.deque()
    while mail.links[link]:
        incarnation, message, riders = mail.take(link)
        call: tuple[str, tuple[Any, ...]] = (("on_messages", ([message[1:]],)) if message[0] == "data"
                                             else ("on_marker", tuple(message[1:])))
        taken.append((incarnation, *call, riders))
    return taken


def zombie_actions(zombies: dict[ReplicaKey, Zombie], mail: Mailboxes, dead: set[ReplicaKey],
                   act: Callable[..., None]) -> list[Callable[[], None]]:
    """One action per zombie with something left to do (``act(key, to=...)``, the zombie its own
    actor), each still ``dead`` (not replaced yet) having gathered what was sent to it."""
    for key, zombie in zombies.items():
        if key in dead and zombie.left > 0:
            gather(zombie, mail)
    return [functools.partial(act, key, to=("zombie", key)) for key, zombie in zombies.items() if zombie.alive]


@dataclass
class ActorZombie:
    """The progress actor or the coordinator, declared dead, still running for a few actions:
    its core (a :class:`~raytide.engine.progress_core.ProgressCore` or a
    :class:`~raytide.snapshots.coordinator.CoordinatorCore`), its incarnation, the actions it has
    left and what reached it and it has not taken yet (progress calls; acknowledgements and
    commits). Until a recovery restarts its role it takes what the replicas and writers still
    send it; what it sends carries its incarnation, which every receiver's guard drops once a
    recovery started a newer one."""

    core: Any
    incarnation: int
    left: int
    inbox: list[Any] = field(default_factory=list)
    after_replacement: int = 0  # actions taken once a recovery restarted its role
    refused: int = 0  # a coordinator's commits refused by the store (a later incarnation was recorded)
    #: its commits that the store took: (id, made once a recovery replaced it, counted by the store's readers)
    landed: list[tuple[int, bool, bool]] = field(default_factory=list)

    def take(self, rng: random.Random, replaced: bool) -> Any:
        """One action: what it takes next from its inbox (at random: the progress actor is threaded,
        acknowledgements come in any order), counted."""
        self.left -= 1
        self.after_replacement += replaced
        return self.inbox.pop(rng.randrange(len(self.inbox)))

    def end(self) -> None:
        """Killed again: its host dies too. It takes no more action; what reached it and it had not
        taken is lost with it (as with any dead actor)."""
        self.left = 0
        self.inbox.clear()

    def listening(self) -> bool:
        """Whether it still takes what is sent to it (it has actions left)."""
        return self.left > 0

    def apply(self, call: Any, mail: Mailboxes, keys: list[ReplicaKey]) -> None:
        """A progress actor's zombie applies ``call``: its pushes to the replicas and its job events
        carry its dead incarnation; what its core raises (a call it had had) reaches nobody."""
        try:
            effects = self.core.receive_all([call])
        except (RaytideError, ValueError):
            return
        mail.post_pushes(effects.pushes, self.incarnation, keys)
        mail.log.extend((self.incarnation, event) for event in effects.events)

    def commit(self, ack: Any, store: SnapshotStore, plan: PhysicalPlan, retain: int, now: int, replaced: bool) -> None:
        """A coordinator's zombie takes acknowledgement ``ack``; a snapshot it completes is committed
        into ``store`` as its dead incarnation writes it (:func:`~raytide.snapshots.recovery.commit_snapshot`):
        refused once a recovery recorded a later incarnation (counted in :attr:`refused`), or taken
        (in :attr:`landed`, with ``replaced``: a recovery had replaced it, and whether the store's
        readers count it, as a recovery would restore it). The store failing beneath it, or a
        snapshot of that id committed already, loses it."""
        commit = self.core.acknowledge(ack, now)
        if commit is None or commit.hold:
            return
        try:
            commit_snapshot(store, plan, commit, commit.delivered, retain)
        except StoreFencedError:
            self.refused += 1
        except (OSError, SnapshotError):
            return
        else:
            counted = commit.snapshot_id in {manifest.snapshot_id for manifest in store.committed()}
            self.landed.append((commit.snapshot_id, replaced, counted))
