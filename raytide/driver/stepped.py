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
    driver: takes the job's events and asks the vertex's replicas (VertexActor.stepping) until
        no step is left; the snapshots resume
    shrinking p -> q: the short switch that retires the emptied replicas

The steps need the job's inputs to pass their epochs: the driver steps only if an input moves
within :data:`QUIET_S` of the call (another thread, a feeder or a source feeds the job), and
``job.rescale`` waits for the steps; it raises a :class:`RescaleError` naming the epochs if
they are not passed within its ``timeout`` (the plan stays installed and ends as the inputs
move on; snapshots stay paused until it has). Where stepping cannot hold
(:func:`~raytide.rescale.steps.stepped_vertex`: several chains, a loop, a vertex fused behind;
an input read in the replicas, closed or not moving; a death before or during the steps), the
rescale holds the whole job as before (:func:`~raytide.driver.rescale.rescale`) and its
record says why.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Collection
from typing import Any

import ray

from raytide.core.keygroups import KeyGroupAssignment
from raytide.driver.inputs import InputFeeds
from raytide.driver.joining import join, refusal
from raytide.driver.recovery import JobRecovery, RescaleRecord, Steps
from raytide.driver.rescale import Supervision, rescale, switch
from raytide.engine.stepping import holds
from raytide.errors import RescaleError
from raytide.physical.protocol import ReplicaKey, StepPlanMessage
from raytide.rescale.layout import check_splittable
from raytide.rescale.steps import StepPlan, plan_steps, stepped_vertex
from raytide.rescale.widths import new_widths

logger = logging.getLogger(__name__)

#: Key groups one step moves (of 128): 100 MB of state moves about 6 MB a step.
GROUPS_PER_STEP = 8
#: How long the driver takes the job's events between two looks at the steps left.
STEP_POLL = 0.02
#: How long the driver watches the inputs for an epoch's move before it steps: the steps wait for
#: the inputs to pass their epochs, so a job not fed meanwhile holds the whole job instead.
QUIET_S = 1.0
#: The record's step for the time inputs waited at the gate for the plan (:mod:`raytide.driver.plan_gate`).
HELD_STEP = "inputs held at the plan's first epoch"
#: ``job.rescale``'s default when not told whether to step: the environment's ``RAYTIDE_STEPPED_RESCALE=1``.
STEPPED_ENV = "RAYTIDE_STEPPED_RESCALE"


def stepping_default() -> bool:
    """Whether ``job.rescale`` steps when not told (``RAYTIDE_STEPPED_RESCALE=1``; off otherwise)."""
    return os.environ.get(STEPPED_ENV, "") == "1"


def make_rescale(recovery: JobRecovery, supervision: Supervision, inputs: InputFeeds, asked: dict[str, int],
                 timeout: float, made_s: float, stepped: bool, streams: Collection[str] = ()) -> dict[str, Any]:
    """``job.rescale``: in steps if asked and it can hold, else holding the whole job (the
    record's ``why`` says why not); returns the rescale's record as a dict. ``streams``: the
    job's stream inputs (each batch waits for a snapshot, which the steps pause: not stepped)."""
    if not stepped:
        return rescale(recovery, supervision, asked, timeout, made_s)
    plan = recovery.placement.plan
    new = supervision.recompile(new_widths(plan, asked))
    vertex, why = stepped_vertex(plan, new)
    if vertex is not None and streams:
        vertex, why = None, f"stream inputs {sorted(streams)} wait for a snapshot at each batch, and the steps pause them"
    if vertex is not None and inputs.readers:
        vertex, why = None, f"inputs {sorted(inputs.readers)} are read in the replicas, which move their epochs"
    if vertex is not None and not inputs_moving(inputs, QUIET_S):
        vertex, why = None, (f"no input moved to a new epoch within {QUIET_S:g} s: the steps would wait for them (is "
                             f"the job fed from the thread that rescales it?)")
    if vertex is not None and None in inputs.epochs.values():
        vertex, why = None, "an input is closed: its records went by the old table, and the steps' epochs would never come"
    if vertex is None:
        return rescale(recovery, supervision, asked, timeout, made_s, why=f"not stepped: {why}")
    check_splittable(new, {name: plan.width(name) for name in plan.vertices})  # refused before anything moves
    return SteppedRescale(recovery, supervision, inputs, vertex, time.monotonic() + timeout).run(asked, made_s)


