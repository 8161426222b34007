"""The wired spanning forest's vertex logic (``raytide.graph.forest_components.ForestLabels``)
against union-find after every epoch: random insert/delete epochs, node ids of every int64
range (their own codes, spread, negative, near ``2**62``: coded by rank), the state saved
and restored or handed to another replica between epochs, and bad input."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

import raytide as rt
from examples.incremental_components import random_updates
from raytide.differential import DIFF
from raytide.errors import RecordError
from raytide.graph.forest_components import ForestLabels
from raytide.testing import LocalJob
from tests.oracles import component_changes

#: Ways of numbering the nodes 0..n-1: ids of one's own, spread, negative, huge, in their order or not.
NUMBERINGS = [lambda n: n, lambda n: n * 50_000_000, lambda n: n - 20, lambda n: 2**62 - 7 * n, lambda n: (n * 7919) % 104_729]


def columns(updates: list) -> dict[str, np.ndarray]:
    return {"src": np.array([u for (u, _), _ in updates], dtype=np.int64),
            "dst": np.array([v for (_, v), _ in updates], dtype=np.int64),
            DIFF: np.array([d for _, d in updates], dtype=np.int64)}


def moved(core: ForestLabels, rng: random.Random) -> ForestLabels:
    """The state as a replica finds it after a snapshot restored, or a hand-over (take, put)."""
    fresh = ForestLabels()
    if rng.random() < 0.5:
        fresh.put(core.rows())
    else:
        fresh.put(core.take(lambda key: True))
        assert core.rows() is None and core.take(lambda key: True) is None
    return fresh


def trial(seed: int) -> None:
    rng = random.Random(seed)
    number = NUMBERINGS[seed % len(NUMBERINGS)]
    nodes = rng.randint(3, 40)
    epochs = random_updates(rng, nodes, rng.randint(1, 2 * nodes), rng.randint(2, 7), rng.choice([0.05, 0.2, 0.5]))
    if seed % 3 == 0:  # an edge twice and taken away once; a self-loop; a node new in a later epoch
        epochs[-1] = epochs[-1] + [epochs[0][0], (epochs[0][0][0], -1), ((1, 1), 1), ((nodes + 3, 0), 1)]
    epochs = [[((number(u), number(v)), diff) for (u, v), diff in updates] for updates in epochs]
    expected = component_changes(epochs)
    core = ForestLabels()
    for epoch, updates in enumerate(epochs):
        if rng.random() < 0.3:
            core = moved(core, rng)
        saved = core.rows()
        changes = core.apply(columns(updates))
        got = Counter() if changes is None else Counter(
            {(n, label): d for n, label, d in zip(changes["node"].tolist(), changes["label"].tolist(), changes[DIFF].tolist())})
        assert got == expected.get(epoch, Counter()), f"seed {seed}, epoch {epoch}"
        if saved is not None and rng.random() < 0.3:  # what was saved before the epoch is untouched by it
            again = ForestLabels()
            again.put(saved)
            redone = again.apply(columns(updates))
            assert (redone is None) == (changes is None)
            assert changes is None or all(np.array_equal(changes[k], redone[k]) for k in changes)  # type: ignore[index]


@pytest.mark.parametrize("seed", range(40))
def test_changes_equal_union_find_after_every_epoch_whatever_the_ids_and_the_moves(seed: int) -> None:
    trial(seed)


def test_a_snapshot_is_not_changed_by_later_epochs() -> None:
    """The state saved before an epoch gives that epoch's changes again when restored after it."""
    core = ForestLabels()
    core.apply(columns([((0, 1), 1), ((1, 2), 1), ((2, 3), 1)]))
    saved = core.rows()
    first = core.apply(columns([((1, 2), -1), ((0, 1), -1)]))
    again = ForestLabels()
    again.put(saved)
    second = again.apply(columns([((1, 2), -1), ((0, 1), -1)]))
    assert first is not None and second is not None
    assert {k: v.tolist() for k, v in first.items()} == {k: v.tolist() for k, v in second.items()}


def test_edges_of_ids_that_are_not_integers_are_refused_naming_the_vertex_and_the_column() -> None:
    with pytest.raises(RecordError, match="column 'src' holds float64 values such as 0.5"):
        ForestLabels().apply({"src": np.array([0.5]), "dst": np.array([1]), DIFF: np.array([1])})
    flow = rt.Dataflow("cc")
    rt.graph.connected_components(flow.collection("edges"), name="cc").output("labels")
    run = LocalJob(flow, {"edges": [[(("a", "b"), 1)]]}, parallelism=2).run()
    assert run.failure is not None and "vertex 'cc'" in str(run.failure) and "column 'src'" in str(run.failure)
