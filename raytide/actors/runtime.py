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
import itertools
import logging
import threading
import time
import uuid
from typing import Any, Iterator, Optional

import ray

from raytide.actors.allocator import check_pretouch
from raytide.core.batches import split_batch
from raytide.actors.markers import Marker
from raytide.actors.plan import PhysicalPlan, compile_plan
from raytide.actors.vertex_actor import VertexActor
from raytide.actors.wire import pack, pack_records, unpack_records
from raytide.core.dataflow import Dataflow, Probe
from raytide.errors import GraphError, RaytideError
from raytide.progress.actor import ProgressActor
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp

logger = logging.getLogger(__name__)

#: How long setup calls (creating and connecting actors) may take.
SETUP_TIMEOUT = 120.0
#: How long tearing a job down waits for its actors' processes to exit.
TEARDOWN_TIMEOUT = 10.0


class JobTimeout(RaytideError, TimeoutError):
    """A wait on a job ran out of time; the message says what was still incomplete."""


def run(
    flow: Dataflow,
    inputs: Optional[dict[str, Any]] = None,
    parallelism: Optional[int] = None,
    *,
    max_inflight: int = 16,
    batch_size: int = 4096,
    chaining: bool = True,
    num_cpus: float = 0,
    pretouch_mb: int = 0,
    name: Optional[str] = None,
) -> Job:
    """Start ``flow`` on the current Ray cluster (a local one if none is running).

    Args:
        flow: the dataflow to run.
        inputs: records per input, consumed lazily with backpressure: an iterable of
            per-epoch record lists (epoch 0, 1, ...), or a source object with an
            ``epochs()`` method yielding ``(epoch, object refs)`` such as
            :func:`raytide.integrations.spark.from_spark`. Inputs not given here are fed
            with :meth:`Job.push`, :meth:`Job.advance` and :meth:`Job.close`.
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
    unknown = sorted(set(inputs or {}) - set(flow.inputs()))
    if unknown:
        raise GraphError(f"inputs {unknown} are not inputs of dataflow {flow.name!r}; its inputs are {flow.inputs()}")
    if not ray.is_initialized():
        ray.init(ignore_reinit_error=True, log_to_driver=False)
    job = Job(plan, name or f"{flow.name}-{uuid.uuid4().hex[:6]}", max_inflight, batch_size, num_cpus, pretouch_mb)
    for input_name, source in (inputs or {}).items():
        job.feed(input_name, source)
    return job


class Job:
    """A running dataflow: feed inputs, wait, read outputs, inspect, cancel."""

    def __init__(self, plan: PhysicalPlan, name: str, max_inflight: int, batch_size: int, num_cpus: float,
                 pretouch_mb: int) -> None:
        self.plan, self.name = plan, name
        self.max_inflight, self.batch_size = max_inflight, batch_size
        self._epochs: dict[str, Optional[int]] = {n: 0 for n in plan.flow.inputs()}
        self._locks = {n: threading.Lock() for n in plan.flow.inputs()}
        self._pushes: dict[Any, collections.deque] = collections.defaultdict(collections.deque)
        self._results: dict[str, dict[int, list]] = {n: {} for n in plan.flow.outputs()}
        self._fetched: dict[str, dict[int, list]] = {n: {} for n in plan.flow.outputs()}
        self._cursor = 0
        self._finished = False
        self._error: Optional[BaseException] = None
        self._torn_down = False
        self._feeders: list[threading.Thread] = []
        self._pings: dict[Any, Any] = {}
        self._last_ping = 0.0
        self._start(num_cpus, pretouch_mb)

    # -- setup ---------------------------------------------------------------------------

    def _start(self, num_cpus: float, pretouch_mb: int) -> None:
        plan = self.plan
        # Every actor is created at once (each costs a worker process), the vertex actors first
        # so that they take Ray's idle workers; the driver waits for them but not for the
        # progress actor, which buffers what replicas send before it is connected.
        self.actors: dict[tuple[str, int], Any] = {}
        remote_vertex = ray.remote(VertexActor)
        for chain in plan.chains:
            for replica in range(chain.parallelism):
                self.actors[(chain.name, replica)] = remote_vertex.options(
                    name=f"{self.name}/{chain.name}/{replica}", num_cpus=num_cpus, max_restarts=0, max_task_retries=0,
                ).remote(plan, chain.name, replica, self.max_inflight, pretouch_mb)
        self.progress = ray.remote(concurrency_groups={"poll": 1})(ProgressActor).options(
            name=f"{self.name}/progress", num_cpus=0).remote(plan.graph, plan.flow.outputs(), plan.initial_pointstamps())
        unbounded = set(plan.feedback)  # sends out of a feedback vertex never wait: loops always drain
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
        if name not in self._epochs:
            raise GraphError(f"{name!r} is not an input of dataflow {self.plan.flow.name!r}; inputs: {self.plan.flow.inputs()}")
        chain = self.plan.chain_of[name]
        return [self.actors[(chain, r)] for r in range(self.plan.parallelism[name])]

    def push(self, name: str, records: Any, epoch: Optional[int] = None) -> None:
        """Send ``records`` into input ``name`` at ``epoch`` (default: the input's current epoch).

        Pushing at a later epoch first advances the input to it; pushing at an earlier
        epoch than the input's, or into a closed input, raises :class:`GraphError`.
        """
        with self._locks[name]:
            current = self._epochs[name]
            epoch = current if epoch is None else epoch
            self._check_epoch(name, epoch)
            if epoch != current:
                self._advance(name, epoch)
            replicas = self._input_replicas(name)
            pieces = split_batch(records, max(1, self.batch_size))
            for index, piece in enumerate(pieces):
                self._submit(replicas[index % len(replicas)], "push", name, *pack(piece), epoch)

    def push_refs(self, name: str, refs: list, epoch: int) -> None:
        """Send object refs of batches (e.g. Arrow tables) into input ``name``; replicas read them."""
        with self._locks[name]:
            self._check_epoch(name, epoch)
            if epoch != self._epochs[name]:
                self._advance(name, epoch)
            replicas = self._input_replicas(name)
            for index in range(len(replicas)):
                mine = refs[index::len(replicas)]
                if mine:
                    self._submit(replicas[index], "push_refs", name, mine, epoch)

    def advance(self, name: str, epoch: int) -> None:
        """Tell input ``name`` that no more records will come before ``epoch``."""
        with self._locks[name]:
            self._check_epoch(name, epoch)
            self._advance(name, epoch)

    def close(self, name: str) -> None:
        """No more records will come into input ``name``."""
        with self._locks[name]:
            if self._epochs[name] is not None:
                self._advance(name, None)

    def _check_epoch(self, name: str, epoch: int) -> None:
        current = self._epochs[name]
        if current is None:
            raise GraphError(f"input {name!r} is closed; it cannot take epoch {epoch}")
        if not isinstance(epoch, int) or epoch < current:
            raise GraphError(f"input {name!r} is at epoch {current}; epoch {epoch!r} is in its past or not an integer")

    def _advance(self, name: str, epoch: Optional[int]) -> None:
        for replica in self._input_replicas(name):
            self._submit(replica, "advance", name, epoch)
        self._epochs[name] = epoch

    def _submit(self, actor: Any, method: str, *args: Any) -> None:
        window = self._pushes[actor]
        while len(window) >= self.max_inflight:
            self._raise_if_failed()
            ready, _ = ray.wait([window[0]], timeout=1.0)
            if ready:
                ray.get(window.popleft())
        window.append(getattr(actor, method).remote(*args))

    def feed(self, name: str, source: Any) -> None:
        """Feed input ``name`` from ``source``, then close it.

        A parallel source (with ``readers(n)``) is read inside the input replicas, one
        reader each; anything else is fed from a background thread on the driver.
        """
        replicas = self._input_replicas(name)
        if hasattr(source, "readers"):
            with self._locks[name]:
                self._epochs[name] = None  # the replicas own this input now
            readers = source.readers(len(replicas))
            if len(readers) != len(replicas):
                raise GraphError(f"source for input {name!r} made {len(readers)} readers for {len(replicas)} replicas")
            self._get([r.start_reader.remote(name, reader) for r, reader in zip(replicas, readers)], f"starting readers of {name!r}")
            return
        thread = threading.Thread(target=self._feed, args=(name, source), name=f"raytide-feed-{name}", daemon=True)
        self._feeders.append(thread)
        thread.start()

    def _feed(self, name: str, source: Any) -> None:
        try:
            if hasattr(source, "epochs"):
                for epoch, refs in source.epochs():
                    self.push_refs(name, list(refs), epoch)
            else:
                for epoch, records in enumerate(source):
                    self.push(name, records, epoch)
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
            events, self._cursor = ray.get(self.progress.next_events.remote(self._cursor, timeout), timeout=timeout + 30)
        except ray.exceptions.RayActorError as error:
            self._fail(RaytideError(f"job {self.name!r}: the progress actor died"), error)
        for event in events:
            if event[0] == "epoch":
                _, output, epoch, refs = event
                self._results[output][epoch] = refs
            elif event[0] == "error":
                self._fail(event[1])
            elif event[0] == "finished":
                self._finished = True
        self._check_alive()
        self._raise_if_failed()

    def _check_alive(self) -> None:
        now = time.monotonic()
        if now - self._last_ping < 1.0:
            return
        self._last_ping = now
        targets = {**{k: a for k, a in self.actors.items()}, ("progress", 0): self.progress}
        for key, actor in targets.items():
            ref = self._pings.get(key)
            if ref is None:
                self._pings[key] = actor.ping.remote()
                continue
            ready, _ = ray.wait([ref], timeout=0)
            if ready:
                del self._pings[key]
                try:
                    ray.get(ref)
                except ray.exceptions.RayActorError as error:
                    what = "the progress actor" if key[0] == "progress" else f"vertex {key[0]!r} replica {key[1]}"
                    self._fail(RaytideError(f"job {self.name!r}: {what} died: {error}"), error)

    def _fail(self, error: BaseException, cause: Optional[BaseException] = None) -> None:
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
        while not self._finished:
            left = deadline - time.monotonic()
            if left <= 0:
                raise JobTimeout(self._describe_unfinished(timeout))
            self._pump(min(left, 0.5))

    def _describe_unfinished(self, timeout: float) -> str:
        open_inputs = {n: e for n, e in self._epochs.items() if e is not None}
        done = {n: max(r, default=None) for n, r in self._results.items()}
        try:
            pending = ray.get(self.progress.describe.remote(), timeout=10)
        except Exception as error:  # the description must not fail itself
            pending = {"progress actor": f"unreachable: {error!r}"}
        return (f"job {self.name!r} did not finish within {timeout:.0f} s; inputs still open (at epoch): {open_inputs}; "
                f"latest complete epoch per output: {done}; " + "; ".join(f"{k}: {v or 'none'}" for k, v in pending.items()))

    def results(self, name: str, timeout: float = 600.0) -> Iterator[tuple[int, list]]:
        """Yield ``(epoch, records)`` of output ``name`` as each epoch completes, until the job finishes."""
        if name not in self._results:
            raise GraphError(f"{name!r} is not an output of dataflow {self.plan.flow.name!r}; outputs: {self.plan.flow.outputs()}")
        yielded: set[int] = set()
        deadline = time.monotonic() + timeout
        while True:
            for epoch in sorted(set(self._results[name]) - yielded):
                yielded.add(epoch)
                yield epoch, self._records(name, epoch)
            if self._finished:
                return
            if time.monotonic() > deadline:
                raise JobTimeout(self._describe_unfinished(timeout))
            self._pump(0.5)

    def __iter__(self) -> Iterator[tuple[int, list]]:
        outputs = self.plan.flow.outputs()
        if len(outputs) != 1:
            raise GraphError(f"the job has outputs {outputs}; iterate over job.results(name)")
        return self.results(outputs[0])

    def _records(self, name: str, epoch: int) -> list:
        fetched = self._fetched[name]
        if epoch not in fetched:
            parts = self._results[name][epoch]
            refs = [p for p in parts if isinstance(p, ray.ObjectRef)]
            loaded = dict(zip(map(id, refs), ray.get(refs)))
            fetched[epoch] = list(itertools.chain.from_iterable(unpack_records(loaded.get(id(p), p)) for p in parts))
        return fetched[epoch]

    def collect(self, name: str) -> dict[int, list]:
        """The records of output ``name`` per completed epoch so far: ``{epoch: records}``."""
        if name not in self._results:
            raise GraphError(f"{name!r} is not an output of dataflow {self.plan.flow.name!r}; outputs: {self.plan.flow.outputs()}")
        if not self._torn_down:
            self._pump(0)
        return {epoch: self._records(name, epoch) for epoch in sorted(self._results[name])}

    def output_parts(self, name: str) -> dict[int, list]:
        """The packed record lists of output ``name`` per completed epoch (object refs or inline blobs).

        Large epochs stay in the object store where the sinks put them. After the job is
        torn down, the records it kept on the driver are packed again.
        """
        if self._torn_down:  # the sinks that owned the refs are gone; what was kept lives on the driver
            return {epoch: [pack_records(self._records(name, epoch))] for epoch in sorted(self._results[name])}
        self._pump(0)
        return dict(sorted(self._results[name].items()))

    def inject_marker(self, marker: Marker) -> None:
        """Inject a control marker at every input replica; it travels in band behind earlier records."""
        for name in self.plan.flow.inputs():
            with self._locks[name]:
                for replica in self._input_replicas(name):
                    self._submit(replica, "inject_marker", marker)

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
        for name, results in self._results.items():
            for epoch in results:
                try:
                    self._records(name, epoch)
                except Exception:  # the owner may already be gone; nothing more to keep
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
