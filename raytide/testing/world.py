"""The simulated world of :class:`~raytide.testing.local.LocalJob`: every replica core, the
progress core and the snapshot coordinator core of one job in this process, the messages in
flight between them (:mod:`raytide.testing.mailboxes`), and one action per mailbox with
something to deliver, which the scheduler chooses among (seeded, or paced:
:mod:`raytide.testing.pacing`).

Messages are delivered the way Ray may: FIFO from one replica to another (data batches and
markers alike), FIFO from the progress actor to each replica, in *any* order from a replica
to the progress actor (it is a threaded actor; the cores number those messages; with
``nodes``, through a relay per node; a batch may ride with data to a peer, which passes it
on, as on Ray: :mod:`raytide.engine.riding`), driver commands FIFO per input replica, and
job events through a log the driver polls. Every message carries its sender's incarnation
and is dropped where it arrives if that is not the receiver's. Snapshots are the coordinator
core's, written into a real :class:`~raytide.snapshots.store.SnapshotStore`; the driver's
calls to the inputs are kept for a recovery in the Ray driver's own
:class:`~raytide.supervisor.replay.ReplayLog`. The recovery and rescale machines run on this
world through the simulator's runtimes (:mod:`raytide.testing.recovery`,
:mod:`raytide.testing.rescaling`), which reach into it as the Ray runtimes reach the job's actors.
"""

from __future__ import annotations

import collections
import functools
import random
from collections.abc import Callable, Hashable, Sequence
from typing import Any, cast

from raytide.engine.epoch_tokens import rides_with_tokens
from raytide.engine.progress_core import ProgressCore, ProgressEffects
from raytide.engine.replica import ReplicaCore
from raytide.errors import RaytideError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import EpochComplete, JobEvent, JobFailed, JobFinished, ReplicaKey, Sequenced
from raytide.snapshots.coordinator import CoordinatorCore
from raytide.snapshots.recovery import RestartBudget
from raytide.supervisor.alone import logged_chains
from raytide.supervisor.execution import Execution
from raytide.supervisor.stalls import StallWatch
from raytide.testing.consumer import LocalConsumer, LocalOutputs
from raytide.testing.mailboxes import Command, Link, LocalTransport, Mailboxes, logged
from raytide.testing.outcome import COORDINATOR, DRIVER, PROGRESS, LocalRecovery, LocalRun, ReplicaDied, Target
from raytide.testing.pacing import Pacing, actor_of
from raytide.testing.snapshotting import SnapshotTaking
from raytide.testing.zombies import ActorZombie, Zombie, rise, zombie_actions

#: How often a zombie acts next to a live actor (it is slow: a partitioned or dying host),
#: so that what it sends arrives well after its replacement, across later snapshots.
ZOMBIE_PACE = 0.2


def idle() -> None:
    """A step in which nothing happens: every actor with something to do is frozen."""


