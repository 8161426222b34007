"""Everything in flight between the in-process runtime's actors, per mailbox, and the
transport through which a replica core sends into them.

Every entry is ``(sender's incarnation, message)``, so that a message of a dead or
replaced incarnation is dropped where it arrives. :class:`~raytide.testing.local.LocalJob`
chooses, at each step, which mailbox delivers next.
"""

from __future__ import annotations

import collections
import itertools
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from raytide.engine.epoch_tokens import ProxyPlan, proxying_inputs
from raytide.engine.progress_runs import merge_by_incarnation
from raytide.engine.riding import Rides
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ChannelId, EpochClosed, JobEvent, Marker, ReplicaKey, Sequenced, StatusPush
from raytide.physical.relay_tree import Paths, PushBundle, bundled, push_paths, relay_groups
from raytide.progress.timestamps import Timestamp
from raytide.snapshots.coordinator import Acknowledgement, Commit
from raytide.snapshots.recovery import RestorePoint
from raytide.snapshots.replica_state import HeldReport, LocalSnapshot
from raytide.supervisor.replay import ReplayLog

#: A driver command for one input replica: ``("push", input, records, epoch)``,
#: ``("advance", input, epoch[, quiet, proxies])`` (None closes; ``epoch_tokens.ProxyPlan``) or ``("marker", marker)``.
Command = tuple[Any, ...]


Link = tuple[ReplicaKey, ReplicaKey]  # from one replica to another


def _deques() -> collections.defaultdict:
    return collections.defaultdict(collections.deque)


