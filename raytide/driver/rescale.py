"""The driver's side of a live rescale (``job.rescale``), in the steps of :mod:`raytide.rescale.widths`.

It runs on the driver, with the job's recovery state (:class:`~raytide.driver.recovery.JobRecovery`:
the incarnation, the coordinator, the restore of every replica), and waits, with a timeout,
for every actor it addresses; no actor waits for the driver.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import ray

from raytide.core.keygroups import KeyGroupAssignment
from raytide.driver.recovery import COORDINATOR, Adoption, JobRecovery, RescaleRecord, Steps, input_replicas
from raytide.errors import SnapshotError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ReplicaKey
from raytide.rescale.layout import check_splittable, cut_point, new_tables
from raytide.rescale.widths import new_widths
from raytide.snapshots.replica_state import HeldReport

if TYPE_CHECKING:
    from raytide.driver.job import Job

logger = logging.getLogger(__name__)


def rescale(recovery: JobRecovery, job: Job, asked: dict[str, int], timeout: float) -> dict[str, Any]:
    """Rescale ``job`` to the widths ``asked`` for, in the steps of :mod:`raytide.rescale.widths`;
    returns its :class:`~raytide.driver.recovery.RescaleRecord` as a dict."""
    assert job.recompile is not None
    widths = new_widths(job.plan, asked)
    before = {name: job.plan.width(name) for name in job.plan.vertices if job.plan.width(name) != widths[name]}
    if not before:
        unchanged = RescaleRecord(recovery.incarnation, {}, {}, None, 0.0, 0.0, 0.0, time.time(), {}, {})
        return vars(unchanged).copy()  # the same keys as a rescale's; not one of job.stats()'s
    plan = job.recompile(widths)
    old_widths = {name: job.plan.width(name) for name in job.plan.vertices}
    check_splittable(plan, old_widths)
    started = time.monotonic()
    steps = Steps()
    fresh = steps.time("start the new hosts", job.hosts_to_add, plan)
    try:
        asked_at, held_at, cut_id, reports, tables, handed = _hold_and_hand_over(
            recovery, job, plan, old_widths, started + timeout, steps)
    except BaseException:
        job.give_back(fresh)
        recovery.coordinator.start.remote()  # the job goes on as it was
        raise
    recovery.incarnation += 1
    incarnation = recovery.incarnation
    job.outputs.rollback()  # what the driver held for a commit comes again from the kept records
    # The held replicas have handed their state over: from here on the job is in the new
    # configuration, and a death is recovered from in it (from the last committed snapshot,
    # laid out for the new widths).
    died: str | None = None
    try:
        recovery.wait(job, [recovery.coordinator.reconfigure.remote(plan, incarnation)],
                      "reconfiguring the coordinator")
    except ray.exceptions.RayActorError as error:  # the recovery below starts a new one
        died = f"job {job.name!r}: {COORDINATOR} died during the rescale to incarnation {incarnation}: " \
               f"{type(error).__name__}"
    recovery.sync_ref = None
    refs: dict[ReplicaKey, list] = {key: [] for key in plan.replica_keys()}
    for pieces in handed:
        for key, ref in pieces.items():
            refs[key].append(ref)
    point = cut_point(plan, reports)
    hosts: dict[str, int] = {}
    resumed = time.monotonic()
    try:
        try:
            hosts = steps.time("give the hosts their replicas", job.reconfigure_hosts, plan, incarnation, fresh)
        finally:
            job._watch()  # the new configuration's actors, whatever happened
        resumed = recovery.restore(job, point, incarnation, steps, Adoption(refs, old_widths, tables))
        recovery.coordinator.start.remote(input_replicas(job))
    except ray.exceptions.RayActorError as error:
        died = died or (f"job {job.name!r}: an actor died during the rescale to incarnation {incarnation}: "
                        f"{type(error).__name__}")
    if died is not None:
        job._recover(died)
        resumed = time.monotonic()
    now = time.monotonic()
    record = RescaleRecord(incarnation, before, {name: widths[name] for name in before}, cut_id, now - started,
                           held_at - asked_at, resumed - held_at, time.time() - (now - resumed), hosts,
                           steps.seconds)
    recovery.rescales.append(record)
    logger.info("job %r rescaled %s -> %s in %.2f s (paused %.2f s)", job.name, record.before, record.after,
                record.seconds, record.pause_s)
    return vars(record).copy()


def _hold_and_hand_over(recovery: JobRecovery, job: Job, plan: PhysicalPlan, old_widths: dict[str, int],
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
        cut_id, reports = steps.time("hold at a cut", job.hold_at_cut, deadline)
        held_at = time.monotonic()
        tables = new_tables(plan, old_widths, [report.tables for report in reports.values()])
        keys = list(job.peers)
        try:
            into = recovery.incarnation + 1
            handed = steps.time("hand the state over", recovery.wait, job, [
                job.peers[key].hand_over.remote(recovery.incarnation, into, plan, old_widths, tables) for key in keys],
                "handing the held state over")
            return asked_at, held_at, cut_id, reports, tables, handed
        except ray.exceptions.RayActorError as error:
            job._recover(f"job {job.name!r}: an actor died while the replicas handed their state over for a "
                         f"rescale: {type(error).__name__}")
            if time.monotonic() >= deadline:
                raise SnapshotError(f"job {job.name!r}: the rescale's state could not be handed over in time: "
                                    f"{error}") from error
        except Exception as error:
            job._recover(f"job {job.name!r}: handing the state over for a rescale failed: {error}")
            raise
