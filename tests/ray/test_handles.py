"""What a replica's process holds on a real Ray across rescales and recoveries (issue 74):
handles only to the actors it calls, whatever the job went through.

A keyed job (inputs -> a keyed ``stateful_map`` that checks each key's numbers follow on)
is rescaled twice and loses a replica to SIGKILL twice while records flow; after each round
every replica's process is asked what it holds (:meth:`Host.census <raytide.actors.hosts.Host.census>`).
A replica may hold handles to its own host, the progress actor, the snapshot coordinator and
the replicas it sends to (:func:`~raytide.engine.outbox.receivers`): an input's replicas
the keyed vertex's, the keyed vertex's none. Before, the driver gave every replica every
host of its job at each connect, restore and adoption. Nor does the driver keep a dead
host's handle: it gives the host back to its pool at once, which forgets it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray

import raytide as rt
from raytide.actors.hosts import unleased
from raytide.driver.placement import PROGRESS
from raytide.engine.outbox import receivers
from raytide.physical.protocol import ReplicaKey
from tests.ray.jobs import next_in_sequence, until

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240),
              pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning")]

KEYS = 6
#: Entries a replica's reference table may hold beyond its windows of calls in flight.
SLACK_REFERENCES = 8


def _epochs(stop: threading.Event) -> Iterator[list[tuple[int, int]]]:
    """Each key's next number per epoch, until ``stop``."""
    epoch = 0
    while not stop.is_set():
        yield [(key, epoch) for key in range(KEYS)]
        epoch += 1
        time.sleep(0.05)


def _id(handle: Any) -> str:
    return handle._actor_id.hex()


def _allowed(job: rt.Job, key: ReplicaKey) -> set[str]:
    """The actors replica ``key`` may hold handles to: its host, the progress actor, the coordinator, its receivers."""
    placement = job.placement
    assert placement.coordinator_lease is not None
    return ({_id(placement.actors[key]), _id(placement.leases[PROGRESS].handle), _id(placement.coordinator_lease.handle)}
            | {_id(placement.actors[peer]) for peer in receivers(job.plan, key)})


def _check_holdings(job: rt.Job, max_inflight: int) -> None:
    """Every replica holds handles only to the actors it may call, and refs only for its calls in flight."""
    for key, actor in job.placement.actors.items():
        census = ray.get(unleased(actor).census.remote(), timeout=60)
        allowed = _allowed(job, key)
        assert set(census["actors"]) <= allowed, (key, len(census["actors"]), len(allowed))
        calls = max_inflight * len(receivers(job.plan, key))
        assert census["references"] <= calls + SLACK_REFERENCES, (key, census)


def _kill_a_keyed_replica(job: rt.Job, results: Iterator[Any], timeout: float = 60.0) -> str:
    """SIGKILL a replica of the keyed vertex and read on until the job has recovered (the
    driver notices the death while it waits for output); returns the dead host's actor id."""
    recovered = job.stats()["recoveries"]["count"] + 1
    victim = min(key for key in job.placement.actors if key.chain != "records")
    dead = _id(job.placement.actors[victim])
    os.kill(job.hosts()[job.placement.host_name(victim)], signal.SIGKILL)
    deadline = next_look = time.monotonic()
    deadline += timeout
    while True:
        next(results)
        now = time.monotonic()
        if now >= next_look:  # job.stats() asks every replica: not at every epoch
            if job.stats()["recoveries"]["count"] >= recovered:
                return dead
            assert now < deadline, f"the job did not recover from a SIGKILL within {timeout:.0f} s"
            next_look = now + 0.5


def _wait_until_forgotten(job: rt.Job, dead: str, timeout: float = 30.0) -> None:
    """The driver keeps no handle of the dead host: neither the job's leases nor the pool
    (which forgets it once its reset fails, on its housekeeping thread)."""
    placement = job.placement
    assert dead not in {_id(lease.handle) for lease in placement.leases.values()}
    until(lambda: dead not in {_id(handle) for handle in list(placement.pool.handles.values())},
          f"the pool forgetting the dead host {dead}", timeout, every=0.2)


def test_a_replica_holds_handles_only_to_the_actors_it_calls_after_rescales_and_recoveries(ray_session, tmp_path):
    flow = rt.Dataflow("handles")
    flow.input("records").stateful_map(lambda r: r[0], next_in_sequence, name="check").output("out")
    stop = threading.Event()
    recovery = rt.Recovery(str(tmp_path / "store"), interval=0.1, max_restarts=10)
    max_inflight = 4
    with rt.run(flow, {"records": _epochs(stop)}, parallelism=2, recovery=recovery, max_inflight=max_inflight) as job:
        results = iter(job.results("out", timeout=180))
        for width in (3, 2):
            job.rescale({"check": width}, timeout=60)
            for _ in range(10):
                next(results)
            dead = _kill_a_keyed_replica(job, results)
            for _ in range(10):
                next(results)
            _check_holdings(job, max_inflight)
            _wait_until_forgotten(job, dead)
        assert job.stats()["recoveries"]["count"] == 2
        stop.set()
        job.cancel()
