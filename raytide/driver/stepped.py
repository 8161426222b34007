"""A stepped rescale on Ray (issue 74; docs/rescaling.md, "Stepped migration"): ``job.rescale``
of one keyed vertex that moves its key groups a few at a time, each step at an epoch, while
every other key group keeps flowing. The plan, its message, its holds and each replica's part
are the ones the in-process runtime runs (:mod:`raytide.rescale.steps`,
:mod:`raytide.engine.stepping`); this module is the driver's side::

    growing p -> q: the new replicas join the running job owning nothing (raytide.driver.joining:
        no hold, no new incarnation); where that cannot hold, the short switch (the rescale
        machine, the vertex's owners kept: no state moves; a brief hold of the whole job)
    driver: the periodic snapshots paused (none may cut through a plan), the one in flight waited for
    driver: the gate closed at first = the latest epoch any input is at (or was let through to)
        + a margin (about 0.15 s of epochs at the inputs' recent rate): raytide.driver.plan_gate
    driver ─hold(+1 at the vertex's input port at each step's epoch)─▶ progress actor  } at once,
    driver ─plan(steps from first; the old owners' new owners' handles)─▶ every replica } inputs
        (ProgressActor.hold, VertexActor.install_plan), and waits for every answer        } flowing
    inputs meanwhile: push and advance below first; one that would reach first waits at the gate
    driver: the gate opened (the wait, if any, is the record's "inputs held at the plan's first epoch")
    replicas: each step as the inputs pass its epoch (old owner: take_keys, GroupState to the new
        owner, which keeps the group's records until it comes); the other groups flow
    growing: job.rescale returns here; the job's pumps see the last step and resume the snapshots
        (raytide.driver.steps_left, which draws that flow)
    shrinking: the driver takes the job's events and asks the vertex's replicas (VertexActor.stepping)
        until no step is left; the emptied replicas leave the running job (raytide.driver.joining's
        retire: no hold, no new incarnation) and the snapshots resume; where that cannot hold, the
        snapshots resume and the short switch retires them. A shrink whose caller feeds the job and
        has pushed at the inputs' epoch returns once its plan is installed, and the pumps retire
        (raytide.driver.steps_left: the plan's resume is the retirement, its redo after a death the
        rescale made again holding the whole job)

``job.rescale`` steps by default where the plan can (``stepped=False``, or ``RAYTIDE_STEPPED_RESCALE=0``
in the driver's environment, holds the whole job: :data:`STEPPED_ENV`). The steps are made as the inputs
pass their epochs, so the driver steps only if an input's epoch moved within :data:`QUIET_S` before the
call. A growth returns once the plan is installed, whoever feeds next (the caller's own thread included:
then one step moves every group, at the epoch after the inputs', so one advance makes it). A shrink
waits for its steps before its retiring switch while another thread feeds, or while the caller feeds
and has pushed nothing at the inputs' epoch yet (its one step is cut there, made at once:
:meth:`~raytide.driver.plan_gate.PlanGate.close_at_frontier`). A caller that feeds and has pushed at
that epoch gets one step at the epoch after, which only its own next advance can make: that shrink
returns once the plan is installed, as a growth does, with the old width still running, and the
job's pumps (its next wait, read or rescale after that advance) retire the emptied replicas
(``stepped["switch"]`` says so until then). A shrink that waits raises a
:class:`RescaleError` naming the epochs if they are not passed within its ``timeout`` (the plan stays
installed and ends as the inputs move on, the pumps resuming the snapshots then). A rescale first waits
for the steps the one before left. Where stepping cannot hold
(:func:`~raytide.rescale.steps.stepped_vertex`: several chains, a loop, a vertex fused behind; an input
read in the replicas, closed or idle; a death before or during the steps), the rescale holds the whole
job as before (:func:`~raytide.driver.rescale.rescale`) and its record says why.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

import ray

from raytide.core.keygroups import DEFAULT_KEY_GROUPS, KeyGroupAssignment
from raytide.driver.inputs import InputFeeds
from raytide.driver.joining import join, refusal, retire
from raytide.driver.plan_gate import PlanGate
from raytide.driver.recovery import JobRecovery, RescaleRecord, Steps
from raytide.driver.rescale import Supervision, rescale, switch
from raytide.driver.steps_left import MOVE_STEP, STEP_POLL, PendingPlan, StepsLeft, died_in_steps
from raytide.engine.stepping import holds
from raytide.errors import RescaleError
from raytide.physical.protocol import ReplicaKey, StepPlanMessage
from raytide.rescale.layout import check_splittable
from raytide.rescale.steps import StepPlan, groups_per_step_at_pace, plan_steps, stepped_vertex
from raytide.rescale.widths import new_widths

logger = logging.getLogger(__name__)

#: The most key groups one step moves (of 128; 100 MB of state: about 6 MB a step), taken
#: when the inputs' epochs come slowly or their pace is not known.
GROUPS_PER_STEP = 8
#: About how long a plan's steps may take at the inputs' pace: within it, steps are as small as
#: one key group (:func:`~raytide.rescale.steps.groups_per_step_at_pace`).
STEPS_S = 1.0
#: An input's epoch must have moved within this many seconds before the call for the driver to step:
#: the steps are made as the inputs pass their epochs, so an idle job holds the whole job instead.
QUIET_S = 1.0
#: The record's step for the time inputs waited at the gate for the plan (:mod:`raytide.driver.plan_gate`).
HELD_STEP = "inputs held at the plan's first epoch"
#: The record's ``stepped["switch"]`` of a shrink whose retirement is left to the pumps, until they make it.
RETIRING = ("retiring once the step is made: it waits for the caller's next advance; then the job's next wait, "
            "read or rescale retires the emptied replicas in place")
#: The driver's environment setting for ``job.rescale``'s default when not told whether to step: ``0``
#: holds the whole job (to compare, or to fall back); unset or anything else steps where the plan can.
STEPPED_ENV = "RAYTIDE_STEPPED_RESCALE"


def stepping_default() -> bool:
    """Whether ``job.rescale`` steps when not told: yes (where the plan can), unless ``RAYTIDE_STEPPED_RESCALE=0``."""
    return os.environ.get(STEPPED_ENV, "") != "0"


def make_rescale(recovery: JobRecovery, supervision: Supervision, inputs: InputFeeds, asked: dict[str, int],
                 timeout: float, made_s: float, stepped: bool, streams: Collection[str], left: StepsLeft) -> dict[str, Any]:
    """``job.rescale``: in steps where it can hold (unless ``stepped`` is False), else holding the
    whole job (the record's ``why`` says why not); returns the rescale's record as a dict. The
    steps of the rescale before end first (``left``). ``streams``: the job's stream inputs (each
    batch waits for a snapshot, which the steps pause: not stepped)."""
    called, deadline = time.monotonic() - made_s, time.monotonic() + timeout
    finish_steps_left(recovery, supervision, inputs, left, deadline)
    if not stepped:
        return rescale(recovery, supervision, asked, max(0.1, deadline - time.monotonic()), made_s)
    plan = recovery.placement.plan
    new = supervision.recompile(new_widths(plan, asked))
    vertex, why = stepped_vertex(plan, new)
    if vertex is not None and streams:
        vertex, why = None, f"stream inputs {sorted(streams)} wait for a snapshot at each batch, and the steps pause them"
    if vertex is not None and inputs.readers:
        vertex, why = None, f"inputs {sorted(inputs.readers)} are read in the replicas, which move their epochs"
    if vertex is not None and None in inputs.epochs.values():
        vertex, why = None, "an input is closed: its records went by the old table, and the steps' epochs would never come"
    if vertex is not None:
        why = feed_refusal(inputs.gate, called)
        vertex = None if why else vertex
    if vertex is None:
        return rescale(recovery, supervision, asked, max(0.1, deadline - time.monotonic()), made_s,
                       why=f"not stepped: {why}")
    check_splittable(new, {name: plan.width(name) for name in plan.vertices})  # refused before anything moves
    return SteppedRescale(recovery, supervision, inputs, vertex, deadline, left).run(asked, made_s)


def feed_refusal(gate: PlanGate, called: float) -> str:
    """Why the steps cannot be left to the feed ("" if they can): they are made as the inputs pass their
    epochs. An idle job (no epoch moved within :data:`QUIET_S` before the call, at ``called``,
    ``time.monotonic()``: a job without recovery's first rescale leases its coordinator of the cuts first)
    holds the whole job: that holds nothing running, and a plan would wait for a feed that may not come
    before the next rescale. A caller that feeds the job itself is no reason: a growth returns once its
    plan is installed, and so does a shrink whose one step waits for the caller's next advance (its
    retirement is left to the job's pumps: :meth:`SteppedRescale.run`)."""
    moved_at, _ = gate.last_move()
    if called - moved_at > QUIET_S:
        return f"no input moved to a new epoch within {QUIET_S:g} s: the steps would wait for them"
    return ""


def finish_steps_left(recovery: JobRecovery, supervision: Supervision, inputs: InputFeeds, left: StepsLeft,
                      deadline: float) -> None:
    """The steps of the rescale before, done before anything else is planned (a death meanwhile
    ends them: recovered from here, as the pump would).

    Raises:
        RescaleError: they were not done by ``deadline``, or they cannot be (the caller feeds the job).
    """
    plan = left.plan
    if plan is not None and caller_feeds(inputs) and not passed(inputs, plan.epochs[1]):
        first, last = plan.epochs
        raise RescaleError(f"job {recovery.placement.name!r}: the stepped rescale before this one has steps left at "
                           f"epochs {first}..{last}, made as the inputs pass them, and the inputs are at "
                           f"{inputs.epochs}: advance them to {last} or later first")
    died = left.wait(supervision.watch, inputs, deadline)
    if died is not None:
        redo = left.abandon(died)
        supervision.recover(recovery.after_death(died))
        redo()


def passed(inputs: InputFeeds, epoch: int) -> bool:
    """Whether every input is at ``epoch`` or later (or closed): a step at ``epoch`` needs no more feed."""
    return all(at is None or at >= epoch for at in inputs.epochs.values())


def caller_feeds(inputs: InputFeeds) -> bool:
    """Whether the thread calling is the one that moved an input's epoch last (it feeds the job itself)."""
    return inputs.gate.last_move()[1] == threading.get_ident()


class SteppedRescale:
    """One stepped rescale of ``vertex`` on Ray (see the module docstring)."""

    def __init__(self, recovery: JobRecovery, supervision: Supervision, inputs: InputFeeds, vertex: str,
                 deadline: float, left: StepsLeft) -> None:
        self.recovery, self.supervision, self.inputs = recovery, supervision, inputs
        self.vertex, self.deadline, self.left = vertex, deadline, left
        self.timeout = deadline - time.monotonic()  # a retirement left to the pumps gets as long from its start
        #: The caller feeds the job itself: one step moves every group, at the epoch after the inputs'.
        self.one_step = caller_feeds(inputs)
        #: A shrink whose one step waits for the caller's next advance: its retirement is left to the pumps.
        self.deferred = False
        self.steps = Steps()  # the seconds of the wait for a snapshot in flight, the install and the steps
        self.window = [0.0, 0.0]  # wall-clock times the plan was installed and its last step seen done
        self.switches: list[RescaleRecord] = []
        self.in_place: str | None = None  # None if the replicas joined or retired in place, else why not
        self.widths: dict[str, int] = {}  # every vertex's width before

    def run(self, asked: dict[str, int], made_s: float) -> dict[str, Any]:
        """Switch (growing), step, switch (shrinking); the record, kept in ``job.stats()``."""
        started = time.monotonic() - made_s
        plan = self.recovery.placement.plan
        self.widths = {name: plan.width(name) for name in plan.vertices}
        before, after = plan.width(self.vertex), new_widths(plan, asked)[self.vertex]
        if after > before:
            self._grow(asked, made_s)
        else:
            self.in_place = refusal(self.recovery, self.supervision.recompile(new_widths(plan, asked)), self.vertex)
        message, why = self._step(after, shrinking=after < before)
        if not why and after < before and not self.deferred:
            why = self._retire(asked)
        if why:  # a death met the steps or the retirement: the job recovered; the rest holding the whole job
            done = self._remake(asked, why)
            if done["cut_id"] is not None:
                return done
            # grown already: the recovery laid the last snapshot out for the new widths
        record = self._record(started, asked, message, why)
        if message is not None and self.deferred:  # the pumps retire the emptied replicas once the step is made
            self.left.start(self._pending(message, record, lambda: self._retire_later(asked, record),
                                          lambda died: self._remake(asked, died_in_steps(died), later=True)))
        elif message is not None and after > before:  # the job's pumps see the steps end (driver/steps_left.py)
            self.left.start(self._pending(message, record, self._resume))
        return vars(record).copy()

    def _left(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    def _grow(self, asked: dict[str, int], made_s: float) -> None:
        """The new replicas join the running job, owning nothing (:mod:`raytide.driver.joining`: no
        hold, no new incarnation; snapshots paused first); where that cannot hold, or a death met
        it (the job recovered in the old widths), the short switch below (``self.in_place`` says why)."""
        new = self.supervision.recompile(new_widths(self.recovery.placement.plan, asked))
        self.in_place = refusal(self.recovery, new, self.vertex)
        if self.in_place is None:
            died = self._pause()
            if died is not None:  # the snapshot in flight would never end: recovered from, in the old widths
                self.supervision.recover(self.recovery.after_death(died))
                self.in_place = f"a death before the join ({died}): the job recovered in its old widths"
            else:
                self.in_place = join(self.recovery, self.supervision, new, self.vertex, self.steps)
            if self.in_place is None:
                return
            self._resume()  # the switch's cut may start; after a recovery, they run already
        self._switch(asked, made_s)

    def _retire_later(self, asked: dict[str, int], record: RescaleRecord) -> None:
        """A shrink whose step waited for the caller's next advance, seen made by a pump or the next rescale:
        its emptied replicas retire as within the call (:meth:`_retire`, given the rescale's timeout from
        now; a death met it: made holding the whole job), and its record says how."""
        self.deadline = time.monotonic() + self.timeout
        why = self._retire(asked)
        if why:
            self._remake(asked, why)
        record.steps.update(self.steps.seconds)
        record.stepped["switch"] = self._how_switched(False)
        if self.switches:
            record.cut_id, record.pause_s = self.switches[-1].cut_id, self.switches[-1].pause_s

    def _remake(self, asked: dict[str, int], why: str, later: bool = False) -> dict[str, Any]:
        """The rescale made holding the whole job (a death met the steps or the retirement: the job recovered
        from its last snapshot, from before the plan); its record. ``later``: by a pump, after the call
        returned (given the rescale's timeout from now)."""
        if later:
            self.deadline = time.monotonic() + self.timeout
        return rescale(self.recovery, self.supervision, asked, self._left(), why=f"not stepped: {why}")

    def _retire(self, asked: dict[str, int]) -> str:
        """A shrink's steps done: the emptied replicas leave the running job (:func:`~raytide.driver.joining.retire`;
        no hold, no new incarnation), then the snapshots resume; where that cannot hold, the snapshots resume and
        the short switch retires them (``self.in_place`` says why). Why the rescale must hold the whole job ("":
        it need not): a death met the retirement, and the job recovered from before the plan."""
        if self.in_place is None:
            new = self.supervision.recompile(new_widths(self.recovery.placement.plan, asked))
            try:
                self.in_place, died = retire(self.recovery, self.supervision, new, self.vertex, self.steps,
                                             self.deadline)
            except RescaleError:  # not let go by the deadline: the emptied replicas hold nothing a snapshot needs
                self._resume()
                raise
            if died:
                return f"{self.in_place}: the job recovered from its last snapshot"
        self._resume()
        if self.in_place is not None:
            self._switch(asked, 0.0)
        return ""

    def _switch(self, asked: dict[str, int], made_s: float) -> None:
        """The short switch: the widths change, the vertex's owners do not (nothing moves)."""
        kept = frozenset(name for name in self.recovery.placement.plan.vertices)
        self.switches.append(switch(self.recovery, self.supervision, asked, self._left(), made_s, kept))

    def _step(self, width: int, shrinking: bool) -> tuple[StepPlanMessage | None, str]:
        """The plan made and installed, and (``shrinking``, whose retiring switch follows, unless it is
        left to the pumps: ``self.deferred``) run to its last step; ``(plan, "")``, or ``(None, why)``
        if a death met it (the job recovered, from before the plan)."""
        recovery, message = self.recovery, None
        try:
            died = self.supervision.watch(0)  # one noticed already: recovered from first
            if died is None:
                died = self._pause()
            if died is None:
                message = self.steps.time("install the plan", self._install, width, shrinking)
                self.window = [time.time(), 0.0]
                if not shrinking or self.deferred:
                    return message, ""
                # retiring in place: the snapshots resume once the emptied replicas have left (_retire)
                self.left.start(self._pending(message, None, self._resume if self.in_place is not None else _stay_paused))
                died = self.steps.time(MOVE_STEP, self.left.wait, self.supervision.watch, self.inputs, self.deadline)
                self.window[1] = time.time()
        except ray.exceptions.RayActorError as error:  # a replica, the progress actor or the coordinator
            died = f"job {recovery.placement.name!r}: an actor died during the stepped rescale: {type(error).__name__}"
        except RescaleError:
            if message is None:  # no plan installed: snapshots may go on
                self._resume()
            raise
        if died is not None:  # the recovery restarts the snapshots
            self.left.abandon(died)
            self.supervision.recover(recovery.after_death(died))
            return None, died_in_steps(died)
        return message, ""  # the snapshots resumed as the last step was seen done (StepsLeft.poll)

    def _pause(self) -> str | None:
        """No snapshot from now until the steps end (none in flight either): one that cut
        through a plan would record a key's state at two replicas. A death's cause if one came
        first (the snapshot in flight would not end: the caller recovers from it)."""
        coordinator = self.recovery.coordinator
        if coordinator is None:
            return None
        self.recovery.wait([coordinator.pause.remote(self.recovery.incarnation)], "pausing the snapshots")
        return self.steps.time("wait for the snapshot in flight", self._no_snapshot_in_flight)

    def _resume(self) -> None:
        if self.recovery.coordinator is not None:
            self.recovery.wait([self.recovery.coordinator.start.remote()], "resuming the snapshots after the steps")

    def _no_snapshot_in_flight(self) -> str | None:
        """Take the job's events until the coordinator has no snapshot in flight; a death's cause if one came first."""
        coordinator = self.recovery.coordinator
        while self.recovery.wait([coordinator.stats.remote()], "the coordinator's stats")[0]["in_flight"] is not None:
            if time.monotonic() > self.deadline:
                raise RescaleError(f"job {self.recovery.placement.name!r}: the snapshot in flight did not end "
                                   f"before the stepped rescale's deadline")
            died = self.supervision.watch(STEP_POLL)
            if died is not None:
                return died
        return None

    def _install(self, width: int, shrinking: bool) -> StepPlanMessage:
        """The plan from an epoch a margin ahead of the inputs (the gate closed there), its holds at
        the progress actor and the plan at every replica at once, while the inputs go on below
        that epoch; then the gate opened (an input that reached it meanwhile waited: measured). A
        caller that feeds the job itself gets one step: a shrink's at the inputs' own epoch if they took
        no records at it yet (made at once: its retirement follows within the call), else the epoch after
        (made at the caller's next advance: its retirement is left to the pumps, ``self.deferred``)."""
        placement, incarnation, gate = self.recovery.placement, self.recovery.incarnation, self.inputs.gate
        table = self._table()  # nothing changes it but a rescale, and this is one
        first = gate.close_at_frontier(self.inputs.epochs, self.deadline) if self.one_step and shrinking else None
        if first is None:  # the step waits for the next advance: a shrink's retirement is left to the pumps
            self.deferred = self.one_step and shrinking
            first = gate.close_ahead(self.inputs.epochs, 1 if self.one_step else gate.margin(), self.deadline)
        try:
            steps = plan_steps(table, width, first, DEFAULT_KEY_GROUPS if self.one_step else self._groups_per_step(table, width))
            message = steps.message(self.vertex)
            self.recovery.wait([placement.progress.hold.remote(incarnation, holds(placement.plan, message)),
                                *[peer.install_plan.remote(incarnation, message, self._new_owners(key, steps))
                                  for key, peer in placement.peers.items()]],
                               "the progress actor taking the stepped rescale's holds and every replica its plan")
        finally:
            self.steps.seconds[HELD_STEP] = gate.open()
        return message

    def _new_owners(self, key: ReplicaKey, steps: StepPlan) -> dict[ReplicaKey, Any]:
        """The handles of the replicas ``key`` hands key groups to (its chain's, which it does not send to otherwise)."""
        peers = self.recovery.placement.peers
        if key.chain != self.recovery.placement.plan.chain_of(self.vertex).name:
            return {}
        owners = {ReplicaKey(key.chain, move.to_replica) for _, move in steps.moves_of(key.replica)
                  if move.from_replica == key.replica}
        return {owner: peers[owner] for owner in owners}

    def _groups_per_step(self, table: KeyGroupAssignment, width: int) -> int:
        """Steps as small as the inputs' pace lets the plan's moves fit in about :data:`STEPS_S`."""
        moves = len(table.rescale(width)[1])
        return groups_per_step_at_pace(max(1, moves), self.inputs.gate.epochs_within(STEPS_S), GROUPS_PER_STEP)

    def _table(self) -> KeyGroupAssignment:
        """The table the senders route the vertex's exchange by (after any plan before)."""
        placement = self.recovery.placement
        routes = {(name, port, index) for (name, port), consumers in placement.plan.consumers.items()
                  for index, consumer in enumerate(consumers) if consumer.vertex == self.vertex}
        for tables, _ in self.recovery.wait([peer.stepping.remote() for peer in placement.peers.values()],
                                            "the replicas' routing tables"):
            for route, table in tables.items():
                if route in routes:
                    return table
        raise RescaleError(f"job {placement.name!r}: no replica routes to vertex {self.vertex!r} by key")

    def _pending(self, message: StepPlanMessage, record: RescaleRecord | None, then: Callable[[], None],
                 redo: Callable[[str], Any] | None = None) -> PendingPlan:
        """The installed plan, for whoever sees its steps end (:mod:`raytide.driver.steps_left`), who runs
        ``then`` (the snapshots resumed, or the retirement); ``redo``: what follows a death's recovery."""
        placement = self.recovery.placement
        chain = placement.plan.chain_of(self.vertex).name
        replicas = [peer for key, peer in placement.peers.items() if key.chain == chain]
        outputs = frozenset(placement.plan.chain(chain).vertices) & frozenset(placement.plan.outputs)
        return PendingPlan(placement.name, self.vertex, replicas, message, then, record, outputs, redo)

    def _record(self, started: float, asked: dict[str, int], message: StepPlanMessage | None,
                why: str) -> RescaleRecord:
        """One record for the whole rescale: the switch's hold (if any) and the steps (a growth's
        are filled in when they end: ``stepped["ended"]`` is None until then)."""
        plan = self.recovery.placement.plan
        now, switched = time.monotonic(), self.switches[-1] if self.switches else None
        widths = new_widths(plan, asked)
        before = {name: width for name, width in self.widths.items() if width != widths[name]}
        steps = {**(switched.steps if switched else {}), **self.steps.seconds}
        epochs = [epoch for epoch, _ in message.steps] if message else []
        moved = sorted(move.key_group for _, moves in message.steps for move in moves) if message else []
        switch = RETIRING if self.deferred else self._how_switched(widths[self.vertex] > self.widths[self.vertex])
        record = RescaleRecord(
            self.recovery.incarnation, before, {name: widths[name] for name in before},
            switched.cut_id if switched else None, now - started, switched.cut_s if switched else 0.0,
            switched.pause_s if switched else 0.0, time.time(), switched.hosts if switched else {}, steps,
            mode="whole job" if why else "stepped", why=why and f"not stepped: {why}",
            stepped={"vertex": self.vertex, "steps": len(epochs), "epochs": epochs[:1] + epochs[-1:], "moved": moved,
                     "window": tuple(self.window), "switch": switch,
                     "ended": "done" if self.window[1] else None})
        self.recovery.rescales.append(record)
        logger.info("job %r rescaled %s -> %s in %.2f s (%s; paused %.2f s, %d steps)%s", self.recovery.placement.name,
                    record.before, record.after, record.seconds, record.mode, record.pause_s, len(epochs),
                    f", {record.why}" if why else "")
        return record

    def _how_switched(self, growing: bool) -> str:
        """How the replicas were added or retired: in place, or by a switch to a new incarnation, and why."""
        if not self.switches and self.in_place is None:
            return f"{'joined' if growing else 'retired'} in place: no hold, no new incarnation"
        return f"a new incarnation: {self.in_place or 'the switch held the job'}"


def _stay_paused() -> None:
    """The snapshots stay paused when the last step is seen: a shrink's retirement in place follows."""
