"""A running job on Ray: the user's handle, :class:`Job`, which ``rt.run`` returns::

    with rt.run(flow, inputs={"lines": [["a b", "b"], ["c"]]}) as job:
        job.wait(timeout=60)
        job.collect("counts")     # {0: [('a', 1), ('b', 2)], 1: [('c', 1)]}

The driver talks to the job through two kinds of actors: the vertex actors (one per
replica of each chain of fused vertices, named ``job/chain/replica`` in the Ray
dashboard) and the progress actor, which also gathers completed output epochs and
failures. Where they run is the job's :class:`~raytide.driver.placement.JobPlacement`; its
inputs and outputs are :mod:`raytide.driver.inputs` and :mod:`raytide.driver.outputs`;
its event and recovery loop is :mod:`raytide.driver.supervisor` (the handle keeps only the
user's methods and calls it); a recovery and a rescale are :mod:`raytide.driver.recovery` and
:mod:`raytide.driver.rescale`, which the supervisor starts and which never see the handle.
Every wait on the driver has a timeout and says what it waited for.
"""

from __future__ import annotations

import contextlib
import copy
import time
from collections.abc import Callable, Iterator
from typing import Any

import ray

from raytide.actors.autoscaler_actor import remote_class as _autoscaler_class
from raytide.autoscale.config import Autoscale
from raytide.core.batches import BatchFormat
from raytide.core.dataflow import Probe
from raytide.driver.event_inputs import EventTimeInputs
from raytide.driver.feeders import Feeders
from raytide.driver.outputs import OutputCollector
from raytide.driver.placement import SETUP_TIMEOUT, HostSettings, JobPlacement
from raytide.driver.pool import cluster_cpus
from raytide.driver.recovery import JobRecovery
from raytide.driver.rescale import cuts_without_recovery
from raytide.driver.stats import actor_stats, autoscaler_timeline, recovery_stats, unfinished
from raytide.driver.stepped import make_rescale, stepping_default
from raytide.driver.supervisor import AUTOSCALE_POLL, JobSupervisor
from raytide.driver.views import EpochBar, JobViews
from raytide.errors import (
    ArgumentError,
    GraphError,
    JobTimeout,
    RescaleError,
)
from raytide.physical.plan import PhysicalPlan
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.rescale.widths import check_widths, new_widths
from raytide.sources.base import Placement as SourcePlacement
from raytide.sources.iterable import as_source
from raytide.sources.stream import StreamSource

#: How long a replica may take to answer a ping before a timeout message calls it busy.
BUSY_PROBE = 1.0


