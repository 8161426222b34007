"""Memory baseline for the fault soak: plain Ray actors doing the soak's calls and churn.

``bench fault_soak --param plain_ray=1`` runs this instead of raytide, so that the growth
per hour of raytide's processes can be read against what Ray's own processes do under the
same load. The job has the soak's processes and messages, with nothing of raytide in them:

* two **input** actors: the driver pushes each epoch's records to them, split in two, every
  ``pace`` seconds; each sends every keyed actor its share (one call per keyed actor);
* two or three **keyed** actors: each keeps a running sum per key and, once both inputs'
  shares of an epoch have come, reports the epoch's sums to the progress actor;
* a **progress** actor: an epoch is complete when every keyed actor has reported it; the
  driver takes complete epochs with a long poll;
* a **coordinator** actor: every ``interval`` seconds it asks every input and keyed actor
  for its state and writes the states to a file (a snapshot).

Every ``rescale_every_s`` the driver stops feeding, lets the epochs in flight complete,
moves the keyed actors' states to a new set of keyed actors (widths 3 and 2 in turn: one
started or killed) and hands the new handles to the inputs, the progress actor and the
coordinator, as a rescale does. Every ``kill_every_s`` it SIGKILLs the process of a random
actor and replaces it: a new actor, the others handed the new set of handles, the keyed
states taken back from the last snapshot, and the epochs in flight fed again, as a recovery
does. Each epoch's sums are checked against the records fed (``wrong``); an epoch fed
again after a kill may complete twice, so repeats are not counted.
"""

from __future__ import annotations

import os
import pickle
import random
import signal
import tempfile
import threading
import time
from collections import defaultdict
from typing import Any

import ray

#: Seconds the driver's long poll, and any wait for the actors, may take.
WAIT_S = 60.0


@ray.remote(num_cpus=0)
class Keyed:
    """A running sum per key; reports each epoch's sums once both inputs' shares came."""

    def __init__(self, state: dict[int, int], inputs: int) -> None:
        self.state, self.inputs = dict(state), inputs
        self.shares: dict[int, list[dict[int, int]]] = defaultdict(list)
        self.progress: Any = None
        self.generation = -1

    def pid(self) -> int:
        return os.getpid()

    def connect(self, progress: Any, generation: int) -> None:
        """Report to ``progress`` from now on; drop the shares of epochs in flight (they are fed again)."""
        self.progress, self.generation = progress, generation
        self.shares.clear()

    def restore(self, state: dict[int, int]) -> None:
        self.state = dict(state)

    def receive(self, epoch: int, records: list[tuple[int, int]], generation: int) -> None:
        if generation != self.generation:  # sent before the last rescale or kill
            return
        sums: dict[int, int] = defaultdict(int)
        for key, value in records:
            sums[key] += value
        self.shares[epoch].append(sums)
        if len(self.shares[epoch]) == self.inputs:
            total: dict[int, int] = defaultdict(int)
            for share in self.shares.pop(epoch):
                for key, value in share.items():
                    total[key] += value
                    self.state[key] = self.state.get(key, 0) + value
            self.progress.done.remote(epoch, dict(total), self.generation)

    def snapshot(self) -> bytes:
        return pickle.dumps(self.state)


@ray.remote(num_cpus=0)
class Input:
    """Sends each keyed actor its share of an epoch's records (by key)."""

    def __init__(self) -> None:
        self.keyed: list[Any] = []
        self.pushed = 0
        self.generation = -1

    def pid(self) -> int:
        return os.getpid()

    def connect(self, keyed: list[Any], generation: int) -> None:
        self.keyed, self.generation = keyed, generation

    def push(self, epoch: int, records: list[tuple[int, int]]) -> None:
        shares: list[list[tuple[int, int]]] = [[] for _ in self.keyed]
        for key, value in records:
            shares[key % len(self.keyed)].append((key, value))
        for actor, share in zip(self.keyed, shares):
            actor.receive.remote(epoch, share, self.generation)
        self.pushed += 1

    def snapshot(self) -> bytes:
        return pickle.dumps(self.pushed)


@ray.remote(num_cpus=0, max_concurrency=2)
class Progress:
    """Counts the keyed actors' reports per epoch; the driver long-polls for complete epochs."""

    def __init__(self) -> None:
        self.width = self.generation = 0
        self.reports: dict[int, list[dict[int, int]]] = defaultdict(list)
        self.complete: list[tuple[int, dict[int, int]]] = []
        self.changed = threading.Condition()

    def pid(self) -> int:
        return os.getpid()

    def configure(self, width: int, generation: int) -> None:
        with self.changed:
            self.width, self.generation = width, generation
            self.reports.clear()

    def done(self, epoch: int, sums: dict[int, int], generation: int) -> None:
        with self.changed:
            if generation != self.generation:
                return
            self.reports[epoch].append(sums)
            if len(self.reports[epoch]) == self.width:
                merged: dict[int, int] = {}
                for report in self.reports.pop(epoch):
                    merged.update(report)
                self.complete.append((epoch, merged))
                self.changed.notify_all()

    def take(self, timeout: float) -> list[tuple[int, dict[int, int]]]:
        with self.changed:
            self.changed.wait_for(lambda: self.complete, timeout=timeout)
            taken, self.complete = self.complete, []
            return taken


