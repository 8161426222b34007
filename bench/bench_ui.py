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

Where the page's cost goes, while it is open: Chromium's CPU seconds per minute over its whole
process tree (psutil; ``chromium_cpu_s_per_min``, and per process type: the browser, the
renderer that runs the page, the GPU process that composites it, utilities such as the
network service), the renderer's own accounting through the DevTools protocol's
``Performance.getMetrics`` (milliseconds per second in tasks, script, layout, style
recalculation; layouts per second), and the bytes the page fetched per second (its resource
timings). The driver's own CPU (its feeding, the watcher and the server) per minute, with the
page open and without: ``watched_driver_cpu_s_per_min``, ``alone_driver_cpu_s_per_min``.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
import urllib.request
from contextlib import contextmanager
from typing import Any

import psutil

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


def _chromium_cpu() -> dict[str, float]:
    """CPU seconds so far of each Chromium process under this one, summed by process type."""
    per_type: dict[str, float] = {}
    for process in psutil.Process(os.getpid()).children(recursive=True):
        try:
            if "chrom" not in process.name():
                continue
            kind = next((a[7:] for a in process.cmdline() if a.startswith("--type=")), "browser")
            times = process.cpu_times()
        except psutil.Error:  # ended meanwhile
            continue
        per_type[kind] = per_type.get(kind, 0.0) + times.user + times.system
    return per_type


RENDERER_METRICS = {"TaskDuration": "task", "ScriptDuration": "script", "LayoutDuration": "layout",
                    "RecalcStyleDuration": "style"}


def _renderer(session: Any) -> dict[str, float]:
    return {m["name"]: m["value"] for m in session.send("Performance.getMetrics")["metrics"]}


def _fetched_bytes(page: Any) -> float:
    return float(page.evaluate("performance.getEntriesByType('resource').reduce((n, e) => n + e.encodedBodySize, 0)"))


class Browser:
    """The page open in Chromium while the block runs, and what Chromium spent on it meanwhile."""

    def __init__(self, playwright: Any) -> None:
        self.playwright = playwright
        self.figures: dict[str, float] = {}

    @contextmanager
    def __call__(self, url: str) -> Any:
        browser = self.playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        session = page.context.new_cdp_session(page)
        session.send("Performance.enable")
        page.goto(url)
        page.evaluate("performance.setResourceTimingBufferSize(100000)")
        page.wait_for_selector("svg.dataflow g.vertex", timeout=30_000)
        cpu, metrics, fetched, started = _chromium_cpu(), _renderer(session), _fetched_bytes(page), time.monotonic()
        try:
            yield
            self._measured(_chromium_cpu(), cpu, _renderer(session), metrics, _fetched_bytes(page) - fetched,
                           time.monotonic() - started)
        finally:
            browser.close()

    def _measured(self, cpu: dict[str, float], cpu0: dict[str, float], metrics: dict[str, float],
                  metrics0: dict[str, float], fetched: float, seconds: float) -> None:
        per_min = {kind: (cpu[kind] - cpu0.get(kind, 0.0)) * 60 / seconds for kind in cpu}
        self.figures = {"chromium_cpu_s_per_min": sum(per_min.values()),
                        **{f"chromium_{kind}_cpu_s_per_min": value for kind, value in per_min.items()},
                        **{f"renderer_{short}_ms_per_s": (metrics[name] - metrics0[name]) * 1000 / seconds
                           for name, short in RENDERER_METRICS.items()},
                        "renderer_layouts_per_s": (metrics["LayoutCount"] - metrics0["LayoutCount"]) / seconds,
                        "page_kb_per_s": fetched / 1024 / seconds}


def _driver_cpu() -> float:
    times = psutil.Process(os.getpid()).cpu_times()
    return times.user + times.system


def measure(seconds: float, parallelism: int, watcher: str) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    global _runs
    ensure_ray()
    watched_first, _runs = _runs % 2 == 0, _runs + 1
    out: dict[str, float] = {}
    with rt.run(keyed(), parallelism=parallelism) as job, sync_playwright() as playwright:
        watching = polled if watcher == "api" else Browser(playwright)
        job.wait_ready(timeout=120)
        epoch, _ = epochs(job, 2.0, 0)  # warm up
        for watched in (watched_first, not watched_first):
            cpu = _driver_cpu()
            if watched:
                with watching(job.ui()):
                    cpu = _driver_cpu()
                    epoch, latencies = epochs(job, seconds, epoch)
            else:
                epoch, latencies = epochs(job, seconds, epoch)
            prefix = "watched" if watched else "alone"
            out.update(figures(prefix, latencies, seconds), **{f"{prefix}_driver_cpu_s_per_min": (_driver_cpu() - cpu) * 60 / seconds})
        job.close("numbers")
    return {**out, **getattr(watching, "figures", {})}
