"""Collections in the in-process runtime, under seeded interleavings, crashes and live rescales,
against recomputation from scratch: after each epoch, every output's accumulated changes are
the operator applied to the inputs accumulated so far, and each epoch's changes are exactly
the difference from the epoch before (so a change shown twice, or lost, shows).

The dataflows: keyed operators over two changing tables (``count``, ``distinct``, a
``reduce``, a ``join`` across epochs), the join and sums by column name (vectorised), and
``iterate`` with deletions (connected components against union-find, hop distances against
BFS, weighted directed distances against Dijkstra).
"""

from __future__ import annotations

import collections
import functools
import heapq
import math
import random
import warnings
from collections import Counter
from collections.abc import Callable

import pytest

import raytide as rt
import tests.sim.test_reshard_sim as reshard_sim
from examples.connected_components import union_find
from raytide.graph import connected_components, pagerank, shortest_paths
from raytide.rescale.widths import width_groups
from raytide.snapshots.store import SnapshotStore
from raytide.testing.local import LocalJob, LocalRecovery
from tests.sim.chaos import MODES, Chaos
from tests.sim.scenarios import SCENARIOS as TIER_SCENARIOS
from tests.sim.scenarios import Scenario

Contents = Counter
Updates = list[list[tuple[object, int]]]


def churn(rng: random.Random, draw: Callable[[], object], epochs: int, most: int = 6) -> Updates:
    """Random epochs of insertions and deletions (of records present, so no count goes negative)."""
    present: Counter = Counter()
    out = []
    for _ in range(epochs):
        updates = []
        for _ in range(rng.randint(0, most)):
            if +present and rng.random() < 0.4:
                record = rng.choice(sorted(present.elements(), key=repr))
                present[record] -= 1
                updates.append((record, -1))
            else:
                record = draw()
                present[record] += 1
                updates.append((record, 1))
        out.append(updates)
    return out


def expected_changes(inputs: dict[str, Updates], outputs: dict[str, Callable[..., Contents]]) -> dict[str, dict]:
    """Per output, per epoch, the consolidated changes from the contents after the epoch before."""
    epochs = max(len(updates) for updates in inputs.values())
    contents = {name: Counter() for name in inputs}
    before = {name: Counter() for name in outputs}
    expected: dict[str, dict] = {name: {} for name in outputs}
    for epoch in range(epochs):
        for name, updates in inputs.items():
            for record, diff in updates[epoch] if epoch < len(updates) else ():
                contents[name][record] += diff
        for name, compute in outputs.items():
            after = compute(*(+contents[input_name] for input_name in inputs))
            change = Counter(after)
            change.subtract(before[name])
            change = Counter({record: diff for record, diff in change.items() if diff})
            if change:
                expected[name][epoch] = change
            before[name] = after
    return expected


def got_changes(outputs: dict[str, dict[int, list]]) -> dict[str, dict]:
    out: dict[str, dict] = {}
    for name, epochs in outputs.items():
        per_epoch: dict[int, Counter] = {}
        for epoch, changes in epochs.items():
            counted: Counter = Counter()
            for record, diff in changes:
                assert record not in counted, f"{name} epoch {epoch}: {record!r} twice in consolidated changes"
                counted[record] += diff
            if counted:
                per_epoch[epoch] = counted
        out[name] = per_epoch
    return out


def tables_flow() -> rt.Dataflow:
    flow = rt.Dataflow("tables")
    left, right = flow.collection("left"), flow.collection("right")
    left.count(lambda r: r[0], name="counting").output("count")
    left.map(lambda r: r[1], name="values").distinct(name="distinct-values").output("distinct")
    left.reduce(lambda r: r[0], lambda k, rs: [(k, sum(v for _, v in rs))], name="summing").output("sums")
    left.sum(lambda r: r[0], lambda r: r[1], name="linear-summing").output("linear")  # the same, linear
    left.join(right, lambda r: r[0], name="joining").output("join")
    return flow


def tables_reference(rng: random.Random, epochs: int = 4) -> tuple[dict[str, Updates], dict[str, dict]]:
    draw = lambda: (rng.randrange(3), rng.randrange(4))  # noqa: E731
    inputs = {"left": churn(rng, draw, epochs), "right": churn(rng, draw, epochs)}

    def per_key(left: Counter, fn: Callable[[object, list], list]) -> Counter:
        groups: dict = collections.defaultdict(list)
        for record in left.elements():
            groups[record[0]].append(record)
        return Counter(out for key, records in groups.items() for out in fn(key, records))

    outputs = {
        "count": lambda left, right: per_key(left, lambda k, rs: [(k, len(rs))]),
        "distinct": lambda left, right: Counter({r[1]: 1 for r in left}),
        "sums": lambda left, right: per_key(left, lambda k, rs: [(k, sum(v for _, v in rs))]),
        "linear": lambda left, right: per_key(left, lambda k, rs: [(k, sum(v for _, v in rs))]),
        "join": lambda left, right: Counter({(a[0], (a, b)): n * m for a, n in left.items() for b, m in right.items()
                                             if a[0] == b[0]}),
    }
    return inputs, expected_changes(inputs, outputs)


