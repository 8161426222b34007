"""Word count: raytide written the natural way against a careful hand-written Ray pipeline.

1,000,000 lines of 10 Zipf-distributed words (vocabulary 50,000), 10 epochs of 100,000
lines, read from a text file. raytide: ``flow.input("lines").flat_map(str.split)
.count_by_key(...)`` fed by a ``TextFileSource`` (read in parallel by the input replicas;
combining before the exchange is done by ``count_by_key``, not by the user). Baseline:
``bench/baselines/wordcount_ray.py`` (parallel byte-range readers, map-side Counter,
shuffle by crc32, reducer actors). Both are timed from nothing running to every epoch's
counts at the driver, actor start-up included, on the same Ray, in the same run, and
their results are checked equal. ``raytide_startup_s`` is the part of raytide's time
spent in ``rt.run`` creating and connecting actors (five fresh worker processes at
parallelism 2: two readers, two mergers, the progress actor), and the second ratio
leaves it out of raytide's time only: the baseline's own start-up (two reducer actors;
its mappers are tasks on Ray's prestarted workers) stays in its time.
"""

from __future__ import annotations

import time
from pathlib import Path

import raytide as rt
from bench.baselines.data import write_zipf_text
from bench.baselines.wordcount_ray import wordcount_ray
from bench.harness import ensure_ray
from raytide.sources import TextFileSource

PARAMS = {"lines": 1_000_000, "epochs": 10, "parallelism": 2}
RATIOS = [
    ("raytide throughput / hand-written throughput", "handwritten_s", "raytide_s"),
    ("raytide after its start-up / hand-written with its own", "handwritten_s", "raytide_after_startup_s"),
]
DATA = Path("/tmp/raytide-bench")


def dataset(lines: int) -> Path:
    path = DATA / f"zipf_{lines}.txt"
    if not path.exists():
        DATA.mkdir(parents=True, exist_ok=True)
        write_zipf_text(path, lines=lines)
    return path


def raytide_wordcount(path: Path, lines: int, epochs: int, parallelism: int) -> tuple[dict, float, float, dict]:
    flow = rt.Dataflow("wordcount")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("counts")
    started = time.perf_counter()
    with rt.run(flow, inputs={"lines": TextFileSource(str(path), lines_per_epoch=lines // epochs)},
                parallelism=parallelism) as job:
        startup = time.perf_counter() - started
        job.wait(timeout=600)
        result = {e: dict(pairs) for e, pairs in job.collect("counts").items()}
        elapsed = time.perf_counter() - started
        stats = job.stats()
    return result, elapsed, startup, stats


def measure(lines: int, epochs: int, parallelism: int) -> dict[str, float]:
    ensure_ray()
    path = dataset(lines)
    ours, raytide_s, startup_s, stats = raytide_wordcount(path, lines, epochs, parallelism)
    started = time.perf_counter()
    theirs = wordcount_ray(path, n_epochs=epochs)
    handwritten_s = time.perf_counter() - started
    assert ours == {e: c for e, c in theirs.items() if c}, "raytide and the baseline disagree"
    return {
        "raytide_s": raytide_s,
        "raytide_startup_s": startup_s,
        "raytide_after_startup_s": raytide_s - startup_s,
        "handwritten_s": handwritten_s,
        "raytide_lines_per_s": lines / raytide_s,
        "progress_batches_per_data_message": stats["progress_batches"] / stats["data_messages"],
    }