@dataclass
class Mailboxes:
    """The messages on their way, by kind and receiver.

    With ``nodes``, the replicas are spread over that many nodes in turn (in the plan's
    order), and each node's messages to the progress actor wait in one mailbox, its relay's
    (the node's first replica), which delivers all it holds in one call, merged into runs,
    as the Ray relay sends what gathered while its previous call was in flight
    (:mod:`raytide.actors.progress_relay`); with more nodes than ``fanin``, into its group's
    relay's mailbox. The progress actor's pushes go down the same relays, a bundle at a
    time (``fan_outs``), as on Ray (:mod:`raytide.physical.relay_tree`)."""

    nodes: int | None = None
    fanin: int | None = None  # node relays per group's relay (None: as on Ray)
    #: Replica to replica. Changed only by :meth:`post`, :meth:`take`, :meth:`drop_inbound` and
    #: :meth:`drop_replica`, which keep ``busy`` and ``ordered`` (the pending links) true.
    links: dict[Link, collections.deque] = field(default_factory=_deques)
    rank: dict[Link, int] = field(default_factory=dict)  # each link's place in ``links``
    busy: set[Link] = field(default_factory=set)  # the links posted to since seen empty
    ordered: list[Link] | None = None  # the pending links in order, until a link fills or empties (None: unknown)
    ranks: Iterator[int] = field(default_factory=itertools.count)
    to_progress: dict[ReplicaKey, list[tuple[int, Sequenced]]] = field(  # any order: the progress actor is threaded; per relay with nodes
        default_factory=lambda: collections.defaultdict(list))
    pushes: dict[ReplicaKey, collections.deque[tuple[int, StatusPush]]] = field(default_factory=_deques)
    fan_outs: dict[ReplicaKey, collections.deque[tuple[int, PushBundle]]] = field(default_factory=_deques)  # per relay
    dead: set[ReplicaKey] = field(default_factory=set)  # the replicas dead now: their hosts take and deliver nothing
    tree: tuple[tuple[ReplicaKey, ...], dict[ReplicaKey, ReplicaKey], Paths, dict[ReplicaKey, ReplicaKey]] | None = None
    commands: dict[ReplicaKey, collections.deque[Command]] = field(default_factory=_deques)  # the driver's, per input replica
    injects: dict[ReplicaKey, collections.deque[tuple[int, Marker]]] = field(default_factory=_deques)  # barriers
    log: collections.deque[tuple[int, JobEvent]] = field(default_factory=collections.deque)  # the driver's long poll
    writes: list[tuple[int, LocalSnapshot]] = field(default_factory=list)  # replicas' snapshot writers
    acks: list[tuple[int, Acknowledgement]] = field(default_factory=list)  # to the coordinator
    commits: collections.deque[tuple[int, Commit]] = field(default_factory=collections.deque)
    sent: int = 0  # calls made so far: data to a peer, progress, status pushes (priced by a Pacing)
    relayed: list[tuple[ReplicaKey, float]] | None = None  # with a Pacing: the relays' merges (host, CPU s)

    def drop_inbound(self, key: ReplicaKey) -> None:
        """Replica ``key`` died: what was on its way to it, and what its snapshot writer had
        not written, is lost. What it sent before it died stays on its way (to other replicas
        and to the progress actor) and arrives late, tagged with its dead incarnation."""
        for (_, receiver), queue in self.links.items():
            if receiver == key:
                queue.clear()
        self.ordered = None
        for mailbox in (self.pushes, self.commands, self.injects, self.fan_outs):
            mailbox.pop(key, None)
        if self.nodes is not None:  # a relay's host died: what it gathered for the progress actor is lost
            self.to_progress.pop(key, None)
        self.writes = [(incarnation, write) for incarnation, write in self.writes if write.key != key]

    def post(self, link: Link, entry: tuple[int, tuple[Any, ...]]) -> None:
        """Put ``entry`` on ``link`` (a sender's incarnation and its message)."""
        if link not in self.links:
            self.rank[link] = next(self.ranks)
        self.links[link].append(entry)
        if link not in self.busy:
            self.busy.add(link)
            self.ordered = None

    def pending_links(self) -> list[Link]:
        """The links with something to deliver, in the order of ``links`` (the order of their
        first message); without looking at every link ever used, which at 512 replicas are
        hundreds of thousands, and worked out again only once a link filled or emptied (the
        scheduler asks at every step; the caller must not change the list)."""
        if self.ordered is None:
            self.busy = {link for link in self.busy if self.links.get(link)}
            self.ordered = sorted(self.busy, key=self.rank.__getitem__)
        return self.ordered

    def calling(self, keys: Sequence[ReplicaKey]) -> list[ReplicaKey]:
        """The mailboxes (of the replicas ``keys``) with something for the progress actor itself."""
        upstreams = self._upstreams(keys)
        return [key for key, calls in self.to_progress.items() if calls and key not in upstreams]

    def progress_mailboxes(self, keys: Callable[[], Sequence[ReplicaKey]]
                           ) -> tuple[list[ReplicaKey], list[tuple[ReplicaKey, ReplicaKey]]]:
        """:meth:`calling` and :meth:`forwarding` at once, as the scheduler asks at every step;
        ``keys()`` (the replicas) is asked only with ``nodes`` (without, no mailbox forwards)."""
        if self.nodes is None:
            return [key for key, calls in self.to_progress.items() if calls], []
        replicas = keys()
        return self.calling(replicas), self.forwarding(replicas)

    def forwarding(self, keys: Sequence[ReplicaKey]) -> list[tuple[ReplicaKey, ReplicaKey]]:
        """The relays' mailboxes (of the replicas ``keys``) with something for a group's relay, and whose."""
        upstreams = self._upstreams(keys)
        return [(key, upstreams[key]) for key, calls in self.to_progress.items() if calls and key in upstreams]

    def _upstreams(self, keys: Sequence[ReplicaKey]) -> dict[ReplicaKey, ReplicaKey]:
        return self._tree(keys)[0]

    def paths(self, keys: Sequence[ReplicaKey]) -> Paths:
        """Each of the replicas ``keys``' path down the relays for its pushes (none without ``nodes``)."""
        return self._tree(keys)[1]

    def _tree(self, keys: Sequence[ReplicaKey]) -> tuple[dict[ReplicaKey, ReplicaKey], Paths, dict[ReplicaKey, ReplicaKey]]:
        """The relays of the replicas ``keys`` (spread over the nodes in turn): where each
        node's relay forwards, each replica's path down for its pushes, and each replica's
        node's relay; kept until the replicas change (not the actors' work: a paced progress
        actor is not charged for working it out on each call)."""
        if self.nodes is None:
            return {}, {}, {}
        if self.tree is None or self.tree[0] != tuple(keys):
            upstreams = relay_groups(keys[:self.nodes], self.fanin)
            relay_of = {key: keys[index % self.nodes] for index, key in enumerate(keys)}
            self.tree = (tuple(keys), upstreams, push_paths(relay_of, upstreams), relay_of)
        return self.tree[1], self.tree[2], self.tree[3]

    def post_pushes(self, pushes: list[tuple[ReplicaKey, StatusPush]], incarnation: int, keys: Sequence[ReplicaKey]) -> None:
        """The progress actor's ``pushes`` (of ``incarnation``), each to its replica, or with
        ``nodes`` a bundle to each relay at the top of their paths; a call to a dead
        replica's host is lost."""
        direct, bundles = bundled(pushes, self.paths(keys))
        for key, push in direct:
            if key not in self.dead:
                self.pushes[key].append((incarnation, push))
                self.sent += 1
        for relay, bundle in bundles.items():
            if relay not in self.dead:
                self.fan_outs[relay].append((incarnation, bundle))
                self.sent += 1

    def fan_out(self, to: ReplicaKey) -> None:
        """Relay ``to`` delivers its next bundle of pushes: to its replicas' mailboxes, and to
        the relays' below it; dead, it drops it (a call to a dead actor is lost)."""
        incarnation, bundle = self.fan_outs[to].popleft()
        if to in self.dead:
            return
        for key, push in bundle.pushes:
            self.pushes[key].append((incarnation, push))
        for relay, below in bundle.via.items():
            self.fan_outs[relay].append((incarnation, below))
        self.sent += len(bundle.pushes) + len(bundle.via)

    def via(self, key: ReplicaKey, keys: Sequence[ReplicaKey]) -> ReplicaKey:
        """Whose mailbox replica ``key`` (of the replicas ``keys``) sends its progress to: its
        own, or with ``nodes`` its node's relay's."""
        return key if self.nodes is None else self._tree(keys)[2][key]

    def take(self, link: Link) -> tuple[int, tuple[Any, ...], list[Sequenced]]:
        """The next message on ``link`` with its incarnation, and the progress batches riding
        with it (:class:`LocalTransport`), which are delivered with it."""
        queue = self.links[link]
        incarnation, message = queue.popleft()
        riders = queue.popleft()[1][1] if queue and queue[0][1][0] == "riders" else []
        if not queue:
            self.ordered = None
        return incarnation, message, riders

    def take_progress(self, key: ReplicaKey, rng: random.Random) -> list[tuple[int, Sequenced]]:
        """What one call to the progress actor takes from ``key``'s mailbox: some of a
        replica's messages, in any order; or all a relay holds, each replica's consecutive
        messages merged into one run as the Ray relay merges them (per incarnation), in any order."""
        calls = self.to_progress[key]
        if self.nodes is not None:
            taken = self._merged(key)
            rng.shuffle(taken)
            return taken
        return [calls.pop(rng.randrange(len(calls))) for _ in range(rng.randint(1, len(calls)))]

    def forward(self, key: ReplicaKey, to: ReplicaKey) -> None:
        """Relay ``key`` forwards all it holds, merged into runs, to its group's relay ``to``
        (which takes the call: the action is ``to``'s, the merge ``key``'s host's work)."""
        self.to_progress[to].extend(self._merged(key))

    def _merged(self, key: ReplicaKey) -> list[tuple[int, Sequenced]]:
        """All relay ``key`` holds, merged into runs per incarnation; its merge is its host's work."""
        started = time.process_time() if self.relayed is not None else 0.0  # a Pacing's only (a system call)
        calls = self.to_progress[key]
        taken = [(incarnation, run) for incarnation, runs in merge_by_incarnation(calls).items() for run in runs]
        calls[:] = []  # the relay's: freeing what it gathered is its work too
        if self.relayed is not None:
            self.relayed.append((key, time.process_time() - started))
        return taken

    def drop_replica(self, key: ReplicaKey) -> None:
        """Replica ``key`` is gone for good (a rescale retired it): its mailboxes, and every
        message to or from it, go."""
        for link in [link for link in self.links if key in link]:
            del self.links[link]
        self.ordered = None
        for mailbox in (self.to_progress, self.pushes, self.commands, self.injects, self.fan_outs):
            mailbox.pop(key, None)
        self.writes = [(incarnation, write) for incarnation, write in self.writes if write.key != key]


