"""The driver's side of a live rescale (``job.rescale``), in the steps of :mod:`raytide.rescale.widths`.

It runs on the driver, with the job's recovery state (:class:`~raytide.driver.recovery.JobRecovery`:
the incarnation, the coordinator, the job's placement, inputs and outputs, the restore of
every replica), and waits, with a timeout, for every actor it addresses; no actor waits for
the driver. The job's handle lends it two of its own steps (:class:`Supervision`): taking
the job's events while it waits (which notices deaths), and recovering from a death.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray

from raytide.core.keygroups import KeyGroupAssignment
from raytide.driver.placement import COORDINATOR
from raytide.driver.recovery import RECOVERY_POLL, JobRecovery, RescaleRecord, Steps
from raytide.errors import RaytideError, SnapshotError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ReplicaKey
from raytide.rescale.layout import check_splittable, cut_point, new_tables
from raytide.rescale.widths import new_widths
from raytide.snapshots.recovering import Pieces, Recovering
from raytide.snapshots.recovery import RestorePoint
from raytide.snapshots.replica_state import HeldReport

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Supervision:
    """What a rescale needs of the job's handle besides its recovery state.

    Attributes:
        recompile: the plan of the job's dataflow at other widths.
        pump: take the job's events, waiting at most the given seconds; a death noticed
            there is recovered from before it returns.
        recover: recover the job from the death (or stuck cut) described.
        fail: fail the job with the error given (and raise it).
    """

    recompile: Callable[[dict[str, int]], PhysicalPlan]
    pump: Callable[[float], None]
    recover: Callable[[str], None]
    fail: Callable[[BaseException], None]


def rescale(recovery: JobRecovery, supervision: Supervision, asked: dict[str, int], timeout: float) -> dict[str, Any]:
    """Rescale the job to the widths ``asked`` for, in the steps of :mod:`raytide.rescale.widths`;
    returns its :class:`~raytide.driver.recovery.RescaleRecord` as a dict."""
    placement = recovery.placement
    widths = new_widths(placement.plan, asked)
    before = {name: placement.plan.width(name) for name in placement.plan.vertices
              if placement.plan.width(name) != widths[name]}
    if not before:
        unchanged = RescaleRecord(recovery.incarnation, {}, {}, None, 0.0, 0.0, 0.0, time.time(), {}, {})
        return vars(unchanged).copy()  # the same keys as a rescale's; not one of job.stats()'s
    plan = supervision.recompile(widths)
    old_widths = {name: placement.plan.width(name) for name in placement.plan.vertices}
    check_splittable(plan, old_widths)
    started = time.monotonic()
    steps = Steps()
    fresh = steps.time("start the new hosts", placement.add_hosts, plan)
    try:
        asked_at, held_at, cut_id, reports, tables, handed = _hold_and_hand_over(
            recovery, supervision, plan, old_widths, started + timeout, steps)
    except BaseException:
        placement.give_back(fresh)
        recovery.coordinator.start.remote()  # the job goes on as it was
        raise
    recovery.incarnation += 1
    incarnation = recovery.incarnation
    recovery.outputs.rollback()  # what the driver held for a commit comes again from the kept records
    # The held replicas have handed their state over: from here on the job is in the new
    # configuration, and a death is recovered from in it (from the last committed snapshot,
    # laid out for the new widths).
    resumed, hosts = _switch(recovery, supervision, plan, fresh, Pieces(_by_new_owner(plan, handed), old_widths, tables),
                             cut_point(plan, reports), steps)
    now = time.monotonic()
    record = RescaleRecord(incarnation, before, {name: widths[name] for name in before}, cut_id, now - started,
                           held_at - asked_at, resumed - held_at, time.time() - (now - resumed), hosts,
                           steps.seconds)
    recovery.rescales.append(record)
    logger.info("job %r rescaled %s -> %s in %.2f s (paused %.2f s)", placement.name, record.before, record.after,
                record.seconds, record.pause_s)
    return vars(record).copy()


def _by_new_owner(plan: PhysicalPlan, handed: list[dict[ReplicaKey, Any]]) -> dict[ReplicaKey, list]:
    """The refs of the pieces every old replica handed over, gathered per replica of ``plan``."""
    refs: dict[ReplicaKey, list] = {key: [] for key in plan.replica_keys()}
    for pieces in handed:
        for key, ref in pieces.items():
            refs[key].append(ref)
    return refs


def _switch(recovery: JobRecovery, supervision: Supervision, plan: PhysicalPlan, fresh: list, pieces: Pieces,
            point: RestorePoint, steps: Steps) -> tuple[float, dict[str, int]]:
    """The switch to ``plan`` in the recovery's (new) incarnation: the coordinator and the
    hosts take their new roles, then the replicas adopt their pieces, the progress actor
    restarts and the inputs replay, in the steps of the recovery machine. A death before the
    adoption is recovered from in the new widths (from the last committed snapshot, laid out
    for them), and so is one during it, by the machine. Returns when the replicas ran again
    and how many hosts were kept, added and returned."""
    placement, incarnation = recovery.placement, recovery.incarnation
    died: str | None = None
    try:
        recovery.wait([recovery.coordinator.reconfigure.remote(plan, incarnation)], "reconfiguring the coordinator")
    except ray.exceptions.RayActorError as error:  # the recovery starts a new one
        died = f"job {placement.name!r}: {COORDINATOR} died during the rescale to incarnation {incarnation}: " \
               f"{type(error).__name__}"
    recovery.sync_ref = None
    hosts: dict[str, int] = {}
    try:
        try:
            hosts = steps.time("give the hosts their replicas", placement.reconfigure, plan, incarnation, fresh,
                               recovery.coordinator)
        finally:
            recovery.watch()  # the new configuration's actors, whatever happened
    except ray.exceptions.RayActorError as error:
        died = died or (f"job {placement.name!r}: an actor died during the rescale to incarnation {incarnation}: "
                        f"{type(error).__name__}")
    machine = (Recovering.adopting(placement.name, recovery.budget, point, pieces, incarnation) if died is None
               else Recovering.after_death(placement.name, recovery.budget, incarnation, died))
    try:
        return recovery.execute(machine, steps), hosts
    except RaytideError as error:
        supervision.fail(error)
        raise


def _hold_and_hand_over(recovery: JobRecovery, supervision: Supervision, plan: PhysicalPlan, old_widths: dict[str, int],
                        deadline: float, steps: Steps) -> tuple[float, float, int, dict[ReplicaKey, HeldReport],
                                                                dict[str, KeyGroupAssignment],
                                                                list[dict[ReplicaKey, Any]]]:
    """Hold ``job`` at a cut and have every replica hand its state over for ``plan``:
    when the cut was asked for and when every replica held (``time.monotonic()``), its id,
    the replicas' reports, the new routing tables and, per old replica, the refs of the
    pieces it put in the object store. A death meanwhile is recovered from (in the old
    configuration) and the cut taken again.

    Raises:
        SnapshotError: no cut by ``deadline``.
        RaytideError: a vertex's ``take_keys`` failed (the job is recovered first: its
            replicas held at the cut run again).
    """
    while True:
        asked_at = time.monotonic()
        cut_id, reports = steps.time("hold at a cut", _hold_at_cut, recovery, supervision, deadline)
        held_at = time.monotonic()
        tables = new_tables(plan, old_widths, [report.tables for report in reports.values()])
        peers, name = recovery.placement.peers, recovery.placement.name
        try:
            into = recovery.incarnation + 1
            handed = steps.time("hand the state over", recovery.wait, [
                peers[key].hand_over.remote(recovery.incarnation, into, plan, old_widths, tables) for key in peers],
                "handing the held state over")
            return asked_at, held_at, cut_id, reports, tables, handed
        except ray.exceptions.RayActorError as error:
            supervision.recover(f"job {name!r}: an actor died while the replicas handed their state over for a "
                                f"rescale: {type(error).__name__}")
            if time.monotonic() >= deadline:
                raise SnapshotError(f"job {name!r}: the rescale's state could not be handed over in time: "
                                    f"{error}") from error
        except Exception as error:
            supervision.recover(f"job {name!r}: handing the state over for a rescale failed: {error}")
            raise


def _hold_at_cut(recovery: JobRecovery, supervision: Supervision, deadline: float) -> tuple[int, dict[ReplicaKey, HeldReport]]:
    """A rescale's cut: every replica holds its state at a marker the coordinator injects
    (``hold_now``); returns the cut's id and the replicas' reports. Deaths meanwhile are
    noticed and recovered from, and the cut is taken again after the recovery; a cut that
    fails without one is let go by a recovery too (held replicas run nothing until
    restored).

    Raises:
        SnapshotError: no cut was complete by ``deadline`` (``time.monotonic()``).
    """
    name = recovery.placement.name
    while True:
        incarnation = recovery.incarnation
        ref = recovery.coordinator.hold_now.remote(max(0.1, deadline - time.monotonic()), recovery.outputs.delivered())
        while not ray.wait([ref], timeout=RECOVERY_POLL)[0]:
            supervision.pump(0)
        try:
            cut_id, reports = ray.get(ref)
        except (SnapshotError, ray.exceptions.RayActorError) as error:
            supervision.pump(0)  # a death: recover from it
            if recovery.incarnation == incarnation:
                supervision.recover(f"job {name!r}: a rescale cut was not complete: {error}")
            if time.monotonic() >= deadline:
                raise SnapshotError(f"job {name!r}: no rescale cut was complete in time: {error}") from error
            continue
        if cut_id is None:  # nothing is held
            raise SnapshotError(f"job {name!r}: the snapshot in flight did not complete in time, so no "
                                f"rescale cut could be taken")
        return cut_id, reports
