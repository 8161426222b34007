"""An in-process runtime: every replica core, the progress core and the snapshot
coordinator in one process, no Ray, under a seeded scheduler.

It runs the same :class:`~raytide.engine.replica.ReplicaCore`,
:class:`~raytide.engine.progress_core.ProgressCore` and
:class:`~raytide.snapshots.coordinator.CoordinatorCore` as the Ray actors, and delivers
their messages the way Ray may: FIFO from one replica to another (data batches and
markers alike), FIFO from the progress actor to each replica, in *any* order from a
replica to the progress actor (it is a threaded actor; the cores number those
messages), driver commands FIFO per input replica, and job events through a log the
driver polls. At each step a seeded ``random.Random`` chooses which mailbox delivers
next, so one seed is one reproducible interleaving and many seeds explore many
(FoundationDB's simulation testing).

Faults are injected by step: :meth:`LocalJob.crash` kills a replica, the progress core
or the coordinator at step ``n``, losing its state and everything it had in flight.
Without ``recovery`` the job then fails. With a :class:`LocalRecovery` it takes
snapshots into a real :class:`~raytide.snapshots.store.SnapshotStore` every few steps
and, a few steps after a death (when it is noticed), recovers as
:mod:`raytide.snapshots.recovery` describes, one step at a time, so that further crashes
can strike in the middle of it. Every message carries its sender's incarnation and is
dropped where it arrives if that is not the receiver's.

>>> import raytide as rt
>>> flow = rt.Dataflow("wordcount")
>>> flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("counts")
>>> run = LocalJob(flow, {"lines": [["a b", "b"], ["c"]]}, parallelism=2, seed=7).run()
>>> {epoch: sorted(records) for epoch, records in run.outputs["counts"].items()}
{0: [('a', 1), ('b', 2)], 1: [('c', 1)]}
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import cloudpickle

from raytide.core.dataflow import Dataflow
from raytide.core.keygroups import KeyGroupAssignment
from raytide.engine.output_gate import OutputGate
from raytide.engine.progress_core import ProgressCore, ProgressEffects
from raytide.engine.replica import ReplicaCore
from raytide.errors import RaytideError, RescaleError, SnapshotError
from raytide.physical.plan import PhysicalPlan, compile_plan
from raytide.physical.protocol import (
    ChannelId,
    EpochComplete,
    JobEvent,
    JobFailed,
    JobFinished,
    Marker,
    ReplicaKey,
    Sequenced,
    StatusPush,
)
from raytide.progress.timestamps import Timestamp
from raytide.progress.tracker import Pointstamp
from raytide.rescale.layout import Piece, cut_point, new_tables
from raytide.rescale.reshard import reshard_snapshot
from raytide.rescale.widths import new_widths, width_groups
from raytide.snapshots.config import OutputCommit
from raytide.snapshots.coordinator import Acknowledgement, Commit, CoordinatorCore
from raytide.snapshots.recovery import (
    RestartBudget,
    RestorePoint,
    commit_snapshot,
    part_name,
    restore_point,
)
from raytide.snapshots.replica_state import HeldReport, LocalSnapshot, summed
from raytide.snapshots.store import SnapshotStore

#: A driver command for one input replica: ``("push", input, records, epoch)``,
#: ``("advance", input, epoch)`` (None closes) or ``("marker", marker)``.
Command = tuple[Any, ...]

#: Crash targets besides replicas.
PROGRESS, COORDINATOR = "progress", "coordinator"
Target = ReplicaKey | str


@dataclass(frozen=True)
class LocalRecovery:
    """Snapshots and recovery in the in-process runtime, with steps for seconds.

    Attributes:
        store: where snapshots go (a real store: the simulation writes and reads files).
        interval: steps between the end of a snapshot and the next trigger.
        timeout: steps after which an incomplete snapshot is abandoned.
        retain: committed snapshots kept.
        max_restarts: recoveries allowed before the job fails.
        detection: a death is noticed up to this many steps after it happened.
        output_commit: when the driver takes a completed epoch (:mod:`raytide.engine.output_gate`).
    """

    store: SnapshotStore
    interval: int = 40
    timeout: int = 3_000
    retain: int = 2
    max_restarts: int = 5
    detection: int = 5
    output_commit: OutputCommit = "epoch"


@dataclass(frozen=True)
class ReplicaDied:
    """An actor (a replica, or ``"progress"``, ``"coordinator"``) was crashed by fault
    injection at ``step``; without recovery the job fails."""

    key: Target
    step: int


@dataclass
class LocalRun:
    """What a run did: records per output and epoch, every job event, the steps taken,
    the recoveries (what caused each), the snapshots committed and the rescales done."""

    outputs: dict[str, dict[int, list]]
    events: list[JobEvent | ReplicaDied] = field(default_factory=list)
    steps: int = 0
    finished: bool = False
    recoveries: list[str] = field(default_factory=list)
    snapshots: list[int] = field(default_factory=list)
    rescales: list[tuple[int, dict[str, int], int]] = field(default_factory=list)  # (step, widths, cut id)

    @property
    def failure(self) -> Any:
        """The first failure (a :class:`JobFailed` error or a :class:`ReplicaDied`), or None."""
        for event in self.events:
            if isinstance(event, JobFailed):
                return event.error
            if isinstance(event, ReplicaDied):
                return event
        return None


class _Transport:
    """One replica's transport: appends to the runtime's mailboxes, tagged with its incarnation."""

    def __init__(self, job: LocalJob, key: ReplicaKey, incarnation: int) -> None:
        self.job, self.key, self.incarnation = job, key, incarnation

    def send(self, to: ReplicaKey, channel: ChannelId, vertex: str, time: Timestamp, batch: Any) -> None:
        self.job.links[(self.key, to)].append((self.incarnation, ("data", channel, vertex, time, batch)))

    def send_marker(self, to: ReplicaKey, channel: ChannelId, vertex: str, marker: Marker) -> None:
        self.job.links[(self.key, to)].append((self.incarnation, ("marker", channel, marker)))

    def to_progress(self, call: Sequenced) -> None:
        if self.job.progress is not None:
            self.job.to_progress[self.key].append((self.incarnation, call))

    def local_snapshot(self, snapshot: LocalSnapshot) -> None:
        self.job.writes.append((self.incarnation, snapshot))

    def held(self, marker_id: int, report: HeldReport) -> None:
        self.job.acks.append((self.incarnation, Acknowledgement(self.key, marker_id, self.incarnation, (), report)))


class LocalJob:
    """A dataflow running in this process under a seeded scheduler.

    Args:
        flow: the dataflow (or an already compiled plan).
        inputs: per input, the records of each epoch (epoch 0, 1, ...); pushed to the
            input's replicas in turn, then each input is closed.
        parallelism: replicas per vertex (the dataflow's default if None).
        seed: chooses the interleaving.
        chaining: fuse pipeline-connected vertices, as ``rt.run`` does.
        markers: ``{input: [(epoch, marker)]}``: inject ``marker`` at every replica of the
            input before its first record of ``epoch`` (after the input moved to it).
        recovery: take snapshots and recover from crashes instead of failing.
        restore: with ``recovery``, start from this committed snapshot of its store (an id,
            or ``"latest"``), of an earlier run at this or another parallelism, as
            ``rt.run(..., restore=)`` does.

    With ``recovery`` and a :class:`~raytide.Dataflow` (not a plan), :meth:`rescale` changes
    the parallelism of vertices while the job runs, as ``job.rescale`` does on Ray.
    """

    def __init__(self, flow: Dataflow | PhysicalPlan, inputs: Mapping[str, Sequence[Sequence[Any]]],
                 parallelism: int | None = None, seed: int = 0, chaining: bool = True,
                 markers: Mapping[str, Sequence[tuple[int, Marker]]] | None = None,
                 recovery: LocalRecovery | None = None, restore: int | str | None = None) -> None:
        self.plan = flow if isinstance(flow, PhysicalPlan) else compile_plan(flow, parallelism, chaining)
        self.flow = flow if isinstance(flow, Dataflow) else None
        self.parallelism, self.chaining = parallelism, chaining
        self.rng = random.Random(seed)
        self.recovery = recovery
        #: Mailboxes; every entry is ``(sender's incarnation, message)``.
        self.links: dict[tuple[ReplicaKey, ReplicaKey], collections.deque] = collections.defaultdict(collections.deque)
        self.to_progress: dict[ReplicaKey, list[tuple[int, Sequenced]]] = collections.defaultdict(list)
        self.pushes: dict[ReplicaKey, collections.deque[tuple[int, StatusPush]]] = \
            collections.defaultdict(collections.deque)
        self.commands: dict[ReplicaKey, collections.deque[Command]] = collections.defaultdict(collections.deque)
        self.injects: dict[ReplicaKey, collections.deque[tuple[int, Marker]]] = \
            collections.defaultdict(collections.deque)
        self.log: collections.deque[tuple[int, JobEvent]] = collections.deque()  # the driver's long poll
        self.writes: list[tuple[int, LocalSnapshot]] = []  # replicas' snapshot writers
        self.acks: list[tuple[int, Acknowledgement]] = []  # to the coordinator
        self.commits: collections.deque[tuple[int, Commit]] = collections.deque()
        self.incarnation = 0
        self.incarnations = {key: 0 for key in self._keys()}
        self.replicas = {key: self._core(key) for key in self._keys()}
        self.progress: ProgressCore | None = ProgressCore(self.plan.graph, self.plan.outputs,
                                                          self.plan.initial_pointstamps())
        self.progress_incarnation = 0
        self.connected = False
        self.dead: set[ReplicaKey] = set()
        self.waiting: set[ReplicaKey] = set()  # restored, not resumed: deliveries to them wait
        self.crashes: dict[int, Target] = {}
        self.failures: list[tuple[int, str]] = []  # (step at which it is noticed, what died)
        self.recovery_steps: collections.deque[Callable[[], None]] = collections.deque()
        self.delivered = {name: -1 for name in self.plan.outputs}  # last epoch handed to the driver
        self.gate = OutputGate(self.plan.outputs, recovery.output_commit if recovery is not None else "epoch")
        self.result = LocalRun({name: {} for name in self.plan.outputs})
        self.planned: dict[tuple[str, int], list[Command]] = {}  # per (input, replica)
        self.rescales: dict[int, dict[str, int]] = {}  # step -> widths asked for then
        self.pending_rescale: dict[str, int] = {}  # asked for, waiting for its cut
        self.holds: set[int] = set()  # the ids of rescale cuts (hold markers)
        self._plan_inputs(inputs, markers or {})
        self.coordinator: CoordinatorCore | None = None
        self.last_snapshot_id = 0
        self.triggered: dict[int, dict[str, int]] = {}  # what the driver had at each snapshot's trigger
        if recovery is not None:
            self.budget = RestartBudget(recovery.max_restarts)
            if restore is not None:
                self._start_from(restore)
            self.coordinator = self._new_coordinator()

    def _keys(self) -> Iterable[ReplicaKey]:
        return self.plan.replica_keys()

    def _core(self, key: ReplicaKey) -> ReplicaCore:
        transport = _Transport(self, key, self.incarnations[key])
        return ReplicaCore(self.plan, key.chain, key.replica, transport, keep_outputs=self.recovery is not None)

    def _input_replicas(self, name: str) -> list[ReplicaKey]:
        chain = self.plan.chain_of(name).name
        return [ReplicaKey(chain, r) for r in range(self.plan.width(name))]

    def _plan_inputs(self, inputs: Mapping[str, Sequence[Sequence[Any]]],
                     markers: Mapping[str, Sequence[tuple[int, Marker]]]) -> None:
        """Queue each input's commands: its records spread over its replicas in turn, epoch by epoch."""
        for name in self.plan.inputs:
            replicas = self._input_replicas(name)
            before = {epoch: marker for epoch, marker in markers.get(name, ())}
            queues: list[list[Command]] = [[] for _ in replicas]
            turn = 0
            for epoch, records in enumerate(inputs.get(name, ())):
                if epoch in before:
                    for queue in queues:
                        queue.append(("marker", before[epoch]))
                for record in records:
                    queues[turn % len(replicas)].append(("push", name, [record], epoch))
                    turn += 1
                for queue in queues:
                    queue.append(("advance", name, epoch + 1))
            for queue in queues:
                queue.append(("advance", name, None))
            for replica, (key, queue) in enumerate(zip(replicas, queues)):
                self.planned[(name, replica)] = queue
                self.commands[key].extend(queue)

    def rescale(self, widths: Mapping[str, int], at_step: int) -> None:
        """At step ``at_step``, ask for vertices at the parallelism ``widths`` gives them
        (``{vertex: n}``). The job changes at its next cut (the coordinator's next trigger is
        a hold marker), in the steps :mod:`raytide.rescale.widths` describes; a crash before
        or during it is recovered from like any other, and the rescale still happens."""
        if self.recovery is None or self.flow is None:
            raise RescaleError("LocalJob.rescale needs recovery=LocalRecovery(...) and a Dataflow (not a plan)")
        new_widths(self.plan, widths)  # refused now, not at the cut
        self.rescales[at_step] = {**self.rescales.get(at_step, {}), **widths}

    def crash(self, target: Target, at_step: int) -> None:
        """Kill ``target`` (a replica key, :data:`PROGRESS` or :data:`COORDINATOR`) at step
        ``at_step``: its state and the messages it had in flight are lost."""
        self.crashes[at_step] = target

    # -- running -------------------------------------------------------------------------

    def run(self, max_steps: int = 1_000_000, after_step: Callable[[LocalJob], None] | None = None) -> LocalRun:
        """Deliver messages until nothing is left to deliver (markers and status pushes may
        still travel after the job finished), the job fails, or ``max_steps``.

        ``after_step(job)`` runs after every step (an invariant check, for tests).

        Raises:
            RuntimeError: still running after ``max_steps`` (a livelock), or quiescent
                without having finished (a hang: something waits forever).
        """
        while self.result.failure is None:
            if self.result.steps in self.crashes:
                self._kill(self.crashes.pop(self.result.steps))
                continue
            if self.result.steps in self.rescales:
                self._ask_rescale(self.rescales.pop(self.result.steps))
            self._notice_failures()
            self._tick_coordinator()
            choices = self._mailboxes()
            if not choices:
                if self.result.finished:
                    break
                if self.failures:  # nothing moves until the death is noticed: notice it now
                    self.failures = [(self.result.steps, cause) for _, cause in self.failures]
                    continue
                raise RuntimeError(f"the job hangs: nothing left to deliver after {self.result.steps} steps and "
                                   f"not finished; pending: {self.progress.describe() if self.progress else None}")
            if self.result.steps >= max_steps:
                raise RuntimeError(f"the job is still running after {max_steps} steps")
            self.result.steps += 1
            self.rng.choice(choices)()
            if after_step is not None:
                after_step(self)
        return self.result

    def _mailboxes(self) -> list[Callable[[], None]]:
        """One action per mailbox with something to deliver."""
        actions: list[Callable[[], None]] = []
        if not self.connected and self.progress is not None:
            actions.append(self._connect)
        actions += [functools.partial(self._deliver, link) for link, queue in self.links.items()
                    if queue and link[1] not in self.waiting]
        actions += [functools.partial(self._apply_progress, key) for key, calls in self.to_progress.items() if calls]
        actions += [functools.partial(self._push_status, key) for key, queue in self.pushes.items()
                    if queue and key not in self.waiting]
        actions += [functools.partial(self._command, key) for key, queue in self.commands.items()
                    if queue and key not in self.waiting]
        actions += [functools.partial(self._inject, key) for key, queue in self.injects.items()
                    if queue and key not in self.waiting]
        if self.log and not self.recovery_steps:  # the driver recovers, then reads events again
            actions.append(self._poll)
        if self.recovery_steps:
            actions.append(self._recovery_step)
        if self.recovery is not None:
            actions += self._snapshot_actions()
        return actions

    def _current(self, key: ReplicaKey, incarnation: int) -> bool:
        """Whether a message of ``incarnation`` reaches replica ``key`` (alive, of that incarnation,
        not retired by a rescale)."""
        return key not in self.dead and self.incarnations.get(key) == incarnation

    def _connect(self) -> None:
        assert self.progress is not None
        self.connected = True
        self._perform(self.progress.connect({key: core.subscriptions() for key, core in self.replicas.items()}))

    def _deliver(self, link: tuple[ReplicaKey, ReplicaKey]) -> None:
        incarnation, message = self.links[link].popleft()
        key = link[1]
        if not self._current(key, incarnation):
            return
        core = self.replicas[key]
        if message[0] == "data":
            self._guard(key, core.on_message, *message[1:])
        else:
            self._guard(key, core.on_marker, *message[1:])

    def _apply_progress(self, key: ReplicaKey) -> None:
        """One of ``key``'s messages to the progress actor, not necessarily the oldest."""
        calls = self.to_progress[key]
        incarnation, call = calls.pop(self.rng.randrange(len(calls)))
        if self.progress is not None and incarnation == self.progress_incarnation:
            self._perform(self.progress.receive(call))

    def _push_status(self, key: ReplicaKey) -> None:
        incarnation, push = self.pushes[key].popleft()
        if self._current(key, incarnation):
            self._guard(key, self.replicas[key].on_progress, *push)

    def _command(self, key: ReplicaKey) -> None:
        command = self.commands[key].popleft()
        core = self.replicas[key]
        if command[0] == "push":
            self._guard(key, core.push_input, command[1], command[2], command[3])
        elif command[0] == "advance":
            self._guard(key, core.advance_input, command[1], command[2])
        else:
            self._guard(key, core.inject_marker, command[1])

    def _inject(self, key: ReplicaKey) -> None:
        incarnation, marker = self.injects[key].popleft()
        if self._current(key, incarnation):
            self._guard(key, self.replicas[key].inject_marker, marker)

    def _guard(self, key: ReplicaKey, method: Callable[..., None], *args: Any) -> None:
        """Run a replica's event; a raytide error fails the job, as the actor's guard does."""
        if key in self.dead:
            return
        try:
            method(*args)
        except RaytideError as error:
            self._record([JobFailed(error)])

    def _perform(self, effects: ProgressEffects) -> None:
        for key, push in effects.pushes:
            if key not in self.dead:
                self.pushes[key].append((self.progress_incarnation, push))
        self.log.extend((self.progress_incarnation, event) for event in effects.events)

    def _poll(self) -> None:
        """The driver reads the oldest job event (events of an older incarnation are dropped:
        a recovery replays their epochs)."""
        incarnation, event = self.log.popleft()
        if incarnation == self.progress_incarnation:
            self._record([event])

    def _record(self, events: Sequence[JobEvent | ReplicaDied]) -> None:
        for event in events:
            self.result.events.append(event)
            if isinstance(event, EpochComplete):
                for epoch, parts in self.gate.offer(event.output, event.epoch, event.parts):
                    self._hand_out(event.output, epoch, parts)
            elif isinstance(event, JobFinished):
                for name, epoch, parts in self.gate.finish():
                    self._hand_out(name, epoch, parts)
                self.result.finished = True

    def _hand_out(self, name: str, epoch: int, parts: list) -> None:
        """The driver hands output ``name``'s ``epoch`` to the user."""
        if epoch in self.result.outputs[name]:
            raise AssertionError(f"output {name!r} epoch {epoch} completed twice")
        self.result.outputs[name][epoch] = [record for part in parts for record in part]
        self.delivered[name] = max(self.delivered[name], epoch)

    # -- faults ----------------------------------------------------------------------------

    def _kill(self, target: Target) -> None:
        """Fault injection: ``target`` dies with its state and what it had in flight."""
        if self.result.finished:
            return  # the driver has seen the end: the job is gone
        if isinstance(target, ReplicaKey):
            self.dead.add(target)
            for link, queue in self.links.items():
                if target in link:
                    queue.clear()
            for mailbox in (self.to_progress, self.pushes, self.commands, self.injects):
                mailbox[target].clear()
            self.writes = [(i, w) for i, w in self.writes if w.key != target]
        elif target == PROGRESS:
            self.progress = None
            self.to_progress.clear()
            self.log.clear()
        elif target == COORDINATOR:
            self.coordinator = None
            self.acks.clear()
            self.commits.clear()
        else:
            raise ValueError(f"no such crash target: {target!r}")
        if self.recovery is None:
            self._record([ReplicaDied(target, self.result.steps)])
        else:
            noticed = self.result.steps + self.rng.randint(0, self.recovery.detection)
            self.failures.append((noticed, f"{target} died at step {self.result.steps}"))

    def _notice_failures(self) -> None:
        """Start a recovery for the deaths noticed by now."""
        due = [cause for step, cause in self.failures if step <= self.result.steps]
        if not due or self.result.finished:
            return
        self.failures = [(step, cause) for step, cause in self.failures if step > self.result.steps]
        try:
            self.budget.spend("; ".join(due))
        except RaytideError as error:
            self._record([JobFailed(error)])
            return
        self._begin_recovery("; ".join(due))

    # -- recovery ----------------------------------------------------------------------------

    def _begin_recovery(self, cause: str) -> None:
        """Start incarnation n + 1 from the last committed snapshot, one step at a time."""
        assert self.recovery is not None
        self.result.recoveries.append(cause)
        self.incarnation += 1
        self.gate.rollback()
        if self.coordinator is not None:
            self.coordinator.reset(self.incarnation, self.result.steps)
        snapshot_id = reshard_snapshot(self.plan, self.recovery.store, None, self.recovery.retain)
        self._schedule_restore(restore_point(self.plan, self.recovery.store, snapshot_id))

    def _schedule_restore(self, point: RestorePoint) -> None:
        """Restore every replica from ``point`` (in random order), then the progress core,
        then resume every replica: the steps of a recovery, run one per step."""
        keys = list(self._keys())
        restores = [functools.partial(self._restore, key, point) for key in self.rng.sample(keys, len(keys))]
        resumes = [functools.partial(self._resume, key, point) for key in self.rng.sample(keys, len(keys))]
        self.recovery_steps = collections.deque(
            [*restores, functools.partial(self._rebuild_progress, point), *resumes, self._end_recovery])

    def _start_from(self, restore: int | str) -> None:
        """Begin at committed snapshot ``restore`` of an earlier run (laid out for this job's
        parallelism first, if it was taken at another): incarnation 1, what that run handed
        out is not handed out again, the inputs continue where the snapshot left them."""
        assert self.recovery is not None
        store = self.recovery.store
        snapshot_id = reshard_snapshot(self.plan, store, None if restore == "latest" else int(restore),
                                       self.recovery.retain)
        if snapshot_id is None:
            raise SnapshotError(f"restore={restore!r}: the store {store} has no committed snapshot")
        point = restore_point(self.plan, store, snapshot_id)
        self.incarnation = 1
        self.progress = None  # nothing runs before the restore: no progress core, every replica waits
        self.waiting = set(self._keys())
        self.delivered.update(point.delivered)
        self.gate.release(point.complete)
        self._schedule_restore(point)

    def _recovery_step(self) -> None:
        self.recovery_steps.popleft()()

    def _fresh(self, key: ReplicaKey) -> ReplicaCore:
        """Replica ``key`` reset in place, or replaced if it died: a fresh core that waits to be resumed."""
        self.dead.discard(key)
        self.incarnations[key] = self.incarnation
        self.replicas[key] = core = self._core(key)
        self.waiting.add(key)
        self.commands[key].clear()
        return core

    def _restore(self, key: ReplicaKey, point: RestorePoint) -> None:
        """Replica ``key``, fresh, from its part of ``point``."""
        assert self.recovery is not None
        core = self._fresh(key)
        if point.snapshot_id is not None:
            data = self.recovery.store.read_part(point.snapshot_id, part_name(key))
            self._guard(key, core.restore, data)

    def _rebuild_progress(self, point: RestorePoint) -> None:
        """A new progress core from the restored replicas' pointstamps and kept output records."""
        self.progress = ProgressCore(self.plan.graph, self.plan.outputs, point.pointstamps, delivered=self.delivered,
                                     kept=point.kept)
        self.progress_incarnation = self.incarnation
        self.to_progress.clear()
        self._connect()

    def _resume(self, key: ReplicaKey, point: RestorePoint) -> None:
        """Replica ``key`` runs again: its logged back-edge batches first, then its inputs from their positions."""
        self.waiting.discard(key)
        vertex = next((name for name in self.plan.chain(key.chain).vertices if name in self.plan.inputs), None)
        if vertex is not None:
            planned = self.planned[(vertex, key.replica)]
            self.commands[key] = collections.deque(_rewound(planned, point.position(key, vertex)))
        self._guard(key, self.replicas[key].resume)

    def _end_recovery(self) -> None:
        if self.coordinator is None:
            self.coordinator = self._new_coordinator()
        self.coordinator.last_end = self.result.steps

    # -- snapshots ---------------------------------------------------------------------------

    def _new_coordinator(self) -> CoordinatorCore:
        """A coordinator whose ids follow every id used before (even of abandoned snapshots)."""
        assert self.recovery is not None
        first = max(self.recovery.store.next_id(), self.last_snapshot_id + 1)
        core = CoordinatorCore(list(self._keys()), first, self.recovery.interval, self.recovery.timeout,
                               self.incarnation)
        core.last_end = self.result.steps
        return core

    def _tick_coordinator(self) -> None:
        if self.coordinator is not None:
            self.coordinator.tick(self.result.steps)

    def _snapshot_actions(self) -> list[Callable[[], None]]:
        actions: list[Callable[[], None]] = []
        coordinator = self.coordinator
        if (coordinator is not None and not self.recovery_steps and not self.result.finished
                and coordinator.due(self.result.steps)):
            actions.append(self._trigger)
        if self.writes:
            actions.append(self._write)
        if self.acks and coordinator is not None:
            actions.append(self._acknowledge)
        if self.commits and coordinator is not None:
            actions.append(self._commit)
        return actions

    def _trigger(self) -> None:
        """The coordinator starts a snapshot: a barrier for every input replica."""
        assert self.coordinator is not None
        trigger = self.coordinator.trigger(self.result.steps)
        if trigger is None:
            return
        self.last_snapshot_id = trigger.snapshot_id
        hold = bool(self.pending_rescale)  # a rescale's cut
        if hold:
            self.holds.add(trigger.snapshot_id)
        else:
            self.triggered[trigger.snapshot_id] = dict(self.delivered)
        marker = Marker(trigger.snapshot_id, snapshot=not hold, delivered=dict(self.delivered), hold=hold)
        for name in self.plan.inputs:
            for key in self._input_replicas(name):
                self.injects[key].append((trigger.incarnation, marker))

    def _write(self) -> None:
        """A replica's writer stores one local snapshot, then acknowledges it."""
        assert self.recovery is not None
        incarnation, snapshot = self.writes.pop(self.rng.randrange(len(self.writes)))
        if not self._current(snapshot.key, incarnation):
            return
        part = self.recovery.store.write_part(snapshot.snapshot_id, part_name(snapshot.key), snapshot.data)
        self.acks.append((incarnation, Acknowledgement(snapshot.key, snapshot.snapshot_id, incarnation, (part,),
                                                       snapshot.summary)))

    def _acknowledge(self) -> None:
        assert self.coordinator is not None
        _, ack = self.acks.pop(self.rng.randrange(len(self.acks)))
        commit = self.coordinator.acknowledge(ack, self.result.steps)
        if commit is not None:
            self.commits.append((commit.incarnation, commit))

    def _commit(self) -> None:
        """The coordinator writes the job part and the manifest, then applies retention."""
        assert self.recovery is not None and self.coordinator is not None
        incarnation, commit = self.commits.popleft()
        if incarnation != self.coordinator.incarnation:
            return
        if commit.snapshot_id in self.holds:
            self.coordinator.held(commit.snapshot_id, self.result.steps)
            self._rescale(commit)
            return
        complete = commit_snapshot(self.recovery.store, self.plan, commit, self.triggered.pop(commit.snapshot_id, {}),
                                   self.recovery.retain)
        self.coordinator.committed(commit.snapshot_id, self.result.steps)
        self.result.snapshots.append(commit.snapshot_id)
        for name, epoch, parts in self.gate.release(complete):  # the driver learns of the commit
            self._hand_out(name, epoch, parts)

    # -- rescaling ---------------------------------------------------------------------------

    def _ask_rescale(self, widths: dict[str, int]) -> None:
        """The driver asks for ``widths``: the next snapshot commit is the cut (one is due now)."""
        if self.result.finished:
            return
        groups = width_groups(self.plan)
        for name in widths:  # a later request overrides an earlier one for the same vertices
            for member in groups[name]:
                self.pending_rescale.pop(member, None)
        self.pending_rescale.update(widths)
        if self.coordinator is not None:
            self.coordinator.last_end = None  # due at once

    def _rescale(self, cut: Commit) -> None:
        """Every replica is held at rescale cut ``cut``: each hands its state over in pieces
        (the moving ones copied, as through Ray's object store), the job switches to the new
        plan, and each replica of it adopts its pieces; the retired ones are dropped. A dead
        replica cannot hand over: its recovery comes first, then another cut."""
        assert self.flow is not None
        if self.result.finished or self.dead & set(self._keys()):
            return  # the recovery restores every replica, then the next cut is this rescale's
        widths = new_widths(self.plan, self.pending_rescale)
        self.pending_rescale = {}
        plan = compile_plan(self.flow, self.parallelism, self.chaining, widths)
        old_widths = {name: self.plan.width(name) for name in self.plan.vertices}
        reports: dict[ReplicaKey, HeldReport] = dict(cut.summaries)  # type: ignore[arg-type]
        tables = new_tables(plan, old_widths, [report.tables for report in reports.values()])
        pieces: dict[ReplicaKey, list[Piece]] = {key: [] for key in plan.replica_keys()}
        for key in self._keys():
            for new, piece in self.replicas[key].hand_over(plan, old_widths, tables).items():
                pieces[new].append(piece if new == key else cloudpickle.loads(cloudpickle.dumps(piece)))
        point = cut_point(plan, reports)
        retired = set(self._keys())
        self.plan = plan
        retired -= set(self._keys())
        for key in retired:
            self._forget(key)
        self.result.rescales.append((self.result.steps, widths, cut.snapshot_id))
        self.incarnation += 1
        self.gate.rollback()  # what it held comes again from the kept records
        self.coordinator = self._new_coordinator()  # for the new replicas; paused while they adopt
        held: list[tuple[Pointstamp, int]] = []
        keys = list(self._keys())
        adopts = [functools.partial(self._adopt, key, old_widths, tables, pieces[key], held)
                  for key in self.rng.sample(keys, len(keys))]
        resumes = [functools.partial(self._resume, key, point) for key in self.rng.sample(keys, len(keys))]
        self.recovery_steps = collections.deque(
            [*adopts, lambda: self._rebuild_progress(dataclasses.replace(point, pointstamps=summed(held))),
             *resumes, self._end_recovery])

    def _adopt(self, key: ReplicaKey, old_widths: dict[str, int], tables: dict[str, KeyGroupAssignment],
               pieces: list[Piece], held: list[tuple[Pointstamp, int]]) -> None:
        """Replica ``key`` of the rescaled job, fresh, from the pieces handed over to it."""
        core = self._fresh(key)
        self._guard(key, lambda: held.extend(core.adopt(old_widths, tables, pieces)))

    def _forget(self, key: ReplicaKey) -> None:
        """A replica a rescale retired: its core, its mailboxes and what was sent to it go."""
        for mapping in (self.replicas, self.incarnations, self.to_progress, self.pushes, self.commands, self.injects):
            mapping.pop(key, None)
        self.dead.discard(key)
        self.waiting.discard(key)
        for link in [link for link in self.links if key in link]:
            del self.links[link]
        self.writes = [(i, w) for i, w in self.writes if w.key != key]


def _rewound(commands: list[Command], position: int) -> list[Command]:
    """``commands`` after the first ``position`` pushes and advances (markers between them skipped)."""
    consumed = 0
    for index, command in enumerate(commands):
        if consumed == position:
            return commands[index:]
        consumed += command[0] in ("push", "advance")
    return []
