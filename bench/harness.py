"""Runs a benchmark several times; reports medians, spreads and ratios measured in the same run.

A benchmark is a module ``bench/bench_<name>.py`` with

* ``measure(**params) -> dict[str, float]``: one run, returning named metrics;
* ``RATIOS``: optional ``[(label, numerator, denominator)]`` computed from the medians,
  e.g. raytide's time over a hand-written baseline measured in the same process, and run
  by run (both sides of a run measured minutes apart at most): the report gives the
  median and the spread of those per-run ratios too, which a machine that changes speed
  between runs moves less than the ratio of the medians;
* ``PARAMS``: optional default keyword arguments for ``measure``;
* ``REPEAT``: optional number of runs when none is asked for (default 5).

Results go to ``bench/results/<name>.json`` so that runs can be compared over time.
"""

from __future__ import annotations

import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).parent / "results"
#: Pause between runs (not timed): actors a baseline killed at its end exit asynchronously,
#: and their last CPU use must not land in the next run's clock.
SETTLE_S = 1.0
#: Where the start-up benchmarks' children keep the bytecode of the modules they compile
#: (:func:`bytecode_env`): outside the checkout, one directory per user.
PYCACHE = Path(tempfile.gettempdir()) / f"raytide-bench-pycache-{os.getuid()}"
ROOT = Path(__file__).resolve().parent.parent


def bytecode_env(cached: bool) -> dict[str, str]:
    """The environment of a start-up benchmark's child process (and so of its Ray's workers).

    ``cached``: with compiled bytecode for every module, as a ``pip install`` leaves it and
    as Python writes it at a first import by default: ``PYTHONDONTWRITEBYTECODE`` dropped,
    the bytecode kept under :data:`PYCACHE` (``PYTHONPYCACHEPREFIX``) and written now, before
    any clock. Otherwise the environment as it is: with ``PYTHONDONTWRITEBYTECODE=1`` and no
    ``__pycache__`` in a checkout, every process compiles raytide's modules from source
    again (about 55 ms of CPU in a vertex host, 2026-11-29), which an installed raytide does not.
    """
    env = dict(os.environ)
    if not cached:
        return env
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPYCACHEPREFIX"] = str(PYCACHE)
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(ROOT / "raytide"), str(ROOT / "bench")],
                   env=env, check=True, capture_output=True)
    return env


def ensure_ray() -> None:
    """A local Ray with the 2 CPUs every benchmark assumes, unless one is running already."""
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)


def summarize(runs: list[dict[str, float]]) -> dict[str, dict[str, float]]:
    """Median, min and max of every metric over the runs."""
    metrics = runs[0].keys()
    return {
        m: {"median": statistics.median(r[m] for r in runs), "min": min(r[m] for r in runs), "max": max(r[m] for r in runs)}
        for m in metrics
    }


def ratios(summary: dict[str, dict[str, float]], pairs: list[tuple[str, str, str]]) -> dict[str, float]:
    """``numerator / denominator`` of the medians for every ``(label, numerator, denominator)``
    whose metrics were measured (a benchmark may run only some of its parts)."""
    return {label: summary[num]["median"] / summary[den]["median"] for label, num, den in pairs
            if num in summary and den in summary}


def paired_ratios(runs: list[dict[str, float]], pairs: list[tuple[str, str, str]]) -> dict[str, dict[str, float]]:
    """Median, min and max over the runs of each run's ``numerator / denominator``."""
    out = {}
    for label, num, den in pairs:
        per_run = [r[num] / r[den] for r in runs if num in r and den in r and r[den]]
        if per_run:
            out[label] = {"median": statistics.median(per_run), "min": min(per_run), "max": max(per_run)}
    return out


def run(name: str, repeat: int | None, params: dict[str, Any] | None = None, out: Callable[[str], None] = print) -> dict:
    """Run benchmark ``name`` ``repeat`` times (None: its ``REPEAT``, else 5); print and save its report."""
    module = importlib.import_module(f"bench.bench_{name}")
    repeat = repeat if repeat is not None else getattr(module, "REPEAT", 5)
    kwargs = {**getattr(module, "PARAMS", {}), **(params or {})}
    runs = []
    for i in range(repeat):
        started = time.perf_counter()
        runs.append(module.measure(**kwargs))
        out(f"  run {i + 1}/{repeat} done in {time.perf_counter() - started:.1f} s")
        if i + 1 < repeat:
            time.sleep(SETTLE_S)
    summary = summarize(runs)
    report = {
        "benchmark": name,
        "params": kwargs,
        "repeat": repeat,
        "machine": {"python": platform.python_version(), "processor": platform.machine(), "node": platform.node()},
        "when": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "metrics": summary,
        "ratios": ratios(summary, getattr(module, "RATIOS", [])),
        "paired_ratios": paired_ratios(runs, getattr(module, "RATIOS", [])),
        "runs": runs,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(report, indent=2))
    out(format_report(report))
    return report


def format_report(report: dict) -> str:
    """A human-readable table of the medians and ratios."""
    lines = [f"{report['benchmark']}: median of {report['repeat']} runs"]
    width = max(len(m) for m in report["metrics"])
    for metric, s in report["metrics"].items():
        lines.append(f"  {metric:<{width}}  {s['median']:>14,.4g}   (min {s['min']:,.4g}, max {s['max']:,.4g})")
    paired = report.get("paired_ratios", {})
    for label, value in report["ratios"].items():
        per_run = paired.get(label)
        spread = (f" (run by run: median {per_run['median']:.3f}, {per_run['min']:.3f}-{per_run['max']:.3f})"
                  if per_run else "")
        lines.append(f"  ratio {label}: {value:.3f}{spread}")
    return "\n".join(lines)