class SteppedRescale:
    """One stepped rescale of ``vertex`` on Ray (see the module docstring)."""

    def __init__(self, recovery: JobRecovery, supervision: Supervision, inputs: InputFeeds, vertex: str,
                 deadline: float) -> None:
        self.recovery, self.supervision, self.inputs = recovery, supervision, inputs
        self.vertex, self.deadline = vertex, deadline
        self.steps = Steps()  # the seconds of the wait for a snapshot in flight, the install and the steps
        self.window = [0.0, 0.0]  # wall-clock times the plan was installed and its last step seen done
        self.switches: list[RescaleRecord] = []
        self.joined: str | None = None  # growing: None if the new replicas joined in place, else why not
        self.widths: dict[str, int] = {}  # every vertex's width before

    def run(self, asked: dict[str, int], made_s: float) -> dict[str, Any]:
        """Switch (growing), step, switch (shrinking); the record, kept in ``job.stats()``."""
        started = time.monotonic() - made_s
        plan = self.recovery.placement.plan
        self.widths = {name: plan.width(name) for name in plan.vertices}
        before, after = plan.width(self.vertex), new_widths(plan, asked)[self.vertex]
        if after > before:
            self._grow(asked, made_s)
        message, why = self._step(after)
        if why:  # a death met the steps: the job recovered; the rest as before, holding the whole job
            done = rescale(self.recovery, self.supervision, asked, self._left(), why=f"not stepped: {why}")
            if done["cut_id"] is not None:
                return done
            # grown already: the recovery laid the last snapshot out for the new widths
        elif after < before:
            self._switch(asked, 0.0)
        return self._record(started, asked, message, why)

    def _left(self) -> float:
        return max(0.1, self.deadline - time.monotonic())

    def _grow(self, asked: dict[str, int], made_s: float) -> None:
        """The new replicas join the running job, owning nothing (:mod:`raytide.driver.joining`: no
        hold, no new incarnation; snapshots paused first); where that cannot hold, or a death met
        it (the job recovered in the old widths), the short switch below (``self.joined`` says why)."""
        new = self.supervision.recompile(new_widths(self.recovery.placement.plan, asked))
        self.joined = refusal(self.recovery, new, self.vertex)
        if self.joined is None:
            self._pause()
            self.joined = join(self.recovery, self.supervision, new, self.vertex, self.steps)
            if self.joined is None:
                return
            self._resume()  # the switch's cut may start; after a recovery, they run already
        self._switch(asked, made_s)

    def _switch(self, asked: dict[str, int], made_s: float) -> None:
        """The short switch: the widths change, the vertex's owners do not (nothing moves)."""
        kept = frozenset(name for name in self.recovery.placement.plan.vertices)
        self.switches.append(switch(self.recovery, self.supervision, asked, self._left(), made_s, kept))

    def _step(self, width: int) -> tuple[StepPlanMessage | None, str]:
        """The plan made, installed and run to its last step; ``(plan, "")``, or ``(None, why)``
        if a death met it (the job recovered, from before the plan)."""
        recovery, message = self.recovery, None
        try:
            died = self.supervision.watch(0)  # one noticed already: recovered from first
            if died is None:
                self._pause()
                message = self.steps.time("install the plan", self._install, width)
                self.window = [time.time(), 0.0]
                died = self.steps.time("move the groups in steps", self._wait_steps, message)
                self.window[1] = time.time()
        except ray.exceptions.RayActorError as error:  # a replica, the progress actor or the coordinator
            died = f"job {recovery.placement.name!r}: an actor died during the stepped rescale: {type(error).__name__}"
        except RescaleError:
            if message is None:  # no plan installed: snapshots may go on
                self._resume()
            raise
        if died is not None:  # the recovery restarts the snapshots
            self.supervision.recover(recovery.after_death(died))
            return None, f"a death during the steps ({died}): the job recovered from its last snapshot"
        self._resume()
        return message, ""

    def _pause(self) -> None:
        """No snapshot from now until the steps end (none in flight either): one that cut
        through a plan would record a key's state at two replicas."""
        coordinator = self.recovery.coordinator
        if coordinator is not None:
            self.recovery.wait([coordinator.pause.remote(self.recovery.incarnation)], "pausing the snapshots")
            self.steps.time("wait for the snapshot in flight", self._no_snapshot_in_flight)

    def _resume(self) -> None:
        if self.recovery.coordinator is not None:
            self.recovery.wait([self.recovery.coordinator.start.remote()], "resuming the snapshots after the steps")

    def _no_snapshot_in_flight(self) -> None:
        coordinator = self.recovery.coordinator
        while self.recovery.wait([coordinator.stats.remote()], "the coordinator's stats")[0]["in_flight"] is not None:
            if time.monotonic() > self.deadline:
                raise RescaleError(f"job {self.recovery.placement.name!r}: the snapshot in flight did not end "
                                   f"before the stepped rescale's deadline")
            time.sleep(STEP_POLL)

    def _install(self, width: int) -> StepPlanMessage:
        """The plan from an epoch a margin ahead of the inputs (the gate closed there), its holds at
        the progress actor and the plan at every replica at once, while the inputs go on below
        that epoch; then the gate opened (an input that reached it meanwhile waited: measured)."""
        placement, incarnation, gate = self.recovery.placement, self.recovery.incarnation, self.inputs.gate
        table = self._table()  # nothing changes it but a rescale, and this is one
        first = gate.close_ahead(self.inputs.epochs, gate.margin(), self.deadline)
        try:
            steps = plan_steps(table, width, first, GROUPS_PER_STEP)
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

    def _wait_steps(self, message: StepPlanMessage) -> str | None:
        """Take the job's events until no replica of the vertex has a step left; a death's
        cause if one came first.

        Raises:
            RescaleError: the steps were not done by the rescale's deadline (naming their epochs
                and the inputs').
        """
        placement = self.recovery.placement
        chain = placement.plan.chain_of(self.vertex).name
        replicas = [peer for key, peer in placement.peers.items() if key.chain == chain]
        while True:
            died = self.supervision.watch(STEP_POLL)
            if died is not None:
                return died
            left = [name for _, names in self.recovery.wait([peer.stepping.remote() for peer in replicas],
                                                             "the replicas' steps left") for name in names]
            if not left:
                return None
            if time.monotonic() > self.deadline:
                epochs = [epoch for epoch, _ in message.steps]
                raise RescaleError(
                    f"job {placement.name!r}: the stepped rescale of {self.vertex!r} has steps left at epochs "
                    f"{epochs[0]}..{epochs[-1]}, and the inputs are at {self.inputs.epochs}: its steps are made as "
                    f"the inputs pass their epochs (feed the job from another thread while job.rescale runs); the "
                    f"plan goes on, and snapshots stay paused until it ends")

    def _record(self, started: float, asked: dict[str, int], message: StepPlanMessage | None,
                why: str) -> dict[str, Any]:
        """One record for the whole rescale: the switch's hold (if any) and the steps."""
        plan = self.recovery.placement.plan
        now, switched = time.monotonic(), self.switches[-1] if self.switches else None
        widths = new_widths(plan, asked)
        before = {name: width for name, width in self.widths.items() if width != widths[name]}
        steps = {**(switched.steps if switched else {}), **self.steps.seconds}
        epochs = [epoch for epoch, _ in message.steps] if message else []
        moved = sorted(move.key_group for _, moves in message.steps for move in moves) if message else []
        record = RescaleRecord(
            self.recovery.incarnation, before, {name: widths[name] for name in before},
            switched.cut_id if switched else None, now - started, switched.cut_s if switched else 0.0,
            switched.pause_s if switched else 0.0, time.time(), switched.hosts if switched else {}, steps,
            mode="whole job" if why else "stepped", why=why and f"not stepped: {why}",
            stepped={"vertex": self.vertex, "steps": len(epochs), "epochs": epochs[:1] + epochs[-1:], "moved": moved,
                     "window": tuple(self.window), "switch": self._how_switched()})
        self.recovery.rescales.append(record)
        logger.info("job %r rescaled %s -> %s in %.2f s (%s; paused %.2f s, %d steps)%s", self.recovery.placement.name,
                    record.before, record.after, record.seconds, record.mode, record.pause_s, len(epochs),
                    f", {record.why}" if why else "")
        return vars(record).copy()

    def _how_switched(self) -> str:
        """How the replicas were added or retired: joined in place, or by a switch to a new incarnation, and why."""
        if not self.switches and self.joined is None:
            return "joined in place: no hold, no new incarnation"
        return f"a new incarnation: {self.joined or 'the retiring replicas leave holding the job'}"


def inputs_moving(inputs: InputFeeds, within: float) -> bool:
    """Whether an input moves to another epoch (or closes) within ``within`` seconds: the job is fed meanwhile."""
    before, deadline = dict(inputs.epochs), time.monotonic() + within
    while time.monotonic() < deadline:
        if inputs.epochs != before:
            return True
        time.sleep(STEP_POLL / 4)
    return False


