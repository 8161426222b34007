"""Does an open live view slow a job? The same keyed job, with and without its page open in a
headless Chromium, alternating, in one process.

Run with ``python -m bench ui --repeat 3``. Each run drives one job of small keyed epochs
(``map -> count_by_key``, parallelism 2) twice for ``seconds`` each: once with nobody
watching, once with ``job.ui()``'s page open in Debian's Chromium (``/usr/bin/chromium``,
driven by Playwright, polling once a second as a user's browser would) and the driver's
watcher reading the job at 1 Hz. The order alternates run by run. Each epoch is pushed and
awaited (``job.results``) before the next, so ``epochs_per_s`` is the job's epoch rate and
``latency_ms_p50`` / ``_p99`` its epoch latency. The page's cost is the ratio watched / not
watched, run by run (``RATIOS``).
"""

from __future__ import annotations

import statistics
import threading
import time
import urllib.request
from collections.abc import Callable
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import raytide as rt
from bench.harness import ensure_ray

PARAMS = {"seconds": 20.0, "parallelism": 2, "watcher": "chromium"}
REPEAT = 3
RATIOS = [
    ("epochs/s with the page open / without", "watched_epochs_per_s", "alone_epochs_per_s"),
    ("epoch latency p50 with the page open / without", "watched_latency_ms_p50", "alone_latency_ms_p50"),
    ("epoch latency p99 with the page open / without", "watched_latency_ms_p99", "alone_latency_ms_p99"),
]
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
_runs = 0


def keyed() -> rt.Dataflow:
    flow = rt.Dataflow("ui-cost")
    flow.input("numbers").map(lambda x: x * 3, name="triple").count_by_key(lambda x: x % 16, name="count").output("out")
    return flow


def epochs(job: rt.Job, seconds: float, first: int) -> tuple[int, list[float]]:
    """Push and await epochs for ``seconds``; the next epoch number and each epoch's latency in ms."""
    results, latencies, epoch = job.results("out", timeout=120, progress=False), [], first
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        start = time.perf_counter()
        job.push("numbers", list(range(64)), epoch)
        job.advance("numbers", epoch + 1)
        next(results)
        latencies.append((time.perf_counter() - start) * 1000)
        epoch += 1
    return epoch, latencies


def figures(prefix: str, latencies: list[float], seconds: float) -> dict[str, float]:
    ordered = sorted(latencies)
    return {f"{prefix}_epochs_per_s": len(latencies) / seconds,
            f"{prefix}_latency_ms_p50": statistics.median(ordered),
            f"{prefix}_latency_ms_p99": ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]}


@contextmanager
def polled(url: str) -> Any:
    """A thread reading the page's data (``/api/job``) once a second while the block runs."""
    stop = threading.Event()

    def poll() -> None:
        while not stop.wait(1.0):
            with urllib.request.urlopen(url.rstrip("/") + "/api/job", timeout=10) as reply:
                reply.read()

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=15)


def browsed(playwright: Any) -> Callable[[str], AbstractContextManager[Any]]:
    """The page open in Chromium while the block runs."""

    @contextmanager
    def opened(url: str) -> Any:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        browser.new_page().goto(url)
        try:
            yield
        finally:
            browser.close()

    return opened


def measure(seconds: float, parallelism: int, watcher: str) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    global _runs
    ensure_ray()
    watched_first, _runs = _runs % 2 == 0, _runs + 1
    out: dict[str, float] = {}
    with rt.run(keyed(), parallelism=parallelism) as job, sync_playwright() as playwright:
        watching = polled if watcher == "api" else browsed(playwright)
        job.wait_ready(timeout=120)
        epoch, _ = epochs(job, 2.0, 0)  # warm up
        for watched in (watched_first, not watched_first):
            if watched:
                with watching(job.ui()):
                    epoch, latencies = epochs(job, seconds, epoch)
            else:
                epoch, latencies = epochs(job, seconds, epoch)
            out.update(figures("watched" if watched else "alone", latencies, seconds))
        job.close("numbers")
    return out