def columns_flow() -> rt.Dataflow:
    """The join, the sums, the count and the distinct by column name (vectorised), the sums also
    over the join's output; a second join of the left by its key reads the first's arrangement
    of it, from the right (one vertex, an output each)."""
    flow = rt.Dataflow("columns")
    left, right = flow.collection("left").with_columns("k", "v"), flow.collection("right").with_columns("k", "w")
    joined = left.join(right, "k", name="joining-columns")
    joined.output("join")
    right.join(left, "k").output("join-back")
    joined.sum("w", "v", name="summing-joined").output("sums")
    left.sum("k", "v", name="summing-columns").output("linear")
    left.count("k", name="counting-columns").output("count")
    left.distinct(name="distinct-columns").output("distinct")
    return flow


def columns_reference(rng: random.Random, epochs: int = 4) -> tuple[dict[str, Updates], dict[str, dict]]:
    draw = lambda: (rng.randrange(3), rng.randrange(4))  # noqa: E731
    inputs = {"left": churn(rng, draw, epochs), "right": churn(rng, draw, epochs)}

    def joined(left: Counter, right: Counter) -> Counter:
        return Counter({(a[0], a[1], b[1]): n * m for a, n in left.items() for b, m in right.items() if a[0] == b[0]})

    def sums(records: Counter, key: int, value: int) -> Counter:
        totals: dict = collections.defaultdict(int)
        for record, copies in records.items():
            totals[record[key]] += record[value] * copies
        return Counter({(k, total): 1 for k, total in totals.items()})

    def counts(records: Counter) -> Counter:
        per_key: Counter = Counter()
        for record, copies in records.items():
            per_key[record[0]] += copies
        return Counter({(k, n): 1 for k, n in per_key.items()})

    outputs = {"join": joined, "join-back": lambda left, right: Counter({(k, w, v): n for (k, v, w), n in
                                                                       joined(left, right).items()}),
               "sums": lambda left, right: sums(joined(left, right), 2, 1),
               "linear": lambda left, right: sums(left, 0, 1), "count": lambda left, right: counts(left),
               "distinct": lambda left, right: Counter(dict.fromkeys(+left, 1))}
    return inputs, expected_changes(inputs, outputs)


def graph_flow() -> rt.Dataflow:
    flow = rt.Dataflow("graph")
    edges = flow.collection("edges")
    connected_components(edges, name="cc").output("labels")  # type: ignore[union-attr]
    shortest_paths(edges, 0, directed=False, name="bfs").output("hops")  # type: ignore[union-attr]
    return flow


def hops_from(source: int, edges: list[tuple[int, int]]) -> dict[int, int]:
    neighbours: dict = collections.defaultdict(set)
    for u, v in edges:
        neighbours[u].add(v)
        neighbours[v].add(u)
    if source not in neighbours:
        return {}
    hops, frontier = {source: 0}, [source]
    while frontier:
        frontier = [n for node in frontier for n in neighbours[node] if n not in hops and not hops.update({n: hops[node] + 1})]
    return hops


def graph_reference(rng: random.Random, epochs: int = 4) -> tuple[dict[str, Updates], dict[str, dict]]:
    nodes = rng.randint(4, 10)
    inputs = {"edges": churn(rng, lambda: (rng.randrange(nodes), rng.randrange(nodes)), epochs, most=10)}
    outputs = {
        "labels": lambda edges: Counter(union_find(list(edges.elements())).items()),
        "hops": lambda edges: Counter(hops_from(0, list(edges.elements())).items()),
    }
    return inputs, expected_changes(inputs, outputs)


def paths_flow() -> rt.Dataflow:
    flow = rt.Dataflow("paths")
    shortest_paths(flow.collection("arcs"), 0, directed=True, name="sp").output("distances")  # type: ignore[union-attr]
    return flow


def dijkstra_from(source: int, arcs: Counter) -> dict[int, int]:
    """Distances from ``source`` along directed weighted arcs ``(u, v, weight)``; none if no arc leaves it."""
    out: dict = collections.defaultdict(list)
    for u, v, weight in arcs:
        out[u].append((v, weight))
    if source not in out:
        return {}
    done: dict[int, int] = {}
    queue = [(0, source)]
    while queue:
        distance, node = heapq.heappop(queue)
        if node not in done:
            done[node] = distance
            for head, weight in out[node]:
                heapq.heappush(queue, (distance + weight, head))
    return done


