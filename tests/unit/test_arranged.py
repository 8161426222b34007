"""Shared arrangements (``differential/arranged.py``, ``Collection.arrange_by_key``) against brute force.

One arrangement of a collection by key is read by two joins (the arranged collection on
either side) and two reductions. Updates of the arranged collection and of the joins'
other sides arrive in random orders the progress tracker could give; the reductions run
their times in random allowed orders; the arrangement is compacted at random points once
epochs are over and, at a random point, half its keys are taken and put into another one.
Every output, accumulated at every time, must equal its operator applied to the inputs
accumulated at that time; and the trace must be one object, held and counted once.
"""

from __future__ import annotations

import copy
import pickle
import random
from collections import Counter

import pytest

import raytide as rt
from raytide.differential import Join, Reduction, SharedArrangement
from raytide.progress.timestamps import Timestamp
from raytide.testing.local import LocalJob
from tests.unit.test_differential import at, grid, random_time

LOGICS = {
    "count": lambda key, contents: {(key, sum(contents.values())): 1},
    "min": lambda key, contents: {(key, min(contents)): 1},
}


def arrivals(rng: random.Random, depth: int) -> list[tuple[int, Timestamp, list]]:
    """Batches ``(port, time, updates)``: port 0 the arranged collection, 1 and 2 the joins' others;
    the arranged collection's deletions take back what an earlier time surely added."""
    batches = [(rng.randrange(3), random_time(rng, depth),
                [(rng.randrange(3), rng.choice("xyz"), rng.choice([1, 1, 2])) for _ in range(rng.randint(1, 3))])
               for _ in range(rng.randint(2, 10))]
    for port, time, updates in list(batches):
        if rng.random() < 0.5:
            later = Timestamp(time.epoch + rng.randint(0, 1), tuple(c + rng.randint(0, 1) for c in time.counters))
            batches.append((port, later, [(k, v, -d) for k, v, d in updates[:1]]))
    return batches


class Run:
    """An arrangement read by two joins and two reductions, driven as a replica would be."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.shared = SharedArrangement()
        self.joins = (self.shared.join(0), self.shared.join(1))
        self.reductions = tuple(self.shared.reduce(LOGICS[name]) for name in sorted(LOGICS))
        self.outs: dict[str, list] = {name: [] for name in ("join0", "join1", *sorted(LOGICS))}

    def receive(self, port: int, time: Timestamp, updates: list) -> set[Timestamp]:
        """A batch in; the reductions' new times."""
        before = self.shared.times()
        if port == 0:
            answers = self.shared.receive(time, updates)
            for index in range(len(self.joins)):
                self._joined(index, time, answers[index])
        else:
            join = self.joins[port - 1]
            self._joined(port - 1, time, join.receive(join.owned[0], time, updates))
        return self.shared.times() - before

    def _joined(self, index: int, time: Timestamp, changes: dict) -> None:
        for when, out in changes.items():
            assert time <= when
            self.outs[f"join{index}"].extend((when, record, diff) for record, diff in out)

    def run(self, time: Timestamp) -> set[Timestamp]:
        due = set()
        for name, reduction in zip(sorted(LOGICS), self.reductions):
            changes, later = reduction.run(time)
            due.update(later)
            self.outs[name].extend((time, record, diff) for record, diff in changes)
        return due

    def move_half(self) -> None:
        """Half the keys taken and put into a fresh arrangement with the same readers, which goes on."""
        other = SharedArrangement()
        joins = (other.join(0), other.join(1))
        reductions = tuple(other.reduce(LOGICS[name]) for name in sorted(LOGICS))
        other.put(self.shared.take(lambda key: key % 2 == 0))
        other.put(self.shared.take(lambda key: True))
        self.shared, self.joins, self.reductions = other, joins, reductions


