"""A stream input's feed on a real local Ray, with a producer of its own (no Spark): each
batch is held by a committed snapshot without waiting for the driver's other threads, and
batches kept outside Ray's object store are read by the replicas they are dealt to."""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
import ray

import raytide as rt
from raytide.errors import JobTimeout, SourceError
from raytide.snapshots.consumed import ConsumedRecord
from raytide.snapshots.store import SnapshotStore
from raytide.sources.base import BlockRefs, RemoteBatch
from raytide.sources.stream import StreamReader, StreamSource

pytestmark = pytest.mark.ray

#: Seconds the consumer's polls for events last in the test below: long enough that waiting
#: for one cannot pass for the hold's own time on a slow machine.
LONG_POLL = 30.0


class FileBatch(RemoteBatch):
    """Words kept in a JSON file (as a Spark executor keeps a micro-batch), read where it is dealt."""

    def __init__(self, path: str, driver: int) -> None:
        self.path, self.driver = path, driver

    def read(self) -> list[str]:
        assert os.getpid() != self.driver, "a remote batch is read by an input replica, not by the driver"
        with open(self.path) as file:
            return json.load(file)


class ListStream(StreamSource):
    """Batches of words, one epoch each, replayed from the position asked; records when each was held.

    With ``keep_in``, each batch is handed as two pieces: its first word through Ray's
    object store, the rest as a :class:`FileBatch` in that directory."""

    def __init__(self, batches: list[list[str]], keep_in: str | None = None) -> None:
        self.batches = batches
        self.keep_in = keep_in
        self.handed: dict[int, float] = {}
        self.held_at: dict[int, float] = {}

    def reader(self) -> StreamReader:
        return _ListReader(self)


class _ListReader(StreamReader):
    def __init__(self, source: ListStream) -> None:
        self.source = source

    def read_from(self, position: int) -> Iterator[tuple[int, Any, int]]:
        for batch_id in range(position, len(self.source.batches)):
            self.source.handed[batch_id] = time.monotonic()
            yield batch_id, BlockRefs(self._pieces(batch_id)), batch_id + 1

    def _pieces(self, batch_id: int) -> tuple[Any, ...]:
        words = self.source.batches[batch_id]
        if self.source.keep_in is None:
            return (ray.put(words),)
        path = os.path.join(self.source.keep_in, f"batch-{batch_id}.json")
        if not os.path.exists(path):  # a batch of a file that is gone stays gone
            with open(path, "w") as file:
                json.dump(words[1:], file)
        return ray.put(words[:1]), FileBatch(path, os.getpid())

    def held(self, epoch: int) -> None:
        self.source.held_at[epoch] = time.monotonic()

    def stop(self) -> None:
        pass


def test_a_stream_batch_is_held_while_a_consumer_waits_for_events(ray_session, tmp_path):
    """The feed syncs with the coordinator (a pump) to learn that a snapshot holds its batch.
    A consumer of ``job.results`` waiting for an epoch used to hold the job's lock through
    each of its long polls, so every hold waited for the consumer's poll to end (a tenth of
    a second each by default, and often several in a row). Here the consumer's polls last
    :data:`LONG_POLL` and no epoch completes while the batches are fed (the output also
    waits for input ``other``): each batch must still be held at once."""
    batches = [[f"w{i}", "x", "x"] for i in range(4)]
    source = ListStream(batches)
    flow = rt.Dataflow("held-while-consumed")
    flow.input("lines").concat(flow.input("other")).count_by_key(lambda word: word).output("counts")
    with rt.run(flow, inputs={"lines": source}, parallelism=1, recovery=rt.Recovery(str(tmp_path))) as job:
        job._supervisor.poll_s = LONG_POLL
        got: dict[int, list] = {}
        consumer = threading.Thread(target=lambda: got.update(job.results("counts", timeout=120)), daemon=True)
        consumer.start()
        deadline = time.monotonic() + LONG_POLL / 2
        while len(source.held_at) < len(batches) and time.monotonic() < deadline:
            time.sleep(0.01)
        holds = {batch: round(source.held_at[batch] - source.handed[batch], 2) for batch in source.held_at}
        assert len(holds) == len(batches), f"held within {LONG_POLL / 2:g} s: {holds} (seconds from hand-out)"
        job.close("other")
        consumer.join(timeout=120)
    counted = {epoch: Counter(dict(records)) for epoch, records in got.items() if records}
    assert counted == {epoch: Counter(batch) for epoch, batch in enumerate(batches)}


