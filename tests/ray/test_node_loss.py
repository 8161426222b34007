"""A whole node lost: a four-node local cluster (``ray.cluster_utils.Cluster``, three CPUs a
node) runs a job with recovery whose replicas are spread over the nodes (each vertex host
takes a CPU: eight of the twelve); the worker node that holds the most hosts is removed
while the job runs, and the job finishes with exactly the failure-free output (counted
per output by :mod:`tests.delivery`: nothing lost, duplicated or out of order), its
progress through a relay per node and, the fan-in lowered to two, a group's relay per two
nodes (the node removed may hold one). The CPUs
left after the removal must hold the replacements: with two CPUs a node, none were free,
and the recovery waited for hosts Ray could not place.

It runs in a child process with a Ray of its own (a cluster cannot join the test
session's Ray). The store is a local directory, which every node reaches: they are
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
from raytide.physical import relay_tree
from tests.delivery import count_outputs, read_outputs
from tests.sim.scenarios import SCENARIOS

def start_cluster():
    """The head and three worker nodes; a cluster whose node failed to come up is shut down
    and started again (on a loaded machine a raylet can register after the 30 s Ray waits)."""
    for attempt in range(1, 4):
        cluster = Cluster()
        try:
            cluster.add_node(num_cpus=3)
            return cluster, [cluster.add_node(num_cpus=3) for _ in range(3)]
        except Exception as error:
            print(f"the cluster did not start (attempt {attempt}): {error}", file=sys.stderr, flush=True)
            cluster.shutdown()
    raise RuntimeError("a four-node local cluster did not start in three attempts")

relay_tree.RELAY_FANIN = 2  # four nodes: two groups' relays, each taking its other node's relay's calls
cluster, workers = start_cluster()
ray.init(address=cluster.address, log_to_driver=False)
cluster.wait_for_nodes()
scenario = SCENARIOS["keyed"](random.Random(11), epochs=40)
holder, removed, report = [], threading.Event(), {}

def hosts_by_node(job):
    nodes = {a.pid: a.node_id for a in list_actors(filters=[("state", "=", "ALIVE")], detail=True, limit=10000)}
    placed = {}
    for name, pid in job.hosts().items():
        placed.setdefault(nodes.get(pid), []).append(name)
    return placed

def feed(epochs):
    for epoch, records in enumerate(epochs):
        if epoch == len(epochs) // 3:
            while not holder:
                time.sleep(0.01)
            job = holder[0]
            deadline = time.monotonic() + 60
            while job.stats()["snapshots"]["committed"] < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            report["committed_at_removal"] = job.stats()["snapshots"]["committed"]
            placed = hosts_by_node(job)
            report["nodes_used"] = len(placed)
            victim = max(workers, key=lambda node: len(placed.get(node.node_id, [])))
            report["lost"] = sorted(placed.get(victim.node_id, []))
            cluster.remove_node(victim)
            removed.set()
        time.sleep(0.03)
        yield records

store = tempfile.mkdtemp()
with rt.run(scenario.flow, inputs={n: feed(e) for n, e in scenario.inputs.items()}, parallelism=2, num_cpus=1,
            recovery=rt.Recovery(store, interval=0.1)) as job:
    holder.append(job)
    got = read_outputs(job, sorted(scenario.expected), timeout=240)
    stats = job.stats()
    report["recoveries"] = stats["recoveries"]["count"]
    report["relays"] = len(set(job.placement.relays.values()))
    report["progress"] = {key: stats[key] for key in ("progress_calls", "progress_relayed", "progress_relay_calls",
                                                      "progress_relay_upward", "progress_fan_outs")}
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
    assert report["committed_at_removal"] >= 2, f"the node was removed before two snapshots committed: {report}"
    assert report["nodes_used"] >= 3, f"the job's hosts ran on {report['nodes_used']} of the 4 nodes"
    assert report["recoveries"] >= 1 and report["exact"], report
    # On a cluster the progress goes through a relay per node (one node fewer after the removal),
    # each forwarding several replicas' calls in one, and some through their group's relay.
    progress = report["progress"]
    assert report["relays"] >= 2 and progress["progress_relayed"] > progress["progress_relay_calls"] > 0, report
    assert progress["progress_relay_upward"] > 0 and progress["progress_fan_outs"] > 0, progress