def paths_reference(rng: random.Random, epochs: int = 4) -> tuple[dict[str, Updates], dict[str, dict]]:
    nodes = rng.randint(4, 9)

    def arc() -> tuple[int, int, int]:
        return rng.randrange(nodes), rng.randrange(nodes), rng.randint(1, 4)

    inputs = {"arcs": churn(rng, arc, epochs, most=10)}
    return inputs, expected_changes(inputs, {"distances": lambda arcs: Counter(dijkstra_from(0, arcs).items())})


def pagerank_flow() -> rt.Dataflow:
    flow = rt.Dataflow("ranks")
    pagerank(flow.collection("edges"), iterations=4, name="pr").output("ranks")  # type: ignore[union-attr]
    return flow


def pagerank_of(edges: Counter, iterations: int = 4, damping: float = 0.85) -> dict:
    """Unnormalised PageRank by its definition (each copy of an edge counts), sums exactly rounded."""
    degree = Counter()
    for (u, _), copies in edges.items():
        degree[u] += copies
    rank = {node: 1.0 for edge in edges for node in edge}
    for _ in range(iterations):
        shares: dict = collections.defaultdict(list)
        for (u, v), copies in edges.items():
            shares[v] += [rank[u] / degree[u]] * copies
        rank = {node: (1 - damping) + damping * math.fsum(shares[node]) for node in rank}
    return rank


def pagerank_reference(rng: random.Random, epochs: int = 4) -> tuple[dict[str, Updates], dict[str, dict]]:
    nodes = rng.randint(3, 8)
    inputs = {"edges": churn(rng, lambda: (rng.randrange(nodes), rng.randrange(nodes)), epochs, most=8)}
    return inputs, expected_changes(inputs, {"ranks": lambda edges: Counter(pagerank_of(edges).items())})


SCENARIOS = {"tables": (tables_flow, tables_reference, "joining"), "graph": (graph_flow, graph_reference, "cc"),
             "pagerank": (pagerank_flow, pagerank_reference, "pr.sum"), "paths": (paths_flow, paths_reference, "sp.nearest"),
             "columns": (columns_flow, columns_reference, "joining-columns")}


@functools.cache
def calm_steps(seed: int, scenario: str) -> int:
    """The steps trial ``seed`` of ``scenario`` takes with no crash and no rescale (:func:`trial`'s job
    without recovery: where its crashes and rescales are drawn from). The crash and the rescale
    tests draw from the same seeds' runs: each is run once per process."""
    build, reference, _ = SCENARIOS[scenario]
    rng = random.Random(seed)
    inputs, _ = reference(rng)
    return LocalJob(build(), inputs, rng.randint(1, 3), seed).run().steps


def trial(seed: int, scenario: str, store_root, seen: Counter, crashes: bool = False, rescales: bool = False) -> None:
    """One seeded run of ``scenario``, with crashes and live rescales if asked, against its reference."""
    rng = random.Random(seed)
    build, reference, rescaled = SCENARIOS[scenario]
    inputs, expected = reference(rng)
    parallelism = rng.randint(1, 3)
    recovery = LocalRecovery(SnapshotStore(str(store_root / f"{scenario}-{seed}")), interval=rng.choice([3, 10, 30]),
                             max_restarts=4) if crashes or rescales else None
    job = LocalJob(build(), inputs, parallelism, seed, recovery=recovery)
    chaos = None
    if rescales or crashes:
        calm = calm_steps(seed, scenario)
        if rescales:
            group = min(width_groups(job.plan)[rescaled])
            job.rescale({group: rng.randint(1, 3)}, at_step=rng.randrange(1, calm))
        if crashes:
            chaos = Chaos(job, rng, MODES[seed % len(MODES)], seen, calm)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        run = job.run(max_steps=200_000, after_step=chaos.after_step if chaos else None)
    assert run.finished and run.failure is None, f"{scenario} seed {seed}: {run.failure!r}"
    assert got_changes(run.outputs) == expected, f"{scenario} seed {seed} (parallelism {parallelism})"
    seen["recoveries"] += len(run.recoveries)
    seen["rescales"] += len(run.rescales)


def test_keyed_operators_and_joins_across_epochs_equal_recomputation_from_scratch(store_root):
    seen: Counter = Counter()
    for seed in range(60):
        trial(seed, "tables", store_root, seen)


def test_iterate_with_deletions_equals_union_find_and_bfs_after_every_epoch(store_root):
    seen: Counter = Counter()
    for seed in range(40):
        trial(seed, "graph", store_root, seen)