def test_batches_kept_outside_the_object_store_are_read_by_the_replicas_in_order(ray_session, tmp_path):
    """A stream's pieces may be :class:`RemoteBatch` handles beside object refs (a Spark
    micro-batch's partitions, cached in its executors): each input replica reads its own,
    none is read on the driver, and every batch comes whole, once, in its epoch."""
    batches = [[f"w{i}", "x", f"y{i % 2}"] for i in range(5)]
    kept = tmp_path / "kept"
    kept.mkdir()
    source = ListStream(batches, keep_in=str(kept))
    flow = rt.Dataflow("remote-batches")
    flow.input("lines").count_by_key(lambda word: word).output("counts")
    with rt.run(flow, inputs={"lines": source}, parallelism=2, recovery=rt.Recovery(str(tmp_path / "store"))) as job:
        got = dict(job.results("counts", timeout=120))
    assert {epoch: Counter(dict(records)) for epoch, records in got.items() if records} == {
        epoch: Counter(batch) for epoch, batch in enumerate(batches)}


def test_a_remote_batch_that_cannot_be_read_fails_the_job_naming_the_input_and_the_epoch(ray_session, tmp_path):
    source = ListStream([["a", "b"], ["c", "d"]], keep_in=str(tmp_path))
    (tmp_path / "batch-1.json").mkdir()  # what batch 1's reader opens is a directory
    flow = rt.Dataflow("unreadable-batch")
    flow.input("lines").count_by_key(lambda word: word).output("counts")
    with rt.run(flow, inputs={"lines": source}, parallelism=1, recovery=rt.Recovery(str(tmp_path / "store"))) as job:
        with pytest.raises(SourceError, match=r"input 'lines' replica 0 epoch 1: .*IsADirectoryError.*batch-1\.json"):
            job.wait(timeout=120)


def test_a_stream_restarted_on_a_store_with_nothing_committed_hands_out_only_what_its_consumer_had_not(
        ray_session, tmp_path):
    """A stream's driver that died before any snapshot committed leaves a store with no
    snapshot but with its consumer's record (epochs 0 and 1 acknowledged, written as such a
    driver writes it). ``restore="latest"`` then starts at the very start (the producer runs
    its batches again from the first, as Spark's query does) and hands out epochs 2 and 3
    only: the consumer had 0 and 1. Found by ``tests/sim/test_driver_restart_sim.py``: a
    restart there began afresh and handed them out again."""
    ConsumedRecord(SnapshotStore(str(tmp_path))).write({"counts": 1}, run_first=1, started_from=None)
    batches = [[f"w{i}", "x"] for i in range(4)]
    flow = rt.Dataflow("restarted-with-nothing-committed")
    flow.input("lines").count_by_key(lambda word: word).output("counts")
    with rt.run(flow, inputs={"lines": ListStream(batches)}, parallelism=1, recovery=rt.Recovery(str(tmp_path)),
                restore="latest") as job:
        handed = [(epoch, Counter(dict(records))) for epoch, records in job.results("counts", timeout=120)]
    assert [epoch for epoch, _ in handed if epoch < 2] == [], handed
    assert [(epoch, counts) for epoch, counts in handed if counts] == [(e, Counter(batches[e])) for e in (2, 3)]


class _StalledReader(_ListReader):
    """Hands out its batches, then waits (a producer that stalls) until ``release`` is set."""

    def __init__(self, source: ListStream, release: threading.Event) -> None:
        super().__init__(source)
        self.release = release

    def read_from(self, position: int) -> Iterator[tuple[int, Any, int]]:
        yield from super().read_from(position)
        self.release.wait(timeout=120)

    def describe(self) -> str:
        return "stalled after its last batch"


