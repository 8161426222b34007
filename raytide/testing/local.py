"""An in-process runtime: every replica core, the progress core and the snapshot
coordinator in one process, no Ray, under a seeded scheduler.

It runs the same :class:`~raytide.engine.replica.ReplicaCore`,
:class:`~raytide.engine.progress_core.ProgressCore` and
:class:`~raytide.snapshots.coordinator.CoordinatorCore` as the Ray actors, and delivers
their messages the way Ray may: FIFO from one replica to another (data batches and
markers alike), FIFO from the progress actor to each replica, in *any* order from a
replica to the progress actor (it is a threaded actor; the cores number those
messages; with ``nodes``, through a relay per node; a batch may ride with data to a
peer, which passes it on, as on Ray: :mod:`raytide.engine.riding`), driver commands FIFO per input
replica, and job events through a log the driver polls. At each step a seeded ``random.Random`` chooses which mailbox
delivers next (the progress actor's count as one: it is one process, taking one call at a time), so one seed is one
reproducible interleaving and many seeds explore many (FoundationDB's simulation testing); or, with a
:class:`~raytide.testing.pacing.Pacing`, which actor acts next, by what its actions cost (a model of time).

Faults are injected by step: :meth:`LocalJob.crash` kills a replica, the progress core or
the coordinator at step ``n``, losing its state and all it had in flight. Without
``recovery`` the job then fails. With a :class:`LocalRecovery` it takes snapshots into a
real :class:`~raytide.snapshots.store.SnapshotStore` every few steps and, a few steps
after a death is noticed, recovers (:mod:`raytide.snapshots.recovering`) one step at a
time, so that further crashes can strike in the middle of it. Every message carries its sender's incarnation and is
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
import functools
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from raytide.core.dataflow import Dataflow
from raytide.engine.epoch_tokens import rides_with_tokens
from raytide.engine.progress_core import ProgressCore, ProgressEffects
from raytide.engine.replica import ReplicaCore
from raytide.errors import RaytideError, RecoveryError, RescaleError, SnapshotError
from raytide.physical.plan import PhysicalPlan, compile_plan
from raytide.physical.protocol import EpochComplete, JobEvent, JobFailed, JobFinished, Marker, MarkerKind, ReplicaKey, Sequenced
from raytide.progress.tracker import Pointstamp
from raytide.rescale.layout import Piece
from raytide.rescale.rescaling import HandOver, RescalePhase, Rescaling
from raytide.rescale.reshard import latest_restore_point, reshard_snapshot
from raytide.rescale.widths import new_widths
from raytide.snapshots.consumed import START, starting_point
from raytide.snapshots.coordinator import Acknowledgement, CoordinatorCore
from raytide.snapshots.recovering import Finished, Pieces, Recovering, ResetCoordinator, RestartProgress
from raytide.snapshots.recovery import RestartBudget, RestorePoint, commit_snapshot, part_name
from raytide.supervisor.replay import input_positions
from raytide.testing.consumer import LocalConsumer, LocalOutputs
from raytide.testing.mailboxes import Link, LocalTransport, Mailboxes, logged, planned_commands, replayed
from raytide.testing.outcome import COORDINATOR, DRIVER, PROGRESS, Hang, LocalRecovery, LocalRun, ReplicaDied, Target
from raytide.testing.pacing import Pacing, actor_of
from raytide.testing.recovery import SteppedRecovery
from raytide.testing.rescaling import RescaleAsks, SteppedRescale, rescaling_in


class LocalJob:
    """A dataflow running in this process under a seeded scheduler.

    Args:
        flow: the dataflow (or an already compiled plan).
        inputs: per input, the records of each epoch (epoch 0, 1, ...); pushed to the input's replicas in turn, then
            each input is closed.
        parallelism: replicas per vertex (the dataflow's default if None).
        seed: chooses the interleaving.
        chaining: fuse pipeline-connected vertices, as ``rt.run`` does.
        markers: ``{input: [(epoch, marker)]}``: inject ``marker`` at every replica of the input before its first record
            of ``epoch`` (after the input moved to it).
        recovery: take snapshots and recover from crashes instead of failing.
        restore: with ``recovery``, start from this committed snapshot of its store (an id, or ``"latest"``), of an
            earlier run at this or another parallelism, as ``rt.run(..., restore=)`` does; or
            :data:`~raytide.snapshots.consumed.START` (a restart on a store with nothing committed, as a stream's is).
        consumer: reads every output as a ``job.results`` loop does (see :mod:`raytide.testing.consumer`), across the
            drivers of a job restarted after :meth:`crash` of :data:`~raytide.testing.outcome.DRIVER`.
        nodes, relay_fanin: spread the replicas over this many nodes, each sending its progress through a relay, as
            on a Ray cluster, and through a group's relay per ``relay_fanin`` nodes (as on Ray if None) if more (:class:`Mailboxes`).
        pacing: choose the next actor by what its actions cost, and keep the model's clock
            (:mod:`raytide.testing.pacing`), instead of one mailbox at a time uniformly.

    With ``recovery`` and a :class:`~raytide.Dataflow` (not a plan), :meth:`rescale` changes
    the parallelism of vertices while the job runs, as ``job.rescale`` does on Ray.
    """

    def __init__(self, flow: Dataflow | PhysicalPlan, inputs: Mapping[str, Sequence[Sequence[Any]]],
                 parallelism: int | None = None, seed: int = 0, chaining: bool = True,
                 markers: Mapping[str, Sequence[tuple[int, Marker]]] | None = None,
                 recovery: LocalRecovery | None = None, restore: int | str | None = None,
                 consumer: LocalConsumer | None = None, nodes: int | None = None, pacing: Pacing | None = None,
                 relay_fanin: int | None = None) -> None:
        self.plan = flow if isinstance(flow, PhysicalPlan) else compile_plan(flow, parallelism, chaining)
        self.flow = flow if isinstance(flow, Dataflow) else None
        self.parallelism, self.chaining = parallelism, chaining
        self.rng = random.Random(seed)
        self.recovery = recovery
        self.mail, self.pacing = Mailboxes(nodes, relay_fanin, relayed=[] if pacing else None), pacing
        self.incarnation = 0
        self.incarnations = {key: 0 for key in self.replica_keys()}
        self.replicas = {key: self._core(key) for key in self.replica_keys()}
        self.progress: ProgressCore | None = ProgressCore(self.plan.graph, self.plan.outputs,
                                                          self.plan.initial_pointstamps())
        self.progress_incarnation = 0
        self.connected = False
        self.dead = self.mail.dead  # shared: a dead relay delivers nothing
        self.waiting: set[ReplicaKey] = set()  # restored, not resumed: deliveries to them wait
        self.crashes: dict[int, list[Target]] = {}  # step -> what dies then (several may, at once)
        self.slow: dict[Target, float] = {}  # replicas slowed down (:meth:`slow_down`)
        self.failures: list[tuple[int, str]] = []  # (step at which it is noticed, what died)
        self.recovering: SteppedRecovery | None = None
        self.result = LocalRun({name: {} for name in self.plan.outputs})
        self.outputs = LocalOutputs(self.plan.outputs, recovery.output_commit if recovery is not None else "epoch",
                                    self.result.outputs, consumer, recovery.store if recovery is not None else None)
        self.asks = RescaleAsks()
        self.rescaling: SteppedRescale | None = None
        self.planned = planned_commands(self.plan, inputs, markers or {})
        self.calls = logged(self.planned, recovery.retain if recovery is not None else 1)  # kept as on Ray
        for (name, replica), commands in self.planned.items():
            self.mail.commands[self._input_replicas(name)[replica]].extend(commands)
        self.coordinator: CoordinatorCore | None = None
        self.last_snapshot_id = 0
        self.started_from: int | None = None
        if recovery is not None:
            self.budget = RestartBudget(recovery.max_restarts)
            self.first_id = recovery.store.next_id()  # this run recovers from its own snapshots (and restore=)
            if restore is not None:
                self._start_from(restore)
            else:
                self.outputs.start(self.first_id)
            self.coordinator = self._new_coordinator()

    def _core(self, key: ReplicaKey) -> ReplicaCore:
        transport = LocalTransport(self.mail, key, self.incarnations[key], lambda: self.progress is not None,
                                   self.mail.via(key, self.replica_keys()), rides_with_tokens(self.plan, key.chain))
        return ReplicaCore(self.plan, key.chain, key.replica, transport, keep_outputs=self.recovery is not None)

    def _input_replicas(self, name: str) -> list[ReplicaKey]:
        chain = self.plan.chain_of(name).name
        return [ReplicaKey(chain, r) for r in range(self.plan.width(name))]

    def rescale(self, widths: Mapping[str, int], at_step: int) -> None:
        """At step ``at_step``, ask for vertices at the parallelism ``widths`` gives them
        (``{vertex: n}``). Once no recovery or other rescale is under way, the job rescales in
        the steps the Ray driver takes (:class:`~raytide.rescale.rescaling.Rescaling`, its cut
        the coordinator's next trigger); a crash before or during it is recovered from, and
        the rescale still happens."""
        if self.recovery is None or self.flow is None:
            raise RescaleError("LocalJob.rescale needs recovery=LocalRecovery(...) and a Dataflow (not a plan)")
        new_widths(self.plan, widths)  # refused now, not at the cut
        self.asks.ask(widths, at_step)

    def crash(self, target: Target, at_step: int) -> None:
        """Kill ``target`` (a replica key, :data:`PROGRESS`, :data:`COORDINATOR` or
        :data:`DRIVER`) at step ``at_step`` (with whatever else dies then): its state and
        what it had not sent yet are lost; what it had sent still arrives, late, from its
        dead incarnation. The driver's crash ends the run (a new ``LocalJob`` with
        ``restore=`` and the same consumer is the new driver)."""
        self.crashes.setdefault(at_step, []).append(target)

    # -- running -------------------------------------------------------------------------

    def run(self, max_steps: int = 1_000_000, after_step: Callable[[LocalJob], None] | None = None) -> LocalRun:
        """Deliver messages until nothing is left to deliver (markers and status pushes may
        still travel after the job finished), the job fails, or ``max_steps``.

        ``after_step(job)`` runs after every step (an invariant check, for tests).

        Raises:
            RuntimeError: still running after ``max_steps`` (a livelock), or quiescent
                without having finished (a hang: something waits forever).
        """
        while self.result.failure is None and self.result.driver_crashed is None:
            if self.result.steps in self.crashes:
                for target in self.crashes.pop(self.result.steps):
                    self._kill(target)
                continue
            if not self.result.finished:
                self.asks.arrive(self.result.steps, self.plan)
            self._notice_failures()
            self._start_rescale()
            self._tick_coordinator()
            choices = self._mailboxes()
            if not choices:
                if self.result.finished or self.result.failure is not None:  # a recovery may fail the job just now
                    break
                if self.failures:  # nothing moves until the death is noticed: notice it now
                    self.failures = [(self.result.steps, cause) for _, cause in self.failures]
                    continue
                raise Hang(f"the job hangs: nothing left to deliver after {self.result.steps} steps and "
                           f"not finished; pending: {self.progress.describe() if self.progress else None}")
            if self.result.steps >= max_steps:
                raise Hang(f"the job is still running after {max_steps} steps")
            self.result.steps += 1
            self._choose(choices)()
            if after_step is not None:
                after_step(self)
        return self.result

    def _mailboxes(self) -> list[Callable[[], None]]:
        """One action per mailbox with something to deliver."""
        actions: list[Callable[[], None]] = []
        if not self.connected and self.progress is not None:
            actions.append(self._connect)
        links = [link for link in self.mail.pending_links() if link[1] not in self.waiting]
        actions += (self.pacing.per_receiver(links, self._deliver, self.rng) if self.pacing is not None
                    else [functools.partial(self._deliver, link, to=link[1]) for link in links])
        keys = self.replica_keys()
        if self.mail.calling(keys):
            actions.append(functools.partial(self._take_progress_call, to=PROGRESS))
        actions += [functools.partial(self.mail.forward, key, to=to) for key, to in self.mail.forwarding(keys)]
        for deliver, mailbox in ((self._push_status, self.mail.pushes), (self._command, self.mail.commands),
                                 (self._inject, self.mail.injects), (self.mail.fan_out, self.mail.fan_outs)):
            actions += [functools.partial(deliver, to=key) for key, queue in mailbox.items()
                        if queue and key not in self.waiting]
        driving = [under_way.step for under_way in (self.recovering, self.rescaling) if under_way and under_way.steps]
        if self.mail.log and not driving:  # the driver recovers (or hands state over), then reads events again
            actions.append(self._poll)
        actions += driving
        actions += self.outputs.consumer_actions()
        if self.recovery is not None:
            actions += self._snapshot_actions()
        return actions

    def slow_down(self, key: ReplicaKey, weight: float) -> None:
        """Make replica ``key`` slow but alive: what is on its way to it is delivered ``weight`` times as often as
        another mailbox's (0 < weight < 1), as a busy actor's queue drains; timeouts (in steps) may then run out."""
        self.slow[key] = weight

    def _choose(self, actions: list[Callable[[], None]]) -> Callable[[], None]:
        """The next action: uniformly, weighted by the slowness of the replica each delivers to, or paced."""
        if self.pacing is not None:
            return self.pacing.choose(actions, self.rng, self.mail, command=self._command)
        if not self.slow:
            return self.rng.choice(actions)
        return self.rng.choices(actions, [self.slow.get(actor_of(action), 1.0) for action in actions])[0]

    def _current(self, key: ReplicaKey, incarnation: int) -> bool:
        """Whether a message of ``incarnation`` reaches replica ``key`` (alive, of it, not retired by a rescale)."""
        return key not in self.dead and self.incarnations.get(key) == incarnation

    def _connect(self) -> None:
        assert self.progress is not None
        self.connected = True
        self._perform(self.progress.connect({key: core.subscriptions() for key, core in self.replicas.items()}))

    def _deliver(self, link: Link, to: ReplicaKey) -> None:
        """The next message on ``link``; data takes the progress batches riding with it along."""
        incarnation, message, riders = self.mail.take(link)
        key = link[1]
        if not self._current(key, incarnation):
            return
        core = self.replicas[key]
        if message[0] == "data":
            self._guard(key, core.on_messages, [message[1:]], riders=riders)
        else:
            self._guard(key, core.on_marker, *message[1:])

    def _take_progress_call(self, to: Target = PROGRESS) -> None:
        """The progress actor (``to``) takes one call (:meth:`Mailboxes.take_progress`) from a mailbox chosen at
        random and applies it. It is one process, so it is one action among the others however many mailboxes wait
        for it: while it applies one call, the replicas go on and the mailboxes gather, as a busy actor's callers do."""
        key = self.rng.choice(self.mail.calling(self.replica_keys()))
        current = [call for incarnation, call in self.mail.take_progress(key, self.rng)
                   if incarnation == self.progress_incarnation]
        if self.progress is not None and current:
            self._perform(self.progress.receive_all(current))

    def _push_status(self, to: ReplicaKey) -> None:
        incarnation, push = self.mail.pushes[to].popleft()
        if self._current(to, incarnation):
            self._guard(to, self.replicas[to].on_progress, *push)

    def _command(self, to: ReplicaKey) -> None:
        """The driver's next command for input replica ``to`` (see :data:`~raytide.testing.mailboxes.Command`)."""
        kind, *args = self.mail.commands[to].popleft()
        core = self.replicas[to]
        methods: dict[str, Callable[..., None]] = {"push": core.push_input, "advance": core.advance_input,
                                                   "marker": core.inject_marker}
        self._guard(to, methods[kind], *args)

    def _inject(self, to: ReplicaKey) -> None:
        incarnation, marker = self.mail.injects[to].popleft()
        if self._current(to, incarnation):
            self._guard(to, self.replicas[to].inject_marker, marker)

    def _guard(self, key: ReplicaKey, method: Callable[..., None], *args: Any, riders: Sequence[Sequenced] = ()) -> None:
        """Run a replica's event (taking along the progress batches ``riders`` that came with its
        data: :meth:`LocalTransport.event`); a raytide error fails the job, as the actor's guard does."""
        if key in self.dead:
            return
        try:
            with cast(LocalTransport, (core := self.replicas[key]).transport).event(riders, core.riders_to_pass_on):
                method(*args)
        except RaytideError as error:
            self._record([JobFailed(error)])

    def _perform(self, effects: ProgressEffects) -> None:
        self.mail.post_pushes(effects.pushes, self.progress_incarnation, self.replica_keys())
        self.mail.log.extend((self.progress_incarnation, event) for event in effects.events)

    def _poll(self) -> None:
        """The driver reads the oldest job event (events of an older incarnation are dropped:
        a recovery replays their epochs)."""
        incarnation, event = self.mail.log.popleft()
        if incarnation == self.progress_incarnation:
            self._record([event])

    def _record(self, events: Sequence[JobEvent | ReplicaDied]) -> None:
        for event in events:
            self.result.events.append(event)
            if isinstance(event, EpochComplete):
                self.outputs.offer(event.output, event.epoch, event.parts)
            elif isinstance(event, JobFinished):
                self.outputs.finish()
                self.result.finished = True

    # -- faults ----------------------------------------------------------------------------

    def _kill(self, target: Target) -> None:
        """Fault injection: ``target`` dies with its state and what it had in flight."""
        if target == DRIVER:  # everything in this process is gone; the store and the consumer's log are not
            self.result.driver_crashed = self.result.steps
            return
        if self.result.finished:
            return  # the driver has seen the end: the job is gone
        if isinstance(target, ReplicaKey):
            self.dead.add(target)
            self.mail.drop_inbound(target)
        elif target == PROGRESS:
            self.progress = None
            self.mail.to_progress.clear()
            self.mail.log.clear()
        elif target == COORDINATOR:
            self.coordinator = None
            self.mail.acks.clear()
            self.mail.commits.clear()
        else:
            raise ValueError(f"no such crash target: {target!r}")
        if self.recovery is None:
            self._record([ReplicaDied(target, self.result.steps)])
        else:
            noticed = self.result.steps + self.rng.randint(0, self.recovery.detection)
            self.failures.append((noticed, f"{target} died at step {self.result.steps}"))

    def _notice_failures(self) -> None:
        """Start a recovery for the deaths noticed by now (or start the one under way over)."""
        due = [cause for step, cause in self.failures if step <= self.result.steps]
        if not due or self.result.finished:
            return
        self.failures = [(step, cause) for step, cause in self.failures if step > self.result.steps]
        cause = "; ".join(due)
        self.result.recoveries.append(cause)
        if self.recovering is not None and not self.recovering.over:
            self.recovering.died(cause)
        elif rescaling_in(self.rescaling, RescalePhase.HOLDING, RescalePhase.HANDING_OVER):
            self.rescaling.died(cause)  # type: ignore[union-attr]
        else:
            self.run_recovery(Recovering.after_death(self.plan.name, self.budget, self.incarnation, cause))

    # -- recovery: the runtime side of raytide.testing.recovery.RecoveryRuntime ---------------

    def run_recovery(self, machine: Recovering) -> None:
        self.recovering = SteppedRecovery(self, machine, self.rng)

    @property
    def recovery_steps(self) -> collections.deque[Callable[[], None]]:
        """The steps of the recovery under way (empty: none is)."""
        return self.recovering.steps if self.recovering is not None else collections.deque()

    def replica_keys(self) -> list[ReplicaKey]:
        return self.plan.replica_keys()

    def roll_back_outputs(self) -> None:
        self.outputs.gate.rollback()

    def pause_coordinator(self, incarnation: int) -> None:
        """The coordinator abandons the snapshot in flight (triggers wait while a recovery runs)."""
        if self.coordinator is not None and self.coordinator.incarnation < incarnation:
            self.coordinator.reset(incarnation, self.result.steps)

    def begin_incarnation(self, incarnation: int) -> None:
        self.incarnation = incarnation

    def latest_point(self) -> RestorePoint:
        assert self.recovery is not None
        return latest_restore_point(self.plan, self.recovery.store, self.recovery.retain, self.first_id,
                                    self.started_from)

    def restore_replica(self, key: ReplicaKey, point: RestorePoint) -> None:
        """Replica ``key``, fresh (reset in place, or replaced if it died), from its part of ``point``."""
        assert self.recovery is not None
        core = self._fresh(key)
        if point.snapshot_id is not None:
            data = self.recovery.store.read_part(point.snapshot_id, part_name(key))
            core.restore(data)  # what it raises fails the recovery (SteppedRecovery), as the actor's call does on Ray

    def adopt_pieces(self, key: ReplicaKey, pieces: Pieces, held: list[tuple[Pointstamp, int]]) -> None:
        """Replica ``key`` of the rescaled job, fresh, from the pieces handed over to it."""
        core = self._fresh(key)
        held.extend(core.adopt(pieces.old_widths, pieces.tables, pieces.refs[key]))  # raises as restore_replica

    def subscriptions(self) -> dict[ReplicaKey, list]:
        return {key: core.subscriptions() for key, core in self.replicas.items()}

    def restart_progress(self, effect: RestartProgress) -> None:
        """A new progress core from the restored replicas' pointstamps and kept output records."""
        self.progress = ProgressCore(self.plan.graph, self.plan.outputs, effect.pointstamps,
                                     delivered=self.outputs.book.delivered(), kept=effect.kept)
        self.progress_incarnation = effect.incarnation
        self.mail.to_progress.clear()
        self.connected = True
        self._perform(self.progress.connect(effect.subscriptions))

    def resume_replica(self, key: ReplicaKey) -> None:
        """Replica ``key`` runs again: its logged back-edge batches first."""
        self.waiting.discard(key)
        self._guard(key, self.replicas[key].resume)

    def replay_inputs(self, point: RestorePoint) -> None:
        """Every input replica gets the driver's calls after its position in ``point``, as on Ray."""
        try:
            self.mail.commands.update(replayed(self.calls, self.plan, point))
        except RecoveryError as error:
            self.fail(error)

    def reset_coordinator(self, effect: ResetCoordinator) -> None:
        """The coordinator snapshots the restored job (a new one if it died)."""
        assert self.recovery is not None, "only a job with recovery recovers"
        if self.coordinator is None:
            self.coordinator = self._new_coordinator()
        elif self.coordinator.incarnation < effect.incarnation:
            self.coordinator.reset(effect.incarnation, self.result.steps)
        self.coordinator.follow(self.recovery.store.next_id())  # as on Ray: after a snapshot the recovery wrote
        self.coordinator.last_end = self.result.steps

    def recovered(self, effect: Finished) -> None:
        """The job runs again (nothing to record: :attr:`LocalRun.recoveries` has every cause);
        a rescale waiting for the recovery goes on."""
        if rescaling_in(self.rescaling, RescalePhase.RECOVERING, RescalePhase.ADOPTING):
            self.rescaling.recovered(effect.incarnation)  # type: ignore[union-attr]

    def fail(self, error: RaytideError) -> None:
        self._record([JobFailed(error)])

    def _start_from(self, restore: int | str) -> None:
        """Begin at committed snapshot ``restore`` of an earlier run (laid out for this job's
        parallelism first, if it was taken at another): incarnation 1, what that run handed
        out is not handed out again, the inputs continue where the snapshot left them."""
        assert self.recovery is not None
        store = self.recovery.store
        snapshot_id = None if restore == START else reshard_snapshot(
            self.plan, store, None if restore == "latest" else int(restore), self.recovery.retain)
        if snapshot_id is None and restore != START:
            raise SnapshotError(f"restore={restore!r}: the store {store} has no committed snapshot")
        point = starting_point(self.plan, store, START if snapshot_id is None else snapshot_id)
        self.incarnation, self.started_from = 1, snapshot_id
        self.progress = None  # nothing runs before the restore: no progress core, every replica waits
        self.waiting = set(self.replica_keys())
        self.outputs.start(self.first_id, point)
        self.run_recovery(Recovering.from_point(self.plan.name, self.budget, point))

    def _fresh(self, key: ReplicaKey) -> ReplicaCore:
        """Replica ``key`` reset in place, or replaced if it died: a fresh core that waits to be resumed."""
        self.dead.discard(key)
        self.incarnations[key] = self.incarnation
        self.replicas[key] = core = self._core(key)
        self.waiting.add(key)
        self.mail.commands[key].clear()
        return core

    # -- snapshots ---------------------------------------------------------------------------

    def _new_coordinator(self) -> CoordinatorCore:
        """A coordinator whose ids follow every id used before (even of abandoned snapshots)."""
        assert self.recovery is not None
        first = max(self.recovery.store.next_id(), self.last_snapshot_id + 1)
        core = CoordinatorCore(list(self.replica_keys()), first, self.recovery.interval, self.recovery.timeout, self.incarnation)
        core.last_end = self.result.steps
        return core

    def _tick_coordinator(self) -> None:
        """The coordinator's clock: it abandons a snapshot (or rescale cut) that took too long."""
        if self.coordinator is None:
            return
        flight = self.coordinator.in_flight
        abandoned = self.coordinator.tick(self.result.steps)
        if abandoned is not None and flight is not None and flight.hold:
            self.rescaling.cut_missed(abandoned.reason)  # type: ignore[union-attr]

    def _snapshot_actions(self) -> list[Callable[[], None]]:
        actions: list[Callable[[], None]] = []
        coordinator, cut = self.coordinator, rescaling_in(self.rescaling, RescalePhase.HOLDING)  # a cut: at once
        if (coordinator is not None and not self.recovery_steps and not self.result.finished
                and not rescaling_in(self.rescaling, RescalePhase.HANDING_OVER)
                and (coordinator.due(self.result.steps) or cut and coordinator.in_flight is None)):
            actions.append(self._trigger)
        if self.mail.writes:
            actions.append(self._write)
        if self.mail.acks and coordinator is not None:
            actions.append(self._acknowledge)
        if self.mail.commits and coordinator is not None:
            actions.append(self._commit)
        return actions

    def _trigger(self) -> None:
        """The coordinator starts a snapshot: a barrier for every input replica."""
        assert self.coordinator is not None
        holding = rescaling_in(self.rescaling, RescalePhase.HOLDING)
        trigger = self.coordinator.trigger(self.result.steps, self.outputs.durable(), hold=holding)
        if trigger is None:
            return
        self.last_snapshot_id = trigger.snapshot_id
        marker = Marker(trigger.snapshot_id, MarkerKind.HOLD if trigger.hold else MarkerKind.SNAPSHOT, trigger.delivered)
        for name in self.plan.inputs:
            for key in self._input_replicas(name):
                self.mail.injects[key].append((trigger.incarnation, marker))

    def _write(self) -> None:
        """A replica's writer stores one local snapshot, then acknowledges it."""
        assert self.recovery is not None
        incarnation, snapshot = self.mail.writes.pop(self.rng.randrange(len(self.mail.writes)))
        if not self._current(snapshot.key, incarnation):
            return
        try:
            part = self.recovery.store.write_part(snapshot.snapshot_id, part_name(snapshot.key), snapshot.data)
        except OSError as error:  # as the replica's writer thread does: the snapshot cannot complete
            if self.coordinator is not None:
                self.coordinator.write_failed(incarnation, snapshot.snapshot_id, repr(error), self.result.steps)
            return
        self.mail.acks.append((incarnation, Acknowledgement(snapshot.key, snapshot.snapshot_id, incarnation, (part,),
                                                       snapshot.summary)))

    def _acknowledge(self) -> None:
        assert self.coordinator is not None
        _, ack = self.mail.acks.pop(self.rng.randrange(len(self.mail.acks)))
        commit = self.coordinator.acknowledge(ack, self.result.steps)
        if commit is not None:
            self.mail.commits.append((commit.incarnation, commit))

    def _commit(self) -> None:
        """The coordinator writes the job part and the manifest, then applies retention."""
        assert self.recovery is not None and self.coordinator is not None
        incarnation, commit = self.mail.commits.popleft()
        if incarnation != self.coordinator.incarnation:
            return
        if commit.hold:
            self.coordinator.held(commit.snapshot_id, self.result.steps)
            self.rescaling.held(commit.snapshot_id, dict(commit.summaries), self.result.finished)  # type: ignore[union-attr, arg-type]
            return
        try:
            complete = commit_snapshot(self.recovery.store, self.plan, commit, commit.delivered, self.recovery.retain)
        except OSError as error:  # as the coordinator actor does: this snapshot is lost, the job goes on
            self.coordinator.fail(f"committing it failed: {error!r}", self.result.steps)
            return
        self.coordinator.committed(commit.snapshot_id, self.result.steps)
        self.result.snapshots.append(commit.snapshot_id)
        self.calls.forget_covered(input_positions({key: summary.positions for key, summary in commit.summaries.items()
                                                   if isinstance(key, ReplicaKey)}))  # as the Ray driver's sync does
        self.outputs.release(complete)  # the driver learns of the commit

    # -- rescaling ---------------------------------------------------------------------------

    def _start_rescale(self) -> None:
        """The rescale asked for, once no other recovery or rescale is under way."""
        busy = [under_way for under_way in (self.recovering, self.rescaling) if under_way and not under_way.over]
        if not self.asks.pending or self.result.finished or busy:
            return
        assert self.flow is not None
        plan = compile_plan(self.flow, self.parallelism, self.chaining, new_widths(self.plan, self.asks.take()))
        self.rescaling = SteppedRescale(self, Rescaling.between(self.plan.name, self.budget, self.incarnation,
                                                                self.plan, plan), self.rng)

    def hand_over(self, key: ReplicaKey, effect: HandOver) -> dict[ReplicaKey, Piece] | None:
        """Replica ``key``, held at the cut, splits its state (None: it died)."""
        return None if key in self.dead else self.replicas[key].hand_over(effect.plan, effect.old_widths, effect.tables)

    def switch(self, plan: PhysicalPlan, incarnation: int) -> None:
        """Incarnation ``incarnation`` begins in ``plan``'s widths: the retired replicas go (their
        cores, their mailboxes and what was sent to them), the coordinator (if alive) takes the
        new replica set."""
        for key in set(self.replica_keys()) - set(plan.replica_keys()):
            for mapping in (self.replicas, self.incarnations):
                mapping.pop(key, None)
            self.dead.discard(key)
            self.waiting.discard(key)
            self.mail.drop_replica(key)
        self.plan, self.incarnation = plan, incarnation
        if self.coordinator is not None and self.recovery is not None:
            self.coordinator.reconfigure(self.replica_keys(), incarnation, self.recovery.store.next_id(), self.result.steps)

    def rescaled(self, widths: dict[str, int], cut_id: int) -> None:
        self.result.rescales.append((self.result.steps, widths, cut_id))