class Job(JobViews):
    """A running dataflow: feed inputs, wait, read outputs, inspect, cancel; watch it (:class:`JobViews`)."""

    def __init__(self, plan: PhysicalPlan, name: str, settings: HostSettings, batch_size: int,
                 restore_id: int | str | None = None, recompile: Callable[[dict[str, int]], PhysicalPlan] | None = None,
                 autoscale: Autoscale | None = None) -> None:
        """Lease and start the job's actors (:class:`~raytide.driver.placement.JobPlacement`); with
        ``settings.recovery``, start the snapshot coordinator, and with ``restore_id``, restore
        that committed snapshot (laid out for ``plan`` already) before anything runs.
        ``recompile``: the plan of the same dataflow with other widths (for :meth:`rescale`).
        ``autoscale``: start an autoscaler actor (:mod:`raytide.actors.autoscaler_actor`).

        Raises:
            JobTimeout: the actors did not start in time (the job is cancelled: no actor is left).
        """
        self.name = name
        self._recompile = recompile
        recovery = settings.recovery
        #: Where the job's actors run: their handles, for tools and tests that look at them or kill them.
        self.placement = placement = JobPlacement(plan, name, settings)
        self._outputs = OutputCollector(placement.progress, plan.outputs,
                                        recovery.output_commit if recovery is not None else "epoch", settings.sockets, name)
        placement.liveness.alarm.wake = self._outputs.link.wake  # a death wakes the wait for events
        #: The event and recovery loop (:mod:`raytide.driver.supervisor`): this handle only calls it.
        self._supervisor = supervisor = JobSupervisor(name, placement, self._outputs, recovery is not None)
        self._inputs = EventTimeInputs(plan, placement.input_handles(), settings.max_inflight, batch_size,
                                       supervisor.raise_if_failed, keep_calls=recovery.retain if recovery is not None else 0,
                                       on_open=self._outputs.open, sockets=settings.sockets)
        self._feeders = supervisor.feeders = Feeders(self, self._inputs, supervisor.feed_failed)
        self._recovery = supervisor.recovery = \
            JobRecovery(recovery, placement, self._inputs, self._outputs) if recovery is not None else None
        #: The last ``stats()`` of the finished job, answered once it is torn down (its actors are released then).
        self._final_stats: dict[str, Any] | None = None
        supervisor.rescale = self.rescale
        supervisor.release_idle = self._inputs.release_idle
        try:
            self._start(restore_id)
        except BaseException:  # a timeout, or a snapshot that cannot be restored: leave no actors behind
            self.cancel()
            raise
        if autoscale is not None:
            supervisor.autoscaler = _autoscaler_class().options(num_cpus=0, max_restarts=0).remote(
                name, autoscale, plan, placement.peers, placement.progress, settings.num_cpus)
            supervisor.autoscale_ref = supervisor.autoscaler.next_change.remote(AUTOSCALE_POLL)

    def _start(self, restore_id: int | str | None) -> None:
        """Give the leased hosts their roles (with recovery: paused until the job is restored or runs); wait for them.

        With recovery, the pool keeps a spare vertex host from then on, to replace a dead one
        at once; it starts once the job's own hosts have: on a driver's first job a spare asked
        for sooner started beside them, a process more on the clock of the job's start (Ray
        starts as many processes at a time as the node has CPUs), and ahead of the coordinator's,
        which the driver waits for.
        """
        placement, recovery = self.placement, self._recovery
        coordinator = None
        if recovery is not None:
            recovery.start_run()
            coordinator = recovery.coordinator
        placement.watch(coordinator)
        placement.started(*placement.take_roles(coordinator), SETUP_TIMEOUT)
        if recovery is not None:
            placement.pool.keep_spares(1)
        if recovery is not None and restore_id is not None:
            recovery.start_from(restore_id)
        elif recovery is not None:
            recovery.start_fresh()

    @property
    def plan(self) -> PhysicalPlan:
        """The physical plan the job runs now (a rescale changes it)."""
        return self.placement.plan

    # -- setup ---------------------------------------------------------------------------

    def hosts(self) -> dict[str, int]:
        """The process id of each host of this job, by ``job/chain/replica`` (and ``job/progress``;
        ``job/coordinator`` in a job with recovery); -1 for one that died before its first answer."""
        return self.placement.hosts()

    def wait_ready(self, timeout: float = SETUP_TIMEOUT) -> None:
        """Block until the progress actor is up too; ``rt.run`` returns once the vertex actors
        and, in a job with recovery, the snapshot coordinator have taken their roles.

        Running does not need this (what replicas send the progress actor waits in Ray's
        queue until it runs), but a measurement that leaves start-up out does.
        """
        try:
            ray.get(self.placement.progress.ping.remote(), timeout=timeout)
        except ray.exceptions.GetTimeoutError as error:
            self.cancel()
            raise JobTimeout(f"job {self.name!r}: starting the progress host took longer than {timeout:.0f} s") from error

    # -- inputs --------------------------------------------------------------------------

    def push(self, name: str, records: Any, epoch: int | None = None, partition: Any = None) -> None:
        """Send ``records`` into input ``name`` at ``epoch`` (default: the input's current epoch).

        Pushing at a later epoch first advances the input to it; pushing at an earlier epoch than the input's, or into a
        closed input, raises :class:`GraphError`. Records are spread over the input's replicas in turn, across pushes.
        An event-time input takes no epoch: records go to epochs by their time, pushed by producer ``partition`` (windows.md).

        Raises:
            RecordError: not records (a string, None), a record that does not pickle or lacks a good timestamp (none sent).
            JobCancelled: the job was cancelled.
        """
        self._supervisor.raise_if_failed()
        self._inputs.push(name, records, epoch, partition)

    def push_refs(self, name: str, refs: list, epoch: int) -> None:
        """Send object refs of batches (e.g. Arrow tables) into input ``name``; replicas read them."""
        self._supervisor.raise_if_failed()
        self._inputs.push_refs(name, refs, epoch)

    def advance(self, name: str, epoch: int) -> None:
        """Tell input ``name`` that no more records will come before ``epoch``."""
        self._supervisor.raise_if_failed()
        self._inputs.advance(name, epoch)

    def close(self, name: str) -> None:
        """No more records will come into input ``name``."""
        self._supervisor.raise_if_failed()
        self._inputs.close(name)

    def feed(self, name: str, source: Any) -> None:
        """Feed input ``name`` from ``source``, then close it.

        ``source`` is a :class:`~raytide.sources.base.Source` or an iterable of per-epoch
        record lists (see :func:`~raytide.sources.iterable.as_source`). A source read in the
        replicas gets one reader per input replica, each read there; a driver-side source's
        one reader runs on a thread of the driver (:mod:`raytide.driver.feeders`), a stream's
        batch by batch (:mod:`raytide.sources.stream`, in a job with recovery).

        Raises:
            GraphError: ``name`` is not an input, ``source`` is neither a source nor an
                iterable, or it made the wrong number of readers.
        """
        self._inputs.check(name)
        source = as_source(source, name)
        if isinstance(source, StreamSource):
            self._require_recovery(f"stream input {name!r}")
            return self._feeders.stream(name, source, self._stream_snapshot, self._supervisor.pump)
        on_driver = source.placement is SourcePlacement.DRIVER
        readers = source.readers(wanted := 1 if on_driver else len(self._inputs.replicas[name]))
        if len(readers) != wanted:
            raise GraphError(f"source for input {name!r} made {len(readers)} readers, not {wanted}")
        if on_driver:
            return self._feeders.driver_source(name, readers[0])
        self._inputs.hand_over(name, readers, SETUP_TIMEOUT, source)

    def _stream_snapshot(self, timeout: float) -> int:
        """A stream's batch is held by the snapshot this takes (what was handed out: ``durable``)."""
        with self._supervisor.driving:
            delivered = self._outputs.durable()
        return self._snapshot(timeout, delivered)

    # -- outputs and waiting -------------------------------------------------------------

    def wait(self, timeout: float = 600.0, progress: bool = True) -> None:
        """Wait until every input is closed and the dataflow has drained (``progress``: a bar of the epochs
        completed, on a terminal when their number is known: :mod:`raytide.driver.views`).

        Ctrl-C (KeyboardInterrupt) during the wait cancels the job, then propagates.

        Raises:
            JobTimeout: not finished within ``timeout`` seconds (says what is still open and
                which vertex holds the earliest pending work).
            JobCancelled: the job was cancelled before it finished.
            RaytideError: a vertex failed or an actor died.
        """
        deadline, bar = time.monotonic() + timeout, EpochBar(self.progress_total, self.name, progress)
        with self._supervisor.cancelled_on_interrupt(), contextlib.closing(bar):
            while not self._outputs.finished:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise JobTimeout(self._describe_unfinished(timeout))
                self._supervisor.pump(min(left, self._supervisor.poll_s))
                bar.show(self._outputs.latest())

    def _describe_unfinished(self, timeout: float) -> str:
        return f"job {self.name!r} did not finish within {timeout:.0f} s; " + unfinished(
            self.placement, self._inputs.open_inputs(), self._outputs.latest(), BUSY_PROBE, self._feeders.describe())

    def results(self, name: str, timeout: float = 600.0, *, batch_format: BatchFormat | None = None,
                progress: bool = True) -> Iterator[tuple[int, Any]]:
        """Yield ``(epoch, records)`` of output ``name`` as each epoch completes, until the job finishes (``progress``: as
        in :meth:`wait`).

        ``batch_format="numpy"`` (or ``"pyarrow"``) yields each epoch as one batch of that format: arrays, dicts of columns or
        Arrow tables sent to the output reach the consumer concatenated, no Python object per record (empty epoch: empty batch).

        An epoch an input fed from the driver was at (``push``, ``advance``, a driver-side
        source, an iterable of record lists) that completed with no records here comes as
        ``(epoch, [])``, in its place: a consumer that feeds an epoch and waits for it never
        waits forever (epochs of sources read in the replicas come when they have records).

        Consuming releases: an epoch yielded here is dropped from the driver (a job that runs for weeks keeps there only what
        was not consumed), and :meth:`collect` afterwards returns only the epochs not yielded. Each epoch is yielded once.

        With recovery, an epoch counts as delivered (for a new driver restored with
        ``restore=``) once the consumer asks for the next one or drops the iterator (before the job's
        teardown or the driver's exit, which release its store: not after): a driver
        killed with epochs received and not yielded, or one in its consumer's hands, loses
        none; the restored job yields them again, so the epoch in hand may be seen twice by a
        consumer that is not idempotent (a sink keyed by epoch, like ``write_parquet``, not).
        """
        self._check_output(name)
        self._outputs.stream(name, batch_format)
        deadline, bar = time.monotonic() + timeout, EpochBar(self.progress_total, self.name, progress)
        while True:
            while True:
                self._supervisor.pump_if_due()
                with self._supervisor.driving:  # taken while no other thread (a stream's feed) takes events
                    taken = self._outputs.hand_first(name, batch_format)
                if taken is None:
                    break
                bar.show({name: taken[0]})
                try:
                    yield taken
                finally:  # the consumer asked for the next one, or dropped the iterator: it has this one
                    with self._supervisor.driving:
                        self._outputs.acknowledge(name, taken[0])
            if self._outputs.finished:
                bar.close()
                return
            if time.monotonic() > deadline:
                raise JobTimeout(self._describe_unfinished(timeout))
            self._supervisor.pump(self._supervisor.poll_s)

    def __iter__(self) -> Iterator[tuple[int, list]]:
        outputs = self.plan.outputs
        if len(outputs) != 1:
            raise GraphError(f"the job has outputs {outputs}; iterate over job.results(name)")
        return self.results(outputs[0])

    def _check_output(self, name: str) -> None:
        if name not in self.plan.outputs:
            raise GraphError(f"{name!r} is not an output of dataflow {self.plan.name!r}; outputs: {self.plan.outputs}")

    def collect(self, name: str) -> dict[int, list]:
        """The records of output ``name`` per completed epoch so far: ``{epoch: records}``,
        for the epochs with records (unlike :meth:`results`, which yields empty epochs too).

        The driver keeps what this returns (for batch use: call it again and get the same
        epochs and more) until :meth:`results` yields those epochs, which releases them; so
        after ``results`` this returns only the epochs it has not yielded yet.
        """
        self._check_output(name)
        with self._supervisor.driving:
            if not self._supervisor.torn_down:
                self._supervisor.pump_now(0)
            return {epoch: records for epoch in self._outputs.epochs(name) if (records := self._outputs.records(name, epoch))}

    def output_parts(self, name: str) -> dict[int, list]:
        """The packed record lists of output ``name`` per completed epoch (object refs or inline blobs).

        Large epochs stay in the object store where the sinks put them. After the job is
        torn down, the records it kept on the driver are packed again.
        """
        self._check_output(name)
        with self._supervisor.driving:
            if not self._supervisor.torn_down:
                self._supervisor.pump_now(0)
            return self._outputs.packed(name, kept=self._supervisor.torn_down)

    def snapshot(self, timeout: float = 60.0) -> int:
        """Take a snapshot now and wait until it is committed; returns its id (a job with recovery).

        Raises:
            SnapshotError: the snapshot was abandoned or not committed within ``timeout`` (the
                message names the job, its inputs' epochs and the coordinator's reason, or the
                coordinator if it does not answer; a vertex whose state does not pickle fails
                the job with a SnapshotError naming it, the replica and the snapshot).
            ArgumentError: the job was started without ``recovery``.
        """
        return self._snapshot(timeout, self._outputs.durable())

    def _snapshot(self, timeout: float, delivered: dict[str, int]) -> int:
        recovery = self._require_recovery("job.snapshot()")
        self._inputs.run_out(timeout)  # every push made before is part of what the user expects the snapshot to hold
        return recovery.snapshot_now(timeout, delivered, self._inputs.open_inputs())

    def stop(self, timeout: float = 60.0) -> int:
        """Take a final snapshot (a savepoint), tear the job down and return the snapshot's id.

        The driver takes no more events from the job once the savepoint is triggered, so the
        epochs it was handed (still readable with :meth:`collect`) are exactly those the
        savepoint records as delivered. A later ``rt.run(..., recovery=..., restore=id)`` of
        the same program, fed the same inputs from their start, continues from there and
        hands out only the epochs after them.
        """
        self._feeders.stop_streams(timeout)
        snapshot_id = self._snapshot(timeout, self._outputs.delivered())
        self._supervisor.cancel(f"job.stop() after savepoint {snapshot_id}")
        return snapshot_id

    def _require_recovery(self, what: str) -> JobRecovery:
        if self._recovery is None:
            raise ArgumentError(f"{what} needs a job started with rt.run(..., recovery=rt.Recovery(store))")
        return self._recovery

    def frontier(self, probe: Probe) -> list[Timestamp]:
        """How far the probed stream has progressed: the timestamps that may still arrive there."""
        return ray.get(self.placement.progress.frontier.remote(Location.of_input(probe.vertex, 0)), timeout=30)

    # -- inspection and teardown ---------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Records and batches per vertex, progress traffic, backpressure figures; with recovery also ``snapshots``
        and ``recoveries``. Replicas answer while busy; one that died or is silent for a minute is named in ``unreachable``.

        Per vertex also ``queued`` (messages on their way to it or waiting in its replicas, as far as the
        progress tracker knows, read before the replicas' counters: replicas hold back progress while it
        cannot matter, so a backlog may show upstream of where it waits), ``frontier`` (the earliest epoch
        that may still arrive) and ``frontier_lag`` (epochs behind the latest input); per replica (``replicas``,
        by ``job/chain/replica``) ``busy_s`` handling events, ``blocked_s`` waiting for a receiver's window
        (backpressure), ``restores`` (how often its process reset its state: a recovery, ``restore=``),
        ``upstream_log`` (the messages it keeps for a replay to a replica recovered alone),
        ``log_dropped`` (those its log dropped past its cap: a replay from before them is refused), and
        its counters per vertex; ``input_calls``, the driver's calls to input replicas, and
        ``input_quiet_moves``, those that moved a replica without records while a peer closed its epoch (proxy tokens),
        ``input_frames``, those that went by socket (:mod:`raytide.driver.input_links`);
        ``late``: per event-time input, its late records (``records``, ``by_epoch``, ``max_lateness_s``).

        A finished job's last reading is kept: once the job is torn down (its actors released, the
        coordinator's too) it is answered instead (read the figures once before the ``with`` block ends)."""
        if self._final_stats is not None and self._supervisor.torn_down:
            return copy.deepcopy(self._final_stats)
        finished = self._outputs.finished and not self._supervisor.torn_down
        fed, calls = [epoch for epoch in self._inputs.open_inputs().values() if epoch is not None], self._inputs.calls
        reading = {"parallelism": self.parallelism(), **actor_stats(self.placement, fed, self._inputs.late_stats),
                   "hosts": self.hosts(), **self._recovery_stats(), "input_calls": calls.total(),
                   "input_quiet_moves": sum(n for (_, m), n in calls.items() if m == "advance_quietly"),
                   "input_frames": self._inputs.links.frames}
        if finished:
            self._final_stats = copy.deepcopy(reading)
        return reading

    def parallelism(self) -> dict[str, int]:
        """Each vertex's number of replicas: ``{vertex_name: n}``."""
        return {name: self.plan.width(name) for name in self.plan.vertices}

    def rescale(self, widths: dict[str, int], timeout: float = 120.0, oversubscribe: bool = False,
                stepped: bool | None = None) -> dict[str, Any]:
        """Change the parallelism of vertices of the running job (``{vertex_name: n}``) and
        return once the new configuration runs: what the rescale did and how long each step
        took (also in ``job.stats()["rescales"]``).

        The job is not restarted and nothing is lost, redone or handed out twice: every
        replica holds at a cut taken now, the keyed state and pending notifications of the
        moving key groups go to their new owners through the object store (the rest stays
        where it is), new replicas start on warm hosts and retiring ones give theirs back (see
        :mod:`raytide.rescale.widths`). A vertex that reads another replica by replica (fused
        behind it) is rescaled with it. With ``recovery=``, a death during a rescale is
        recovered from the job's snapshots and the rescale still made. Without, the first
        rescale leases a coordinator to take the cuts (kept for the next ones); a death during
        a rescale, or a cut not complete in time, fails the job (a :class:`RecoveryError`
        naming why), as a death fails such a job at any time.

        ``oversubscribe``: as in :func:`~raytide.driver.run.run`, allow more replicas than the
        cluster can place. ``stepped`` (default True, where the plan can; ``RAYTIDE_STEPPED_RESCALE=0`` in the
        driver's environment makes it False): move one keyed vertex's key groups in steps while the
        others flow, holding the job only to add replicas that cannot join it in place, or
        to retire replicas (docs/rescaling.md). A growth returns once its plan is installed (its steps
        end as the inputs pass their epochs, whoever feeds them); a shrink waits for its steps and retires
        the emptied replicas, unless its caller feeds the job and has pushed at the inputs' epoch: then it
        returns once its plan is installed, and the job's next wait, read or rescale after that thread's
        next advance retires them. Where stepping cannot hold, or ``stepped=False``,
        the whole job is held and the record says why.
        Rescales from several threads are made one after the other (each checked against the widths
        the one before left); meanwhile no other thread takes the job's events.

        Raises:
            ArgumentError: a width is not a positive integer, or is more than a keyed vertex's key groups or (without
                ``oversubscribe``) than the cluster can place.
            GraphError: a vertex the job does not have.
            RescaleError: an input's width would change, two vertices that must keep one
                width were given different ones, a vertex whose width changes keeps state it
                cannot split by key, the job has finished (before the call, or before the
                rescale's cut was held), or another thread's rescale did not end within ``timeout``.
            SnapshotError: no cut was complete within ``timeout`` seconds.
            RecoveryError: without ``recovery``, the rescale met a death or its cut was not
                complete in time: the job failed.
        """
        if not self._supervisor.driving.acquire(timeout=timeout):
            raise RescaleError(f"job {self.name!r}: the rescale to {widths} waited {timeout:g} s for another thread's "
                               f"rescale (or recovery) of the job to end, and was not made")
        try:
            check_widths(self.plan, new_widths(self.plan, widths), cluster_cpus(), self.placement.settings.num_cpus,
                         oversubscribe)
            self._supervisor.raise_if_failed()
            if self._outputs.finished or self._supervisor.torn_down:
                raise RescaleError(f"job {self.name!r} has finished (or was cancelled): there is nothing to rescale")
            self._supervisor.rescaling = True
            assert self._recompile is not None
            started, made = time.monotonic(), self._supervisor.cuts is None and self._recovery is None
            recovery = self._recovery or self._cuts()
            return make_rescale(recovery, self._supervisor.supervision(self._recompile), self._inputs, widths, timeout,
                                time.monotonic() - started if made else 0.0,
                                stepping_default() if stepped is None else stepped, self._feeders.streams,
                                self._supervisor.steps_left)
        finally:
            self._supervisor.rescaling = False
            self._supervisor.driving.release()

    def _cuts(self) -> JobRecovery:
        """What the rescales of a job without recovery need (made at the first)."""
        supervisor = self._supervisor
        if supervisor.cuts is None:
            try:
                supervisor.cuts = cuts_without_recovery(self.placement, self._inputs, self._outputs)
            except ray.exceptions.RayActorError:  # a replica died meanwhile: its death fails the job, named
                supervisor.pump_now(0)
                raise
        return supervisor.cuts

    def _recovery_stats(self) -> dict[str, Any]:
        """``snapshots``, ``recoveries``, ``rescales`` and ``autoscaler``, in a job with recovery;
        without, ``rescales`` and ``autoscaler`` once it has either."""
        if self._recovery is None:  # its rescales, and the autoscaler's timeline, if either
            cuts, autoscaler = self._supervisor.cuts, self._supervisor.autoscaler
            rescales = {} if cuts is None and autoscaler is None else {"rescales": cuts.rescale_stats() if cuts else []}
            return rescales if autoscaler is None else \
                {**rescales, "autoscaler": autoscaler_timeline(autoscaler, self._outputs.finished)}
        return recovery_stats(self._recovery, self._supervisor.autoscaler, self._outputs.finished)

    def cancel(self) -> None:
        """Stop the job and give its hosts back to the pool, which resets them for the next
        job (results already complete stay readable).

        Waiting for a job cancelled before it finished raises :class:`JobCancelled`, and so
        does feeding it; cancelling twice does nothing.
        """
        self._supervisor.cancel("the driver (job.cancel() or the end of its with block)")

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cancel()