def test_a_stream_job_that_stalls_says_what_its_feed_and_producer_are_doing(ray_session, tmp_path):
    """A stream job whose epochs stop coming names, in its timeout, the feed's step (here:
    batch 1 held, waiting for the next) and what the producer says of itself."""
    release = threading.Event()
    source = ListStream([["a"], ["b"]])
    source.reader = lambda: _StalledReader(source, release)  # type: ignore[method-assign]
    flow = rt.Dataflow("stalled-stream")
    flow.input("lines").count_by_key(lambda word: word).output("counts")
    with rt.run(flow, inputs={"lines": source}, parallelism=1, recovery=rt.Recovery(str(tmp_path))) as job:
        with pytest.raises(JobTimeout) as stalled:
            for _ in job.results("counts", timeout=3):
                pass
        release.set()
    assert ("stream feeds: {'lines': \"waiting for its producer's batch after 1 (batch 1 is held); its producer: "
            "stalled after its last batch\"}") in str(stalled.value)


class TimedStream(ListStream):
    """A :class:`ListStream` of records ``{"t", "page", "n"}``, which says so (an event-time input checks its column)."""

    def event_time_schema(self) -> tuple[str, pa.Schema]:
        return "a list stream", pa.schema([("t", pa.float64()), ("page", pa.int64()), ("n", pa.int64())])


def clicks(rng: random.Random, batches: int, per_batch: int, step: float) -> list[list[dict]]:
    """``batches`` batches of ``per_batch`` clicks ``{"t", "page", "n"}``: time goes on by up to
    ``step`` seconds a click, and a click's own time is now, up to 3 s back (within ``max_delay``)
    or 4-12 s back (beyond it), each drawn as often."""
    stream, now = [], 1000.0
    for batch_id in range(batches):
        batch = []
        for index in range(per_batch):
            now += rng.uniform(0, step)
            back = rng.choice([0.0, rng.uniform(0, 3), rng.uniform(4, 12)])
            batch.append({"t": round(now - back, 3), "page": rng.randrange(3), "n": batch_id * per_batch + index})
        stream.append(batch)
    return stream