class LocalTransport:
    """One replica's transport: appends to the mailboxes, tagged with its incarnation; its
    messages to the progress actor are lost while there is none (``progress_alive``).

    Progress batches ride with data as on Ray (:mod:`raytide.engine.riding`): inside an
    event (:meth:`event`) the batches placed with a
    peer follow the event's last data to it as a ``("riders", calls)`` entry, which
    :class:`~raytide.testing.local.LocalJob` delivers with that data; a marker to the peer
    sends them ahead of it, as the Ray transport's flush does."""

    def __init__(self, mail: Mailboxes, key: ReplicaKey, incarnation: int, progress_alive: Callable[[], bool],
                 via: ReplicaKey, tokens_ride: bool = False) -> None:
        """``via``: the mailbox its messages to the progress actor go to (:meth:`Mailboxes.via`);
        ``tokens_ride``: ``epoch_tokens.rides_with_tokens`` of its chain."""
        self.mail, self.key, self.incarnation, self.progress_alive, self.via = mail, key, incarnation, progress_alive, via
        self.rides = Rides(key.chain, tokens_ride)
        self.in_event = False
        self.pass_on: Callable[[Rides], list[Sequenced]] = Rides.take_passing_on  # the event's (:meth:`event`)
        self.pending: dict[ReplicaKey, None] = {}  # the peers this event sent data to, in order, not flushed
        self.writer: list[tuple[int, LocalSnapshot]] | None = None  # its own writer's queue (a zombie's), else the world's

    def send(self, to: ReplicaKey, channel: ChannelId, vertex: str, time: Timestamp, batch: Any,
             sequence: int | None = None) -> None:
        self.mail.post((self.key, to), (self.incarnation, ("data", channel, vertex, time, batch, sequence)))
        self.mail.sent += 1
        self.rides.sent(to, token=isinstance(batch, EpochClosed))
        if self.in_event:
            self.pending.setdefault(to)

    def send_marker(self, to: ReplicaKey, channel: ChannelId, vertex: str, marker: Marker) -> None:
        self._flush(to)  # the batches placed with the data sent before it go first
        self.mail.post((self.key, to), (self.incarnation, ("marker", channel, marker)))

    def to_progress(self, call: Sequenced) -> None:
        self._send_progress(self.rides.place(call, self.in_event, self.pending))

    def event(self, riders: Sequence[Sequenced] = (),
              pass_on: Callable[[Rides], list[Sequenced]] = Rides.take_passing_on) -> LocalTransport:
        """One event of the replica, as a context (``with transport.event(...):``; events do not
        nest); ``riders``: other replicas' progress batches that came
        with the data it takes. At its end the batches placed with each peer follow its
        data, those whose data went before them (a marker) go to the progress actor, and the
        riders not sent on with them that ``pass_on`` picks (the rest wait for the
        replica's next message: :meth:`~raytide.engine.replica.ReplicaCore.riders_to_pass_on`);
        a failed event's go nowhere (the job fails). The transport is its own context manager,
        not a ``contextlib`` generator: it wraps every delivery the simulator makes."""
        self.rides.carried(riders)
        self.in_event, self.pass_on = True, pass_on
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        """The end of :meth:`event` (an error raised in it propagates)."""
        try:
            if kind is None:
                for to in list(self.pending):
                    self._flush(to)
                self._send_progress(self.rides.take_stranded())
        finally:
            self.pending.clear()
            self.rides.end_event()
            self.in_event = False
        if kind is None:
            self._send_progress(self.pass_on(self.rides))

    def _flush(self, to: ReplicaKey) -> None:
        self.pending.pop(to, None)
        riders = self.rides.take(to)
        if riders:
            self.mail.post((self.key, to), (self.incarnation, ("riders", riders)))

    def _send_progress(self, calls: Sequence[Sequenced]) -> None:
        if self.progress_alive() and calls:
            self.mail.to_progress[self.via].extend((self.incarnation, call) for call in calls)
            self.mail.sent += 1

    def local_snapshot(self, snapshot: LocalSnapshot) -> None:
        (self.mail.writes if self.writer is None else self.writer).append((self.incarnation, snapshot))

    def held(self, marker_id: int, report: HeldReport) -> None:
        self.mail.acks.append((self.incarnation, Acknowledgement(self.key, marker_id, self.incarnation, (), report)))