def drive(rng: random.Random, run: Run, batches: list) -> dict[int, list]:
    """Feed the batches in an order the tracker allows; the inputs by port."""
    waiting, notified, compacted, moved = list(batches), set(), -1, False
    rng.shuffle(waiting)
    seen: dict[int, list] = {0: [], 1: [], 2: []}
    while waiting or notified:
        ready = [t for t in notified if not any(b[1] <= t for b in waiting)
                 and not any(o.less_than(t) for o in notified)]
        if waiting and (not ready or rng.random() < 0.5):
            port, time, updates = waiting.pop()
            notified |= run.receive(port, time, updates)
            seen[port].extend((time, (key, value), diff) for key, value, diff in updates)
        else:
            time = rng.choice(ready)
            notified.discard(time)
            notified |= run.run(time)
        over = [e for e in range(6) if not any(t.epoch <= e for t in notified) and not any(b[1].epoch <= e for b in waiting)]
        if over and rng.random() < 0.5 and max(over) > compacted:
            compacted = max(over)
            run.shared.compact(compacted)
        if not moved and rng.random() < 0.1:
            moved = True
            run.move_half()
    return seen


def joined(left: Counter, right: Counter) -> Counter:
    return Counter({(k1, (a, b)): n * m for (k1, a), n in left.items() for (k2, b), m in right.items() if k1 == k2})


def reduced(name: str, contents: Counter) -> Counter:
    per_key: dict = {}
    for (key, value), copies in contents.items():
        per_key.setdefault(key, {})[value] = copies
    out: Counter = Counter()
    for key, values in per_key.items():
        out.update(LOGICS[name](key, values))
    return out


@pytest.mark.parametrize("depth", [0, 1])
def test_joins_and_reductions_reading_one_arrangement_equal_brute_force_at_every_time(depth):
    rng = random.Random(20 + depth)
    for trial in range(150):
        run = Run(rng)
        seen = drive(rng, run, arrivals(rng, depth))
        for time in grid(depth):
            arranged, first, second = (at(seen[port], time) for port in range(3))
            expected = {"join0": joined(arranged, first), "join1": joined(second, arranged),
                        **{name: reduced(name, arranged) for name in LOGICS}}
            for name, out in run.outs.items():
                got = Counter()
                for when, record, diff in out:
                    if when <= time:
                        got[record] += diff
                assert +got == +expected[name] and all(v >= 0 for v in got.values()), (trial, name, time)


def test_the_readers_hold_one_trace_of_the_arranged_collection():
    shared = SharedArrangement()
    join, reduction = shared.join(0), shared.reduce(LOGICS["count"])
    shared.receive(Timestamp(0), [(1, "a", 1), (2, "b", 1)])
    join.receive(1, Timestamp(0), [(1, "c", 1)])
    assert join.sides[0] is reduction.input is shared.trace
    assert [len(trace) for trace in shared.traces()] == [2, 1, 0]  # shared, the join's other side, the output
    assert isinstance(join, Join) and isinstance(reduction, Reduction)


def arranged_flow(kind: str) -> rt.Dataflow:
    """Two joins and a count of ``orders`` by customer: on one arrangement asked for
    (``asked``), on one found by their one key function (``found``), or each keeping its own
    (``apart``: each named)."""
    flow = rt.Dataflow("shared")
    orders, customers, flags = flow.collection("orders"), flow.collection("customers"), flow.collection("flags")
    key = lambda o: o[1]  # noqa: E731
    if kind == "asked":
        by_customer = orders.arrange_by_key(key, name="by-customer")
        by_customer.join(customers, lambda c: c[0]).output("regions")
        flags.join(by_customer, lambda f: f[0]).output("flagged")
        by_customer.count().output("counts")
    else:
        apart = (lambda label: {"name": label}) if kind == "apart" else (lambda label: {})  # noqa: E731
        orders.join(customers, key, lambda c: c[0]).output("regions")
        flags.join(orders, lambda f: f[0], key, **apart("flags-orders")).output("flagged")
        orders.count(key, **apart("counting")).output("counts")
    return flow


