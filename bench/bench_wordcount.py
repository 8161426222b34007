"""Word count: raytide written the natural way against a careful hand-written Ray pipeline.

1,000,000 lines of 10 Zipf-distributed words (vocabulary 50,000), 10 epochs of 100,000
lines, read from a text file. raytide: ``flow.input("lines").flat_map(str.split)
.count_by_key(...)`` fed by a ``TextFileSource`` (read in parallel by the input replicas;
combining before the exchange is done by ``count_by_key``, not by the user). Baseline:
``bench/baselines/wordcount_ray.py`` (parallel byte-range readers, map-side Counter,
shuffle by crc32, reducer actors). Both run twice per repetition, on the same Ray, and
every result is checked against the other side's:

* start-up included (``raytide_s``, ``handwritten_s``): from nothing running to every
  epoch's counts at the driver. raytide starts five fresh worker processes at
  parallelism 2 (two readers, two mergers, the progress actor; ``raytide_startup_s`` is
  the part spent in ``rt.run``); the baseline starts two reducer actors while its mapper
  tasks count lines on Ray's prestarted workers.
* actors up before the clock (``raytide_running_s``, ``handwritten_running_s``): every
  actor of both is created and answering first, as in the components benchmark, so the
  clock measures the throughput of the running pipeline from the first read to the last
  count at the driver.

raytide counts the words of ``flat_map(str.split).count_by_key(lambda w: w)`` with
Arrow's kernels (:mod:`raytide.core.split_text`), the baseline with ``str.split`` and a
``Counter``. So the same baseline with its mappers counting with those kernels is timed
too (``handwritten_arrow_running_s``, actors up): the ratio against it is what raytide's
runtime costs, with the work itself equal.
"""

from __future__ import annotations

import time
from pathlib import Path

import ray

import raytide as rt
from bench.baselines.data import write_zipf_text
from bench.baselines.wordcount_ray import start_reducers, wordcount_ray
from bench.harness import SETTLE_S, ensure_ray
from raytide.sources import TextFileSource

PARAMS = {"lines": 1_000_000, "epochs": 10, "parallelism": 2}
RATIOS = [
    ("raytide throughput / hand-written throughput, actors up before the clock", "handwritten_running_s", "raytide_running_s"),
    ("raytide throughput / hand-written throughput, start-up included", "handwritten_s", "raytide_s"),
    ("raytide throughput / hand-written with Arrow's kernels, actors up before the clock", "handwritten_arrow_running_s",
     "raytide_running_s"),
]
DATA = Path("/tmp/raytide-bench")


def dataset(lines: int) -> Path:
    path = DATA / f"zipf_{lines}.txt"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        write_zipf_text(path, lines=lines)
    return path


def raytide_wordcount(path: Path, lines: int, epochs: int, parallelism: int,
                      warm: bool) -> tuple[dict, float, float, dict]:
    """``(counts per epoch, seconds, seconds in rt.run, job stats)``; ``warm``: actors up before the clock."""
    flow = rt.Dataflow("wordcount")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("counts")
    source = TextFileSource(str(path), lines_per_epoch=lines // epochs)
    started = time.perf_counter()
    with rt.run(flow, inputs=None if warm else {"lines": source}, parallelism=parallelism) as job:
        startup = time.perf_counter() - started
        if warm:
            job.wait_ready()
            started = time.perf_counter()
            job.feed("lines", source)
        job.wait(timeout=600)
        result = {e: dict(pairs) for e, pairs in job.collect("counts").items()}
        elapsed = time.perf_counter() - started
        stats = job.stats()
    return result, elapsed, startup, stats


def handwritten_wordcount(path: Path, epochs: int, warm: bool, counter: str = "python") -> tuple[dict, float]:
    """``(counts per epoch, seconds)`` of the baseline; ``warm``: reducers up before the clock;
    ``counter``: how its mappers count (see :func:`bench.baselines.wordcount_ray.wordcount_ray`)."""
    reducers = start_reducers(2, 2) if warm else None
    try:
        if reducers:
            ray.get([r.result.remote() for r in reducers])
        started = time.perf_counter()
        result = wordcount_ray(path, n_epochs=epochs, reducers=reducers, counter=counter)
        return {e: c for e, c in result.items() if c}, time.perf_counter() - started
    finally:
        for reducer in reducers or ():
            ray.kill(reducer)


def measure(lines: int, epochs: int, parallelism: int) -> dict[str, float]:
    ensure_ray()
    path = dataset(lines)
    ours, raytide_s, startup_s, _ = raytide_wordcount(path, lines, epochs, parallelism, warm=False)
    time.sleep(SETTLE_S)
    ours_running, raytide_running_s, _, stats = raytide_wordcount(path, lines, epochs, parallelism, warm=True)
    time.sleep(SETTLE_S)
    theirs, handwritten_s = handwritten_wordcount(path, epochs, warm=False)
    time.sleep(SETTLE_S)
    theirs_running, handwritten_running_s = handwritten_wordcount(path, epochs, warm=True)
    time.sleep(SETTLE_S)
    theirs_arrow, handwritten_arrow_running_s = handwritten_wordcount(path, epochs, warm=True, counter="arrow")
    assert ours == ours_running == theirs == theirs_running == theirs_arrow, "raytide and the baseline disagree"
    return {
        "raytide_s": raytide_s,
        "raytide_startup_s": startup_s,
        "handwritten_s": handwritten_s,
        "raytide_running_s": raytide_running_s,
        "handwritten_running_s": handwritten_running_s,
        "handwritten_arrow_running_s": handwritten_arrow_running_s,
        "raytide_running_lines_per_s": lines / raytide_running_s,
        "progress_batches_per_data_message": stats["progress_batches"] / stats["data_messages"],
    }
