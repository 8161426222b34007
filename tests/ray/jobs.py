"""Running a dataflow to its end on the session's Ray, for tests that only need its output."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import raytide as rt
from tests.ray.own_ray import until_ray_starts


def run_collect(flow: rt.Dataflow, inputs: dict[str, Any] | None = None, output: str = "out", *,
                parallelism: int = 2, timeout: float = 120, **options: Any) -> dict[int, list]:
    """Run ``flow`` on ``inputs`` until it finishes; the records of ``output`` per completed epoch.

    ``options`` go to :func:`raytide.run` (``batch_size``, ``chaining``, ``num_cpus``, ...).
    """
    with rt.run(flow, inputs=inputs, parallelism=parallelism, **options) as job:
        job.wait(timeout=timeout)
        return job.collect(output)


def until(condition: Callable[[], Any], what: str, timeout: float = 30.0, every: float = 0.05) -> Any:
    """Poll ``condition`` every ``every`` s until it is true and return its value; fail naming
    ``what`` after ``timeout`` s (the tests' one poll with a deadline)."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"{what}: not within {timeout:g} s"
        time.sleep(every)
    return value


def wait_for_epoch(job: rt.Job, output: str, epoch: int, timeout: float = 120.0) -> None:
    """Poll until ``job`` handed out epoch ``epoch`` (or a later one) of ``output``; fail after ``timeout`` s."""
    until(lambda: max(job.collect(output), default=-1) >= epoch, f"epoch {epoch} of {output!r} handed out",
          timeout, every=0.02)


def committed_snapshots(job: rt.Job) -> int:
    """The snapshots ``job`` has committed, for a poll with a deadline of its own: 0 while its
    coordinator does not answer (replaced after a kill, or starved on a loaded machine), when
    ``job.stats()["snapshots"]`` says why in place of the figures."""
    return int(job.stats()["snapshots"].get("committed", 0))


def as_multisets(result: dict[int, list]) -> dict[int, Counter]:
    """Each non-empty epoch's records as a multiset: their order within an epoch is not defined."""
    return {epoch: Counter(records) for epoch, records in result.items() if records}


def text_parts(directory: Path, rng: random.Random, files: int = 40, lines: int = 50) -> tuple[list[str], dict]:
    """``files`` text files of random words in ``directory`` (one per epoch when read by a
    :class:`~raytide.sources.TextFileSource`), and per epoch the multiset of its word counts."""
    paths = []
    for number in range(files):
        path = directory / f"part-{number:02d}.txt"
        path.write_text("".join(" ".join(rng.choice("abcdef") for _ in range(4)) + "\n" for _ in range(lines)))
        paths.append(str(path))
    return paths, {epoch: Counter(Counter(open(p).read().split()).items()) for epoch, p in enumerate(paths)}


class Brake:
    """Keeps the input replicas of :func:`counting_words` reading slowly (``delay`` s a line:
    2,000 lines take them at least 50 s) until the test releases it, after what it kills or
    rescales; :attr:`read_after_release` says whether they read a line with the brake on and
    one after its release (else they had been done before it, and the test proved nothing).
    Files in ``directory`` carry all of it to the replicas' processes (this machine's)."""

    def __init__(self, directory: Path, delay: float = 0.05) -> None:
        self.on, self.delay = directory / "brake-on", delay
        self.held, self.after = directory / "read-with-the-brake-on", directory / "read-after-release"
        self.on.touch()

    def release(self) -> None:
        self.on.unlink()

    @property
    def read_after_release(self) -> bool:
        return self.held.exists() and self.after.exists()

    def words(self, line: str) -> list[str]:
        if self.on.exists():
            self.held.touch()
            time.sleep(self.delay)
        elif not self.after.exists():
            self.after.touch()
        return line.split()


def counting_words(name: str, brake: Brake) -> rt.Dataflow:
    """Lines -> words (slowly, until ``brake`` is released) -> a count per word and epoch, output ``counts``."""
    flow = rt.Dataflow(name)
    flow.input("lines").flat_map(brake.words, name="words").count_by_key(lambda w: w, name="count").output("counts")
    return flow


def hosts_given_back(job: rt.Job, timeout: float = 60.0) -> bool:
    """Every host of ``job`` is back in the pool, reset (idle), or dead: none is still the job's."""
    deadline = time.monotonic() + timeout
    coordinator = job.placement.coordinator_lease
    numbers = {lease.number for lease in job.placement.leases.values()} | ({coordinator.number} if coordinator else set())
    while True:
        states = job.placement.pool.describe()
        held = numbers & {n for state, hosts in states.items() if not state.endswith("idle") for n in hosts}
        if not held:
            return True
        assert time.monotonic() < deadline, f"hosts {sorted(held)} of job {job.name!r} were not given back: {states}"
        time.sleep(0.1)


def next_in_sequence(last: int | None, record: tuple[int, int]) -> tuple[int, tuple[int, int]]:
    """``stateful_map``'s function: the record must follow the last one of its key."""
    key, number = record
    expected = 0 if last is None else last + 1
    if number != expected:
        raise ValueError(f"key {key}: record {number} arrived where {expected} was due (lost, repeated or reordered)")
    return number, record


#: How long an example may run in a test: the demo (a Ray, a Spark of three JVMs, four epochs)
#: took 209 s beside both session lanes in a full run, more than 240 s in one CI run.
EXAMPLE_TIMEOUT_S = 360


def run_example(tmp_path: Path, env: dict[str, str], script: str, *args: str) -> tuple[str, str]:
    """Run ``examples/<script>`` in a fresh process from the repository's root; its stdout and
    stderr, after checking it exited with 0 within :data:`EXAMPLE_TIMEOUT_S`. Run again if it
    started a Ray of its own and that Ray did not start (:func:`~tests.ray.own_ray.until_ray_starts`).
    One still running then is stopped with SIGABRT first, which its faulthandler (turned on
    here) answers by writing every thread's stack to its stderr: the failure shows where it was.

    Output goes to files, not pipes: Ray's and Spark's helper processes inherit the
    descriptors, and reading a pipe to its end would also wait for them."""
    def attempt() -> tuple[int | None, str, str]:
        stdout, stderr = tmp_path / "stdout.txt", tmp_path / "stderr.txt"
        with open(stdout, "w") as out, open(stderr, "w") as err:
            run = subprocess.Popen([sys.executable, f"examples/{script}", *args], cwd=Path(__file__).resolve().parents[2],
                                   env={**env, "PYTHONFAULTHANDLER": "1"}, stdout=out, stderr=err,
                                   stdin=subprocess.DEVNULL)
            try:
                run.wait(timeout=EXAMPLE_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                err.write(f"\n[test] still running after {EXAMPLE_TIMEOUT_S} s: SIGABRT for its stacks\n")
                err.flush()
                run.send_signal(signal.SIGABRT)
                try:
                    run.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    run.kill()
                    run.wait()
        return run.returncode, stdout.read_text(), stderr.read_text()

    code, out, err = until_ray_starts(attempt, lambda done: done[2])
    assert code == 0, f"exit code {code}\n{out[-3000:]}\n{err[-8000:]}"
    return out, err


class SequenceFeed:
    """Epochs of ``(key, sequence number)`` for ``keys`` keys, ``per_key`` consecutive numbers a key
    an epoch, one epoch every ``pause`` s until :meth:`stop` (a vertex checks each key's numbers
    follow on: :func:`next_in_sequence`)."""

    def __init__(self, keys: int, per_key: int, pause: float) -> None:
        self.keys, self.per_key, self.pause = keys, per_key, pause
        self.stopped = threading.Event()
        self.fed = 0

    def epochs(self) -> Iterator[list[tuple[int, int]]]:
        while not self.stopped.is_set():
            yield [(key, self.fed * self.per_key + i) for i in range(self.per_key) for key in range(self.keys)]
            self.fed += 1
            time.sleep(self.pause)

    def stop(self) -> None:
        self.stopped.set()

    def reference(self) -> dict[str, dict[int, Counter]]:
        """Output ``out``'s records per epoch fed: ``(key, (key, n))`` for each number fed."""
        return {"out": {epoch: Counter((key, (key, n)) for key in range(self.keys)
                                       for n in range(epoch * self.per_key, (epoch + 1) * self.per_key))
                        for epoch in range(self.fed)}}
