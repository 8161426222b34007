"""Live rescaling on a real Ray: ``job.rescale`` while records flow, compared with plain Python.

Every record carries its key's next sequence number, and the keyed state checks each one
follows the last: a record lost, processed twice (after the state saw it) or reordered
within its key fails the job with an error naming it. The job is rescaled 1 -> 4 -> 2 -> 3
while the driver feeds it, and the output must hold every (key, sequence number) once.
"""

from __future__ import annotations

import collections
import dataclasses
import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import psutil
import pytest
import ray

import raytide as rt
from examples.connected_components import build_flow, union_find
from raytide.driver.recovery import RescaleRecord
from raytide.driver.rescale import RayRescale
from raytide.errors import ArgumentError, GraphError, RescaleError
from raytide.physical.protocol import ReplicaKey
from raytide.snapshots.store import SnapshotStore
from tests.delivery import assert_exactly_once
from tests.ray.jobs import Brake, as_multisets, counting_words, next_in_sequence, text_parts
from tests.ray.test_recovery import sigkill

pytestmark = [pytest.mark.ray, pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")]

KEYS = 12
PER_KEY = 5  # records per key and epoch
STEPS = (4, 2, 3)  # the widths the rescaled vertex goes through, from 1
RETAIN_ALL = 1_000  # a test that reads the snapshot a recovery came from once the job is done keeps them all


class Gates:
    """Paces the feed around the rescales: from epoch 10 on, once the rescale before is
    done, it lets the driver start the next one, and it goes on feeding while each runs
    (records arrive before, at and after every cut); it stops 10 epochs after the last."""

    def __init__(self) -> None:
        self.reached = [threading.Event() for _ in STEPS]
        self.started = [threading.Event() for _ in STEPS]
        self.rescaled = [threading.Event() for _ in STEPS]
        self.fed = 0  # epochs fed, once the feed is over

    def epochs(self) -> Iterator[list[tuple[int, int]]]:
        """Epochs of ``(key, sequence number)``, each key's numbers consecutive from 0 across epochs."""
        epoch, step, last_done = 0, 0, None
        while last_done is None or epoch < last_done + 10:
            if step < len(STEPS) and epoch >= 10 * (step + 1) and (step == 0 or self.rescaled[step - 1].is_set()):
                self.reached[step].set()
                assert self.started[step].wait(300), "the driver did not rescale"
                step += 1
            if last_done is None and self.rescaled[-1].is_set():
                last_done = epoch
            assert epoch < 5000, "the rescales did not finish"
            yield [(key, epoch * PER_KEY + i) for i in range(PER_KEY) for key in range(KEYS)]
            epoch += 1
            time.sleep(0.005)
        self.fed = epoch

    def rescale(self, job: rt.Job, step: int, widths: dict[str, int], stepped: bool | None = None) -> dict[str, Any]:
        """Rescale ``job`` as step ``step``, once the feed is there, while it goes on (``stepped``: as
        ``job.rescale``'s; False where a test is about the whole-job rescale's machine)."""
        assert self.reached[step].wait(300)
        self.started[step].set()
        record = job.rescale(widths, timeout=120, stepped=stepped)
        self.rescaled[step].set()
        return record


def sequences(epochs: int) -> dict[str, dict[int, collections.Counter]]:
    """The plain-Python output of :func:`next_in_sequence` over the first ``epochs`` epochs of
    :meth:`Gates.epochs`: per epoch ``(key, (key, n))`` for each key and each of its numbers."""
    return {"out": {epoch: collections.Counter((key, (key, n)) for key in range(KEYS)
                                               for n in range(epoch * PER_KEY, (epoch + 1) * PER_KEY))
                    for epoch in range(epochs)}}


class SequenceChecker(rt.Vertex):
    """Keyed by the exchange before it: checks each key's sequence, and at the end of every
    epoch (a notification) sends how many records each key had in it."""

    def __init__(self) -> None:
        self.last: dict[int, int] = {}
        self.counts: dict[rt.Timestamp, collections.Counter] = {}

    def on_recv(self, edge: int, message: Any, time: rt.Timestamp) -> None:
        for key, number in message:
            expected = self.last.get(key, -1) + 1
            if number != expected:
                raise ValueError(f"key {key}: record {number} arrived where {expected} was due")
            self.last[key] = number
            if time not in self.counts:
                self.counts[time] = collections.Counter()
                self.notify_at(time)
            self.counts[time][key] += 1

    def on_notify(self, time: rt.Timestamp) -> None:
        self.send_by(0, sorted(self.counts.pop(time).items()), time)

    def snapshot(self) -> Any:
        return self.last, self.counts

    def restore(self, state: Any) -> None:
        self.last, self.counts = state

    def take_keys(self, moving: Callable[[Any], bool]) -> Any:
        last = {key: n for key, n in self.last.items() if moving(key)}
        counts = {}
        for at, per_key in list(self.counts.items()):
            counts[at] = collections.Counter({key: n for key, n in per_key.items() if moving(key)})
            self.counts[at] = collections.Counter({key: n for key, n in per_key.items() if not moving(key)})
            if not self.counts[at]:
                del self.counts[at]
                self.cancel_notify(at)
        for key in last:
            del self.last[key]
        return last, counts

    def put_keys(self, state: Any) -> None:
        last, counts = state
        self.last.update(last)
        for at, per_key in counts.items():
            if not per_key:
                continue
            if at not in self.counts:
                self.counts[at] = collections.Counter()
                self.notify_at(at)
            self.counts[at].update(per_key)


def run_with_rescales(flow: rt.Dataflow, vertex: str, tmp_path, stepped: bool | None = None) -> tuple[
        dict[int, list], list[dict[str, Any]], dict[str, Any], int]:
    """Feed ``flow`` and rescale ``vertex`` through :data:`STEPS` meanwhile (``stepped``: as
    ``job.rescale``'s); the output, the rescales' records, the job's final stats and how many epochs were fed."""
    gates = Gates()
    job = rt.run(flow, {"records": gates.epochs()}, parallelism=1,
                 recovery=rt.Recovery(str(tmp_path / "store"), interval=0.5))
    with job:
        records = []
        for step, width in enumerate(STEPS):
            records.append(gates.rescale(job, step, {vertex: width}, stepped))
            assert job.parallelism()[vertex] == width
        job.wait(timeout=300)
        return job.collect("out"), records, job.stats(), gates.fed


def sequence_rescaled_1_4_2_3(tmp_path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """A keyed ``stateful_map`` that checks each key's sequence (:func:`next_in_sequence`),
    rescaled through :data:`STEPS` while it runs, holding the whole job (the stepped rescale's
    own test is tests/ray/test_rescale_stepped.py): every record must arrive once (counted
    against every key's full sequence) and every epoch once, in order. Returns the
    rescales' records and the job's final stats."""
    flow = rt.Dataflow("sequence")
    flow.input("records").stateful_map(lambda r: r[0], next_in_sequence, name="check").output("out")
    out, records, stats, epochs = run_with_rescales(flow, "check", tmp_path, stepped=False)
    got = collections.Counter(record for records_ in out.values() for _, record in records_)
    assert got == collections.Counter((key, n) for key in range(KEYS) for n in range(epochs * PER_KEY))
    assert sorted(out) == list(range(epochs))
    return records, stats


@pytest.mark.timeout(600)
def test_a_keyed_stateful_map_rescaled_1_4_2_3_sees_every_record_once_in_order(ray_session, tmp_path):
    records, stats = sequence_rescaled_1_4_2_3(tmp_path)
    assert [r["after"] for r in records] == [{"check": w, "out": w} for w in STEPS]  # the output reads it replica by replica
    assert all(r["cut_s"] > 0 and r["pause_s"] > 0 and r["hosts"]["kept"] >= 1 for r in records)
    assert stats["parallelism"]["check"] == 3 and len(stats["rescales"]) == 3
    assert sum(1 for host in stats["replicas"] if "check" in host) == 3


@pytest.mark.timeout(600)
def test_a_custom_vertex_with_notifications_rescaled_1_4_2_3_counts_every_epoch_exactly(ray_session, tmp_path):
    flow = rt.Dataflow("sequence-notified")
    flow.input("records").exchange(lambda r: r[0], name="by_key").unary(SequenceChecker, name="check").output("out")
    out, records, _, epochs = run_with_rescales(flow, "check", tmp_path)
    assert sorted(out) == list(range(epochs))
    for epoch, pairs in out.items():
        counts = collections.Counter()
        for key, n in pairs:
            counts[key] += n
        assert counts == {key: PER_KEY for key in range(KEYS)}, f"epoch {epoch}"
    assert records[0]["after"] == {"by_key": 4, "check": 4, "out": 4}  # it reads by_key replica by replica: they move together


@pytest.mark.timeout(600)
def test_a_rescale_in_the_middle_of_connected_components_gives_the_union_find_labels(ray_session, tmp_path):
    import random

    rng = random.Random(4)
    edges = [(rng.randrange(300), rng.randrange(300)) for _ in range(400)]
    epochs = [edges[i::8] for i in range(8)]
    with rt.run(build_flow(2), parallelism=2, recovery=rt.Recovery(str(tmp_path / "store"), interval=0.5)) as job:
        labels = labels_through_rescales(job, epochs, {3: 3})
        assert job.parallelism()["label-propagation"] == 3
    assert labels == union_find(edges)


def labels_through_rescales(job: rt.Job, epochs: list[list], widths: dict[int, int]) -> dict[int, int]:
    """Each epoch of edges pushed to connected components' ``job``, the loop rescaled to
    ``widths[epoch]`` after the epochs in ``widths`` are fed (in the loop, state and all,
    mid-epoch); every node's label as the epochs' outputs fold it. Closes and waits for the job."""
    results = job.results("labels", timeout=300)
    labels: dict[int, int] = {}
    for epoch, batch in enumerate(epochs):
        job.push("edges", batch, epoch)
        job.advance("edges", epoch + 1)
        if epoch in widths:
            job.rescale({"label-propagation": widths[epoch]}, timeout=120)
        _, pairs = next(results)
        for node, label in pairs:
            labels[node] = min(label, labels.get(node, label))
    job.close("edges")
    job.wait(timeout=300)
    return labels


@pytest.mark.timeout(600)
def test_a_replica_killed_as_the_rescale_starts_is_recovered_and_the_rescale_still_happens(ray_session, tmp_path):
    """The kill strikes before the cut: the cut cannot complete, the driver notices the
    death while it waits, recovers, and takes the cut again."""
    flow = rt.Dataflow("sequence-killed")
    flow.input("records").stateful_map(lambda r: r[0], next_in_sequence, name="check").output("out")
    gates = Gates()
    with rt.run(flow, {"records": gates.epochs()}, parallelism=1,
                recovery=rt.Recovery(str(tmp_path / "store"), interval=0.3, max_restarts=3)) as job:
        for step, width in enumerate(STEPS):
            if step == 1:
                assert gates.reached[step].wait(300)
                sigkill(job, "check+out/1")
            gates.rescale(job, step, {"check": width}, stepped=False)
        job.wait(timeout=300)
        out, stats = list(job.results("out")), job.stats()
    assert_exactly_once(sequences(gates.fed), {"out": out})
    assert stats["recoveries"]["count"] >= 1 and [r["after"]["check"] for r in stats["rescales"]] == list(STEPS)


class Announces(SequenceChecker):
    """Announces every ``restore`` (``phase="hand over"``: the held replica splitting its
    state restores it into a fresh instance first) or every ``put_keys`` (``phase="adopt"``:
    a replica of the rescaled job gathering its keys) in a file, and takes a second over it:
    the window in which the test kills another replica."""

    def __init__(self, announce: str, phase: str) -> None:
        super().__init__()
        self.announce, self.phase = announce, phase

    def _announce(self, phase: str) -> None:
        if phase == self.phase:
            with open(self.announce, "a") as file:
                file.write(f"{phase}\n")
            time.sleep(1.0)

    def restore(self, state: Any) -> None:
        self._announce("hand over")
        super().restore(state)

    def put_keys(self, state: Any) -> None:
        self._announce("adopt")
        super().put_keys(state)


@pytest.mark.timeout(600)
@pytest.mark.parametrize("phase", ["hand over", "adopt"])
def test_a_replica_killed_while_the_state_moves_recovers_into_one_configuration(ray_session, tmp_path, phase):
    """Killed while the held replicas hand their state over, the job recovers in its old
    widths and the rescale is made again; killed while the new replicas adopt it, the job
    recovers in the new widths, from its last snapshot laid out for them. Either way every
    record is seen once, in order."""
    announce = str(tmp_path / "announced")
    flow = rt.Dataflow("sequence-killed-moving")
    flow.input("records").unary(lambda: Announces(announce, phase), exchange=lambda r: r[0], name="check").output("out")
    gates, store = Gates(), str(tmp_path / "store")
    with rt.run(flow, {"records": gates.epochs()}, parallelism=1,
                recovery=rt.Recovery(store, interval=0.3, max_restarts=3, retain=RETAIN_ALL)) as job:
        pid = job.hosts()[f"{job.name}/check+out/0"]  # its host plays replica 0 of the new widths too

        def kill_once_announced() -> None:
            deadline = time.monotonic() + 120
            while not os.path.exists(announce):
                assert time.monotonic() < deadline
                time.sleep(0.01)
            os.kill(pid, signal.SIGKILL)

        assert gates.reached[0].wait(300)
        snapshot_id = job.snapshot()  # at width 1: what a recovery in the new widths must lay out again
        killer = threading.Thread(target=kill_once_announced, daemon=True)
        killer.start()
        record = gates.rescale(job, 0, {"check": 3}, stepped=False)
        killer.join(timeout=120)
        for step, width in enumerate(STEPS[1:], start=1):
            gates.rescale(job, step, {"check": width}, stepped=False)
        job.wait(timeout=300)
        out, stats = job.collect("out"), job.stats()
    assert record["after"]["check"] == 3 and stats["recoveries"]["count"] >= 1
    first = stats["recoveries"]["recoveries"][0]
    assert ("handed their state over" if phase == "hand over" else "during the rescale") in first["cause"], first
    restored = SnapshotStore(store).manifest(first["snapshot_id"])
    if phase == "adopt":  # in the new widths: snapshot_id laid out again for them
        assert restored.snapshot_id > snapshot_id and restored.metadata["vertices"]["check"] == 3, restored
    else:
        assert restored.snapshot_id >= snapshot_id and restored.metadata["vertices"]["check"] == 1, restored
    counts = collections.Counter()
    for pairs in out.values():
        for key, n in pairs:
            counts[key] += n
    assert counts == {key: gates.fed * PER_KEY for key in range(KEYS)}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("before", [True, False], ids=["before the switch", "after the switch"])
def test_the_coordinator_killed_as_the_job_switches_to_the_new_widths_leaves_it_in_them(ray_session, tmp_path,
                                                                                        monkeypatch, before):
    """Once the held replicas have handed their state over there is no way back: a
    coordinator killed (from the driver, at that step) before it is told of the new widths,
    or right after the switch, before the new replicas adopt their state, is replaced by
    the recovery that follows the switch, and every record is still seen once, in order,
    through the rescales after it."""
    flow = rt.Dataflow("sequence-coordinator-killed")
    flow.input("records").stateful_map(lambda r: r[0], next_in_sequence, name="check").output("out")
    gates, store = Gates(), str(tmp_path / "store")
    with rt.run(flow, {"records": gates.epochs()}, parallelism=1,
                recovery=rt.Recovery(store, interval=0.3, max_restarts=3)) as job:
        host = job._recovery.coordinator.handle  # the coordinator's pooled host
        killed = at_the_switch(monkeypatch, lambda: ray.kill(host), before=before)
        record = gates.rescale(job, 0, {"check": STEPS[0]}, stepped=False)
        assert killed == [1], killed
        monkeypatch.undo()
        assert job.parallelism()["check"] == STEPS[0]
        for step, width in enumerate(STEPS[1:], start=1):
            gates.rescale(job, step, {"check": width}, stepped=False)
        job.wait(timeout=300)
        out, stats = list(job.results("out")), job.stats()
    assert record["after"] == {"check": STEPS[0], "out": STEPS[0]} and stats["recoveries"]["count"] == 1, stats
    assert "coordinator" in stats["recoveries"]["recoveries"][0]["cause"], stats["recoveries"]
    assert_exactly_once(sequences(gates.fed), {"out": out})


def at_the_switch(monkeypatch: pytest.MonkeyPatch, kill: Callable[[], None], *, before: bool) -> list[int]:
    """Make ``kill`` at the next rescale's switch to the new widths, from the driver (its
    rescale runtime, :class:`~raytide.driver.rescale.RayRescale`): before the coordinator and
    the hosts are told of the new widths (``before``), or right after, before the new
    replicas adopt the state handed over to them. Returns a list that gets the switch's
    incarnation once the kill is made."""
    made: list[int] = []
    switch = RayRescale.switch

    def killing_switch(self: RayRescale, effect: Any, run: Any) -> Any:
        if before and not made:
            kill()
            made.append(effect.incarnation)
        event = switch(self, effect, run)
        if not made:
            kill()
            made.append(effect.incarnation)
        return event

    monkeypatch.setattr(RayRescale, "switch", killing_switch)
    return made


def kill_and_wait_gone(pid: int) -> None:
    """SIGKILL process ``pid`` (a host), wait until it is gone and Ray's control store has its
    actor dead, then a second more: the raylet has noticed the death by then, and frees the
    objects the process owned. On a loaded machine the raylet notices late, and a piece
    still in the object store would be read as if its owner lived."""
    from ray._private.state import actors  # the GCS's actor table (the state API needs the dashboard)

    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, f"process {pid} still there 30 s after SIGKILL"
        time.sleep(0.01)
    while any(actor["Pid"] == pid and actor["State"] != "DEAD" for actor in actors().values()):
        assert time.monotonic() < deadline, f"Ray still has the actor of process {pid} alive 30 s after SIGKILL"
        time.sleep(0.01)
    time.sleep(1.0)


@pytest.mark.timeout(600)
def test_a_replica_that_handed_its_keys_over_and_died_before_they_were_adopted_is_recovered_from(
        ray_session, tmp_path, monkeypatch):
    """From 4 replicas to 2, replicas 2 and 3 hand all their keys over (as objects they own
    in Ray's object store) and retire. Replica 3's process is SIGKILLed right after the
    switch, before replicas 0 and 1 fetch its pieces, which are lost with it: the job
    recovers in the new widths from its last snapshot, and every record is still seen
    once, in order (Ray's ``OwnerDiedError`` escaped to the caller before)."""
    flow = rt.Dataflow("sequence-owner-killed")
    flow.input("records").stateful_map(lambda r: r[0], next_in_sequence, name="check").output("out")
    gates = Gates()
    with rt.run(flow, {"records": gates.epochs()}, parallelism=1,
                recovery=rt.Recovery(str(tmp_path / "store"), interval=0.3, max_restarts=3)) as job:
        gates.rescale(job, 0, {"check": STEPS[0]}, stepped=False)
        owner = job.hosts()[f"{job.name}/check+out/3"]
        killed = at_the_switch(monkeypatch, lambda: kill_and_wait_gone(owner), before=False)
        gates.rescale(job, 1, {"check": STEPS[1]}, stepped=False)
        assert killed, "no kill was made at the switch"
        monkeypatch.undo()
        gates.rescale(job, 2, {"check": STEPS[2]}, stepped=False)
        job.wait(timeout=300)
        out, stats = list(job.results("out")), job.stats()
    assert stats["recoveries"]["count"] == 1, stats["recoveries"]
    assert "during the rescale" in stats["recoveries"]["recoveries"][0]["cause"], stats["recoveries"]
    assert_exactly_once(sequences(gates.fed), {"out": out})


@pytest.mark.timeout(600)
@pytest.mark.parametrize("recovers", [True, False], ids=["with recovery", "without recovery"])
def test_a_rescale_while_the_replicas_read_a_source_resumes_every_reader_at_the_cut(ray_session, tmp_path, recovers):
    """The input replicas read text files themselves (their readers are part of the held
    state): what a reader read after the cut is read again by the rescaled job, once; in a
    job without recovery too (issue 74)."""
    paths, expected = text_parts(tmp_path, random.Random(9))
    brake = Brake(tmp_path)
    flow = counting_words("files-rescaled", brake)
    source = rt.sources.TextFileSource(paths, batch_lines=10)
    with rt.run(flow, inputs={"lines": source}, parallelism=2,
                recovery=rt.Recovery(str(tmp_path / "store"), interval=0.3) if recovers else None) as job:
        deadline = time.monotonic() + 60
        while not job.collect("counts"):
            assert time.monotonic() < deadline, "no epoch counted in 60 s"
            time.sleep(0.02)
        records = [job.rescale({"count": width}, timeout=120) for width in (3, 1)]
        brake.release()
        job.wait(timeout=120)
        got = job.collect("counts")
    assert brake.read_after_release, "the readers were done before the rescales"
    assert [r["after"]["count"] for r in records] == [3, 1]
    assert as_multisets(got) == expected


class StallsOnce(rt.Vertex):
    """Passes records on; the first time it ever sees record -1 it takes 6 s over it (a
    file remembers, so the replay after a recovery runs at full speed)."""

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def on_recv(self, edge: int, message: Any, time_: rt.Timestamp) -> None:
        if -1 in message and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            time.sleep(6.0)
        self.send_by(0, list(message), time_)


@pytest.mark.timeout(300)
def test_a_cut_that_a_busy_replica_does_not_reach_in_time_fails_the_rescale_naming_it(ray_session, tmp_path):
    """The rescale's timeout runs out while a replica is stuck in a record: the error says
    which replica the cut waited for, the job is let go of its cut (by a recovery) and gives
    every record once."""
    flow = rt.Dataflow("stuck")
    flow.input("numbers").exchange(lambda n: n, name="by_value").unary(
        lambda: StallsOnce(str(tmp_path / "stalled")), name="slow").output("out")
    with rt.run(flow, parallelism=1, recovery=rt.Recovery(str(tmp_path / "store"), interval=None)) as job:
        job.push("numbers", [1, 2, -1], 0)
        job.advance("numbers", 1)
        deadline = time.monotonic() + 60
        while not os.path.exists(tmp_path / "stalled"):
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(rt.RaytideError, match=r"rescale cut \d+ was not held: .*still waiting for 1 replicas "
                                                  r"\(by_value\+slow\+out/0\)"):
            job.rescale({"by_value": 2}, timeout=2.0, stepped=False)  # the whole job's cut
        job.push("numbers", [3], 1)
        job.close("numbers")
        job.wait(timeout=120)
        assert job.parallelism()["slow"] == 1 and job.stats()["recoveries"]["count"] == 1
        assert {epoch: sorted(records) for epoch, records in job.collect("out").items()} == {0: [-1, 1, 2], 1: [3]}


def test_a_rescale_that_cannot_be_done_says_why_and_the_job_goes_on(ray_session, tmp_path):
    flow = rt.Dataflow("refused")
    flow.input("records").stateful_map(lambda r: r[0], next_in_sequence, name="check").output("out")
    with rt.run(flow, parallelism=1, recovery=rt.Recovery(str(tmp_path / "store"), interval=0.5)) as job:
        with pytest.raises(GraphError, match="no vertex 'nope'"):
            job.rescale({"nope": 2})
        with pytest.raises(RescaleError, match="input 'records' cannot change its parallelism"):
            job.rescale({"records": 2})
        unchanged = job.rescale({"check": 1})  # the width it has: nothing to do, no snapshot taken
        assert (unchanged["before"], unchanged["cut_id"], unchanged["pause_s"]) == ({}, None, 0.0), unchanged
        assert set(unchanged) == {f.name for f in dataclasses.fields(RescaleRecord)}
        assert job.stats()["rescales"] == [] and job.parallelism()["check"] == 1
        job.push("records", [(0, 0), (0, 1)], 0)
        job.close("records")
        job.wait(timeout=120)
        assert job.collect("out") == {0: [(0, (0, 0)), (0, (0, 1))]}
        with pytest.raises(RescaleError, match="finished"):
            job.rescale({"check": 2})
    plain = rt.run(flow, parallelism=1)  # without recovery= too (tests/ray/test_rescale_without_recovery.py)
    with plain, pytest.raises(ArgumentError, match=r"'check'.* at most"):
        plain.rescale({"check": 500})


def test_a_rescale_keeps_the_pending_liveness_watch_of_every_actor_it_keeps(ray_session, tmp_path):
    """The driver watches each actor with one pending ``watch`` call per lease. A rescale that
    keeps an actor under its lease (the input's replicas, the progress actor, the
    coordinator) keeps that call: a second one would wait behind the first in the actor's
    one ``watch`` thread, so every rescale would add a call pending for the rest of the job,
    in the driver and in the actor (the soak's memory growth)."""
    flow = rt.Dataflow("watched")
    flow.input("records").stateful_map(lambda r: r[0], next_in_sequence, name="check").output("out")
    with rt.run(flow, parallelism=1, recovery=rt.Recovery(str(tmp_path / "store"), interval=0.5)) as job:
        first = dict(job.placement.liveness.watches)
        for width in (2, 1, 2):
            job.rescale({"check": width})
        now, actors = job.placement.liveness.watches, job.placement.liveness.actors
        assert len(first) == 4 and set(now) == {*first, ReplicaKey("check+out", 1)}
        assert all(now[key] is first[key] for key in first), (first, now)  # same host, same lease: same call
        ready, _ = ray.wait(list(now.values()), num_returns=len(now), timeout=0)
        assert not ready, "a watch of a live actor under its lease returned"
        assert len({(actor.handle, actor.lease) for actor in actors.values()}) == len(now)
        job.push("records", [(0, 0), (0, 1)], 0)
        job.close("records")
        job.wait(timeout=120)
        assert job.collect("out") == {0: [(0, (0, 0)), (0, (0, 1))]}
