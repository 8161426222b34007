"""A compute-bound job: Mandelbrot rows (one image row per record, 1000x1000) through ``map``.

raytide: the driver pushes the row indices in small batches to a 2-replica input whose
``map`` computes each row with the same kernel as the baseline (fused in the input's
actor); baseline: ``bench/baselines/mandelbrot_ray.py``, a pool of 2 actors with dynamic
dispatch. Both timed from nothing running to the full image at the driver, in the same
run, and checked equal. ``raytide_startup_s`` is the time ``rt.run`` took to start three
fresh worker processes (two replicas and the progress actor; the baseline starts two),
left out of raytide's time only in the second ratio.
"""

from __future__ import annotations

import time

import numpy as np

import raytide as rt
from bench.baselines.mandelbrot_ray import mandelbrot_ray, mandelbrot_row
from bench.harness import ensure_ray

PARAMS = {"size": 1000, "parallelism": 2, "rows_per_batch": 10}
RATIOS = [
    ("raytide throughput / hand-written throughput", "handwritten_s", "raytide_s"),
    ("raytide after its start-up / hand-written with its own", "handwritten_s", "raytide_after_startup_s"),
]


def raytide_mandelbrot(size: int, parallelism: int, rows_per_batch: int) -> tuple[np.ndarray, float]:
    """The image, and the seconds ``rt.run`` took to start the actors."""
    flow = rt.Dataflow("mandelbrot")
    flow.input("rows").map(lambda y: (y, mandelbrot_row(y, size, size))).output("image")
    image = np.empty((size, size), dtype=np.int32)
    started = time.perf_counter()
    with rt.run(flow, parallelism=parallelism, batch_size=rows_per_batch) as job:
        startup = time.perf_counter() - started
        job.push("rows", list(range(size)))
        job.close("rows")
        job.wait(timeout=600)
        for y, row in job.collect("image")[0]:
            image[y] = row
    return image, startup


def measure(size: int, parallelism: int, rows_per_batch: int) -> dict[str, float]:
    ensure_ray()
    started = time.perf_counter()
    ours, startup_s = raytide_mandelbrot(size, parallelism, rows_per_batch)
    raytide_s = time.perf_counter() - started
    started = time.perf_counter()
    theirs = mandelbrot_ray(size, size, n_actors=parallelism, rows_per_call=rows_per_batch)
    handwritten_s = time.perf_counter() - started
    assert np.array_equal(ours, theirs), "raytide and the baseline disagree"
    return {"raytide_s": raytide_s, "raytide_startup_s": startup_s, "raytide_after_startup_s": raytide_s - startup_s,
            "handwritten_s": handwritten_s, "raytide_rows_per_s": size / raytide_s}