def planned_commands(plan: PhysicalPlan, inputs: Mapping[str, Sequence[Sequence[Any]]],
                     markers: Mapping[str, Sequence[tuple[int, Marker]]]) -> dict[tuple[str, int], list[Command]]:
    """The driver's commands for each ``(input, replica)``: every input's records spread over
    its replicas in turn, epoch by epoch, each epoch closed by an advance (and preceded by the
    marker ``markers`` puts before it), then the input closed."""
    planned: dict[tuple[str, int], list[Command]] = {}
    proxying = proxying_inputs(plan)
    for name in plan.inputs:
        width = plan.width(name)
        before = dict(markers.get(name, ()))
        queues: list[list[Command]] = [[] for _ in range(width)]
        proxies = ProxyPlan(width, name in proxying)
        turn = 0
        for epoch, records in enumerate(inputs.get(name, ())):
            if epoch in before:
                for queue in queues:
                    queue.append(("marker", before[epoch]))
            for record in records:
                queues[turn % width].append(("push", name, [record], epoch))
                turn += 1
            fed = sorted({replica % width for replica in range(turn - len(records), turn)})
            for replica, (quiet, proxied) in proxies.close(epoch + 1, fed).items():
                queues[replica].append(("advance", name, epoch + 1, quiet, proxied))
        for replica, queue in enumerate(queues):
            planned[(name, replica)] = [*queue, ("advance", name, None)]
    return planned


