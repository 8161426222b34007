"""An in-process runtime: every replica core, the progress core and the snapshot
coordinator in one process, no Ray, under a seeded scheduler. :class:`LocalJob` is the
user's handle (run, crash, slow down, rescale); the simulated world it schedules is
:mod:`raytide.testing.world`, and the recoveries and rescales run in the Ray driver's own
loop (:mod:`raytide.supervisor`) on the simulator's runtimes.

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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from raytide.core.dataflow import Dataflow
from raytide.core.keygroups import KeyGroupAssignment
from raytide.engine.progress_core import ProgressCore
from raytide.engine.stepping import holds
from raytide.errors import ActorLost, RaytideError, ReplicaLost, RescaleError, SnapshotError
from raytide.physical.plan import PhysicalPlan, compile_plan
from raytide.physical.protocol import JobFailed, Marker, ReplicaKey, StepPlanMessage
from raytide.rescale.rescaling import Rescaling
from raytide.rescale.reshard import reshard_snapshot
from raytide.rescale.steps import plan_steps
from raytide.rescale.widths import new_widths
from raytide.snapshots.consumed import START, starting_point
from raytide.snapshots.recovering import Recovering
from raytide.supervisor.deaths import supervise
from raytide.supervisor.execution import Execution
from raytide.supervisor.stalls import StallWatch
from raytide.testing.consumer import LocalConsumer
from raytide.testing.mailboxes import planned_commands
from raytide.testing.outcome import COORDINATOR, DRIVER, PROGRESS, Hang, LocalRecovery, LocalRun, ReplicaDied, Target
from raytide.testing.pacing import Pacing
from raytide.testing.recovery import start_recovery
from raytide.testing.rescaling import RescaleAsks, SimRescale
from raytide.testing.solo import alone_candidate, recover_alone
from raytide.testing.world import World, idle


class LocalJob(World):
    """A dataflow running in this process under a seeded scheduler. Its public methods are the
    user's: :meth:`run`, :meth:`rescale`, :meth:`crash`, :meth:`slow_down`, ``replica_keys()``
    and ``recovery_steps`` (what a test crashes and when; ``tests/test_structure.py`` pins the list).

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
        step_plans: stepped rescales' plans (:class:`~raytide.physical.protocol.StepPlanMessage`) every replica
            has before the job starts, as the driver installs them before their first epoch: routing by the owners
            at a record's epoch, checked where the records arrive (docs/rescaling.md, "Stepped migration"; the
            state does not move yet, nor does a recovered replica get the plan again).

    With a :class:`~raytide.Dataflow` (not a plan), :meth:`rescale` changes the parallelism of
    vertices while the job runs, as ``job.rescale`` does on Ray, with or without ``recovery``
    (without, a coordinator takes the cuts from the first rescale on, and nothing is written).
    """

    def __init__(self, flow: Dataflow | PhysicalPlan, inputs: Mapping[str, Sequence[Sequence[Any]]],
                 parallelism: int | None = None, seed: int = 0, chaining: bool = True,
                 markers: Mapping[str, Sequence[tuple[int, Marker]]] | None = None,
                 recovery: LocalRecovery | None = None, restore: int | str | None = None,
                 consumer: LocalConsumer | None = None, nodes: int | None = None, pacing: Pacing | None = None,
                 relay_fanin: int | None = None, step_plans: Sequence[StepPlanMessage] = ()) -> None:
        plan = flow if isinstance(flow, PhysicalPlan) else compile_plan(flow, parallelism, chaining)
        super().__init__(plan, planned_commands(plan, inputs, markers or {}), seed, recovery, consumer, nodes, pacing,
                         relay_fanin)
        if step_plans:  # with the driver's holds at each step, made before any input moves
            made = [hold for message in step_plans for hold in holds(plan, message)]
            self.progress = ProgressCore(plan.graph, plan.outputs, plan.initial_pointstamps() + made)
        for message in step_plans:
            for core in self.replicas.values():
                core.install_plan(message)
        self.flow = flow if isinstance(flow, Dataflow) else None
        self.parallelism, self.chaining = parallelism, chaining
        self.crashes: dict[int, list[Target]] = {}  # step -> what dies then (several may, at once)
        self.migrations: dict[int, list[tuple[str, int, int]]] = {}  # step -> the stepped rescales made then (migrate)
        self.in_force: list[tuple[int, int, tuple[str, int, int]]] = []  # (incarnation, last commit, migration)
        self.asks = RescaleAsks()
        self.events_seen = 0  # the job events the stall rule has seen
        #: The stall rule for frozen actors (``LocalRecovery.stall``), None: frozen actors are waited for.
        self.frozen_stalls: StallWatch[Target] | None = None
        if recovery is not None and recovery.stall is not None:
            self.frozen_stalls = StallWatch(recovery.stall, recovery.ping)
        if recovery is not None:
            self.first_id = recovery.store.next_id()  # this run recovers from its own snapshots (and restore=)
            if restore is not None:
                self._start_from(restore)
            else:
                self.outputs.start(self.first_id)
            self.coordinator = self._new_coordinator()

    def rescale(self, widths: Mapping[str, int], at_step: int) -> None:
        """At step ``at_step``, ask for vertices at the parallelism ``widths`` gives them
        (``{vertex: n}``). Once no recovery or other rescale is under way, the job rescales in
        the steps the Ray driver takes (:class:`~raytide.rescale.rescaling.Rescaling`, its cut
        the coordinator's next trigger); a crash before or during it is recovered from, and
        the rescale still happens."""
        if self.flow is None:
            raise RescaleError("LocalJob.rescale needs a Dataflow (not a plan)")
        new_widths(self.plan, widths)  # refused now, not at the cut
        self.asks.ask(widths, at_step)

    def migrate(self, vertex: str, parallelism: int, at_step: int, groups_per_step: int = 8) -> None:
        """At step ``at_step``, move ``vertex``'s key groups in steps, as a stepped rescale to
        ``parallelism`` would (docs/rescaling.md, "Stepped migration"): the driver plans the
        steps from the epoch after the latest any input has reached, makes their holds at
        the progress core and installs the plan at every replica in that one step (as the
        driver holds its inputs until every replica has it). The vertex keeps its replicas
        (no short switch yet): shrinking empties the replicas from ``parallelism`` on.

        With ``recovery``, it waits for a snapshot in flight, no snapshot is taken while a plan
        runs, and a death falls back to today's whole-job recovery from the last committed
        snapshot (taken before the plan), after which the rescale is made again with a new
        plan (until a snapshot taken after the plan's end commits).

        Raises:
            RescaleError: ``parallelism`` wider than the vertex is.
        """
        if not 1 <= parallelism <= self.plan.width(vertex):
            raise RescaleError(f"LocalJob.migrate: vertex {vertex!r} has {self.plan.width(vertex)} replicas; its key "
                               f"groups can move to 1 to that many, not {parallelism} (no short switch yet)")
        self.migrations.setdefault(at_step, []).append((vertex, parallelism, groups_per_step))

    def _migrate(self, vertex: str, parallelism: int, groups_per_step: int) -> None:
        busy = self.recovery_steps or self.progress is None or (self.coordinator and self.coordinator.in_flight)
        if busy:  # a snapshot in flight or a recovery: the driver waits for it to end
            self.migrations.setdefault(self.result.steps + 1, []).append((vertex, parallelism, groups_per_step))
            return
        self.in_force.append((self.incarnation, max(self.result.snapshots, default=0),
                              (vertex, parallelism, groups_per_step)))
        epochs = [epoch for core in self.replicas.values() for epoch in core.input_epochs.values()]
        if None in epochs:  # an input closed: its records went by the old table
            self.result.refused.append((self.result.steps, RescaleError(f"vertex {vertex!r}: an input has closed")))
            return
        first = max(epoch for epoch in epochs if epoch is not None) + 1
        steps = plan_steps(KeyGroupAssignment.contiguous(self.plan.width(vertex)), parallelism, first, groups_per_step)
        message = steps.message(vertex)
        assert self.progress is not None
        self._perform(self.progress.hold(holds(self.plan, message)))
        for core in self.replicas.values():
            core.install_plan(message)
        self.result.migrations.append((self.result.steps, message))

    def _replan(self) -> None:
        """The stepped rescales a recovery undid (the job went back to a snapshot from before
        their plans) are made again; one a snapshot from after its end holds is done."""
        if not self.in_force or self.recovery_steps:
            return
        committed = max(self.result.snapshots, default=0)
        undone = [entry for entry in self.in_force if entry[0] != self.incarnation]
        self.in_force = [entry for entry in self.in_force
                         if entry[0] == self.incarnation and not (committed > entry[1] and not self._stepping())]
        for _, _, migration in undone:
            self.migrations.setdefault(self.result.steps, []).append(migration)

    def crash(self, target: Target, at_step: int) -> None:
        """Kill ``target`` (a replica key, :data:`PROGRESS`, :data:`COORDINATOR` or
        :data:`DRIVER`) at step ``at_step`` (with whatever else dies then): its state and
        what it had not sent yet are lost; what it had sent still arrives, late, from its
        dead incarnation. The driver's crash ends the run (a new ``LocalJob`` with
        ``restore=`` and the same consumer is the new driver)."""
        self.crashes.setdefault(at_step, []).append(target)

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
            self._replan()
            for migration in self.migrations.pop(self.result.steps, ()):
                self._migrate(*migration)
            self._supervise()
            self._tick_coordinator()
            choices = self._mailboxes()
            if not choices:
                if self.result.finished or self.result.failure is not None:  # a recovery may fail the job just now
                    break
                self._stalled(max_steps)
                continue
            if self.result.steps >= max_steps:
                raise Hang(f"the job is still running after {max_steps} steps")
            self.result.steps += 1
            action = self._choose(choices)
            if action is idle and self.result.finished:
                break  # all that is left of a finished job is a frozen actor's mail
            action()
            self._watch_stall()
            if after_step is not None:
                after_step(self)
        return self.result

    def slow_down(self, key: Target, weight: float, at_step: int = 0, steps: int | None = None) -> None:
        """Make ``key`` (a replica, :data:`PROGRESS`, :data:`COORDINATOR` or :data:`DRIVER`) slow but
        alive: it acts ``weight`` times as often as another actor (0 < weight < 1), as a busy actor's
        queue drains; timeouts (in steps) may then run out. With ``steps``, only from ``at_step`` for
        that many steps, and ``weight`` may be 0: frozen (it takes no action, its clock stands), then
        it resumes. The driver's work is the supervisor's turn: its pushes to the inputs, its polls
        and output hand-outs, noticing deaths, the recovery's and rescale's steps, learning of
        commits; a frozen driver does none of it (a death meanwhile is handled when it thaws)."""
        if steps is None:
            self.slow[key] = weight
        else:
            self.spells.append((key, weight, at_step, at_step + steps))

    def _kill(self, target: Target) -> None:
        """Fault injection: ``target`` dies with its state and what it had in flight."""
        if target == DRIVER:  # everything in this process is gone; the store and the consumer's log are not
            self.result.driver_crashed = self.result.steps
            return
        if self.result.finished:
            return  # the driver has seen the end: the job is gone
        self._take_down(target, undead=True)
        if self.recovery is None:
            self._record([ReplicaDied(target, self.result.steps)])
        elif self.recovery.missed and self.rng.random() < self.recovery.missed:
            self.unannounced[target] = self._lost(target)  # found when a call to it fails (``World._found``)
        else:
            noticed = self.result.steps + self.rng.randint(0, self.recovery.detection)
            self.failures.append((noticed, self._lost(target)))

    def _declare(self, target: Target, why: str) -> None:
        """The stall rule declared ``target`` failed (``why``): killed (a stopped process leaves no
        zombie), noticed at once; its replacement is not frozen."""
        self._take_down(target, undead=False)
        self.spells = [spell for spell in self.spells if spell[0] != target]
        self.slow.pop(target, None)
        self.failures.append((self.result.steps, self._lost(target, why)))

    def _take_down(self, target: Target, undead: bool) -> None:
        """``target`` dies with its state and what it had in flight (going on as a zombie if ``undead``)."""
        if isinstance(target, ReplicaKey):
            if undead:
                self._rise(target)
            self.dead.add(target)
            self.mail.drop_inbound(target)
        elif target == PROGRESS:
            haunted = undead and self._rise_actor(PROGRESS, self.progress, self.progress_incarnation,
                                                  [call for calls in self.mail.to_progress.values() for _, call in calls])
            self.progress = None
            self.mail.to_progress.clear()
            if not haunted:  # the job events the driver has not read die with it; a zombie keeps them, and the driver
                self.mail.log.clear()  # reads on in order (as from a Ray actor's cursor: no gap before the zombie's)
        elif target == COORDINATOR:
            if undead:
                self._rise_actor(COORDINATOR, self.coordinator, getattr(self.coordinator, "incarnation", 0),
                                 [ack for _, ack in self.mail.acks])
            self.coordinator = None
            self.mail.acks.clear()
            self.mail.commits.clear()
            self.cut_asks.clear()  # a call to a dead actor fails: its death answers the rescale
            self.cut_of = None
        else:
            raise ValueError(f"no such crash target: {target!r}")

    def _lost(self, target: Target, why: str = "") -> RaytideError:
        """The error naming ``target``'s death (or, with ``why``, its declared failure), as the Ray driver names it."""
        cause = f"{target} died at step {self.result.steps}" + (f": {why}" if why else "")
        if not isinstance(target, ReplicaKey):
            return ActorLost(f"job {self.plan.name!r}: {cause}")
        vertices = self.plan.chain(target.chain).vertices if target in self.replicas else ()  # a retired one: none
        by = "the supervisor's ping of a stalled job" if why else "the simulator"
        return ReplicaLost(f"{self.plan.name}/{target.chain}/{target.replica}", vertices, by, cause)

    def _watch_stall(self) -> None:
        """The stall rule (:mod:`raytide.supervisor.stalls`, the Ray driver's) with
        ``LocalRecovery``'s bounds in steps: once the driver has taken no job event for ``stall``
        steps (as on Ray: snapshots going on are no movement), every actor is pinged; one frozen
        ``ping`` steps later is declared failed and killed, as the Ray driver kills a stopped
        process. The driver runs it: not while frozen."""
        watch = self.frozen_stalls
        if watch is None or not self._driver_awake:
            return
        now, actors = self.result.steps, self._actors()
        moved, self.events_seen = len(self.result.events) != self.events_seen, len(self.result.events)
        if watch.look(now, moved, pending=not self.result.finished):
            watch.pinging(now, [actor for actor in actors if not self._still_dead(actor)])
        for actor in [actor for actor in watch.waiting if self._pace(actor) > 0]:
            watch.answered(actor)
        for target in watch.silent(now):
            if not self._still_dead(target):
                self._declare(target, f"frozen: no answer to the supervisor's ping within {watch.answer:g} steps "
                                      f"after {watch.stall:g} steps without moving")

    def _supervise(self) -> None:
        """The supervisor's turn, if the driver is not frozen: what the coordinator told it, the
        deaths noticed by now, the rescale asked for."""
        if self._driver_awake:
            self._learn()
            self._notice_failures()
            self._start_rescale()

    def _stalled(self, max_steps: int) -> None:
        """Nothing is left to deliver and the job has not finished: a step passes idle if the driver
        is frozen (it acts when it thaws), or the deaths not noticed yet are noticed now (a ping of
        every actor), or the job hangs."""
        if not self._driver_awake:
            if self.result.steps >= max_steps:
                raise Hang(f"the job is still running after {max_steps} steps (its driver frozen)")
            self.result.steps += 1
        elif not self._sweep():
            raise Hang(f"the job hangs: nothing left to deliver after {self.result.steps} steps and "
                       f"not finished; pending: {self.progress.describe() if self.progress else None}")

    def _notice_failures(self) -> None:
        """Start a recovery for the deaths noticed by now (or start the one under way over)."""
        if not self.failures:
            return
        due = [cause for step, cause in self.failures if step <= self.result.steps]
        if not due or self.result.finished:
            return
        self.failures = [(step, cause) for step, cause in self.failures if step > self.result.steps]
        cause = supervise(due, True, (self.recovering, self.rescaling), self._fail, self._recover)
        assert cause is not None, "the simulator notices deaths only"
        self.result.recoveries.append(cause)

    def _recover(self, cause: str) -> None:
        """The deaths of ``cause``: one replica recovered alone where the rule allows (:mod:`raytide.testing.solo`), else the whole job."""
        lost = alone_candidate(self)
        if lost is not None:
            self.failures = [(step, failure) for step, failure in self.failures if not self._names(failure, lost)]
            self.unannounced.pop(lost, None)
            refused = recover_alone(self, lost)
            if refused is None:
                return
            self.result.alone_refused.append(refused)  # a sender's log dropped what the replay needs: the whole job
        start_recovery(self, Recovering.after_death(self.plan.name, self.budget, self.incarnation, cause))

    def _names(self, failure: RaytideError, key: ReplicaKey) -> bool:
        """Whether ``failure`` is the death of replica ``key`` (noticed again: it is recovered already)."""
        return isinstance(failure, ReplicaLost) and failure.replica == f"{self.plan.name}/{key.chain}/{key.replica}"

    def _fail(self, error: BaseException) -> None:
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
        start_recovery(self, Recovering.from_point(self.plan.name, self.budget, point))

    def _start_rescale(self) -> None:
        """The rescale asked for, once no other recovery or rescale is under way."""
        if not self.asks.pending or self.result.finished:
            return
        if any(under_way and not under_way.over for under_way in (self.recovering, self.rescaling)):
            return
        assert self.flow is not None
        if self.coordinator is None and self.recovery is None:  # as on Ray: one for the cuts, from the first rescale on
            self.coordinator = self._new_coordinator()
        plan = compile_plan(self.flow, self.parallelism, self.chaining, new_widths(self.plan, self.asks.take()))
        self.rescaling = Execution(Rescaling.between(self.plan.name, self.budget, self.incarnation, self.plan, plan),
                                   SimRescale(self))
        self.rescaling.start()
