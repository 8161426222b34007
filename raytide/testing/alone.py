"""The protocol of a replica recovered alone, in one process under a seeded scheduler: upstream
backup (:mod:`raytide.engine.upstream_log`), downstream deduplication
(:mod:`raytide.engine.dedup`) and the hold of a lost replica's progress, with crashes
injected at any step (docs/recovery.md, "A replica recovered alone").

A model of the protocol: its actors are small cores written here, not
:class:`~raytide.engine.replica.ReplicaCore`, but they number, keep, mark, trim, admit,
save, restore and replay with the engine's own :class:`~raytide.engine.numbered_channels.Numbering`
(the replica core's, unchanged), so the numbering has one encoding. The job
is the one :func:`running_counts` compiles: an input of ``inputs`` replicas, each reading its
share of the driver's feed, an exchange by key into ``width`` replicas that keep a running
count per key and send ``(key, count)`` at the record's epoch from ``on_recv``, and one sink
replica. Each sender numbers its messages per channel and keeps them in its upstream log;
every replica reports its progress figures (:mod:`raytide.engine.monotone_progress`), and the
sink completes an epoch when they say nothing at or before it can still come: a lost
replica's dues stay held until its replacement has restored and replayed them, while the
other replicas run on.

Snapshots: the inputs mark their logs and send a barrier on every channel; a counting replica
aligns (holds a channel whose barrier came until every input's did), then saves its counts,
where it is in each input channel (its dedup's positions), its log's marks and its figures;
the snapshot commits once every replica saved, and every log forgets what is before its
marks. A crash abandons the snapshot in flight, and none starts while a replica is lost. A
replacement restores the lost replica's part of the last committed snapshot; an input replica
reads its feed again from its restored position, a counting replica is replayed each input
channel's messages from the position it restored. What either sends again under numbers its
receivers had is dropped.

Deaths are recovered alone only where :func:`~raytide.supervisor.alone.decide` says so: the
inputs always, the counting replicas with one input replica (one channel each); with two, a
counting replica's death is not injected (the model has no whole-job path), except under
``plant="several"``, which recovers it alone anyway: its replay interleaves the two channels
otherwise than the replica did, and the numbers its sink drops by no longer name the same
messages.

Plants the trials must catch (``plant=``): ``"skip"`` (a replay that leaves out its first
message), ``"repeat"`` (a replacement that takes its first replayed message twice),
``"nodedup"`` (receivers that take every message), ``"sum"`` (progress figures added up),
``"forget"`` (a lost replica's dues counted as taken at its death), ``"several"`` (above).
"""

from __future__ import annotations

import random
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any, Literal

from raytide.core.dataflow import Dataflow
from raytide.core.keygroups import key_group
from raytide.core.vertex import Vertex
from raytide.engine.monotone_progress import MonotoneProgress
from raytide.engine.numbered_channels import Numbering
from raytide.physical.plan import PhysicalPlan, compile_plan
from raytide.physical.protocol import ReplicaKey
from raytide.supervisor.alone import decide

Plant = Literal["skip", "repeat", "nodedup", "sum", "forget", "several"] | None
#: A replica of the model: ``("x", i)`` an input replica, ``("count", r)`` a counting replica.
Place = tuple[str, int]
SINK: Place = ("sink", 0)


class RunningCount(Vertex):
    """The counting stage's vertex as a dataflow declares it: ``(key, count so far)`` per record,
    sent from ``on_recv`` only (it asks for no notification)."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()

    def on_recv(self, port: int, batch: Any, time: Any) -> None:
        for key in batch:
            self.counts[key] += 1
            self.send_by(0, [(key, self.counts[key])], time)

    def snapshot(self) -> Any:
        return dict(self.counts)

    def restore(self, state: Any) -> None:
        self.counts = Counter(state)


def running_counts_flow(width: int, inputs: int = 1) -> Dataflow:
    """The model's job: ``x`` (``inputs`` replicas) -> ``count`` (``width``, by key) -> ``sink``
    (what the Ray test of a replica recovered alone runs too)."""
    flow = Dataflow("alone")
    counted = flow.vertex(RunningCount, [flow.input("x", parallelism=inputs)], exchange=[_identity],
                          name="count", parallelism=width)[0]
    counted.map(_identity, name="sink", parallelism=1).output("out")
    return flow


def running_counts(width: int, inputs: int = 1) -> PhysicalPlan:
    """The model's job (:func:`running_counts_flow`) as a plan."""
    return compile_plan(running_counts_flow(width, inputs))


def _identity(value: Any) -> Any:
    """A record's key (the record itself) and the sink's map."""
    return value