def test_an_arrangement_read_three_times_is_held_and_counted_once_with_the_same_changes():
    orders = [[((i, i % 3), 1) for i in range(12)], [((0, 0), -1), ((12, 1), 1)]]
    inputs = {"orders": orders, "customers": [[((c, f"r{c}"), 1) for c in range(3)]], "flags": [[], [((1, "vip"), 1)]]}
    runs = {}
    for kind in ("asked", "found", "apart"):
        job = LocalJob(arranged_flow(kind), inputs, 2, seed=3)
        runs[kind] = (job.run(), job)
    changes = {kind: {name: {epoch: Counter(dict(out)) for epoch, out in epochs.items()}
                      for name, epochs in run.outputs.items()} for kind, (run, _) in runs.items()}
    assert changes["asked"] == changes["found"] == changes["apart"] and changes["asked"]["flagged"][1]
    held = {kind: Counter() for kind in runs}
    for kind, (_, job) in runs.items():
        for replica in job.replicas.values():
            for vertex in replica.vertices.values():
                held[kind].update(vertex.statistics())
    # 12 orders once, 3 customers, 1 flag, 3 counts; apart: the orders three times
    for kind in ("asked", "found"):
        assert held[kind]["shared_updates"] == 12 and held[kind]["arranged_updates"] == 12 + 3 + 1 + 3, held
    assert held["apart"]["arranged_updates"] == 3 * 12 + 3 + 1 + 3, held
    # one copy in snapshots: what is saved and restored is one trace, its readers' (an object pickled once)
    vertices = [replica.vertices[name] for replica in runs["asked"][1].replicas.values()
                for name in replica.vertices if name == "by-customer"]
    for vertex in vertices:
        core = pickle.loads(pickle.dumps(vertex.snapshot()))["core"]
        joins = [reader for reader in core.readers if isinstance(reader, Join)]
        assert len(joins) == 2 and all(join.sides[1 - join.owned[0]] is core.trace for join in joins)
        assert [reader.input is core.trace for reader in core.readers if isinstance(reader, Reduction)] == [True]
    assert len(vertices) == 2 and sum(vertex.arrangement.trace.size for vertex in vertices) == 12


def hops(edges: Counter, source: int) -> Counter:
    """Each node's hops from ``source`` by the directed edges present (BFS)."""
    dist, frontier = {source: 0}, [source]
    while frontier:
        frontier = [v for u in frontier for (a, v) in sorted(edges) if a == u and v not in dist
                    and not dist.update({v: dist[u] + 1})]
    return Counter(dict.fromkeys(dist.items(), 1))


def shortest(node: int, rows: list) -> list:
    return [min(rows, key=lambda row: row[1])]


def hops_flow() -> rt.Dataflow:
    """Hop distances as ``iterate``: the distances, arranged once by node in the loop, read by
    the join with the edges and by the per-node minimum."""
    flow = rt.Dataflow("hops")
    edges, roots = flow.collection("edges"), flow.collection("roots")

    def body(dist: rt.Collection) -> rt.Collection:
        by_node = dist.arrange_by_key(lambda row: row[0])
        stepped = by_node.join(edges, lambda e: e[0]).map(lambda kv: (kv[1][1][1], kv[1][0][1] + 1))
        return by_node.reduce(shortest).concat(stepped, roots).reduce(lambda row: row[0], shortest)

    roots.iterate(body).output("hops")
    return flow


