"""Connected components of a collection of edges inserted and deleted (the forgetful label
propagation of ``raytide.graph.changing_components``), in the in-process runtime under
seeded interleavings, against union-find of the edges present after every epoch.

Each epoch's output must be exactly the changes between union-find's labellings before and
after it: a change lost, shown twice, or a stale label kept (a component cut in two that
still carries the label of the other part) fails. Crashes and live rescales of the same
loop run in tests/sim/test_collections_sim.py (its ``graph`` scenario); on real Ray in
tests/ray/test_collections.py.
"""

from __future__ import annotations

import random
from collections import Counter

import raytide as rt
from examples.incremental_components import random_updates
from raytide.graph import connected_components
from raytide.testing import LocalJob
from tests.oracles import component_changes


def trial(seed: int) -> None:
    rng = random.Random(seed)
    nodes = rng.randint(3, 30)
    epochs = random_updates(rng, nodes, rng.randint(1, 2 * nodes), rng.randint(2, 6), rng.choice([0.05, 0.2, 0.5]))
    if seed % 4 == 0:  # an edge twice, and taken away once: still present
        epochs[-1] = epochs[-1] + [epochs[0][0], (epochs[0][0][0], -1)]
    flow = rt.Dataflow("cc")
    connected_components(flow.collection("edges"), name="cc").output("labels")  # type: ignore[union-attr]
    parallelism = rng.randint(1, 3)
    run = LocalJob(flow, {"edges": epochs}, parallelism=parallelism, seed=seed).run()
    assert run.finished and run.failure is None, f"seed {seed}: {run.failure!r}"
    got = {epoch: Counter(dict(changes)) for epoch, changes in run.outputs["labels"].items() if changes}
    assert got == component_changes(epochs), f"seed {seed} (parallelism {parallelism})"


def test_components_under_insertions_and_deletions_equal_union_find_after_every_epoch():
    for seed in range(80):
        trial(seed)