class World(SnapshotTaking):
    """The simulated actors of one job and what is in flight between them (see the module docstring).

    Its methods are the world's own actions (private: :class:`~raytide.testing.local.LocalJob`,
    the user's handle, schedules them, and the simulator's runtimes call the few a recovery and
    a rescale need: a fresh replica core, a guarded event, the progress core's effects, a new
    coordinator, a recorded failure), as the Ray runtimes call the job's actors."""

    def __init__(self, plan: PhysicalPlan, planned: dict[tuple[str, int], list[Command]], seed: int,
                 recovery: LocalRecovery | None, consumer: LocalConsumer | None, nodes: int | None,
                 pacing: Pacing | None, relay_fanin: int | None) -> None:
        """``planned``: the driver's commands for each ``(input, replica)``, all sent at once."""
        self.plan, self.planned = plan, planned
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
        self.slow: dict[Hashable, float] = {}  # actors slowed down (``LocalJob.slow_down``, zombies)
        self.spells: list[tuple[Hashable, float, int, int]] = []  # (actor, weight, from step, until step): a while
        self.zombies: dict[ReplicaKey, Zombie] = {}  # dead replicas still running (``LocalRecovery.zombie``)
        self.undead: dict[str, ActorZombie] = {}  # the progress actor's or the coordinator's dead incarnation, running
        self.failures: list[tuple[int, RaytideError]] = []  # (step at which it is noticed, what died)
        self.unannounced: dict[Target, RaytideError] = {}  # deaths whose notice is missed (``LocalRecovery.missed``)
        self.found: collections.Counter[str] = collections.Counter()  # how missed deaths were found
        self.stalls: StallWatch[Target] = StallWatch(stall=0, answer=0)  # when nothing moves, a ping finds the dead
        self.untold: list[Callable[[], None]] = []  # what the driver learns from the coordinator once it thaws
        self.recovering: Execution | None = None  # the recovery under way (or the last one)
        self.rescaling: Execution | None = None  # the rescale under way (or the last one)
        #: The driver's requests for a rescale's cut on their way to the coordinator, as
        #: ``(incarnation, attempt)`` (Ray's ``hold_now``: one may arrive after a recovery
        #: it did not know of), and the attempt whose cut is in flight (None: no cut is).
        self.cut_asks: collections.deque[tuple[int, int]] = collections.deque()
        self.cut_of: int | None = None
        self.result = LocalRun({name: {} for name in self.plan.outputs})
        self.outputs = LocalOutputs(self.plan.outputs, recovery.output_commit if recovery is not None else "epoch",
                                    self.result.outputs, consumer, recovery.store if recovery is not None else None)
        self.calls = logged(planned, recovery.retain if recovery is not None else 1)  # kept as on Ray
        for (name, replica), commands in planned.items():
            self.mail.commands[self._input_replicas(name)[replica]].extend(commands)
        self.coordinator: CoordinatorCore | None = None
        self.last_snapshot_id = 0
        self.first_id = 1  # this run recovers from its own snapshots (from this id on) and the one it started from
        self.started_from: int | None = None
        self.budget = RestartBudget(recovery.max_restarts) if recovery is not None else RestartBudget.none(plan.name)

    def _stepping(self) -> bool:
        """Whether a stepped rescale's plan runs (a replica has a step left): no snapshot then."""
        return any(not stepped.moves.done for core in self.replicas.values() for stepped in core.stepped.values())

    def _core(self, key: ReplicaKey) -> ReplicaCore:
        numbered = self.recovery is not None and (self.recovery.numbered or self.recovery.alone)
        rides = rides_with_tokens(self.plan, key.chain) and not numbered  # a batch kept by a lost replica would be lost
        transport = LocalTransport(self.mail, key, self.incarnations[key], self._progress_alive,
                                   self.mail.via(key, self.replica_keys()), rides)
        logged = logged_chains(self.plan) if self.recovery is not None and self.recovery.alone else None  # as rt.run's
        cap = self.recovery.upstream_log_cap if self.recovery is not None else None
        return ReplicaCore(self.plan, key.chain, key.replica, transport, keep_outputs=True, numbered=numbered,
                           logged=logged, log_cap=cap)  # as on Ray

    def _input_replicas(self, name: str) -> list[ReplicaKey]:
        chain = self.plan.chain_of(name).name
        return [ReplicaKey(chain, r) for r in range(self.plan.width(name))]

    def replica_keys(self) -> list[ReplicaKey]:
        return self.plan.replica_keys()

    @property
    def recovery_steps(self) -> collections.deque[Callable[[], None]]:
        """The steps of the recovery under way (empty: none is)."""
        return self.recovering.steps if self.recovering is not None else collections.deque()

    def _mailboxes(self) -> list[Callable[[], None]]:
        """One action per mailbox with something to deliver. It runs at every step, of which one
        action is taken: it looks only at the mailboxes that may hold something, and skips
        what an empty world (no zombie, nobody waiting, no relay) cannot offer."""
        mail, waiting = self.mail, self.waiting
        haunting = zombie_actions(self.zombies, mail, self.dead, self._haunt) if self.zombies else []  # first: they take their mail
        actions: list[Callable[[], None]] = []
        if not self.connected and self.progress is not None:
            actions.append(self._connect)
        links = mail.pending_links()
        if waiting:
            links = [link for link in links if link[1] not in waiting]
        actions += (self.pacing.per_receiver(links, self._deliver, self.rng) if self.pacing is not None
                    else [functools.partial(self._deliver, link, to=link[1]) for link in links])
        calling, forwarding = mail.progress_mailboxes(self.replica_keys)
        if calling:
            actions.append(functools.partial(self._take_progress_call, to=PROGRESS))
        actions += [functools.partial(mail.forward, key, to=to) for key, to in forwarding]
        for deliver, mailbox in ((self._push_status, mail.pushes), (self._command, mail.commands),
                                 (self._inject, mail.injects), (mail.fan_out, mail.fan_outs)):
            if mailbox:
                actions += [functools.partial(deliver, to=key) for key, queue in mailbox.items()
                            if queue and key not in waiting]
        driving = [under_way.step for under_way in (self.recovering, self.rescaling) if under_way and under_way.steps]
        if mail.log and not driving:  # the driver recovers (or hands state over), then reads events again
            actions.append(self._poll)
        actions += driving
        actions += haunting
        if self.undead:
            actions += [functools.partial(self._haunt_actor, role, to=("zombie", role))
                        for role, zombie in self.undead.items() if zombie.left > 0 and zombie.inbox]
        actions += self.outputs.consumer_actions()
        if self.recovery is not None or self.coordinator is not None:  # without recovery: a rescale's cuts
            actions += self._snapshot_actions()
        return actions

    def _choose(self, actions: list[Callable[[], None]]) -> Callable[[], None]:
        """The next action: uniformly, weighted by the slowness of the actor that takes it, or paced.
        With every actor that has something to do frozen, none: the step passes idle."""
        if self.pacing is not None:
            return self.pacing.choose(actions, self.rng, self.mail, command=self._command)
        if not self.slow and not self.spells:
            return self.rng.choice(actions)
        weights = [self._pace(actor_of(action)) * self._sender(action) for action in actions]
        return self.rng.choices(actions, weights)[0] if any(weights) else idle

    def _pace(self, actor: Hashable) -> float:
        """How often ``actor`` acts next to an actor at full speed (0: frozen) at this step."""
        if not self.spells:
            return self.slow.get(actor, 1.0)
        now = self.result.steps
        spell = [weight for who, weight, start, end in self.spells if who == actor and start <= now < end]
        return spell[-1] if spell else self.slow.get(actor, 1.0)

    def _sender(self, action: Callable[[], None]) -> float:
        """The pace of whoever sends what ``action`` delivers, if not its own actor: the driver
        for its commands to the input replicas (a frozen driver pushes nothing), else 1."""
        return self._pace(DRIVER) if isinstance(action, functools.partial) and action.func == self._command else 1.0

    @property
    def _driver_awake(self) -> bool:
        """Whether the driver (the supervisor's turn) acts at this step: not frozen by ``slow_down(DRIVER, 0, ...)``."""
        return self._pace(DRIVER) > 0

    def _tell(self, learn: Callable[[], None]) -> None:
        """The driver learns something from the coordinator (a commit, a rescale's cut held or
        missed): at once, or, while it is frozen, when it thaws (:meth:`_learn`)."""
        if self._driver_awake and not self.untold:
            learn()
        else:
            self.untold.append(learn)

    def _learn(self) -> None:
        """A driver that thawed takes in what the coordinator told it meanwhile, in order."""
        while self.untold and self._driver_awake:
            self.untold.pop(0)()

    def _current(self, key: ReplicaKey, incarnation: int) -> bool:
        """Whether a message of ``incarnation`` reaches replica ``key`` (alive, of it, not retired by a rescale)."""
        return key not in self.dead and self.incarnations.get(key) == incarnation

    def _haunt(self, key: ReplicaKey, to: object = None) -> None:
        """Zombie ``key`` (its own actor, ``to``) takes one more action."""
        zombie = self.zombies[key]
        zombie.act(self.rng, self.incarnation > zombie.incarnation, self._store)

    def _rise(self, key: ReplicaKey) -> None:
        """Replica ``key`` dies but, with ``LocalRecovery.zombie``, goes on as a zombie for a few
        actions; its writer keeps what it had not written. Call before its mailboxes are dropped
        and it is counted dead. Killed again before a recovery replaced it, it does not rise again:
        its zombie's host dies too (:meth:`Zombie.end`). A second zombie of the same core would
        take the mail sent after the second kill, skipping what the first had gathered and not
        taken: a gap in a FIFO channel, which no actor on Ray can have (a barrier taken after
        data that never reached the core: a snapshot that lost records)."""
        if key in self.dead:
            if key in self.zombies:
                self.zombies[key].end()
            return
        if self.recovery is None or not self.recovery.zombie or key not in self.replicas:
            return
        self.zombies[key] = rise(self.mail, key, self.replicas[key], self.incarnations[key],
                                 self.rng.randint(1, self.recovery.zombie))
        self.slow[("zombie", key)] = ZOMBIE_PACE

    def _rise_actor(self, role: str, core: Any, incarnation: int, inbox: list[Any]) -> bool:
        """The progress actor or the coordinator (``role``: its ``core`` of ``incarnation``) dies but,
        with ``LocalRecovery.zombie``, goes on for a few slow actions, with what was on its way to it;
        whether it does. Killed again before a recovery replaced it (``core`` None: it is dead), its
        zombie's host dies too (:meth:`ActorZombie.end`): it neither rises again nor goes on."""
        if core is None and role in self.undead and self._still_dead(role):
            self.undead[role].end()
        if self.recovery is None or not self.recovery.zombie or core is None:
            return False
        self.undead[role] = ActorZombie(core, incarnation, self.rng.randint(1, self.recovery.zombie), inbox)
        self.slow[("zombie", role)] = ZOMBIE_PACE
        return True

    def _undead(self, role: str) -> ActorZombie | None:
        """The zombie of ``role`` that still takes what is sent to the actor the job knows (the
        dead one, not yet replaced), if any."""
        zombie = self.undead.get(role)
        return zombie if zombie is not None and zombie.listening() and self._still_dead(role) else None

    def _haunt_actor(self, role: str, to: object = None) -> None:
        """The zombie of the progress actor or of the coordinator (``role``) takes one more action."""
        zombie, replaced = self.undead[role], self.incarnation > self.undead[role].incarnation
        taken = zombie.take(self.rng, replaced)
        if role == PROGRESS:
            zombie.apply(taken, self.mail, self.replica_keys())
        else:  # its commit: a snapshot of its dead incarnation, which the store refuses once a recovery recorded one
            zombie.commit(taken, self.recovery.store, self.plan, self.recovery.retain, self.result.steps, replaced)  # type: ignore[union-attr]

    def _progress_alive(self) -> bool:
        """Whether a replica's call to the progress actor reaches one (if not, the call fails: a death found)."""
        if self.progress is None and self._undead(PROGRESS) is not None:
            return True
        if self.progress is None:
            self._found(PROGRESS, "a replica's progress call failed")
        return self.progress is not None

    def _still_dead(self, target: Target) -> bool:
        """Whether ``target`` is dead now (not yet replaced by a recovery)."""
        if target == PROGRESS:
            return self.progress is None
        if target == COORDINATOR:
            return self.coordinator is None
        return target in self.dead

    def _found(self, target: Target, how: str) -> None:
        """A death whose notice was missed is found (``how``: a call to the dead actor failed,
        as a pending Ray call fails with ``RayActorError``): it is noticed now."""
        cause = self.unannounced.pop(target, None)
        if cause is not None and self._still_dead(target):
            self.failures.append((self.result.steps, cause))
            self.found[how] += 1

    def _sweep(self) -> bool:
        """Nothing moves: the supervisor's stall rule (:mod:`raytide.supervisor.stalls`, the Ray
        driver's too; its bounds 0 steps) pings every actor, and the dead, which do not answer, are
        declared failed: a death never announced is found, a late notice comes now. Whether any did."""
        now, actors = self.result.steps, self._actors()
        if self.stalls.look(now, moved=False, pending=True):
            self.stalls.pinging(now, actors)
            for actor in actors:
                if not self._still_dead(actor):
                    self.stalls.answered(actor)
        for target in self.stalls.silent(now):
            self._found(target, "the job stalled")
        self.failures = [(now, cause) for _, cause in self.failures]  # and the notices still on their way come now
        return bool(self.failures)

    def _actors(self) -> list[Target]:
        """Every actor of the job a ping reaches: the replicas, the progress actor, the coordinator."""
        return [*self.replica_keys(), PROGRESS, COORDINATOR]

    def _connect(self) -> None:
        assert self.progress is not None
        self.connected = True
        self._perform(self.progress.connect({key: core.subscriptions() for key, core in self.replicas.items()}))

    def _deliver(self, link: Link, to: ReplicaKey) -> None:
        """The next message on ``link``; data takes the progress batches riding with it along."""
        incarnation, message, riders = self.mail.take(link)
        key = link[1]
        if key in self.dead:
            self._found(key, "a peer's call failed")
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
        current = [call for incarnation, call in self.mail.take_progress(key, self.rng) if self._heard(incarnation)]
        zombie = self._undead(PROGRESS)
        if zombie is not None:  # the actor the replicas know is the zombie
            zombie.inbox += current
        if self.progress is not None and current:
            self._perform(self.progress.receive_all(current))

    def _heard(self, incarnation: int) -> bool:
        """Whether the progress actor applies a call of ``incarnation`` (its guard: only its own)."""
        return incarnation == self.progress_incarnation

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
        if to in self.dead:
            self._found(to, "the coordinator's barrier failed")
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
        for key in {key for key, _ in effects.pushes if key in self.dead}:
            self._found(key, "the progress actor's push failed")
        self.mail.log.extend((self.progress_incarnation, event) for event in effects.events)

    def _orphaned_progress_calls(self) -> None:
        """A recovery restarts the progress actor: the calls on their way to the one the replicas
        knew go to its zombie (if it still runs), then no more call reaches it."""
        zombie = self._undead(PROGRESS)
        if zombie is not None:
            zombie.inbox += [call for calls in self.mail.to_progress.values() for incarnation, call in calls
                             if incarnation == zombie.incarnation]
        self.mail.to_progress.clear()

    def _poll(self) -> None:
        """The driver reads the oldest job event (events of an older incarnation are dropped:
        a recovery replays their epochs)."""
        incarnation, event = self.mail.log.popleft()
        if incarnation != self.progress_incarnation:
            return
        self._record([event])
        if self.recovery is None and isinstance(event, EpochComplete):  # no barrier says what the driver has:
            delivered = self.outputs.book.delivered()  # the driver does (on Ray: forget_delivered)
            for core in self.replicas.values():
                if core.kept:  # an output's replica
                    core.forget_delivered(delivered)

    def _record(self, events: Sequence[JobEvent | ReplicaDied]) -> None:
        for event in events:
            self.result.events.append(event)
            if isinstance(event, EpochComplete):
                self.outputs.offer(event.output, event.epoch, event.parts)
            elif isinstance(event, JobFinished):
                self.outputs.finish()
                self.result.finished = True

    def _fresh(self, key: ReplicaKey) -> ReplicaCore:
        """Replica ``key`` reset in place, or replaced if it died: a fresh core that waits to be resumed."""
        self.dead.discard(key)
        self.incarnations[key] = self.incarnation
        self.replicas[key] = core = self._core(key)
        self.waiting.add(key)
        self.mail.commands[key].clear()
        return core
