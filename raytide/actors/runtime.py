"""Running a dataflow on Ray: ``rt.run(flow, ...)`` places the actors and returns a :class:`Job`::

    with rt.run(flow, inputs={"lines": [["a b", "b"], ["c"]]}) as job:
        job.wait(timeout=60)
        job.collect("counts")     # {0: [('a', 1), ('b', 2)], 1: [('c', 1)]}

The driver talks to the job through two kinds of actors: the vertex actors (one per
replica of each chain of fused vertices, named ``job/chain/replica`` in the Ray
dashboard) and the progress actor, which also gathers completed output epochs and
failures. Every wait on the driver has a timeout and says what it waited for.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
import uuid
from collections.abc import Hashable, Iterator
from typing import Any

import ray

from raytide.actors.allocator import check_pretouch
from raytide.actors.driver_inputs import InputFeeds
from raytide.actors.driver_side import Liveness, OutputCollector
from raytide.actors.plan import PhysicalPlan, compile_plan
from raytide.actors.progress_actor import ProgressActor
from raytide.actors.protocol import Marker, ReplicaKey
from raytide.actors.vertex_actor import VertexActor
from raytide.core.dataflow import Dataflow, Probe
from raytide.errors import GraphError, JobTimeout, RaytideError, ReplicaLost
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.sources.base import BlockRefs, Placement, Reader
from raytide.sources.iterable import as_source

logger = logging.getLogger(__name__)

#: The progress actor's key among the actors the driver watches (the others are ReplicaKeys).
PROGRESS = "the progress actor"

#: How long setup calls (creating and connecting actors) may take.
SETUP_TIMEOUT = 120.0
#: How long tearing a job down waits for its actors' processes to exit.
TEARDOWN_TIMEOUT = 10.0


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
) -> Job:
    """Start ``flow`` on the current Ray cluster (a local one if none is running).

    Args:
        flow: the dataflow to run.
        inputs: records per input, consumed lazily with backpressure: a
            :class:`~raytide.sources.base.Source` (read in the input replicas, such as
            :class:`~raytide.sources.TextFileSource` and
            :func:`~raytide.integrations.ray_data.from_dataset`, or on the driver, such as
            :func:`~raytide.integrations.spark.from_spark`) or an iterable of per-epoch
            record lists (epoch 0, 1, ...), read on the driver. Inputs not given here are
            fed with :meth:`Job.push`, :meth:`Job.advance` and :meth:`Job.close`.
        parallelism: replicas per vertex, overriding the dataflow's default.
        max_inflight: unacknowledged batches allowed per channel before a sender waits.
        batch_size: records per message when the driver pushes records.
        chaining: fuse pipeline-connected vertices into one actor.
        num_cpus: CPUs Ray reserves per vertex actor.
        pretouch_mb: MiB of memory each vertex actor maps at start-up and keeps for its
            arrays (like the JVM's ``-XX:+AlwaysPreTouch``, see
            :mod:`raytide.actors.allocator`): the page faults of a first large epoch move
            to start-up, at the cost of that much resident memory per actor. At most 64.
        name: the job name in actor names (default: the dataflow name plus a short id).

    Raises:
        GraphError: the dataflow is invalid or ``inputs`` names an unknown input.
        ValueError: ``pretouch_mb`` is out of range.
    """
    check_pretouch(pretouch_mb)
    plan = compile_plan(flow, parallelism, chaining)
    unknown = sorted(set(inputs or {}) - set(plan.inputs))
    if unknown:
        raise GraphError(f"inputs {unknown} are not inputs of dataflow {plan.name!r}; its inputs are {plan.inputs}")
    sources = {input_name: as_source(source, input_name) for input_name, source in (inputs or {}).items()}
    if not ray.is_initialized():
        ray.init(ignore_reinit_error=True, log_to_driver=False)
    job = Job(plan, name or f"{flow.name}-{uuid.uuid4().hex[:6]}", max_inflight, batch_size, num_cpus, pretouch_mb)
    try:
        for input_name, source in sources.items():
            job.feed(input_name, source)
    except BaseException:  # a source that cannot start (a missing file): leave no actors behind
        job.cancel()
        raise
    return job


class Job:
    """A running dataflow: feed inputs, wait, read outputs, inspect, cancel."""

    def __init__(self, plan: PhysicalPlan, name: str, max_inflight: int, batch_size: int, num_cpus: float,
                 pretouch_mb: int) -> None:
        self.plan, self.name = plan, name
        self.max_inflight, self.batch_size = max_inflight, batch_size
        self._error: BaseException | None = None
        self._torn_down = False
        self._feeders: list[threading.Thread] = []
        self._start(num_cpus, pretouch_mb)

    # -- setup ---------------------------------------------------------------------------

    def _start(self, num_cpus: float, pretouch_mb: int) -> None:
        plan = self.plan
        # Every actor is created at once (each costs a worker process), the vertex actors first
        # so that they take Ray's idle workers; the driver waits for them but not for the
        # progress actor, which buffers what replicas send before it is connected.
        self.actors: dict[ReplicaKey, Any] = {}
        remote_vertex = ray.remote(VertexActor)
        for chain in plan.chains:
            for replica in range(chain.parallelism):
                self.actors[ReplicaKey(chain.name, replica)] = remote_vertex.options(
                    name=f"{self.name}/{chain.name}/{replica}", num_cpus=num_cpus, max_restarts=0, max_task_retries=0,
                ).remote(plan, self.name, chain.name, replica, self.max_inflight, pretouch_mb)
        self.progress = ray.remote(concurrency_groups={"poll": 1})(ProgressActor).options(  # type: ignore[call-overload]
            name=f"{self.name}/progress", num_cpus=0).remote(plan.graph, plan.outputs, plan.initial_pointstamps())
        unbounded = set(plan.with_role("feedback"))  # sends out of a feedback vertex never wait: loops always drain
        self.outputs = OutputCollector(self.progress, plan.outputs)
        watched: dict[Hashable, Any] = {PROGRESS: self.progress}
        watched.update(self.actors)
        self.liveness = Liveness(watched)
        self.inputs = InputFeeds(plan.name, {name: [self.actors[ReplicaKey(plan.chain_of(name).name, r)]
                                                    for r in range(plan.width(name))] for name in plan.inputs},
                                 self.max_inflight, self.batch_size, self._raise_if_failed)
        subscriptions = self._get(
            [a.connect.remote(self.actors, unbounded, self.progress) for a in self.actors.values()],
            "starting and connecting vertex actors")
        self.progress.connect.remote({key: (actor, locs) for (key, actor), locs in zip(self.actors.items(), subscriptions)})

    def wait_ready(self, timeout: float = SETUP_TIMEOUT) -> None:
        """Block until the progress actor is up too; ``rt.run`` returns once the vertex actors are.

        Running does not need this (what replicas send the progress actor waits in Ray's
        queue until it runs), but a measurement that leaves start-up out does.
        """
        self._get([self.progress.ping.remote()], "starting the progress actor", timeout)

    def _get(self, refs: list, what: str, timeout: float = SETUP_TIMEOUT) -> list:
        try:
            return ray.get(refs, timeout=timeout)
        except ray.exceptions.GetTimeoutError as error:
            self.cancel()
            raise JobTimeout(f"job {self.name!r}: {what} took longer than {timeout:.0f} s") from error

    # -- inputs --------------------------------------------------------------------------

    def _input_replicas(self, name: str) -> list[Any]:
        self.inputs.check(name)
        return self.inputs.replicas[name]

    def push(self, name: str, records: Any, epoch: int | None = None) -> None:
        """Send ``records`` into input ``name`` at ``epoch`` (default: the input's current epoch).

        Pushing at a later epoch first advances the input to it; pushing at an earlier
        epoch than the input's, or into a closed input, raises :class:`GraphError`.
        Records are spread over the input's replicas in turn, across pushes.
        """
        self.inputs.push(name, records, epoch)

    def push_refs(self, name: str, refs: list, epoch: int) -> None:
        """Send object refs of batches (e.g. Arrow tables) into input ``name``; replicas read them."""
        self.inputs.push_refs(name, refs, epoch)

    def advance(self, name: str, epoch: int) -> None:
        """Tell input ``name`` that no more records will come before ``epoch``."""
        self.inputs.advance(name, epoch)

    def close(self, name: str) -> None:
        """No more records will come into input ``name``."""
        self.inputs.close(name)

    def feed(self, name: str, source: Any) -> None:
        """Feed input ``name`` from ``source``, then close it.

        ``source`` is a :class:`~raytide.sources.base.Source` or an iterable of per-epoch
        record lists (see :func:`~raytide.sources.iterable.as_source`). A source read in
        the replicas gets one reader per input replica, each read there; a driver-side
        source's one reader runs on a background thread of the driver, which pushes what
        it yields.

        Raises:
            GraphError: ``name`` is not an input, ``source`` is neither a source nor an
                iterable, or it made the wrong number of readers.
        """
        replicas = self._input_replicas(name)
        source = as_source(source, name)
        on_driver = source.placement is Placement.DRIVER
        wanted = 1 if on_driver else len(replicas)
        readers = source.readers(wanted)
        if len(readers) != wanted:
            raise GraphError(f"source for input {name!r} made {len(readers)} readers, not {wanted}")
        if on_driver:
            thread = threading.Thread(target=self._feed, args=(name, readers[0]), name=f"raytide-feed-{name}", daemon=True)
            self._feeders.append(thread)
            thread.start()
            return
        self.inputs.hand_over(name)
        self._get([r.start_reader.remote(name, reader) for r, reader in zip(replicas, readers)], f"starting readers of {name!r}")

    def _feed(self, name: str, reader: Reader[Any]) -> None:
        try:
            for epoch, batch in reader:
                if isinstance(batch, BlockRefs):
                    self.push_refs(name, list(batch.refs), epoch)
                else:
                    self.push(name, batch, epoch)
            self.close(name)
        except BaseException as error:  # surfaced by wait()/results()
            if not self._torn_down:
                self._error = RaytideError(f"feeding input {name!r} failed: {error!r}")
                self._error.__cause__ = error

    # -- outputs and waiting -------------------------------------------------------------

    def _pump(self, timeout: float) -> None:
        """Take new events from the progress actor (waiting up to ``timeout``); check liveness."""
        self._raise_if_failed()
        try:
            for failure in self.outputs.poll(timeout):
                self._fail(failure)
        except ray.exceptions.RayActorError as error:
            self._fail(self._lost(PROGRESS, error), error)
        dead = self.liveness.check()
        if dead is not None:
            self._fail(self._lost(*dead), dead[1])

    def _lost(self, key: Any, error: BaseException) -> RaytideError:
        if key == PROGRESS:
            return RaytideError(f"job {self.name!r}: the progress actor died: {type(error).__name__}")
        return ReplicaLost(f"{self.name}/{key.chain}/{key.replica}", self.plan.chain(key.chain).vertices,
                           "the driver's liveness check", type(error).__name__)

    def _fail(self, error: BaseException, cause: BaseException | None = None) -> None:
        if self._error is None:
            self._error = error
            if cause is not None:
                error.__cause__ = cause
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            self.cancel()
            raise self._error

    def wait(self, timeout: float = 600.0) -> None:
        """Wait until every input is closed and the dataflow has drained.

        Raises:
            JobTimeout: not finished within ``timeout`` seconds (says what is still open).
            RaytideError: a vertex failed or an actor died.
        """
        deadline = time.monotonic() + timeout
        while not self.outputs.finished:
            left = deadline - time.monotonic()
            if left <= 0:
                raise JobTimeout(self._describe_unfinished(timeout))
            self._pump(min(left, 0.5))

    def _describe_unfinished(self, timeout: float) -> str:
        open_inputs = self.inputs.open_inputs()
        done = self.outputs.latest()
        try:
            pending = ray.get(self.progress.describe.remote(), timeout=10)
        except Exception as error:  # the description must not fail itself
            pending = {"progress actor": f"unreachable: {error!r}"}
        return (f"job {self.name!r} did not finish within {timeout:.0f} s; inputs still open (at epoch): {open_inputs}; "
                f"latest complete epoch per output: {done}; " + "; ".join(f"{k}: {v or 'none'}" for k, v in pending.items()))

    def results(self, name: str, timeout: float = 600.0) -> Iterator[tuple[int, list]]:
        """Yield ``(epoch, records)`` of output ``name`` as each epoch completes, until the job finishes."""
        self._check_output(name)
        yielded: set[int] = set()
        deadline = time.monotonic() + timeout
        while True:
            for epoch in sorted(set(self.outputs.epochs(name)) - yielded):
                yielded.add(epoch)
                yield epoch, self.outputs.records(name, epoch)
            if self.outputs.finished:
                return
            if time.monotonic() > deadline:
                raise JobTimeout(self._describe_unfinished(timeout))
            self._pump(0.5)

    def __iter__(self) -> Iterator[tuple[int, list]]:
        outputs = self.plan.outputs
        if len(outputs) != 1:
            raise GraphError(f"the job has outputs {outputs}; iterate over job.results(name)")
        return self.results(outputs[0])

    def _check_output(self, name: str) -> None:
        if name not in self.plan.outputs:
            raise GraphError(f"{name!r} is not an output of dataflow {self.plan.name!r}; outputs: {self.plan.outputs}")

    def collect(self, name: str) -> dict[int, list]:
        """The records of output ``name`` per completed epoch so far: ``{epoch: records}``."""
        self._check_output(name)
        if not self._torn_down:
            self._pump(0)
        return {epoch: self.outputs.records(name, epoch) for epoch in self.outputs.epochs(name)}

    def output_parts(self, name: str) -> dict[int, list]:
        """The packed record lists of output ``name`` per completed epoch (object refs or inline blobs).

        Large epochs stay in the object store where the sinks put them. After the job is
        torn down, the records it kept on the driver are packed again.
        """
        self._check_output(name)
        if not self._torn_down:
            self._pump(0)
        return self.outputs.packed(name, kept=self._torn_down)

    def inject_marker(self, marker: Marker) -> None:
        """Inject a control marker at every input replica; it travels in band behind earlier records."""
        self.inputs.inject_marker(marker)

    def replica_stats(self) -> dict[tuple[str, int], dict[str, Any]]:
        """The raw counters of every replica (including what each saw at each marker)."""
        keys = list(self.actors)
        return dict(zip(keys, ray.get([self.actors[k].stats.remote() for k in keys], timeout=60)))

    def frontier(self, probe: Probe) -> list[Timestamp]:
        """How far the probed stream has progressed: the timestamps that may still arrive there."""
        return ray.get(self.progress.frontier.remote(Location.of_input(probe.vertex, 0)), timeout=30)

    # -- inspection and teardown ---------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Records and batches per vertex, progress traffic, backpressure figures."""
        keys = list(self.actors)
        per_replica = ray.get([self.actors[k].stats.remote() for k in keys], timeout=60)
        vertices: dict[str, dict[str, int]] = collections.defaultdict(lambda: collections.Counter())
        for stats in per_replica:
            for name, counters in stats["vertices"].items():
                vertices[name].update(counters)
        progress = ray.get(self.progress.stats.remote(), timeout=60)
        data_batches = sum(s["vertices"][c.vertices[0]]["batches_in"] for s, c in zip(per_replica, (self.plan.chain(k[0]) for k in keys)))
        return {
            "vertices": {n: dict(c) for n, c in vertices.items()},
            "progress_batches": progress["batches_applied"],
            "progress_pushes": progress["pushes"],
            "data_messages": data_batches,
            "max_inflight_seen": max(s["max_inflight_seen"] for s in per_replica),
            "backpressure_waits": sum(s["backpressure_waits"] for s in per_replica),
            "local_sends": sum(s["local_sends"] for s in per_replica),
        }

    def cancel(self) -> None:
        """Stop the job and tear every actor down (results already complete stay readable)."""
        if self._torn_down:
            return
        self._torn_down = True
        for name, epoch in self.outputs.keep_locally():
            logger.debug("could not keep output %s epoch %s", name, epoch)
        actors = [*self.actors.values(), self.progress]
        for actor in actors:
            try:
                ray.kill(actor)
            except Exception:  # already dead
                pass
        # ray.kill returns at once; wait (a bounded time) until the processes are gone, so that
        # the next job finds the CPUs free and may reuse this job's actor names.
        gone = [actor.ping.remote() for actor in actors]
        _, alive = ray.wait(gone, num_returns=len(gone), timeout=TEARDOWN_TIMEOUT)
        if alive:
            logger.warning("job %r: %d actors still alive %.0f s after being killed", self.name, len(alive),
                           TEARDOWN_TIMEOUT)

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cancel()
