"""The MPR thesis's unbalanced workloads (chapter 7) as raytide jobs, for the autoscaler.

* **Mandelbrot rows**: each record is a row of the image; computing it costs as many
  iterations as its points take to escape, so rows through the set's middle cost far
  more than rows at the edge. The output per row is its total iteration count.
* **Primes by ranges**: each record is the start of a range of numbers; counting the
  primes in it by trial division costs more the higher the range.

Both are CPU-bound pure Python, so a replica keeps one core busy, and more replicas go
faster until the cores run out: what the autoscaler has to find.

    python -m examples.unbalanced --rows 400 --goal 60
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import raytide as rt

WIDTH = 400
HEIGHT = 240
MAX_ITERATIONS = 400
RANGE = 2_000


def mandelbrot_row(y: int, width: int = WIDTH, height: int = HEIGHT, limit: int = MAX_ITERATIONS) -> tuple[int, int]:
    """``(y, iterations)``: the escape iterations of every point of row ``y``, summed."""
    imaginary = -1.2 + 2.4 * (y % height) / height
    total = 0
    for x in range(width):
        c = complex(-2.1 + 3.0 * x / width, imaginary)
        z, iterations = 0j, 0
        while iterations < limit and abs(z) <= 2.0:
            z = z * z + c
            iterations += 1
        total += iterations
    return y, total


def primes_in(start: int, size: int = RANGE) -> tuple[int, int]:
    """``(start, count)``: how many primes lie in ``[start, start + size)``, by trial division."""
    def prime(n: int) -> bool:
        return n > 1 and all(n % d for d in range(2, math.isqrt(n) + 1))

    return start, sum(1 for n in range(start, start + size) if prime(n))


def mandelbrot_flow() -> rt.Dataflow:
    """Input ``rows`` (row numbers), a vertex ``mandelbrot`` computing each, output ``out``."""
    flow = rt.Dataflow("mandelbrot")
    flow.input("rows").map(mandelbrot_row, name="mandelbrot").output("out")
    return flow


def primes_flow() -> rt.Dataflow:
    """Input ``ranges`` (range starts), a vertex ``primes`` counting each, output ``out``."""
    flow = rt.Dataflow("primes")
    flow.input("ranges").map(primes_in, name="primes").output("out")
    return flow


def row_epochs(rows: int, per_epoch: int = 8) -> Iterator[list[int]]:
    """Row numbers ``0 .. rows - 1`` (the image again after ``HEIGHT``), ``per_epoch`` an epoch."""
    numbers = iter(range(rows))
    while chunk := list(itertools.islice(numbers, per_epoch)):
        yield chunk


def range_epochs(ranges: int, per_epoch: int = 4, size: int = RANGE, cycle: int = 200) -> Iterator[list[int]]:
    """``ranges`` range starts ``0, size, 2 size, ...`` (back to 0 after ``cycle`` ranges, as
    the Mandelbrot rows come back after an image), ``per_epoch`` an epoch."""
    starts = (size * (i % cycle) for i in range(ranges))
    while chunk := list(itertools.islice(starts, per_epoch)):
        yield chunk


def plot_timeline(ax: Any, timeline: list[dict[str, Any]], vertex: str, goal: float | None = None) -> None:
    """Throughput (left axis) and replicas (right axis) of ``vertex`` over the autoscaler's
    rounds (``job.stats()["autoscaler"]``), each rescale marked where it was decided, like
    the thesis's figures 7.1-7.4."""
    start = timeline[0]["at"] - timeline[0]["window_s"]
    seconds = [entry["at"] - start for entry in timeline]
    ax.plot(seconds, [entry["throughput"].get(vertex, 0.0) for entry in timeline], "o-", color="tab:blue",
            label="throughput")
    if goal is not None:
        ax.axhline(goal, color="tab:blue", linestyle=":", label="goal")
    ax.set_xlabel("seconds")
    ax.set_ylabel("records / s", color="tab:blue")
    replicas = ax.twinx()
    replicas.step(seconds, [entry["parallelism"].get(vertex, 0) for entry in timeline], where="post",
                  color="tab:orange", label="replicas")
    replicas.set_ylabel("replicas", color="tab:orange")
    replicas.set_ylim(0, max(entry["parallelism"].get(vertex, 0) for entry in timeline) + 1)
    for at, entry in zip(seconds, timeline):
        if entry["changes"] and "pause_s" in (entry["rescale"] or {}):  # made, not only decided
            ax.axvline(at, color="grey", linestyle="--")
            ax.annotate(f"{vertex} -> {entry['changes'].get(vertex, '')}", (at, 0.02), xycoords=ax.get_xaxis_transform(),
                        xytext=(3, 0), textcoords="offset points", fontsize=8, rotation=90)
    ax.set_title(vertex)


def main(argv: Sequence[str] | None = None) -> int:
    """Compute ``--rows`` Mandelbrot rows with the rate autoscaler aiming at ``--goal`` rows a second."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=400)
    parser.add_argument("--goal", type=float, default=60.0)
    parser.add_argument("--store", default="/tmp/raytide-unbalanced")
    args = parser.parse_args(argv)
    autoscale = rt.Autoscale(policy="rate", rate=args.goal, interval=1.0, cooldown=2.0)
    with rt.run(mandelbrot_flow(), {"rows": row_epochs(args.rows)}, parallelism=1,
                recovery=rt.Recovery(args.store, interval=None), autoscale=autoscale) as job:
        job.wait(timeout=600)
        for entry in job.stats()["autoscaler"]:
            changes = entry["changes"]
            print(f"{entry['parallelism']} {entry['throughput']} {changes or ''}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