def test_a_stream_with_event_time_windows_exactly_once_across_a_lost_driver_and_a_restore(ray_session, tmp_path):
    """A stream with event time (records ``{"t", "page", "n"}``, out of order within and beyond
    ``max_delay``) into 2-second tumbling counts at parallelism 2. The first job takes 5
    batches, then its producer stalls and the job is cancelled without a savepoint (a driver
    that dies: its replicas' clocks hold records for epochs the watermark has not reached);
    a new job with ``restore="latest"`` goes on from the batch count its snapshot holds
    (batch 5; the replicas' epochs are event time, apart). The epochs each driver was shown,
    joined by epoch (as a sink keyed by epoch keeps them; one shown to both is the same in
    both), give every window once, with a count exactly
    that of the records not late, the late output and ``job.stats()["late"]`` exactly the
    records beyond the bound (``tests/unit/test_clocked_stream.py``'s reference)."""
    from tests.unit.test_clocked_stream import reference

    spec = rt.EventTime("t", granularity=1.0, max_delay=3.0, late_output="late")
    stream = clicks(random.Random(7), batches=10, per_batch=6, step=1.0)
    flow = rt.Dataflow("clocked-stream")
    flow.input("clicks", event_time=spec).window(lambda click: click["page"], rt.Tumbling(2)).count().output("counts")
    release = threading.Event()
    first = TimedStream(stream[:5])
    first.reader = lambda: _StalledReader(first, release)  # type: ignore[method-assign]
    job = rt.run(flow, inputs={"clicks": first}, parallelism=2, recovery=rt.Recovery(str(tmp_path)))
    deadline = time.monotonic() + 60
    while len(first.held_at) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(first.held_at) == 5, first.held_at
    job.cancel()
    release.set()
    shown = {name: job.collect(name) for name in ("counts", "late")}  # what the lost driver was shown
    with rt.run(flow, inputs={"clicks": TimedStream(stream)}, parallelism=2, recovery=rt.Recovery(str(tmp_path)),
                restore="latest") as job:
        job.wait(timeout=120)
        again = {name: job.collect(name) for name in ("counts", "late")}
        stats = job.stats()["late"]["clicks"]
    for name in shown:  # an epoch shown to both drivers (after the last snapshot) is the same: computed the same way
        assert all(Counter(map(repr, shown[name][e])) == Counter(map(repr, again[name][e]))
                   for e in set(shown[name]) & set(again[name])), name
    counts = [record for records in {**shown["counts"], **again["counts"]}.values() for record in records]
    late = sorted(click["n"] for records in {**shown["late"], **again["late"]}.values() for click in records)
    epochs, expected_late = reference([[batch] for batch in stream], 2, spec)
    pages = {click["n"]: click["page"] for batch in stream for click in batch}
    windows = Counter((pages[n], epoch // 2 * 2) for n, epoch in epochs.items() if n not in expected_late)
    assert Counter({(key, start): value for key, start, end, value in counts}) == windows
    assert all(end == start + 2 for _, start, end, _ in counts) and len(counts) == len(windows)
    assert late == sorted(expected_late) and expected_late, "the late records are exactly those beyond the bound"
    assert stats["records"] == len(expected_late)


class _StarvingReader(_StalledReader):
    """Each batch in two parts, dealt so that replica 1 always gets the empty one (part ``i`` of
    batch ``b`` goes to replica ``(b + i) mod 2``), a tenth of a second apart; then it stalls."""

    def read_from(self, position: int) -> Iterator[tuple[int, Any, int]]:
        for item in super().read_from(position):
            time.sleep(0.1)
            yield item

    def _pieces(self, batch_id: int) -> tuple[Any, ...]:
        records, empty = ray.put(self.source.batches[batch_id]), ray.put([])
        return (records, empty) if batch_id % 2 == 0 else (empty, records)


def test_a_stream_replica_given_no_records_goes_idle_and_windows_close_without_it(ray_session, tmp_path):
    """Replica 1 of a stream with event time reads nothing, ever: without idleness it would hold
    the input at epoch 0. With ``idle_timeout=0.3`` the driver finds it idle after 0.3 s and
    releases it, in each next share, to replica 0's watermark: while the producer stalls after
    10 batches (records at seconds 0-99), the 10-second windows up to that watermark (88: the
    one after batch 8) are out; the stream's end closes the rest. Every window once, exact."""
    spec = rt.EventTime("t", granularity=1.0, max_delay=1.0, idle_timeout=0.3)
    stream = [[{"t": 10.0 * b + i, "page": i % 2, "n": 10 * b + i} for i in range(10)] for b in range(10)]
    flow = rt.Dataflow("idle-stream")
    flow.input("clicks", event_time=spec).window(lambda click: click["page"], rt.Tumbling(10)).count().output("counts")
    release = threading.Event()
    source = TimedStream(stream)
    source.reader = lambda: _StarvingReader(source, release)  # type: ignore[method-assign]
    windows: list[tuple] = []
    with rt.run(flow, inputs={"clicks": source}, parallelism=2, recovery=rt.Recovery(str(tmp_path))) as job:
        for _, records in job.results("counts", timeout=30, progress=False):
            windows += records
            if len(windows) == 16:  # [0, 10) .. [70, 80), two pages each, before the stream can end
                break
        release.set()
        job.wait(timeout=60)
        windows += [record for records in job.collect("counts").values() for record in records]
    assert sorted(windows) == sorted((page, start, start + 10, 5) for start in range(0, 100, 10) for page in (0, 1))


class KillingBatch(RemoteBatch):
    """Records that, read the first time (by the replica they are dealt to), SIGKILL process
    ``victim`` first: a replica killed while its peer takes the same batch."""

    def __init__(self, records: list[dict], victim: int, flag: str) -> None:
        self.records, self.victim, self.flag = records, victim, flag

    def read(self) -> list[dict]:
        if not os.path.exists(self.flag):
            open(self.flag, "w").close()
            os.kill(self.victim, signal.SIGKILL)
        return self.records


class _KillingReader(_ListReader):
    """Batch ``kill_at`` in two pieces, the second (dealt to replica 1) a :class:`KillingBatch`
    of input replica 0, once ``victim`` (a one-item list) has its pid."""

    def __init__(self, source: ListStream, kill_at: int, victim: list[int], flag: str) -> None:
        super().__init__(source)
        self.kill_at, self.victim, self.flag = kill_at, victim, flag

    def _pieces(self, batch_id: int) -> tuple[Any, ...]:
        records = self.source.batches[batch_id]
        if batch_id != self.kill_at:
            return (ray.put(records),)
        assert batch_id % 2 == 0, "part i of batch b goes to replica (b + i) mod 2: the killer must be replica 1's"
        half = len(records) // 2
        return ray.put(records[:half]), KillingBatch(records[half:], self.victim[0], self.flag)


@pytest.mark.parametrize("victim_of", [lambda job: f"{job.plan.chain_of('clicks').name}/0", lambda job: "coordinator"],
                         ids=["input-replica-0", "coordinator"])
def test_a_clocked_stream_input_replica_sigkilled_mid_batch_gives_every_window_once_and_every_late_record(
        ray_session, tmp_path, victim_of):
    """A stream with event time (records out of order within and beyond ``max_delay``) into
    2-second tumbling counts with a late output, at parallelism 2. Batch 6 of 12 is dealt in
    two parts, and input replica 1, reading its part, SIGKILLs input replica 0 (both hold
    clocks with records for epochs their watermarks have not reached): batch 6 is never held,
    replica 1 took it, replica 0 may have. The recovery rolls both back to the snapshot that
    holds batch 5, each clock with its replica, and replays batch 6's shares: every window
    once, its count exactly that of the records not late, the late output and
    ``job.stats()["late"]`` exactly the records beyond the bound
    (``tests/unit/test_clocked_stream.py``'s reference). The same with the snapshot
    coordinator SIGKILLed there instead: batch 6's snapshot never commits, and the job goes on
    from the one that holds batch 5 as exactly."""
    from tests.unit.test_clocked_stream import reference

    spec = rt.EventTime("t", granularity=1.0, max_delay=3.0, late_output="late", idle_timeout=None)
    stream = clicks(random.Random(3), batches=12, per_batch=8, step=0.8)
    flow = rt.Dataflow("clocked-stream-kill")
    flow.input("clicks", event_time=spec).window(lambda click: click["page"], rt.Tumbling(2)).count().output("counts")
    source, victim = TimedStream(stream), []
    source.reader = lambda: _KillingReader(source, 6, victim, str(tmp_path / "killed"))  # type: ignore[method-assign]
    with rt.run(flow, parallelism=2, recovery=rt.Recovery(str(tmp_path / "store"))) as job:
        victim.append(job.hosts()[f"{job.name}/{victim_of(job)}"])
        job.feed("clicks", source)
        job.wait(timeout=60)
        counts = [record for records in job.collect("counts").values() for record in records]
        late = sorted(click["n"] for records in job.collect("late").values() for click in records)
        stats = job.stats()
    parts = [[batch] if b != 6 else [batch[:4], batch[4:]] for b, batch in enumerate(stream)]
    epochs, expected_late = reference(parts, 2, spec)
    pages = {click["n"]: click["page"] for batch in stream for click in batch}
    windows = Counter((pages[n], epoch // 2 * 2) for n, epoch in epochs.items() if n not in expected_late)
    assert Counter({(key, start): value for key, start, end, value in counts}) == windows
    assert all(end == start + 2 for _, start, end, _ in counts) and len(counts) == len(windows), "a window twice"
    assert late == sorted(expected_late) and expected_late, "the late records are exactly those beyond the bound"
    assert stats["late"]["clicks"]["records"] == len(expected_late)
    assert stats["recoveries"], "the SIGKILL was not recovered from"
