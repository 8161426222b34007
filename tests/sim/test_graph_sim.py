"""Connected components through the graph layer in the in-process runtime, under seeded
interleavings and crashes (a replica, the progress core, the coordinator; before, during
and after snapshots), against union-find.

The output of an epoch is exactly one ``(node, label)`` row per node (each node's changes
are folded where it lives), so a lost, duplicated or mixed-up record shows: the rows are
compared as a multiset with union-find's labelling.
"""

from __future__ import annotations

import collections
import random
import warnings

from examples.connected_components import union_find
from raytide.actors.local import LocalJob, LocalRecovery
from raytide.snapshots.store import SnapshotStore
from tests.sim.chaos import MODES, Chaos

import raytide as rt
from raytide.graph import connected_components, edge_columns

TRIALS = 48


def components_flow() -> rt.Dataflow:
    flow = rt.Dataflow("components")
    connected_components(flow.input("edges").map_batches(edge_columns), name="cc").output("labels")
    return flow


def rows(outputs: dict) -> collections.Counter:
    return collections.Counter(tuple(int(x) for x in row) for row in outputs.get("labels", {}).get(0, []))


def test_components_under_crashes_equal_union_find_exactly_once(tmp_path):
    seen: collections.Counter = collections.Counter()
    recoveries = 0
    for seed in range(TRIALS):
        rng = random.Random(seed)
        nodes = rng.randint(5, 40)
        edges = [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(rng.randint(1, 50))]
        batches = [edges[i::3] for i in range(3)]
        expected = collections.Counter(union_find(edges).items())
        parallelism, chaining = rng.randint(1, 3), rng.random() < 0.8
        options = {"interval": rng.choice([3, 10, 30]), "retain": rng.randint(1, 3), "max_restarts": 4,
                   "detection": rng.randint(0, 6)}

        def job(directory: str) -> LocalJob:
            recovery = LocalRecovery(SnapshotStore(directory), **options)
            return LocalJob(components_flow(), {"edges": [[b for batch in batches for b in batch]]}, parallelism,
                            seed, chaining, recovery=recovery)

        calm = job(str(tmp_path / f"{seed}-calm")).run()
        assert calm.finished and rows(calm.outputs) == expected, f"seed {seed}, no crash"
        chaotic = job(str(tmp_path / str(seed)))
        chaos = Chaos(chaotic, rng, MODES[seed % len(MODES)], seen, calm.steps)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            run = chaotic.run(max_steps=100_000, after_step=chaos.after_step)
        assert run.finished and run.failure is None, f"seed {seed}: {run.failure!r}"
        assert rows(run.outputs) == expected, f"seed {seed}: {rows(run.outputs)} != {expected}"
        recoveries += len(run.recoveries)
    assert recoveries >= TRIALS // 2, recoveries  # the crashes struck while the job ran
    assert seen["crash of a replica"] >= 5 and seen["crash after a committed snapshot"] >= 5, dict(seen)
