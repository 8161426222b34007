"""Kill-anywhere trials on a real Ray: ``python -m bench chaos --trials 100``.

Each trial runs one of three jobs with recovery (a snapshot every 0.1 s): the keyed
word count of the sim scenarios (``stateful_map`` across epochs), the halving loop with a
notified vertex inside it, and a join; 30 epochs fed from the driver at a pace. At a
random moment once at least two snapshots are committed, it kills a random one of the
job's actors -- a replica, the progress actor or the snapshot coordinator -- by SIGKILL
of its process (half the time) or ``ray.kill``, and compares the job's output with the
failure-free reference. It reports how many trials gave exactly that output (the bar:
all of them) and, per trial, the time from the kill to the end of the recovery.
"""

from __future__ import annotations

import os
import random
import signal
import statistics
import tempfile
import threading
import time
from collections import Counter
from typing import Any

import ray

import raytide as rt
from bench.harness import ensure_ray
from tests.sim.scenarios import SCENARIOS

PARAMS = {"trials": 100, "seed": 0}
REPEAT = 1  # one run of ``trials`` trials
JOBS = ("keyed", "loop", "join")
EPOCHS = 30
PACE = 0.02


def trial(number: int, rng: random.Random, root: str) -> dict[str, Any]:
    """One trial; what was killed, whether the output was exact, the recovery time."""
    name = JOBS[number % len(JOBS)]
    scenario = SCENARIOS[name](random.Random(number), epochs=EPOCHS)
    holder: list[rt.Job] = []
    started = threading.Event()
    kill_after = rng.uniform(0.0, 0.5)
    outcome: dict[str, Any] = {"job": name}

    def kill(job: rt.Job) -> None:
        hosts = job.hosts()
        victim = rng.choice(sorted(hosts))
        outcome["victim"] = victim.split("/", 1)[1]
        outcome["killed_at"] = time.time()
        if rng.random() < 0.5 or victim.endswith(("/progress", "/coordinator")):
            os.kill(hosts[victim], signal.SIGKILL)
            outcome["how"] = "SIGKILL"
        else:
            key = next(k for k in job.placement.actors if f"{job.name}/{k.chain}/{k.replica}" == victim)
            ray.kill(job.placement.actors[key])
            outcome["how"] = "ray.kill"

    def feed(epochs: list[list[Any]], killer: bool) -> Any:
        for epoch, records in enumerate(epochs):
            if killer and epoch == EPOCHS // 3:
                started.wait(60)
                deadline = time.monotonic() + 60
                while holder[0].stats()["snapshots"]["committed"] < 2 and time.monotonic() < deadline:
                    time.sleep(0.02)
                time.sleep(kill_after)
                kill(holder[0])
            time.sleep(PACE)
            yield records

    first = sorted(scenario.inputs)[0]
    inputs = {input_name: feed(epochs, input_name == first) for input_name, epochs in scenario.inputs.items()}
    recovery = rt.Recovery(f"{root}/{number}", interval=0.1)
    try:
        with rt.run(scenario.flow, inputs=inputs, parallelism=2, recovery=recovery) as job:
            holder.append(job)
            started.set()
            job.wait(timeout=300)
            got = {output: {e: Counter(r) for e, r in job.collect(output).items() if r} for output in scenario.expected}
            records = job.stats()["recoveries"]["recoveries"]
    except rt.RaytideError as error:
        return {**outcome, "exact": False, "error": repr(error)}
    outcome["exact"] = got == scenario.expected
    outcome["recoveries"] = len(records)
    if records and "killed_at" in outcome:
        outcome["recovery_s"] = records[-1]["finished_at"] - outcome["killed_at"]
    return outcome


def measure(trials: int, seed: int) -> dict[str, float]:
    ensure_ray()
    rng = random.Random(seed)
    outcomes = []
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as root:
        for number in range(trials):
            outcome = trial(number, rng, root)
            outcomes.append(outcome)
            print(f"  trial {number + 1}/{trials}: {outcome}", flush=True)
    times = [o["recovery_s"] for o in outcomes if "recovery_s" in o]
    return {"trials": float(trials), "exact": float(sum(o["exact"] for o in outcomes)),
            "recovered": float(len(times)),
            "recovery_p50_s": statistics.median(times) if times else float("nan"),
            "recovery_max_s": max(times) if times else float("nan")}