def owner(key: Any, width: int) -> int:
    """The counting replica of ``key``."""
    return key_group(key) % width


@dataclass
class Replica:
    """A live replica of the model: its numbered channels (the engine's: its log of sends and
    its dedup), its counts, where it read."""

    numbering: Numbering
    counts: Counter = field(default_factory=Counter)
    read: int = 0  # the input's position in the driver's feed
    sent: Counter = field(default_factory=Counter)  # per (receiver, epoch): messages sent in all
    taken: Counter = field(default_factory=Counter)  # per (sender, epoch): messages taken in all
    repeat_next: bool = False
    aligning: set[Place] = field(default_factory=set)  # the inputs whose barrier came (their channels held)


@dataclass
class AloneRun:
    """What a trial shows: the sink's epochs, each key's counts as the sink took them out of
    order, restores and crashes per replica, the kinds decided, the largest log kept, steps the
    survivors took and epochs the sink completed while a replica was lost."""

    epochs: dict[int, list]
    order_breaks: list[str]
    restores: Counter
    crashed: Counter
    kinds: list[str]
    largest_log: int
    survivor_steps: int
    completed_while_lost: int


def feed_of(epochs: list[list[int]], replica: int = 0, inputs: int = 1) -> list[tuple]:
    """The driver's calls to input replica ``replica`` of ``inputs``, in order: each epoch's
    keys dealt to it (record ``j`` to replica ``j % inputs``), then the epoch's end."""
    return [item for epoch, keys in enumerate(epochs)
            for item in [("rec", key, epoch) for j, key in enumerate(keys) if j % inputs == replica] + [("done", epoch)]]


def reference(epochs: list[list[int]]) -> dict[int, list]:
    """The plain-Python answer: per epoch, the sorted ``(key, count so far)`` of its records."""
    counts: Counter = Counter()
    out: dict[int, list] = {}
    for epoch, keys in enumerate(epochs):
        for key in keys:
            counts[key] += 1
            out.setdefault(epoch, []).append((key, counts[key]))
        out[epoch] = sorted(out.get(epoch, []))
    return out


@dataclass
class Sink:
    """The sink replica (never lost in these trials): what it took of each counting replica,
    each epoch completed once the progress figures say nothing at or before it can still come."""

    numbering: Numbering
    taken: Counter = field(default_factory=Counter)  # per (sender, epoch)
    pending: dict[int, list] = field(default_factory=dict)
    epochs: dict[int, list] = field(default_factory=dict)
    last: Counter = field(default_factory=Counter)
    order_breaks: list[str] = field(default_factory=list)

    def take(self, payload: tuple) -> None:
        """A new count from a counting replica; a key's counts must come in order."""
        _, key, count, epoch = payload
        if count != self.last[key] + 1:
            self.order_breaks.append(f"key {key} at epoch {epoch}: count {count} after {self.last[key]}")
        self.last[key] = count
        self.pending.setdefault(epoch, []).append((key, count))

    def complete(self, progress: MonotoneProgress, epochs: int) -> int:
        """Complete every epoch ``progress`` says is; how many it completed now."""
        done = len(self.epochs)
        while len(self.epochs) < epochs and progress.complete(len(self.epochs)):
            self.epochs[len(self.epochs)] = sorted(self.pending.pop(len(self.epochs), []))
        return len(self.epochs) - done