@ray.remote(num_cpus=0, max_concurrency=2)
class Coordinator:
    """Every ``interval`` seconds, asks its actors for their state and writes it to ``path``."""

    def __init__(self, interval: float, path: str) -> None:
        self.interval, self.path = interval, path
        self.actors: list[Any] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._loop, daemon=True).start()

    def pid(self) -> int:
        return os.getpid()

    def watch(self, actors: list[Any]) -> None:
        with self.lock:
            self.actors = actors

    def _loop(self) -> None:
        while True:
            time.sleep(self.interval)
            with self.lock:
                actors = list(self.actors)
            try:
                states = ray.get([actor.snapshot.remote() for actor in actors], timeout=WAIT_S)
            except Exception:  # an actor was killed: the driver replaces it; the next round takes it
                continue
            with open(self.path, "wb") as out:
                pickle.dump(states, out)


class PlainJob:
    """The actors of the plain job and the driver's side of it: feeding, rescaling, replacing."""

    def __init__(self, interval: float, path: str, width: int) -> None:
        self.progress = Progress.remote()
        self.coordinator = Coordinator.remote(interval, path)
        self.inputs = [Input.remote() for _ in range(2)]
        self.keyed = [Keyed.remote({}, len(self.inputs)) for _ in range(width)]
        self.interval, self.path, self.generation = interval, path, 0
        self.in_flight: dict[int, tuple[list[tuple[int, int]], dict[int, int], float]] = {}
        self.wire()

    def actors(self) -> dict[str, Any]:
        return {"progress": self.progress, "coordinator": self.coordinator,
                **{f"input/{i}": actor for i, actor in enumerate(self.inputs)},
                **{f"keyed/{i}": actor for i, actor in enumerate(self.keyed)}}

    def pids(self) -> dict[str, int]:
        actors = self.actors()
        return dict(zip(actors, ray.get([actor.pid.remote() for actor in actors.values()], timeout=WAIT_S)))

    def wire(self) -> None:
        """Hand every actor the current handles (a new generation: calls sent before are ignored)."""
        self.generation += 1
        ray.get([self.progress.configure.remote(len(self.keyed), self.generation),
                 *(actor.connect.remote(self.keyed, self.generation) for actor in self.inputs),
                 *(actor.connect.remote(self.progress, self.generation) for actor in self.keyed),
                 self.coordinator.watch.remote(self.inputs + self.keyed)], timeout=WAIT_S)

    def feed(self, epoch: int, records: list[tuple[int, int]]) -> None:
        sums: dict[int, int] = defaultdict(int)
        for key, value in records:
            sums[key] += value
        self.in_flight[epoch] = (records, dict(sums), time.monotonic())
        self._push(epoch, records)

    def _push(self, epoch: int, records: list[tuple[int, int]]) -> None:
        half = len(records) // 2
        self.inputs[0].push.remote(epoch, records[:half])
        self.inputs[1].push.remote(epoch, records[half:])

    def take(self, timeout: float) -> tuple[list[float], int]:
        """Complete epochs: their latencies (s), and how many had wrong sums."""
        latencies, wrong = [], 0
        for epoch, sums in ray.get(self.progress.take.remote(timeout), timeout=timeout + WAIT_S):
            if epoch in self.in_flight:
                _, expected, fed_at = self.in_flight.pop(epoch)
                latencies.append(time.monotonic() - fed_at)
                wrong += sums != expected
        return latencies, wrong

    def drain(self) -> tuple[list[float], int]:
        latencies, wrong, deadline = [], 0, time.monotonic() + WAIT_S
        while self.in_flight and time.monotonic() < deadline:
            more, bad = self.take(0.1)
            latencies += more
            wrong += bad
        return latencies, wrong

    def rescale(self, width: int) -> None:
        """Move the keyed actors' states to ``width`` of them (one started or killed), as a rescale does."""
        state: dict[int, int] = {}
        for blob in ray.get([actor.snapshot.remote() for actor in self.keyed], timeout=WAIT_S):
            state.update(pickle.loads(blob))
        while len(self.keyed) < width:
            self.keyed.append(Keyed.remote({}, len(self.inputs)))
        while len(self.keyed) > width:
            ray.kill(self.keyed.pop())
        ray.get([actor.restore.remote({k: v for k, v in state.items() if k % width == i})
                 for i, actor in enumerate(self.keyed)], timeout=WAIT_S)
        self.wire()

    def kill(self, name: str) -> None:
        """SIGKILL the process of actor ``name``, replace it, and feed the epochs in flight again."""
        actor = self.actors()[name]
        os.kill(ray.get(actor.pid.remote(), timeout=WAIT_S), signal.SIGKILL)
        while True:  # until Ray knows it is dead
            try:
                ray.get(actor.pid.remote(), timeout=WAIT_S)
                time.sleep(0.05)
            except ray.exceptions.RayActorError:
                break
        kind, _, index = name.partition("/")
        if kind == "progress":
            self.progress = Progress.remote()
        elif kind == "coordinator":
            self.coordinator = Coordinator.remote(self.interval, self.path)
        elif kind == "input":
            self.inputs[int(index)] = Input.remote()
        else:
            self.keyed[int(index)] = Keyed.remote(self._snapshot_share(int(index)), len(self.inputs))
        self.wire()
        for epoch, (records, _, _) in sorted(self.in_flight.items()):
            self._push(epoch, records)

    def _snapshot_share(self, index: int) -> dict[int, int]:
        """Keyed actor ``index``'s state in the last snapshot (empty if none was written yet)."""
        try:
            with open(self.path, "rb") as snapshot:
                states = pickle.load(snapshot)
        except (OSError, EOFError, pickle.UnpicklingError):
            return {}
        blobs = states[len(self.inputs):]
        return pickle.loads(blobs[index]) if index < len(blobs) else {}


