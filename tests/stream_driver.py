"""A driver program fed by a Spark Structured Streaming query, to be SIGKILLed and restarted:
shared by ``tests/ray/test_stream_driver_restart.py`` (the two moments that matter) and
``bench/bench_stream_driver_kills.py`` (random moments, many trials).

The program (:data:`DRIVER`, run as ``python -c DRIVER <root> <files> <how>``) counts the
words of the files under ``<root>/in`` per micro-batch (one file each), appends every epoch
its ``job.results`` consumer is handed to ``<root>/consumed.txt`` (fsynced: a consumer's
side effect) and writes it to a Parquet sink under ``<root>/parquet``; it stops once every
file has been counted. ``<how>``, comma-separated: ``start`` or ``restore``
(``restore="latest"``), and optionally ``held:<n>`` or ``offsets:<n>``: SIGKILL itself when
batch ``n`` is held by a snapshot but before Spark commits it, or when Spark has planned
batch ``n`` but before the batch reaches raytide; or ``executor:<n>``: SIGKILL the process
of the Spark executor (RayDP's executor actor) that caches batch ``n``'s Arrow partitions
once Spark has computed and cached them, before the batch is handed to the job, and print
``killed Spark executor ...`` once Ray has seen it die (what the job does then:
``tests/ray/test_stream_driver_restart.py``). A driver that finished may be followed by
another program in the same process (:func:`chained`); each connects to Ray and starts Spark
only if that is not done yet.
"""

from __future__ import annotations

import ast
import os
import textwrap
from collections import Counter
from pathlib import Path

import pyarrow.dataset as ds

LINES = 30

DRIVER = textwrap.dedent("""
    import os, re, signal, sys, time
    import ray
    import raytide as rt
    from raytide.integrations.parquet import ParquetSink
    from raytide.integrations.spark import start_spark, from_spark_stream, stream
    from raytide.integrations.spark.stream import SparkStreamReader

    def kill_executor(name, batch):  # SIGKILL the executor actor's process; back once Ray has seen it die
        from ray._private.state import actors
        actor = ray.get_actor(name)._actor_id.hex()  # the actor the input replicas would look up
        pid = actors(actor)["Pid"]
        os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 60
        while actors(actor)["State"] == "ALIVE" and actors(actor)["Pid"] == pid and time.monotonic() < deadline:
            time.sleep(0.05)
        print(f"killed Spark executor {name!r} (pid {pid}) at micro-batch {batch}: {actors(actor)['State']}", flush=True)

    def cache_then_kill(frame, what, cache=stream.cache_partitions):
        cached = cache(frame, what)
        batch = int(what.split()[1])  # "micro-batch <n> of <the query>"
        if batch in executor_kills:
            for name in sorted({partition.executor for partition in cached.partitions}):
                kill_executor(name, batch)
        return cached

    root, files, how = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    executor_kills = set()
    for kill in [item for item in how if ":" in item]:  # die at that moment of batch n, as a crash would
        moment, n = kill.split(":")
        die = lambda: os.kill(os.getpid(), signal.SIGKILL)
        if moment == "held":
            held = SparkStreamReader.held
            SparkStreamReader.held = lambda self, epoch: die() if epoch == int(n) else held(self, epoch)
        elif moment == "offsets":
            on_batch = SparkStreamReader._on_batch
            SparkStreamReader._on_batch = lambda self, frame, i: die() if i == int(n) else on_batch(self, frame, i)
        else:  # "executor": batch n computed and cached in Spark, its executor killed before the replicas read it
            assert moment == "executor", kill
            executor_kills.add(int(n))
            stream.cache_partitions = cache_then_kill
    counted = set()
    if os.path.exists(f"{root}/consumed.txt"):  # what the consumer had from the run before
        counted = {tag for line in open(f"{root}/consumed.txt") for tag in re.findall(r"'(f[0-9]+)'", line)}
    if len(counted) == files:  # the run before was done
        print("finished", flush=True)
        sys.exit(0)
    ray.init(log_to_driver=False, ignore_reinit_error=True)  # connected already by a program before it (chained)
    spark = start_spark("stream-driver")
    frame = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(f"{root}/in")
    flow = rt.Dataflow("stream-driver")
    flow.input("lines").flat_map(lambda row: row["value"].split()).count_by_key(lambda w: w).output("counts")
    source = from_spark_stream(frame, f"{root}/checkpoint", processing_time="0.2 seconds")
    options = {"restore": "latest"} if "restore" in how else {}
    sink = ParquetSink(f"{root}/parquet", "counts")
    with rt.run(flow, {"lines": source}, parallelism=2, recovery=rt.Recovery(f"{root}/store"), **options) as job:
        with open(f"{root}/consumed.txt", "a") as consumed:
            for epoch, records in job.results("counts", timeout=150):
                if records:  # the sink first: an epoch in the log is in the sink too
                    sink.write(epoch, records)
                consumed.write(f"{epoch} {sorted(records)!r}\\n")
                consumed.flush()
                os.fsync(consumed.fileno())
                counted |= {word for word, _ in records if word.startswith("f")}
                if len(counted) == files:
                    break
        job.stop()
    print("finished", flush=True)
""")