def test_weighted_shortest_paths_with_deletions_equal_dijkstra_after_every_epoch_also_under_crashes_and_rescales(
        store_root):
    seen: Counter = Counter()
    for seed in range(24):
        trial(seed, "paths", store_root, seen, crashes=seed % 3 == 1, rescales=seed % 3 == 2)
    assert seen["recoveries"] >= 3 and seen["rescales"] >= 5, dict(seen)


def test_pagerank_on_collections_equals_its_definition_after_every_epoch_also_under_crashes_and_rescales(store_root):
    seen: Counter = Counter()
    for seed in range(12):
        trial(seed, "pagerank", store_root, seen, crashes=seed % 3 == 1, rescales=seed % 3 == 2)
    assert seen["recoveries"] >= 1 and seen["rescales"] >= 2, dict(seen)


def test_joins_and_sums_by_column_equal_recomputation_also_under_crashes_and_live_rescales(store_root):
    seen: Counter = Counter()
    for seed in range(30):
        trial(seed, "columns", store_root, seen, crashes=seed % 3 == 1, rescales=seed % 3 == 2)
    assert seen["recoveries"] >= 4 and seen["rescales"] >= 6, dict(seen)


def test_collections_under_crashes_recover_exactly_once(store_root):
    seen: Counter = Counter()
    for seed in range(24):
        trial(seed, "tables" if seed % 2 else "graph", store_root, seen, crashes=True)
    assert seen["recoveries"] >= 10 and seen["crash of a replica"] >= 4, dict(seen)


def test_collections_rescaled_live_mid_run_equal_the_reference(store_root):
    seen: Counter = Counter()
    for seed in range(24):
        trial(seed, "tables" if seed % 2 else "graph", store_root, seen, rescales=True, crashes=seed % 3 == 0)
    assert seen["rescales"] >= 16, dict(seen)


def arranged(job: LocalJob) -> Counter:
    """Per keyed operator, the updates its traces hold, over all replicas (``job.stats()``'s counter)."""
    held: Counter = Counter()
    for replica in job.replicas.values():
        for name, vertex in replica.vertices.items():
            held[name] += vertex.statistics().get("arranged_updates", 0)
    return +held


def test_a_hundred_epochs_of_changes_that_cancel_leave_the_arrangements_no_larger_than_at_the_start():
    """Compaction: once epochs are over their updates merge, and what cancels goes; so a trace's
    size follows the collection, not its history: the keyed operators over two tables after 100
    epochs, and connected components (traces inside a loop) after 30, all pushed at once."""
    rng = random.Random(7)
    edges = [(rng.randrange(30), rng.randrange(30)) for _ in range(40)]
    first = [(edge, 1) for edge in edges]
    churned = [first] + [[(edge, 1 if epoch % 2 else -1) for edge in edges[epoch % 5::5]] for epoch in range(1, 101)]
    for flow, inputs in ((tables_flow, {"left": churned, "right": churned}), (graph_flow, {"edges": churned[:31]})):
        start = LocalJob(flow(), {name: updates[:1] for name, updates in inputs.items()}, 2, seed=1)
        start.run()
        after = LocalJob(flow(), inputs, 2, seed=1)
        run = after.run()
        assert run.finished and run.failure is None
        assert set(arranged(after)) == set(arranged(start))
        assert all(arranged(after)[name] <= held for name, held in arranged(start).items()), \
            (arranged(start), arranged(after))


def as_scenario(kind: str) -> Callable[..., Scenario]:
    """A collections dataflow as the simulation tier's scenarios are (its outputs' changes as records)."""
    build, reference, _ = SCENARIOS[kind]

    def scenario(rng: random.Random, epochs: int = 4) -> Scenario:
        inputs, expected = reference(rng, epochs)
        as_records = {out: {epoch: Counter(dict.fromkeys(change.items(), 1)) for epoch, change in per_epoch.items()}
                      for out, per_epoch in expected.items()}
        return Scenario(f"collections {kind}", build(), inputs, as_records)

    return scenario


@pytest.mark.parametrize("kind", ["tables", "graph", "columns"])
def test_a_snapshot_restored_at_another_parallelism_keeps_every_arrangement(kind, store_root, monkeypatch):
    """Restore at another width: the traces (and, in the loop, each iteration's history) split
    by key group and merged at their new replicas, crashes after the restore in odd seeds."""
    monkeypatch.setitem(TIER_SCENARIOS, kind, as_scenario(kind))
    restored = 0
    for seed in range(12):
        did_restore, wrong = reshard_sim.trial(kind, seed, str(store_root / str(seed)))
        assert wrong is None, f"seed {seed}: {wrong}"
        restored += did_restore
    assert restored >= 4, restored