#: How long a soak goes on past its minutes for the faults it was asked to make (``min_faults``).
FAULTS_TIMEOUT_S = 300.0


def _soak_goes_on(end: float, made: tuple[int, int], wanted: tuple[int, int]) -> bool:
    """Whether the soak ending at ``end`` goes on: its time is not up, or it has made fewer
    (rescales, kills) than ``wanted``; an error once those are ``FAULTS_TIMEOUT_S`` late."""
    now = time.monotonic()
    if now < end:
        return True
    if all(done >= want for done, want in zip(made, wanted)):
        return False
    if now > end + FAULTS_TIMEOUT_S:
        raise TimeoutError(f"the plain soak made (rescales, kills) {made} of the {wanted} asked for "
                           f"{FAULTS_TIMEOUT_S:.0f} s after its time was up")
    return True


def plain_soak(minutes: float, interval: float, pace: float, rescale_every_s: float, kill_every_s: float,
               sample_every_s: float, seed: int, records: Any, widths: tuple[int, ...],
               sample: Any, min_faults: tuple[int, int] = (0, 0)) -> dict[str, float]:
    """Run the plain job for ``minutes``, feeding ``records(epoch)`` every ``pace`` seconds;
    ``sample(pids)`` is called every ``sample_every_s`` with the driver's and every actor's
    process id. Returns the epochs, faults, wrong epochs and latencies (ms).

    ``min_faults`` (rescales, kills): go on past ``minutes`` until at least that many were
    made (a test's check that they happen, on a machine where each takes long), for at most
    :data:`FAULTS_TIMEOUT_S` more."""
    rng = random.Random(seed)
    path = os.path.join(tempfile.gettempdir(), f"raytide-plain-soak-{os.getpid()}")
    job = PlainJob(interval, path, widths[-1])
    latencies: list[float] = []
    epoch = wrong = kills = rescales = 0
    started = time.monotonic()
    end = started + minutes * 60
    next_feed, next_rescale, next_kill, next_sample = started, started + rescale_every_s, started + kill_every_s, started
    while _soak_goes_on(end, (rescales, kills), min_faults):
        now = time.monotonic()
        if now >= next_feed:
            job.feed(epoch, records(epoch))
            epoch += 1
            next_feed += pace
        more, bad = job.take(max(0.0, min(next_feed - time.monotonic(), pace)))
        latencies += more
        wrong += bad
        now = time.monotonic()
        if now >= next_sample:
            sample({"driver": os.getpid(), **job.pids()})
            next_sample = now + sample_every_s
        if now >= next_rescale or now >= next_kill:
            more, bad = job.drain() if now >= next_rescale else ([], 0)
            latencies += more
            wrong += bad
            if now >= next_rescale:
                job.rescale(widths[rescales % len(widths)])
                rescales += 1
                next_rescale = time.monotonic() + rescale_every_s
            else:
                job.kill(rng.choice(sorted(job.actors())))
                kills += 1
                next_kill = time.monotonic() + kill_every_s
            next_feed = time.monotonic()
    more, bad = job.drain()
    latencies += more
    ordered = sorted(latencies) or [float("nan")]
    return {"minutes": minutes, "epochs": float(epoch), "kills": float(kills), "rescales": float(rescales),
            "wrong": float(wrong + bad), "not_completed": float(len(job.in_flight)),
            "latency_p50_ms": ordered[len(ordered) // 2] * 1000,
            "latency_p99_ms": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))] * 1000}
