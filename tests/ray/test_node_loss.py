"""A whole node lost: a two-node local cluster (``ray.cluster_utils.Cluster``) runs a job with
recovery whose replicas are spread over both nodes; the node that holds some of them is
removed while the job runs, and the job finishes with exactly the failure-free output
(counted per output by :mod:`tests.delivery`: nothing lost, duplicated or out of order).

It runs in a child process with a Ray of its own (a cluster cannot join the test
session's Ray). The store is a local directory, which both nodes reach: they are
processes of this machine.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ray

CHILD = r'''
import dataclasses, json, random, sys, tempfile, threading, time
import ray
from ray.cluster_utils import Cluster
from ray.util.state import list_actors
import raytide as rt
from tests.delivery import count_outputs, read_outputs
from tests.sim.scenarios import SCENARIOS

cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 8})
worker = cluster.add_node(num_cpus=4)
ray.init(address=cluster.address, log_to_driver=False)
cluster.wait_for_nodes()
scenario = SCENARIOS["keyed"](random.Random(11), epochs=40)
holder, removed, report = [], threading.Event(), {}

def on_worker(job):
    nodes = {a.pid: a.node_id for a in list_actors(filters=[("state", "=", "ALIVE")], detail=True, limit=10000)}
    return sorted(name for name, pid in job.hosts().items() if nodes.get(pid) == worker.node_id)

def feed(epochs):
    for epoch, records in enumerate(epochs):
        if epoch == len(epochs) // 3:
            while not holder:
                time.sleep(0.01)
            job = holder[0]
            deadline = time.monotonic() + 60
            while job.stats()["snapshots"]["committed"] < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            report["lost"] = on_worker(job)
            cluster.remove_node(worker)
            removed.set()
        time.sleep(0.03)
        yield records

store = tempfile.mkdtemp()
with rt.run(scenario.flow, inputs={n: feed(e) for n, e in scenario.inputs.items()}, parallelism=2, num_cpus=1,
            recovery=rt.Recovery(store, interval=0.1)) as job:
    holder.append(job)
    got = read_outputs(job, sorted(scenario.expected), timeout=240)
    report["recoveries"] = job.stats()["recoveries"]["count"]
counts = count_outputs(scenario.expected, got)
report["delivery"] = {name: dataclasses.asdict(count) for name, count in counts.items()}
report["exact"] = all(count.exact for count in counts.values())
print(json.dumps(report))
ray.shutdown()
cluster.shutdown()
'''


def test_a_lost_node_is_recovered_from_with_exactly_the_failure_free_output(own_ray_env):
    child = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, env=own_ray_env,
                           timeout=600, cwd=str(__import__("pathlib").Path(__file__).parents[2]))
    lines = child.stdout.strip().splitlines()
    assert child.returncode == 0 and lines, child.stderr[-3000:]
    report = json.loads(lines[-1])
    assert report["lost"], "no replica ran on the removed node: the test proved nothing"
    assert report["recoveries"] >= 1 and report["exact"], report
