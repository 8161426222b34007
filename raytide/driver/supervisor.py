"""The supervisor loop of a job on Ray, out of the user's handle (:class:`~raytide.driver.job.Job`
keeps only the user's methods and calls this): events in, machines run, effects out::

    long poll (job events) ─┐
    Liveness (a host died) ─┤
    a stall's ping (silent) ┼─▶ notice ─▶ supervise (raytide.supervisor.deaths, the simulator's too)
    coordinator sync ───────┘        │ deaths, in a job with recovery     │ any other failure
                                     ▼                                    ▼
              recover: a Recovering run by the shared loop        fail: the job is cancelled
              (raytide.supervisor.execution) on RayRecovery       and the error raised to the user
                                     │
                                     ▼
              the autoscaler reads the replaced actors; its decisions become job.rescale calls

A death has one report, the liveness watch's, whoever meets it first. A feed thread (a driver
thread pushing an input's batches, :mod:`raytide.driver.feeders`) whose call into a killed input
replica fails hands the death to the watch, which names the replica at its next look::

    feed thread ──push──▶ input replica (dead): ActorDiedError(actor id)
         │ feed_failed (no recovery: a job with recovery replays the feed's calls, nothing fails)
         ▼
    Liveness.name ── the actor is watched ──▶ DeathAlarm.ring: wakes the driver's wait for events
         │ not watched (nobody else can name it): the job fails with the feed's error
         ▼
    the next notice (a pump, or a rescale under way taking events) ─▶ Liveness.check ─▶ lost(key):
    ReplicaLost naming the replica; in a rescale under way, the rescale's verdict on a death
    (without recovery, a RecoveryError: only a recovery could undo it); an actor a rescale
    retired before that look: Liveness.unclaimed, the job fails with the feed's error

At each pump the driver also looks at its event-time inputs' idleness (a partition that pushed
nothing for ``idle_timeout`` stops holding the watermark back: ``EventTimeInputs.release_idle``),
so a window an idle partition held open closes while a thread waits on the job, without a push.

Every wait has a timeout and says what it waited for; Ctrl-C while the driver waits tears the
job down (a notebook's interrupted cell leaves no actors running).
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import ray

from raytide.driver.alone_recovery import AloneOnRay
from raytide.driver.feeders import Feeders
from raytide.driver.outputs import LIVENESS_EVERY_S, OutputCollector
from raytide.driver.placement import COORDINATOR, PROGRESS, JobPlacement
from raytide.driver.recovery import RECOVERY_POLL, JobRecovery
from raytide.driver.rescale import Supervision
from raytide.driver.stall_ping import StallPing
from raytide.driver.steps_left import StepsLeft
from raytide.driver.store_lease import release_store
from raytide.errors import ActorLost, InternalError, JobCancelled, RaytideError, ReplicaLost
from raytide.physical.plan import PhysicalPlan
from raytide.snapshots.recovering import Recovering
from raytide.snapshots.recovery import unrecoverable
from raytide.supervisor.deaths import judge, supervise

logger = logging.getLogger(__name__)

#: The longest the autoscaler's long poll for changes waits (the driver keeps one pending).
AUTOSCALE_POLL = 5.0
#: Seconds between two calls telling a job's output replicas what the driver has, without recovery.
FORGET_EVERY = 1.0


class JobSupervisor:
    """The event and recovery loop of one job on Ray (see the module docstring), and its end."""

    def __init__(self, name: str, placement: JobPlacement, outputs: OutputCollector, recovers: bool) -> None:
        """``recovers``: the job was started with recovery (its :attr:`recovery` is set once made)."""
        self.name, self.placement, self.outputs = name, placement, outputs
        self.recovery: JobRecovery | None = None
        self.error: BaseException | None = None
        self.torn_down = False
        self.rescaling = False
        #: Held by a rescale throughout and by every pump: a rescale from another thread waits
        #: for the one under way, and no thread takes events while a rescale changes the job.
        self.driving = threading.RLock()
        #: Longest wait for events between two liveness checks (shorter with recovery: a death is noticed within about two).
        self.poll_s = RECOVERY_POLL if recovers else 0.5
        self.feeders: Feeders | None = None  # the job's feeders (they are given the job's handle: set after it)
        self.autoscaler: Any = None
        self.autoscale_ref: Any = None
        self.rescale: Callable[[dict[str, int]], dict[str, Any]] | None = None  # the job's, for the autoscaler
        settings = placement.settings.recovery
        #: The stall rule (a job with recovery): silent actors of a job that stopped moving are declared failed.
        self.stalls = StallPing(settings.stall_timeout, settings.ping_timeout) if recovers and settings else None
        #: The timer of event-time inputs' idleness (``EventTimeInputs.release_idle``), looked at each pump.
        self.release_idle: Callable[[], None] | None = None
        #: A job without recovery: what its rescales need, made at the first
        #: (:func:`~raytide.driver.rescale.cuts_without_recovery`), and when the output replicas
        #: were last told what the driver has (:meth:`forget_delivered`).
        self.cuts: JobRecovery | None = None
        self.forgotten_at = 0.0
        #: A growing stepped rescale's steps left after ``job.rescale`` returned: each pump looks (driver/steps_left.py).
        self.steps_left = StepsLeft()
        self.pumped_at = 0.0  # monotonic time of the last pump (see pump_if_due)

    def pump_if_due(self) -> None:
        """A pump that waits for nothing, if none ran for :data:`LIVENESS_EVERY_S`: a consumer
        taking epochs shown already (``job.results`` of a backlog) pumps as one waiting for the
        next, so a death is recovered from and a stepped rescale's end resumes the snapshots
        while it catches up, not after (a consumer slower than the job could hold both off
        indefinitely)."""
        if time.monotonic() - self.pumped_at >= LIVENESS_EVERY_S:
            self.pump(0)

    def pump(self, timeout: float) -> None:
        """Take new events from the progress actor (waiting up to ``timeout``); check liveness.

        In a job with recovery, a death starts a recovery instead of failing the job. Not
        while another thread rescales the job (it waits for the rescale to end). The wait
        for the progress actor holds no lock: a stream's feed must not wait for a consumer's polls.
        """
        with self.driving:
            call = self.outputs.poll_call(timeout)
        with self.cancelled_on_interrupt():
            if self.outputs.wait(call, timeout) and call is not None:
                self.outputs.answered = call  # the poll need not look again
        with self.driving:
            self.pump_now(0)
        self.pumped_at = time.monotonic()

    def pump_now(self, timeout: float) -> None:
        """:meth:`pump` by a thread that holds the job's lock: take the events, recover from deaths,
        release what idle event-time partitions held back (the driver's timer of idleness), autoscale."""
        with self.cancelled_on_interrupt():
            # the recovery of a death runs to its end here: no machine is under way to take one
            supervise(self.notice(timeout), self.recovery is not None, (None, None), self.fail, self.recover)
            if self.release_idle is not None:
                self.release_idle()
            if self.recovery is None:
                self.forget_delivered()
            if self.steps_left.plan is not None:  # a growth's steps may be left (their outputs' epochs copied only then)
                self.steps_left.poll(self.outputs.finished, self.outputs.latest())
            if self.autoscaler is not None and not self.rescaling:
                self.autoscale()

    def forget_delivered(self) -> None:
        """In a job without recovery, about once a second: the output replicas drop the records
        they keep for a rescale of the epochs the driver has (with recovery, snapshots' barriers
        tell them)."""
        now = time.monotonic()
        if now - self.forgotten_at < FORGET_EVERY:
            return
        self.forgotten_at, plan = now, self.placement.plan
        incarnation, delivered = (self.cuts.incarnation if self.cuts else 0), self.outputs.delivered()
        for key, peer in self.placement.peers.items():
            if any(vertex in plan.outputs for vertex in plan.chain(key.chain).vertices):
                peer.forget_delivered.remote(incarnation, delivered)

    def take_events(self, timeout: float) -> str | None:
        """Take new events (:meth:`notice`) for a rescale that holds at its cut: returns the
        deaths noticed, in a job with recovery (None: none were), for the rescale to recover
        from; any other failure fails the job (:func:`~raytide.supervisor.deaths.judge`)."""
        with self.cancelled_on_interrupt():
            ruling = judge(self.notice(timeout), recovers=self.recovery is not None)
            if ruling.fail is not None:
                self.fail(ruling.fail)
            return ruling.recover

    def notice(self, timeout: float) -> list[BaseException]:
        """Take new events from the progress actor (waiting up to ``timeout``: the outputs shown,
        :class:`~raytide.driver.outputs.OutputCollector`), check liveness and sync the
        coordinator; returns the failures noticed (deaths named as such)."""
        self.raise_if_failed()
        with self.cancelled_on_interrupt():
            try:
                failures = self.outputs.poll(timeout)
            except ray.exceptions.RayActorError as error:
                failures = [self.lost(PROGRESS, error)]
            dead = self.placement.liveness.check()
            if dead is not None:
                failures.append(self.lost(*dead))
            failures += self.placement.liveness.unclaimed()
            if self.stalls is not None:
                failures += [self.lost(key, why=why) for key, why in
                             self.stalls.check(self.placement.liveness, self.outputs.events, not self.outputs.finished)]
            if self.recovery is not None:
                failure = self.recovery.sync()  # the coordinator died (ActorLost), or the store was taken over
                if failure is not None:
                    failures.append(failure)
            return failures

    def recover(self, cause: str) -> None:
        """Recover the job from the deaths of ``cause`` (the job fails if it cannot): one lost
        replica alone where ``Recovery(alone=True)`` and the rule allow
        (:mod:`raytide.driver.alone_recovery`), else the whole job."""
        assert self.recovery is not None
        alone, stepping = False, self.steps_left.plan is not None
        redo = self.steps_left.abandon(cause)  # the whole job recovers: from its last snapshot, taken before the plan
        try:
            alone = not stepping and self.recovery.recovery.alone and AloneOnRay(self.recovery).recover(cause)
        except RaytideError as error:
            self.fail(error)
        if alone:
            self.recovered()
        else:
            self.run_recovery(self.recovery.after_death(cause))
            redo()  # a shrink left to the pumps is made again, holding the whole job

    def autoscale(self) -> None:
        """Make the changes the autoscaler decided on, if it has (without waiting for it)."""
        if not ray.wait([self.autoscale_ref], timeout=0)[0]:
            return
        try:
            changes = ray.get(self.autoscale_ref)
        except ray.exceptions.RayActorError as error:
            logger.warning("job %r: the autoscaler died (%s); the job goes on at its widths", self.name, error)
            self.autoscaler = None
            return
        record: dict[str, Any] | None = None
        if changes and self.outputs.finished:
            record = {"not_made": "the job had finished"}
        elif changes:
            try:
                assert self.rescale is not None
                record = self.rescale(changes)
            except RaytideError as error:  # the job finishing meanwhile refuses it too: nothing to warn of then
                if not self.outputs.finished:
                    logger.warning("job %r: the autoscaler's rescale %s was not made: %s", self.name, changes, error)
                record = {"not_made": str(error)}
        self.autoscaler.rescaled.remote(record, self.placement.plan, self.placement.peers, self.placement.progress)
        self.autoscale_ref = self.autoscaler.next_change.remote(AUTOSCALE_POLL)

    def run_recovery(self, machine: Recovering) -> None:
        """Bring the job back with recovery ``machine`` (the job fails if it cannot); the
        autoscaler reads the replaced actors."""
        assert self.recovery is not None
        try:
            self.recovery.execute(machine)
        except RaytideError as error:
            self.fail(error)
        self.recovered()

    def recovered(self) -> None:
        """After a recovery: the time it took is no stall, and the autoscaler reads the replaced actors."""
        if self.stalls is not None:
            self.stalls.moved()  # the time the recovery took is no stall
        if self.autoscaler is not None:  # it reads the replaced actors from now on
            self.autoscaler.rescaled.remote(None, self.placement.plan, self.placement.peers, self.placement.progress)

    def supervision(self, recompile: Callable[[dict[str, int]], PhysicalPlan]) -> Supervision:
        """What a rescale lends of the supervisor: its events, its recoveries (without recovery,
        failing the job: :meth:`cannot_recover`), its failing the job."""
        return Supervision(recompile, self.take_events, self.run_recovery if self.recovery else self.cannot_recover,
                           self.fail)

    def cannot_recover(self, machine: Recovering) -> None:
        """A rescale of a job without recovery that must go back to its old widths (a death, a
        cut not complete in time) fails the job: its replicas held at the cut have nothing to
        go back to."""
        self.fail(unrecoverable(self.name, f"its rescale could not be made: {machine.causes[-1]}"))

    @contextlib.contextmanager
    def cancelled_on_interrupt(self) -> Iterator[None]:
        """Ctrl-C (KeyboardInterrupt) while the driver waits tears the job down, then goes on up:
        a notebook's interrupted cell leaves no actors running. A broken guarantee
        (:class:`InternalError`) fails the job."""
        try:
            yield
        except InternalError as error:
            self.fail(error)
        except KeyboardInterrupt:
            self.cancel("Ctrl-C (KeyboardInterrupt) while the driver waited for it")
            raise

    def lost(self, key: Any, error: BaseException | None = None, why: str = "") -> RaytideError:
        """The death of the job's actor ``key`` (a replica's key, or the progress actor or coordinator),
        named: found by Ray (``error``), or declared by the stall rule (``why``); a progress actor seated
        in a vertex host is named as that host's replica (:meth:`JobPlacement.seated_in`)."""
        cause = type(error).__name__ if error is not None else why
        by = "the driver's liveness check" if error is not None else "the supervisor's ping of a stalled job"
        if self.placement.seated_in(key) != key:
            key, cause = self.placement.seated_in(key), f"{cause}; the progress actor seated in its host died with it"
        if key in (PROGRESS, COORDINATOR):
            lost: RaytideError = ActorLost(f"job {self.name!r}: {key} died: {cause}" + (f" ({by})" if why else ""))
        else:
            lost = ReplicaLost(f"{self.name}/{key.chain}/{key.replica}", self.placement.plan.chain(key.chain).vertices,
                               by, cause)
        lost.__cause__ = error
        return lost

    def fail(self, error: BaseException, cause: BaseException | None = None) -> None:
        """Fail the job with ``error`` (the first failure stays), cancel it and raise it."""
        if self.error is None:
            self.error = error
            if cause is not None:
                error.__cause__ = cause
        self.raise_if_failed()

    def raise_if_failed(self) -> None:
        if self.error is not None:
            self.cancel("the driver, as the job failed")
            raise self.error

    def feed_failed(self, name: str, error: BaseException) -> None:
        """A feeder thread of input ``name`` failed: the job fails with it (the next call raises it).

        A feed stopped by the death of an actor the job watches (in a job without recovery: one
        with recovery replays the feed's calls) hands it to the liveness watch instead, which names
        the replica at once (see the module docstring): the job fails with its ``ReplicaLost``, or
        with the verdict of the rescale under way."""
        if self.torn_down:
            return
        failed = RaytideError(f"feeding input {name!r} failed: {error!r}")
        failed.__cause__ = error
        if (self.recovery is None and isinstance(error, ray.exceptions.RayActorError)
                and self.placement.liveness.name(error, failed)):
            return  # with recovery the job could not go on without this feed: its error fails the job
        self.error = failed

    def cancel(self, by: str) -> None:
        """Stop the job (``by`` whom, for the error of a wait that had not finished) and give its hosts back."""
        if self.torn_down:
            return
        self.torn_down = True
        self.outputs.link.close()  # the events' socket (raytide.driver.event_link)
        if self.feeders is not None:
            self.feeders.stop_streams(None)  # no batch is acknowledged to a producer from now on
        if self.error is None and not self.outputs.finished:
            self.error = JobCancelled(f"job {self.name!r} was cancelled by {by} before it finished; it takes no more "
                                      f"input; the epochs completed before and not consumed by job.results() stay readable "
                                      f"with job.collect()")
        if not ray.is_initialized():  # ray.shutdown() came first: the actors went with it, and a call would start a Ray
            return release_store(self.placement.settings.recovery)
        for name, epoch in self.outputs.keep_locally():
            logger.debug("could not keep output %s epoch %s", name, epoch)
        if self.autoscaler is not None:
            ray.kill(self.autoscaler)
        (self.recovery or self.placement).release()  # the hosts, then (with recovery) the store's lease
        if self.cuts is not None:
            shutil.rmtree(self.cuts.recovery.store, ignore_errors=True)
