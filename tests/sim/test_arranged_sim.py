"""A shared arrangement in the in-process runtime, under seeded crashes, live rescales and a
restore at another width, against recomputation from scratch (the harness of
``test_collections_sim``): ``left`` arranged by its key once, read by a join with ``right``,
a join with ``right`` on the other side, a ``count``, a ``reduce``, a ``sum`` and a ``distinct``; each
epoch's changes exact, none twice."""

from __future__ import annotations

import collections
import random
from collections import Counter
from collections.abc import Callable

import raytide as rt
import tests.sim.test_collections_sim as collections_sim
import tests.sim.test_reshard_sim as reshard_sim
from tests.sim.scenarios import SCENARIOS as TIER_SCENARIOS


def shared_flow() -> rt.Dataflow:
    flow = rt.Dataflow("shared")
    by_key = flow.collection("left").arrange_by_key(lambda r: r[0], name="by-key")
    by_key.count().output("count")
    right = flow.collection("right")  # made after the arrangement's vertex was placed: it grows a port
    by_key.join(right, lambda r: r[0]).output("join")
    right.join(by_key, lambda r: r[0]).output("join-flipped")
    by_key.reduce(lambda k, rs: [(k, sum(v for _, v in rs))]).output("sums")
    by_key.sum(lambda r: r[1]).output("linear")
    by_key.distinct().output("distinct")
    return flow


def shared_reference(rng: random.Random, epochs: int = 4) -> tuple[dict, dict]:
    draw = lambda: (rng.randrange(3), rng.randrange(4))  # noqa: E731
    inputs = {"left": collections_sim.churn(rng, draw, epochs), "right": collections_sim.churn(rng, draw, epochs)}

    def per_key(left: Counter, fn: Callable[[object, list], list]) -> Counter:
        groups: dict = collections.defaultdict(list)
        for record in left.elements():
            groups[record[0]].append(record)
        return Counter(out for key, records in groups.items() for out in fn(key, records))

    def joined(first: Counter, second: Counter) -> Counter:
        return Counter({(a[0], (a, b)): n * m for a, n in first.items() for b, m in second.items() if a[0] == b[0]})

    outputs = {
        "join": joined,
        "join-flipped": lambda left, right: joined(right, left),
        "count": lambda left, right: per_key(left, lambda k, rs: [(k, len(rs))]),
        "sums": lambda left, right: per_key(left, lambda k, rs: [(k, sum(v for _, v in rs))]),
        "linear": lambda left, right: per_key(left, lambda k, rs: [(k, sum(v for _, v in rs))]),
        "distinct": lambda left, right: Counter(dict.fromkeys(+left, 1)),
    }
    return inputs, collections_sim.expected_changes(inputs, outputs)


def test_a_shared_arrangement_equals_recomputation_under_crashes_and_live_rescales(store_root, monkeypatch):
    monkeypatch.setitem(collections_sim.SCENARIOS, "shared", (shared_flow, shared_reference, "by-key"))
    seen: Counter = Counter()
    for seed in range(9):
        collections_sim.trial(seed, "shared", store_root, seen, crashes=seed % 3 == 1, rescales=seed % 3 == 2)
    assert seen["recoveries"] >= 1 and seen["rescales"] >= 2, dict(seen)


def test_a_shared_arrangement_restored_at_another_parallelism_keeps_its_trace(store_root, monkeypatch):
    monkeypatch.setitem(collections_sim.SCENARIOS, "shared", (shared_flow, shared_reference, "by-key"))
    monkeypatch.setitem(TIER_SCENARIOS, "shared", collections_sim.as_scenario("shared"))
    restored = 0
    for seed in range(3):
        did_restore, wrong = reshard_sim.trial("shared", seed, str(store_root / str(seed)))
        assert wrong is None, f"seed {seed}: {wrong}"
        restored += did_restore
    assert restored >= 2, restored