class AloneWorld:
    """The model's actors, channels and snapshots, one action per :meth:`step` (see the module docstring)."""

    def __init__(self, epochs: list[list[int]], width: int, seed: int, crashes: int, plant: Plant = None,
                 inputs: int = 1) -> None:
        self.plan, self.width, self.plant = running_counts(width, inputs), width, plant
        self.rng, self.crashes, self.steps = random.Random(seed), crashes, 0
        self.inputs: list[Place] = [("x", i) for i in range(inputs)]
        self.feeds = {actor: feed_of(epochs, actor[1], inputs) for actor in self.inputs}
        self.counting: list[Place] = [("count", r) for r in range(width)]
        self.replicas: dict[Place, Replica | None] = {a: self._fresh(a, {}) for a in [*self.inputs, *self.counting]}
        self.sink = Sink(Numbering("sink[0]", dedup=plant != "nodedup"))
        self.progress = MonotoneProgress(inputs, "sum" if plant == "sum" else "max")
        self.epochs = len(epochs)
        self.channels: dict[tuple[Place, Place], deque] = {}
        self.lost: Place | None = None
        self.found_at = 0
        self.in_flight: int | None = None
        self.saved: dict[Place, dict] = {}
        self.committed: dict[Place, dict] = {}
        self.snapshot_ids = 0
        self.restores: Counter = Counter()
        self.crashed: Counter = Counter()
        self.kinds: list[str] = []
        self.largest_log = self.survivor_steps = self.completed_while_lost = 0

    def _fresh(self, actor: Place, state: dict) -> Replica:
        """``actor`` at ``state`` (a committed snapshot's part; empty: at the start)."""
        numbering = Numbering(f"{actor[0]}[{actor[1]}]", dedup=self.plant != "nodedup")
        numbering.restore(state.get("sequences"))
        return Replica(numbering, Counter(state.get("counts", {})), state.get("read", 0),
                       Counter(state.get("sent", {})), Counter(state.get("taken", {})))

    def send(self, sender: Place, receiver: Place, payload: tuple) -> None:
        """Number ``payload`` on the channel, keep it in the sender's log, report the channel's
        figure for its epoch, and put it on the channel unless the receiver is lost (a call to a
        dead actor goes nowhere)."""
        replica = self.replicas[sender]
        assert replica is not None
        sequence = replica.numbering.number(receiver, payload)
        replica.sent[(receiver, payload[-1])] += 1
        self.progress.report_sent((sender, receiver), payload[-1], replica.sent[(receiver, payload[-1])])
        if receiver == SINK or self.replicas[receiver] is not None:
            self.channels.setdefault((sender, receiver), deque()).append(("msg", sequence, payload))

    # -- the actors' actions ------------------------------------------------------------------

    def read(self, actor: Place) -> None:
        """Input replica ``actor`` takes the driver's next call: a key to its owner, or an
        epoch's end (it reaches the next epoch; again, after it was restored: nothing moves)."""
        replica = self.replicas[actor]
        assert replica is not None
        item = self.feeds[actor][replica.read]
        replica.read += 1
        if item[0] == "rec":
            self.send(actor, ("count", owner(item[1], self.width)), item)
        else:
            self.progress.reached(item[1] + 1, actor[1])

    def deliver(self, sender: Place, receiver: Place) -> None:
        """The receiver takes the head of its channel from ``sender``."""
        message = self.channels[(sender, receiver)].popleft()
        if message[0] == "barrier":
            self._align(sender, receiver, message[1])
            return
        _, sequence, payload = message
        replica = self.sink if receiver == SINK else self.replicas[receiver]
        assert replica is not None
        self.survivor_steps += self.lost is not None and receiver != SINK
        if not replica.numbering.admit(sender, sequence, payload[-1]):
            return
        replica.taken[(sender, payload[-1])] += 1
        self.progress.report_taken((sender, receiver), payload[-1], replica.taken[(sender, payload[-1])])
        if isinstance(replica, Sink):
            replica.take(payload)
            return
        for _ in range(2 if replica.repeat_next else 1):
            self._count(receiver, replica, payload)
        replica.repeat_next = False

    def _count(self, actor: Place, replica: Replica, payload: tuple) -> None:
        """``RunningCount.on_recv``."""
        _, key, epoch = payload
        replica.counts[key] += 1
        self.send(actor, SINK, ("count", key, replica.counts[key], epoch))

    # -- snapshots ----------------------------------------------------------------------------

    def snapshot(self) -> None:
        """The inputs take snapshot ``n`` and send its barrier on every channel."""
        self.snapshot_ids += 1
        self.in_flight, self.saved = self.snapshot_ids, {}
        for source in self.inputs:
            self._save(source, self.snapshot_ids)
            for actor in self.counting:
                self.channels.setdefault((source, actor), deque()).append(("barrier", self.snapshot_ids))

    def _align(self, sender: Place, receiver: Place, snapshot_id: int) -> None:
        """A barrier from ``sender``: its channel held until every input's came, then the part saved."""
        replica = self.replicas[receiver]
        if snapshot_id != self.in_flight or replica is None:
            return
        replica.aligning.add(sender)
        replica.numbering.at_barrier(snapshot_id, sender)
        if len(replica.aligning) == len(self.inputs):
            replica.aligning.clear()
            self._save(receiver, snapshot_id)

    def _save(self, actor: Place, snapshot_id: int) -> None:
        """``actor`` saves its part of ``snapshot_id`` (one abandoned since: nothing), which
        commits once every replica saved: every log forgets what is before its marks."""
        replica = self.replicas[actor]
        if snapshot_id != self.in_flight or replica is None:
            return
        self.saved[actor] = {"counts": dict(replica.counts), "sequences": replica.numbering.take(snapshot_id),
                             "read": replica.read, "sent": dict(replica.sent), "taken": dict(replica.taken)}
        if len(self.saved) == len(self.replicas):
            self.committed, self.in_flight = self.saved, None
            for live in self.replicas.values():
                assert live is not None
                live.numbering.commit(snapshot_id)

    # -- a death, and the replica recovered alone -------------------------------------------------

    def crash(self, actor: Place) -> None:
        """``actor`` dies: its state and what was on its way to it are gone (what it sent
        goes on); the snapshot in flight is abandoned. (``plant="forget"``: the progress figures
        count what it was owed as taken, as if a lost replica owed nothing.)"""
        self.replicas[actor], self.lost, self.in_flight = None, actor, None
        self.crashed[actor] += 1
        for survivor in self.replicas.values():
            if survivor is not None:
                survivor.aligning.clear()
        self.found_at = self.steps + self.rng.randint(1, 20)
        for (_, receiver), channel in self.channels.items():
            if receiver == actor:
                channel.clear()
        for key, count in self.progress.sent.items() if self.plant == "forget" else ():
            if key[0] in [(sender, actor) for sender, _ in self.channels]:
                self.progress.taken[key] = count

    def replace(self) -> None:
        """The lost replica, recovered alone: its part of the last committed snapshot restored,
        each input channel replayed from the position it restored (an input: its feed read again)."""
        actor, self.lost = self.lost, None
        assert actor is not None
        kind = decide(self.plan, [ReplicaKey(self.plan.chain_of("x" if actor[0] == "x" else "count").name, actor[1])])
        assert kind.kind == "alone" or self.plant == "several", f"the model has no whole-job path: {kind.why}"
        self.kinds.append(kind.kind)
        state = self.committed.get(actor, {})
        self.replicas[actor] = replica = self._fresh(actor, state)
        self.restores[actor] += 1
        for index, source in enumerate(self.inputs if actor[0] == "count" else ()):
            sender = self.replicas[source]
            assert sender is not None
            entries = sender.numbering.replay(actor, replica.numbering.dedup.expected.get(source, 0))
            if self.plant == "skip" and index == 0:
                entries = entries[1:]
            replica.repeat_next = replica.repeat_next or (self.plant == "repeat" and bool(entries))
            self.channels[(source, actor)] = deque(("msg", sequence, payload) for sequence, payload in entries)

    # -- the scheduler --------------------------------------------------------------------------

    def _mortal(self) -> list[Place]:
        """Whom a crash may hit: the replicas ``decide`` recovers alone (or, planted, every one)."""
        alone = len(self.inputs) == 1 or self.plant == "several"
        return [*self.inputs, *(self.counting if alone else [])]

    def _actions(self) -> list[tuple]:
        """What may happen next: an input reads, a receiver takes a message (not from a channel
        held for alignment), the lost replica is found and replaced."""
        actions: list[tuple] = [("read", source) for source in self.inputs
                                if (replica := self.replicas[source]) is not None
                                and replica.read < len(self.feeds[source])]
        actions += [("deliver", *pair) for pair, channel in self.channels.items()
                    if channel and (pair[1] == SINK or ((replica := self.replicas[pair[1]]) is not None
                                                        and pair[0] not in replica.aligning))]
        if self.lost is not None and self.steps >= self.found_at:
            actions.append(("replace",))
        return actions

    def step(self) -> bool:
        """One action, drawn by the seed (a crash or a snapshot now and then); False once the
        job is finished: all read, all taken, nothing lost."""
        self.steps += 1
        if self.lost is None and self.crashes and self.rng.random() < 0.03:
            self.crashes -= 1
            self.crash(self.rng.choice(self._mortal()))
        elif self.lost is None and self.in_flight is None and self.rng.random() < 0.05:
            self.snapshot()
        actions = self._actions()
        if not actions:
            return self.lost is not None  # waiting for the death to be found
        action = self.rng.choice(actions)
        getattr(self, action[0])(*action[1:])
        self.completed_while_lost += self.sink.complete(self.progress, self.epochs) * (self.lost is not None)
        self.largest_log = max(self.largest_log, *(r.numbering.kept() for r in self.replicas.values() if r is not None))
        return True

    def run(self, max_steps: int = 100_000) -> AloneRun:
        """Run until finished; a job that does not finish within ``max_steps`` fails naming what is left."""
        while self.step():
            if self.steps > max_steps:
                raise AssertionError(f"not finished after {max_steps} steps: lost {self.lost}, sink completed "
                                     f"{len(self.sink.epochs)} epochs, owed {self.progress.owed(len(self.sink.epochs))}")
        return AloneRun(self.sink.epochs, self.sink.order_breaks, self.restores, self.crashed, self.kinds, self.largest_log,
                        self.survivor_steps, self.completed_while_lost)