def logged(planned: dict[tuple[str, int], list[Command]], retain: int) -> ReplayLog:
    """The driver's calls to each ``(input, replica)`` as the Ray driver logs them for a
    recovery (:class:`~raytide.supervisor.replay.ReplayLog`, ``retain`` snapshots): a push and
    an advance count one command each, a marker none."""
    log = ReplayLog(planned, retain)
    for replica, commands in planned.items():
        for kind, *args in commands:
            log[replica].append(int(kind in ("push", "advance")), kind, tuple(args))
    return log


def replayed(log: ReplayLog, plan: PhysicalPlan, point: RestorePoint) -> dict[ReplicaKey, collections.deque[Command]]:
    """Per input replica of ``plan``, the commands after its position in ``point``: what the
    driver sends it again after a recovery (:meth:`~raytide.supervisor.replay.ReplayLog.after`).

    Raises:
        RecoveryError: the calls after a position were forgotten.
    """
    commands: dict[ReplicaKey, collections.deque[Command]] = {}
    for key in plan.replica_keys():
        vertex = next((name for name in plan.chain(key.chain).vertices if name in plan.inputs), None)
        if vertex is not None:
            calls = log.after((vertex, key.replica), point.position(key, vertex))
            commands[key] = collections.deque((method, *args) for method, args in calls)
    return commands
