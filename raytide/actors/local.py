"""An in-process runtime: every replica core and the progress core in one process, no Ray,
under a seeded scheduler.

It runs the same :class:`~raytide.actors.replica.ReplicaCore` and
:class:`~raytide.actors.progress_core.ProgressCore` as the Ray actors, and delivers
their messages the way Ray may: FIFO from one replica to another (data batches and
markers alike), FIFO from the progress actor to each replica, in *any* order from a
replica to the progress actor (it is a threaded actor; the cores number those
messages), and driver commands FIFO per input replica. At each step a seeded
``random.Random`` chooses which mailbox delivers next, so one seed is one
reproducible interleaving and many seeds explore many (FoundationDB's simulation
testing). Faults are injected by step: :meth:`LocalJob.crash` kills a replica at step
``n``, dropping everything it had in flight and everything sent to it.

>>> import raytide as rt
>>> flow = rt.Dataflow("wordcount")
>>> flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("counts")
>>> run = LocalJob(flow, {"lines": [["a b", "b"], ["c"]]}, parallelism=2, seed=7).run()
>>> {epoch: sorted(records) for epoch, records in run.outputs["counts"].items()}
{0: [('a', 1), ('b', 2)], 1: [('c', 1)]}
"""

from __future__ import annotations

import collections
import functools
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from raytide.actors.plan import PhysicalPlan, compile_plan
from raytide.actors.progress_core import ProgressCore, ProgressEffects
from raytide.actors.protocol import (
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
from raytide.actors.replica import ReplicaCore
from raytide.core.dataflow import Dataflow
from raytide.errors import RaytideError
from raytide.progress.timestamps import Timestamp

#: A driver command for one input replica: ``("push", input, records, epoch)``,
#: ``("advance", input, epoch)`` (None closes) or ``("marker", marker)``.
Command = tuple[Any, ...]


@dataclass(frozen=True)
class ReplicaDied:
    """A replica was crashed by fault injection (the job fails: recovery is not built yet)."""

    key: ReplicaKey
    step: int


@dataclass
class LocalRun:
    """What a run did: records per output and epoch, every job event, the steps taken."""

    outputs: dict[str, dict[int, list]]
    events: list[JobEvent | ReplicaDied] = field(default_factory=list)
    steps: int = 0
    finished: bool = False

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
    """One replica's transport: appends to the runtime's mailboxes."""

    def __init__(self, job: LocalJob, key: ReplicaKey) -> None:
        self.job, self.key = job, key

    def send(self, to: ReplicaKey, channel: ChannelId, vertex: str, time: Timestamp, batch: Any) -> None:
        self.job.links[(self.key, to)].append(("data", channel, vertex, time, batch))

    def send_marker(self, to: ReplicaKey, channel: ChannelId, vertex: str, marker: Marker) -> None:
        self.job.links[(self.key, to)].append(("marker", channel, marker))

    def to_progress(self, call: Sequenced) -> None:
        self.job.to_progress[self.key].append(call)


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
    """

    def __init__(self, flow: Dataflow | PhysicalPlan, inputs: Mapping[str, Sequence[Sequence[Any]]],
                 parallelism: int | None = None, seed: int = 0, chaining: bool = True,
                 markers: Mapping[str, Sequence[tuple[int, Marker]]] | None = None) -> None:
        self.plan = flow if isinstance(flow, PhysicalPlan) else compile_plan(flow, parallelism, chaining)
        self.rng = random.Random(seed)
        self.links: dict[tuple[ReplicaKey, ReplicaKey], collections.deque] = collections.defaultdict(collections.deque)
        self.to_progress: dict[ReplicaKey, list[Sequenced]] = collections.defaultdict(list)
        self.pushes: dict[ReplicaKey, collections.deque[StatusPush]] = collections.defaultdict(collections.deque)
        self.commands: dict[ReplicaKey, collections.deque[Command]] = collections.defaultdict(collections.deque)
        self.replicas = {key: ReplicaCore(self.plan, key.chain, key.replica, _Transport(self, key))
                         for key in self._keys()}
        self.progress = ProgressCore(self.plan.graph, self.plan.outputs, self.plan.initial_pointstamps())
        self.connected = False
        self.dead: set[ReplicaKey] = set()
        self.crashes: dict[int, ReplicaKey] = {}
        self.result = LocalRun({name: {} for name in self.plan.outputs})
        self._plan_inputs(inputs, markers or {})

    def _keys(self) -> Iterable[ReplicaKey]:
        return (ReplicaKey(chain.name, r) for chain in self.plan.chains for r in range(chain.parallelism))

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
            for key, queue in zip(replicas, queues):
                self.commands[key].extend(queue)

    def crash(self, key: ReplicaKey, at_step: int) -> None:
        """Kill replica ``key`` at step ``at_step``: it stops, and its messages in flight are lost."""
        self.crashes[at_step] = key

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
                self._kill(self.crashes[self.result.steps])
                continue
            choices = self._mailboxes()
            if not choices:
                if self.result.finished:
                    break
                raise RuntimeError(f"the job hangs: nothing left to deliver after {self.result.steps} steps and "
                                   f"not finished; pending: {self.progress.describe()}")
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
        if not self.connected:
            actions.append(self._connect)
        actions += [functools.partial(self._deliver, link) for link, queue in self.links.items() if queue]
        actions += [functools.partial(self._apply_progress, key) for key, calls in self.to_progress.items() if calls]
        actions += [functools.partial(self._push_status, key) for key, queue in self.pushes.items() if queue]
        actions += [functools.partial(self._command, key) for key, queue in self.commands.items() if queue]
        return actions

    def _connect(self) -> None:
        self.connected = True
        self._perform(self.progress.connect({key: core.subscriptions() for key, core in self.replicas.items()}))

    def _deliver(self, link: tuple[ReplicaKey, ReplicaKey]) -> None:
        message = self.links[link].popleft()
        core = self.replicas[link[1]]
        if message[0] == "data":
            self._guard(link[1], core.on_message, *message[1:])
        else:
            self._guard(link[1], core.on_marker, *message[1:])

    def _apply_progress(self, key: ReplicaKey) -> None:
        """One of ``key``'s messages to the progress actor, not necessarily the oldest."""
        calls = self.to_progress[key]
        self._perform(self.progress.receive(calls.pop(self.rng.randrange(len(calls)))))

    def _push_status(self, key: ReplicaKey) -> None:
        self._guard(key, self.replicas[key].on_progress, *self.pushes[key].popleft())

    def _command(self, key: ReplicaKey) -> None:
        command = self.commands[key].popleft()
        core = self.replicas[key]
        if command[0] == "push":
            self._guard(key, core.push_input, command[1], command[2], command[3])
        elif command[0] == "advance":
            self._guard(key, core.advance_input, command[1], command[2])
        else:
            self._guard(key, core.inject_marker, command[1])

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
                self.pushes[key].append(push)
        self._record(effects.events)

    def _record(self, events: Sequence[JobEvent | ReplicaDied]) -> None:
        for event in events:
            self.result.events.append(event)
            if isinstance(event, EpochComplete):
                records = [record for part in event.parts for record in part]
                if event.epoch in self.result.outputs[event.output]:
                    raise AssertionError(f"output {event.output!r} epoch {event.epoch} completed twice")
                self.result.outputs[event.output][event.epoch] = records
            elif isinstance(event, JobFinished):
                self.result.finished = True

    def _kill(self, key: ReplicaKey) -> None:
        """Fault injection: ``key`` dies; what it sent and what was sent to it is lost."""
        del self.crashes[self.result.steps]
        self.dead.add(key)
        for link, queue in self.links.items():
            if key in link:
                queue.clear()
        self.to_progress[key].clear()
        self.pushes[key].clear()
        self.commands[key].clear()
        self._record([ReplicaDied(key, self.result.steps)])