def test_an_arrangement_inside_a_loop_read_twice_keeps_hop_distances_with_deletions():
    """Edges inserted and deleted over epochs; after each, the distances equal BFS's."""
    for seed in range(4):
        rng = random.Random(seed)
        edge_epochs, present = [], Counter()
        for _ in range(6):
            epoch = [((rng.randrange(9), rng.randrange(9)), 1) for _ in range(5)]
            epoch += [(edge, -1) for edge in rng.sample(sorted(+present), min(3, len(+present)))]
            for edge, diff in epoch:
                present[edge] += diff
            edge_epochs.append(epoch)
        run = LocalJob(hops_flow(), {"edges": edge_epochs, "roots": [[((0, 0), 1)]]}, 1 + seed % 3, seed=seed).run()
        assert run.finished and run.failure is None, run.failure
        contents, present = Counter(), Counter()
        for epoch, updates in enumerate(edge_epochs):
            for edge, diff in updates:
                present[edge] += diff
            rt.accumulate(run.outputs["hops"].get(epoch, []), contents)
            assert +Counter(contents) == hops(+present, 0), (seed, epoch)


def test_an_arrangement_is_read_in_its_own_loop_by_key_functions():
    flow = rt.Dataflow("scopes")
    edges = flow.collection("edges")
    by_source = edges.arrange_by_key(lambda e: e[0])
    with pytest.raises(rt.GraphError, match="arrangement .* is read in the loop it is made in"):
        edges.iterate(lambda inner: inner.join(by_source, lambda e: e[1]).map(lambda kv: kv[1][1]))
    with pytest.raises(rt.GraphError, match="other_key names column 'k'"):
        by_source.join(edges, "k")
    # a join inside a loop does not find an arrangement of the enclosing scope by the same key
    # function: what it reads is the collection entered into the loop, arranged there
    edges.join(edges, by_source.key).output("pairs")
    edges.iterate(lambda inner: inner.join(edges, by_source.key).map(lambda kv: kv[1][1]), max_iterations=2)
    with pytest.raises(rt.GraphError, match="the key must be a function of a record, got 'k'"):
        edges.arrange_by_key("k")  # type: ignore[arg-type]


def test_a_lone_join_or_reduction_saved_before_arrangements_were_shared_restores_and_goes_on_alike():
    """A savepoint of a raytide before every keyed reader read an arrangement holds a lone
    ``Join`` (both sides its own) or ``Reduction`` (its own input, a time received and not run):
    ``SharedArrangement.of`` adopts it, and what follows is what the lone core would give."""
    rng = random.Random(5)
    for _ in range(40):
        first = [(rng.randrange(3), rng.choice("xyz"), 1) for _ in range(rng.randint(1, 5))]
        later = [(rng.randrange(3), rng.choice("xyz"), 1) for _ in range(rng.randint(0, 3))]
        later += [(key, value, -1) for key, value, _ in rng.sample(first, rng.randint(0, len(first)))]
        lone, saved = Join(), Join()
        for join in (lone, saved):
            join.receive(0, Timestamp(0), first)
            join.receive(1, Timestamp(0), [(k, k * 10, 1) for k in range(3)])
        adopted = SharedArrangement.of(copy.deepcopy(saved))
        (reader,) = adopted.readers
        assert isinstance(reader, Join) and len(adopted.traces()) == 2  # the arranged left once, the right
        assert adopted.receive(Timestamp(1), later)[0] == lone.receive(0, Timestamp(1), later)
        assert reader.receive(1, Timestamp(2), [(1, 7, 1)]) == lone.receive(1, Timestamp(2), [(1, 7, 1)])
        counting, kept = Reduction(LOGICS["count"]), Reduction(LOGICS["count"])
        for reduction in (counting, kept):
            reduction.receive(Timestamp(0), first)
            reduction.run(Timestamp(0))
            reduction.receive(Timestamp(1), later)  # received, not run: pending when saved
        adopted = SharedArrangement.of(copy.deepcopy(kept))
        (reduction,) = adopted.readers
        assert isinstance(reduction, Reduction)
        assert reduction.run(Timestamp(1)) == counting.run(Timestamp(1))
        assert adopted.traces()[0] is reduction.input and len(adopted.traces()) == 2  # the trace, the output
