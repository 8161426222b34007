"""Starting a dataflow on Ray: ``rt.run(flow, ...)`` checks its arguments, compiles the plan,
lays a snapshot to restore out for it, and returns the running :class:`~raytide.driver.job.Job`.

``Job`` is importable from here too.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import uuid
from typing import Any

import ray

from raytide.actors.hosts import check_pretouch
from raytide.autoscale.config import Autoscale
from raytide.core.arguments import non_negative, positive_int
from raytide.core.dataflow import Dataflow
from raytide.driver.job import Job
from raytide.driver.placement import HostSettings
from raytide.driver.pool import cluster_cpus
from raytide.driver.store_lease import release_store, take_store
from raytide.driver.streams import restore_id as stream_restore_id
from raytide.errors import ArgumentError, GraphError, SnapshotError
from raytide.physical.plan import PhysicalPlan, compile_plan
from raytide.rescale.reshard import reshard_snapshot
from raytide.rescale.widths import check_widths
from raytide.snapshots.config import Recovery
from raytide.snapshots.consumed import START
from raytide.snapshots.store import store_of
from raytide.sources.iterable import as_source
from raytide.sources.stream import StreamSource
from raytide.supervisor.alone import numbering_for

__all__ = ["Job", "run"]


def run(
    flow: Dataflow,
    inputs: dict[str, Any] | None = None,
    parallelism: int | None = None,
    *,
    max_inflight: int = 16,
    batch_size: int = 4096,
    chaining: bool = True,
    num_cpus: float = 0,
    pretouch_mb: int = 0,
    name: str | None = None,
    recovery: Recovery | None = None,
    restore: int | str | None = None,
    autoscale: Autoscale | None = None,
    oversubscribe: bool = False,
    ui: bool = False,
) -> Job:
    """Start ``flow`` on the current Ray cluster (a local one if none is running).

    Args:
        flow: the dataflow to run.
        inputs: records per input, consumed lazily with backpressure: a
            :class:`~raytide.sources.base.Source` (read in the input replicas, such as
            :class:`~raytide.sources.TextFileSource` and
            :func:`~raytide.integrations.ray_data.from_dataset`, or on the driver, such as
            :func:`~raytide.integrations.spark.from_spark`) or an iterable of per-epoch
            record lists (epoch 0, 1, ...), read on the driver. A stream source
            (:func:`~raytide.integrations.spark.from_spark_stream`) needs ``recovery``: each
            of its batches is one epoch, acknowledged to its producer once a snapshot holds
            it, and the job's snapshots are taken at its batch ends (``recovery.interval``
            does not apply; see :mod:`raytide.sources.stream`). Inputs not given here are
            fed with :meth:`Job.push`, :meth:`Job.advance` and :meth:`Job.close`.
        parallelism: replicas per vertex, overriding the dataflow's default.
        max_inflight: unacknowledged batches allowed per channel before a sender waits.
        batch_size: records per message when the driver pushes records; a pushed column
            batch (a dict of columns, an Arrow table) goes as one message per input replica
            instead, each at least ``batch_size`` rows and at most 16 MiB.
        chaining: fuse pipeline-connected vertices into one actor.
        num_cpus: CPUs Ray reserves per vertex host (process; a seated input replica shares its host, docs/hosts.md).
        pretouch_mb: MiB of memory each vertex actor maps at start-up and keeps for its
            arrays (like the JVM's ``-XX:+AlwaysPreTouch``, see
            :mod:`raytide.actors.hosts`): the page faults of a first large epoch move
            to start-up, at the cost of that much resident memory per actor. At most 64.
        name: the job name in actor names (default: the dataflow name plus a short id).
        recovery: take snapshots and recover from the death of any of the job's actors
            with exactly-once output (see :class:`~raytide.Recovery`): sources read in the
            replicas resume from their readers' positions, and the driver keeps what it
            sent an input itself until a committed snapshot covers it.
        restore: with ``recovery``, start from a committed snapshot of its store, ``"latest"``
            or an id (from ``job.stop()``, say), of an earlier run of the same program: its
            state comes back, the epochs that run handed out are not handed out again, and
            inputs fed the same way from their start continue where the snapshot left them.
            Vertices other than inputs may have another parallelism than in that run: the
            snapshot is first written again for this job's, keyed state moving to the new
            owners of its key groups (:mod:`raytide.rescale.reshard`). With stream inputs,
            ``"latest"`` is the latest snapshot at a batch boundary of every stream, and a
            store without any starts the job afresh (no batch was held yet).
        autoscale: an autoscaler actor that rescales the job's vertices while it runs (with
            or without ``recovery``, as :meth:`~raytide.driver.job.Job.rescale` does),
            towards a goal (see :class:`~raytide.Autoscale`); the driver
            makes its changes while it waits on the job (``wait``, ``results``, ``collect``).
        oversubscribe: allow a vertex more replicas than the cluster can place
            (:func:`~raytide.rescale.widths.width_limit`: its CPUs over ``num_cpus``, or 4 per
            CPU when replicas reserve none).
        ui: serve the job's live web view and print its URL (``job.ui()``, docs/ui.md), and post its
            figures to the cluster's board, where ``python -m raytide ui`` finds it (as
            ``RAYTIDE_UI=1`` in the driver's environment does, without serving).

    Raises:
        GraphError: the dataflow is invalid or ``inputs`` names an unknown input.
        ArgumentError: a stream input without ``recovery``, a count that is not a positive integer (``parallelism``,
            ``max_inflight``, ``batch_size``), a negative ``num_cpus``, ``pretouch_mb`` out
            of range, a vertex wider than its key groups or (without ``oversubscribe``) than
            the cluster can place (an ArgumentError is a ValueError too).
        SnapshotError: ``recovery``'s store cannot be written (a probe file is written and
            deleted first), or ``restore`` names no snapshot this job can start from.
        StoreLeaseError: another driver holds ``recovery``'s store (its lease is live: see
            ``rt.Recovery(lease=)``); the message names it. A lease that is not renewed is
            waited for (at most about one lease term), then taken over.
    """
    max_inflight, batch_size, num_cpus = _checked(max_inflight, batch_size, num_cpus, pretouch_mb, name, recovery,
                                                  restore, autoscale)
    plan = compile_plan(flow, parallelism, chaining)
    unknown = sorted(set(inputs or {}) - set(plan.inputs))
    if unknown:
        raise GraphError(f"inputs {unknown} are not inputs of dataflow {plan.name!r}; its inputs are {plan.inputs}")
    if autoscale is not None:
        autoscale.check_names(plan.vertices, plan.inputs)
    sources = {input_name: as_source(source, input_name) for input_name, source in (inputs or {}).items()}
    streams = sorted(input_name for input_name, source in sources.items() if isinstance(source, StreamSource))
    if streams:  # snapshots at batch ends, taken by the streams' feeds (raytide.sources.stream)
        if recovery is None:
            raise ArgumentError(f"stream inputs {streams} need recovery=rt.Recovery(store): a batch is acknowledged "
                                f"to its producer once a committed snapshot holds it")
        recovery = dataclasses.replace(recovery, interval=None)
    name = name or f"{flow.name}-{uuid.uuid4().hex[:6]}"
    if recovery is not None:  # refused if another driver holds the store, or if it cannot be written
        recovery = take_store(numbering_for(plan, recovery), name)  # alone off where no replica can be
    try:
        restore_id = _prepared(plan, sources, streams, recovery, restore, num_cpus, oversubscribe)
        job = Job(plan, name, HostSettings(max_inflight, num_cpus, pretouch_mb, recovery), batch_size, restore_id,
                  recompile=functools.partial(compile_plan, flow, parallelism, chaining), autoscale=autoscale)
    except BaseException:  # the store is free for the next driver at once
        release_store(recovery)
        raise
    try:
        for input_name, source in sources.items():
            job.feed(input_name, source)
    except BaseException:  # a source that cannot start (a missing file): leave no actors behind
        job.cancel()
        raise
    job._given_inputs = dict(inputs or {})  # the progress bars' total is counted from them (JobViews)
    if ui or os.environ.get("RAYTIDE_UI"):
        from raytide.driver.watch import watch  # aiohttp and the page's modules only for a watched job

        watch(job, publish=True)
        if ui:
            print(f"raytide: the live view of job {job.name!r} is at {job.ui()}", file=sys.stderr, flush=True)
    return job


def _prepared(plan: PhysicalPlan, sources: dict[str, Any], streams: list[str], recovery: Recovery | None,
              restore: int | str | None, num_cpus: float, oversubscribe: bool) -> int | str | None:
    """Ray started, the plan's widths checked against the cluster, and the snapshot ``restore``
    names laid out for the plan (None without ``restore``)."""
    if not ray.is_initialized():
        ray.init(ignore_reinit_error=True, log_to_driver=False)
    check_widths(plan, {name: plan.width(name) for name in plan.vertices}, cluster_cpus(), num_cpus, oversubscribe)
    clocked = [input_name for input_name in streams  # streams with event time: their boundaries are batch counts
               if plan.vertex(input_name).event_time is not None or getattr(sources[input_name], "event_time", None) is not None]
    return _restore_id(plan, recovery, restore, streams, clocked) if restore is not None else None


def _restore_id(plan: PhysicalPlan, recovery: Recovery | None, restore: int | str, streams: list[str],
                clocked: list[str]) -> int | str:
    """The committed snapshot ``restore=`` names, laid out for ``plan``'s widths (a new snapshot
    if need be); with stream inputs (``clocked``: those with event time), the latest one at a batch boundary, or
    :data:`~raytide.snapshots.consumed.START` if the store has none yet (the query runs its
    batches again from the first; what the consumers had of them is not handed out again)."""
    assert recovery is not None
    store = store_of(recovery)
    if streams and (restore := stream_restore_id(store, restore, streams, clocked)) is None:  # type: ignore[assignment]
        return START
    restore_id = reshard_snapshot(plan, store, None if restore == "latest" else restore,  # type: ignore[arg-type]
                                  recovery.retain)
    if restore_id is None:
        raise SnapshotError(f"restore={restore!r}: the store {recovery.store!r} has no committed snapshot")
    return restore_id


def _checked(max_inflight: int, batch_size: int, num_cpus: float, pretouch_mb: int, name: str | None,
             recovery: Recovery | None, restore: int | str | None, autoscale: Autoscale | None) -> tuple[int, int, float]:
    """``run``'s arguments checked (see its Raises); the counts as ``(max_inflight, batch_size, num_cpus)``."""
    check_pretouch(pretouch_mb)
    max_inflight = positive_int(max_inflight, "max_inflight")
    batch_size = positive_int(batch_size, "batch_size")
    num_cpus = non_negative(num_cpus, "num_cpus")
    if name is not None and (not isinstance(name, str) or not name):
        raise ArgumentError(f"name must be a non-empty string, not {name!r}")
    if recovery is not None and not isinstance(recovery, Recovery):
        raise ArgumentError(f"recovery must be an rt.Recovery(...), not {type(recovery).__name__}")
    if autoscale is not None and not isinstance(autoscale, Autoscale):
        raise ArgumentError(f"autoscale must be an rt.Autoscale(...), not {type(autoscale).__name__}")
    if restore is not None and (recovery is None or not (restore == "latest" or _is_id(restore))):
        raise ArgumentError(f"restore must be 'latest' or a snapshot id, with recovery=rt.Recovery(store) "
                            f"naming the store; got restore={restore!r}, recovery={recovery!r}")
    return max_inflight, batch_size, num_cpus


def _is_id(value: Any) -> bool:
    """Whether ``value`` can be a snapshot id (a non-negative int, not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