def land_files(root: Path, files: int) -> None:
    """``files`` text files under ``root/in``: lines ``w<j % 4> f<i>``, file ``i`` tagged ``f<i>``."""
    (root / "in").mkdir()
    for index in range(files):
        (root / "in" / f"part-{index:04d}.txt").write_text("".join(f"w{j % 4} f{index}\n" for j in range(LINES)))


def file_counts(index: int) -> Counter:
    """The ``(word, count)`` records of an epoch that read file ``index`` alone."""
    return Counter({**{(f"w{k}", LINES // 4 + (k < LINES % 4)): 1 for k in range(4)}, (f"f{index}", LINES): 1})


def consumer_saw(consumed: list[tuple[int, list]], kills: int) -> dict[int, list]:
    """Per epoch, the records the consumer saw (``consumed``: every epoch it was handed, in
    order). Each epoch comes after every earlier one, or again right after itself (the one
    in its hands when a driver was killed, which the next hands out first), at most once per
    driver killed, and every copy with the same records."""
    by_epoch: dict[int, list] = {}
    repeated = []
    for position, (epoch, records) in enumerate(consumed):
        if epoch in by_epoch:
            before = consumed[position - 1][0]
            assert before == epoch, f"epoch {epoch} came again after epoch {before}: {[e for e, _ in consumed]}"
            assert Counter(records) == Counter(by_epoch[epoch]), \
                f"epoch {epoch} differs the second time: {by_epoch[epoch]} then {records}"
            repeated.append(epoch)
        else:
            assert not by_epoch or epoch > max(by_epoch), f"epoch {epoch} came after a later one"
            by_epoch[epoch] = records
    assert len(repeated) <= kills, f"epochs the consumer saw twice: {repeated} (only the one in its hands may be)"
    return by_epoch


def check_exactly_once(root: Path, files: int, kills: int = 1) -> None:
    """Every file counted once, alone in its epoch, in the Parquet sink; the consumer saw
    every epoch, and at most one twice per driver killed (the one in its hands), the same
    both times (:func:`consumer_saw`)."""
    consumed = [(int(epoch), ast.literal_eval(records))
                for epoch, records in (line.split(" ", 1) for line in (root / "consumed.txt").read_text().splitlines())]
    by_epoch = consumer_saw(consumed, kills)
    tags = {epoch: [w for w, _ in records if w.startswith("f")] for epoch, records in by_epoch.items()}
    assert sorted(t for ts in tags.values() for t in ts) == sorted(f"f{i}" for i in range(files)), \
        f"files lost or counted twice: {tags}"
    for epoch, records in by_epoch.items():
        if tags[epoch]:
            assert Counter(records) == file_counts(int(tags[epoch][0][1:])), f"epoch {epoch}: {records}"
    written = ds.dataset(os.fspath(root / "parquet"), partitioning="hive").to_table().to_pylist()
    in_files: dict[int, Counter] = {}
    for row in written:
        in_files.setdefault(row["epoch"], Counter())[(row["_1"], row["_2"])] += 1
    assert in_files == {epoch: Counter(records) for epoch, records in by_epoch.items() if records}


def chained(*runs: tuple[str, list[str]]) -> str:
    """One program that runs each ``(program, argv)`` of ``runs`` in turn in this process, as
    ``python -c program *argv`` would, and prints ``chained: done <i>`` after the ``i``-th
    returns (a program's ``sys.exit`` ends the process). The programs after the first use the
    first's Ray connection and Spark, which saves a driver's start (a Spark start is most of
    the 35 s a driver process takes on 2 busy cores): run a program that finishes, then one
    that is killed, in one process."""
    steps = [f"sys.argv = {['-c', *argv]!r}\nexec(compile({program!r}, '<driver {index}>', 'exec'), {{'__name__': '__main__'}})\n"
             f"print('chained: done {index}', flush=True)\n" for index, (program, argv) in enumerate(runs)]
    return "import sys\n" + "".join(steps)


#: Event time for :data:`EVENT_DRIVER`: seconds per epoch, bound on out-of-orderness, epochs per window.
MAX_DELAY, WINDOW = 3.0, 4

EVENT_DRIVER = textwrap.dedent("""
    import ast, json, os, signal, sys
    import ray
    import raytide as rt
    from raytide.integrations.spark import start_spark, from_spark_stream
    from raytide.integrations.spark.stream import SparkStreamReader

    root, windows, how = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")
    for kill in [item for item in how if item.startswith("held:")]:  # batch n held by a snapshot, not committed by Spark
        n = int(kill.split(":")[1])
        held = SparkStreamReader.held
        SparkStreamReader.held = lambda self, epoch: os.kill(os.getpid(), signal.SIGKILL) if epoch == n else held(self, epoch)
    seen = set()  # the windows (page, start) the consumers had
    if os.path.exists(f"{root}/consumed.txt"):
        seen = {w[:2] for line in open(f"{root}/consumed.txt") for w in ast.literal_eval(line.split(" ", 1)[1])}
    ray.init(log_to_driver=False, ignore_reinit_error=True)  # connected already by a program before it (chained)
    spark = start_spark("stream-event-time")
    lines = spark.readStream.format("text").option("maxFilesPerTrigger", 1).load(f"{root}/in")
    clicks = lines.selectExpr("cast(split(value, ' ')[0] as double) as t", "cast(split(value, ' ')[1] as int) as page")
    flow = rt.Dataflow("stream-event-time")
    spec = rt.EventTime("t", granularity=1.0, max_delay=%(delay)r, idle_timeout=None)  # judged as the reference does
    flow.input("clicks", event_time=spec).window(lambda row: row["page"], rt.Tumbling(%(window)d)).count().output("counts")
    source = from_spark_stream(clicks, f"{root}/checkpoint", processing_time="0.2 seconds", event_time="t")
    options = {"restore": "latest"} if "restore" in how else {}
    with rt.run(flow, {"clicks": source}, parallelism=2, recovery=rt.Recovery(f"{root}/store"), **options) as job:
        with open(f"{root}/consumed.txt", "a") as consumed:
            for epoch, records in job.results("counts", timeout=150):
                consumed.write(f"{epoch} {sorted(records)!r}\\n")
                consumed.flush()
                os.fsync(consumed.fileno())
                seen |= {w[:2] for w in records}
                if len(seen) == windows:
                    break
        print("late", json.dumps(job.stats()["late"].get("clicks", {})), flush=True)
        job.stop()
    print("finished", flush=True)
""") % {"delay": MAX_DELAY, "window": WINDOW}


def land_clicks(root: Path, files: int, seed: int = 3) -> list[list[tuple[float, int]]]:
    """``files`` text files of clicks ``"<t> <page>"`` under ``root/in`` (modified one second
    apart, so Spark reads them in order, one per micro-batch), times rising with some out of
    order within ``MAX_DELAY`` and some beyond; then two files of one click far ahead (one per
    input replica: every earlier window closes). Returns each file's clicks, the last two included."""
    import random

    rng = random.Random(seed)
    (root / "in").mkdir()
    now, landed = 1_000_000.0, []
    for _ in range(files):
        clicks = []
        for _ in range(8):
            now += rng.uniform(0, 1.2)
            clicks.append((round(now - rng.choice([0.0, rng.uniform(0, MAX_DELAY), rng.uniform(MAX_DELAY + 1, 30)]), 3),
                           rng.randrange(3)))
        landed.append(clicks)
    landed += [[(now + 10_000, 0)], [(now + 10_000, 0)]]
    for index, clicks in enumerate(landed):
        path = root / "in" / f"part-{index:04d}.txt"
        path.write_text("".join(f"{t} {page}\n" for t, page in clicks))
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))
    return landed
