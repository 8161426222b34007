"""Connected components through the graph layer in the in-process runtime, under seeded
interleavings and crashes (a replica, the progress core, the coordinator; before, during
and after snapshots), against union-find epoch by epoch.

The in-process runtime pushes every epoch at once, so the epochs are pipelined through
the loop (its epoch gate keeps them apart). The output of epoch ``e`` is exactly one
``(node, label)`` row per node that an edge of ``e`` touches or whose label ``e`` lowers
(each node's changes are folded where it lives), with its label after ``e``: so a lost,
duplicated or mixed-up record shows, the rows being compared as a multiset.
"""

from __future__ import annotations

import collections
import random
import warnings

import raytide as rt
from examples.connected_components import union_find
from raytide.core.gated import GatedColumns
from raytide.engine.progress_core import ProgressCore
from raytide.engine.replica import ReplicaCore
from raytide.graph import connected_components, edge_columns, pagerank
from raytide.rescale.widths import width_groups
from raytide.snapshots.store import SnapshotStore
from raytide.testing.local import LocalJob, LocalRecovery, LocalRun
from tests.sim.chaos import MODES, Chaos
from tests.sim.seeds import seeds

TRIALS = 16


def components_flow() -> rt.Dataflow:
    flow = rt.Dataflow("components")
    connected_components(flow.input("edges").map_batches(edge_columns), name="cc").output("labels")
    return flow


def rows(outputs: dict) -> dict[int, collections.Counter]:
    return {epoch: collections.Counter(tuple(int(x) for x in row) for row in records)
            for epoch, records in outputs.get("labels", {}).items()}


def expected_rows(epochs: list[list[tuple[int, int]]]) -> dict[int, collections.Counter]:
    """Per epoch, the rows processing the epochs one after another gives (union-find after each):
    a row for each node new in the epoch and each known node whose label dropped, no other."""
    out, before, seen = {}, {}, []
    for epoch, edges in enumerate(epochs):
        seen += edges
        after = union_find(seen)
        touched = {n for n in after if n not in before or after[n] < before[n]}
        if touched:
            out[epoch] = collections.Counter((n, after[n]) for n in touched)
        before = after
    return out


class Trial:
    """One seeded trial: a random graph, parallelism, chaining and snapshot options."""

    def __init__(self, seed: int) -> None:
        self.seed, self.rng = seed, random.Random(seed)
        nodes = self.rng.randint(5, 40)
        edges = [(self.rng.randrange(nodes), self.rng.randrange(nodes)) for _ in range(self.rng.randint(1, 50))]
        self.epochs = [edges[i::3] for i in range(3)]
        self.parallelism, self.chaining = self.rng.randint(1, 3), self.rng.random() < 0.8
        self.options = {"interval": self.rng.choice([3, 10, 30]), "retain": self.rng.randint(1, 3),
                        "max_restarts": 4, "detection": self.rng.randint(0, 6)}
        self.nodes = self.rng.choice([None, 1, 2])  # progress through relays that merge runs (acknowledgements in them)

    def job(self, directory: str) -> LocalJob:
        recovery = LocalRecovery(SnapshotStore(directory), **self.options)  # type: ignore[arg-type]
        return LocalJob(components_flow(), {"edges": self.epochs}, self.parallelism, self.seed, self.chaining,
                        recovery=recovery, nodes=self.nodes)

    def run(self, directory: str, seen: collections.Counter) -> tuple[LocalRun, LocalRun]:
        """The calm run, and the run with crashes."""
        calm = self.job(directory + "-calm").run()
        chaotic = self.job(directory)
        chaos = Chaos(chaotic, self.rng, MODES[self.seed % len(MODES)], seen, calm.steps)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            return calm, chaotic.run(max_steps=100_000, after_step=chaos.after_step)


def test_pipelined_epochs_of_components_under_crashes_equal_the_sequential_run_exactly_once(store_root, rides_carried):
    """Also walks the riding rules of a loop (:mod:`raytide.engine.riding`): a round that sent
    its rows to one replica of its own chain sends its progress batch with them, in some
    of these trials, crashes included."""
    seen: collections.Counter = collections.Counter()
    recoveries = 0
    for seed in range(TRIALS):
        trial = Trial(seed)
        expected = expected_rows(trial.epochs)
        calm, run = trial.run(str(store_root / str(seed)), seen)
        assert calm.finished and rows(calm.outputs) == expected, f"seed {seed}, no crash: {calm.failure!r}"
        assert run.finished and run.failure is None, f"seed {seed}: {run.failure!r}"
        assert rows(run.outputs) == expected, f"seed {seed}: {rows(run.outputs)} != {expected}"
        recoveries += len(run.recoveries)
    assert recoveries >= TRIALS // 2, recoveries  # the crashes struck while the job ran
    assert seen["crash of a replica"] >= 3 and seen["crash after a committed snapshot"] >= 3, dict(seen)
    assert sum(count for chain, count in rides_carried.items() if chain.startswith("cc+")) >= 20, rides_carried  # the loop's chain


def test_a_loop_round_runs_once_its_rows_and_tokens_are_in_without_waiting_for_a_notification(monkeypatch):
    """A round of the loop runs as soon as a replica holds every replica's token for it and
    the rows they announce: in a run without crashes or rescales no round after an epoch's
    entry runs at a notification, and no round asks the progress actor for an
    acknowledgement (one Ray hop a round instead of three). Nothing sends a ``Declaration``,
    and a push that carries nothing but an acknowledgement still comes only when it lets
    the replica run something."""
    seen: collections.Counter = collections.Counter()
    receive, on_progress, on_recv = ProgressCore.receive, ReplicaCore.on_progress, GatedColumns.on_recv
    notify = GatedColumns.on_notify

    def counted(self, call):
        if call.sender.chain.startswith("cc"):
            seen[type(call.message).__name__ + (" asking" if getattr(call.message, "ack", False) else "")] += 1
        return receive(self, call)

    def pushed(self, statuses, acked):
        rounds = sum(counters.notifications for counters in self.stats.values())
        on_progress(self, statuses, acked)
        if acked and not statuses:
            seen["acknowledgement alone"] += 1
            seen["in vain"] += rounds == sum(counters.notifications for counters in self.stats.values())

    def received(self, edge, message, time):
        self.receiving = True
        try:
            on_recv(self, edge, message, time)
        finally:
            self.receiving = False

    def notified(self, time):
        kind = "entry" if time.counters[-1] == 0 else "round"
        seen[f"{kind} {'on receipt' if getattr(self, 'receiving', False) else 'at its notification'}"] += 1
        notify(self, time)

    monkeypatch.setattr(ProgressCore, "receive", counted)
    monkeypatch.setattr(ReplicaCore, "on_progress", pushed)
    monkeypatch.setattr(GatedColumns, "on_recv", received)
    monkeypatch.setattr(GatedColumns, "on_notify", notified)
    path = [(node + 1, node) for node in range(30)]
    for seed in range(5):
        run = LocalJob(components_flow(), {"edges": [path[:10], path[10:]]}, 2, seed).run()
        assert run.finished and rows(run.outputs) == expected_rows([path[:10], path[10:]]), f"seed {seed}"
    # a round per stretch of the path held at one replica (each runs to its local fixpoint in a round), at both
    assert seen["round on receipt"] >= 5 * 2 * 15, dict(seen)
    assert seen["round at its notification"] == 0, dict(seen)
    assert seen["entry at its notification"] == 5 * 2 * 2 and seen["entry on receipt"] == 0, dict(seen)
    assert seen["ProgressBatch asking"] <= seen["entry at its notification"], dict(seen)
    assert seen["Declaration"] == 0, dict(seen)
    assert seen["in vain"] == 0, dict(seen)


RESCALE_TRIALS = 24
#: Trials go on past ``RESCALE_TRIALS`` until one reaches the finish-again path (about 1 in 40), up to this many.
MAX_RESCALE_TRIALS = 160


def test_components_rescaled_at_random_moments_with_crashes_equal_the_sequential_run_exactly_once(store_root,
                                                                                                   monkeypatch):
    """The loop's state vertex rescaled once or twice mid-run (odd seeds also crash something):
    each epoch's rows still come exactly once. A replica that takes keys after it finished an
    epoch runs the loop's ``finish`` again and sends only the keys it took: counted, and the
    trials go on until one reaches that path."""
    seen: collections.Counter = collections.Counter()
    finish = GatedColumns._finish

    def counted(self, phase, counter):
        seen["finish again after a rescale"] += phase in self.gate.concluded
        finish(self, phase, counter)

    monkeypatch.setattr(GatedColumns, "_finish", counted)
    for seed in range(MAX_RESCALE_TRIALS):
        if seed >= RESCALE_TRIALS and seen["finish again after a rescale"]:
            break
        seen["rescales"] += rescaled_trial(seed, store_root, seen, crashes=bool(seed % 2))
    assert seen["rescales"] >= RESCALE_TRIALS, dict(seen)
    assert seen["finish again after a rescale"] >= 1, dict(seen)


class LargerTrial(Trial):
    """A trial over a graph of 40-400 nodes and up to 600 edges in 2-6 epochs: waves narrow
    enough for a round's local fixpoint (``edges.narrow``) and epochs that overlap a rescale
    more often than the small graphs' do."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        rng = random.Random(seed * 7 + 1)
        nodes = rng.randint(40, 400)
        edges = [(rng.randrange(nodes), rng.randrange(nodes)) for _ in range(rng.randint(50, 600))]
        parts = rng.randint(2, 6)
        self.epochs = [edges[i::parts] for i in range(parts)]


def rescaled_trial(seed: int, store_root, seen: collections.Counter, crashes: bool, kind: type[Trial] = Trial) -> int:
    """Trial ``seed`` (of ``kind``) with the loop rescaled once or twice at random steps (and
    crashes if asked): its rows must be the sequential run's. Returns how many rescales were made."""
    trial = kind(seed)
    calm = trial.job(str(store_root / f"{seed}-calm")).run()
    job = trial.job(str(store_root / str(seed)))
    group = min(width_groups(job.plan)["cc"])
    for _ in range(trial.rng.randint(1, 2)):
        job.rescale({group: trial.rng.randint(1, 3)}, at_step=trial.rng.randrange(1, calm.steps))
    chaos = Chaos(job, trial.rng, MODES[seed % len(MODES)], seen, calm.steps) if crashes else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        run = job.run(max_steps=100_000, after_step=chaos.after_step if chaos else None)
    assert run.finished and run.failure is None, f"seed {seed}: {run.failure!r}"
    assert rows(run.outputs) == expected_rows(trial.epochs), f"seed {seed}, rescales {run.rescales}"
    return len(run.rescales)


#: Seeds of the rescale trials (without crashes) that found the gate's bugs once rounds ran on
#: their tokens, about 1 in 80 of them: a round ended by tokens consumed before the cut (333),
#: a round run early past a slow notification (446), a parked epoch started beside the live
#: one (331), the last two at once (503). 4,000 seeds pass, and 1,200 with crashes too.
GATE_BUG_SEEDS = (331, 333, 446, 503)


def test_the_rescales_that_found_the_epoch_gates_bugs_give_the_sequential_run(store_root):
    seen: collections.Counter = collections.Counter()
    for seed in GATE_BUG_SEEDS:
        assert rescaled_trial(seed, store_root, seen, crashes=False) >= 1


#: Larger-graph rescale trials that found a bug: the next epoch's entry ran before the finish
#: of the epoch before it, which a rescale had moved to a replica that had concluded that epoch
#: itself; a node's unsent row of the earlier epoch was lost (5066; once on Ray in CI).
LARGER_BUG_SEEDS = (5066,)


def test_larger_graphs_rescaled_at_random_moments_equal_the_sequential_run(store_root):
    seen: collections.Counter = collections.Counter()
    for seed in (*LARGER_BUG_SEEDS, *seeds(6, "larger-rescaled", rotate=2)):
        rescaled_trial(seed, store_root, seen, crashes=bool(seed % 2), kind=LargerTrial)


def visit(state, record):
    """Per-record label propagation at a node (the README's ``stateful_map`` style): state ``(label, neighbours)``."""
    node, kind, value = record
    label, neighbours = state if state is not None else (node, [])
    if kind == "edge":
        return (label, neighbours + [value]), [(node, "label", label), (value, "offer", label)]
    if value < label:
        return (value, neighbours), [(node, "label", value)] + [(n, "offer", value) for n in neighbours]
    return (label, neighbours), []


def per_record_flow() -> rt.Dataflow:
    flow = rt.Dataflow("per-record")

    def body(records: rt.Stream) -> tuple[rt.Stream, rt.Stream]:
        made = records.stateful_map(lambda r: r[0], visit, name="visit").flat_map(lambda pair: pair[1])
        return made.filter(lambda r: r[1] == "offer"), made.filter(lambda r: r[1] == "label")

    edges = flow.input("edges").flat_map(lambda e: [(e[0], "edge", e[1]), (e[1], "edge", e[0])])
    edges.iterate(body).map(lambda r: (r[0], r[2])).output("labels")
    return flow


def test_a_per_record_stateful_map_in_a_loop_never_mixes_overlapping_epochs_silently():
    """Epochs pushed at once into ``iterate`` + ``stateful_map``: each run either gives every
    epoch's labels as the sequential run does, or fails naming the vertex and the two epochs
    (the state would have mixed them); never a wrong labelling."""
    refused = 0
    for seed in range(30):
        rng = random.Random(seed)
        edges = [(rng.randrange(12), rng.randrange(12)) for _ in range(18)]
        epochs = [edges[i::3] for i in range(3)]
        run = LocalJob(per_record_flow(), {"edges": epochs}, rng.randint(1, 3), seed).run()
        if run.failure is not None:
            assert "two epochs are in the loop at once" in str(run.failure) and "'visit'" in str(run.failure)
            refused += 1
            continue
        labels: dict[int, int] = {}
        for epoch in range(3):
            for node, label in rows_of(run.outputs, epoch):
                labels[node] = min(label, labels.get(node, label))
            assert labels == union_find([e for part in epochs[: epoch + 1] for e in part]), (seed, epoch)
    assert refused >= 5, refused  # the overlap happens, and is refused


def rows_of(outputs: dict, epoch: int) -> list:
    return outputs.get("labels", {}).get(epoch, [])


def pagerank_flow(iterations: int) -> rt.Dataflow:
    flow = rt.Dataflow("pagerank")
    pagerank(flow.input("edges").map_batches(edge_columns), iterations=iterations).output("ranks")
    return flow


def pagerank_reference(edges: list[tuple[int, int]], iterations: int) -> dict[int, float]:
    """The unnormalised power iteration over ``edges``, every node of them starting at 1."""
    nodes = sorted({x for edge in edges for x in edge})
    degree = collections.Counter(u for u, _ in edges)
    rank = dict.fromkeys(nodes, 1.0)
    for _ in range(iterations):
        got = collections.defaultdict(float)
        for u, v in edges:
            got[v] += rank[u] / degree[u]
        rank = {n: 0.15 + 0.85 * got[n] for n in nodes}
    return rank


def test_pagerank_epochs_pushed_at_once_count_their_rounds_from_their_own_start():
    """The gate starts a later epoch at a higher loop counter; each epoch still runs exactly
    ``iterations`` rounds over the edges so far (a wrong round count changes the ranks)."""
    for seed in range(12):
        rng = random.Random(seed)
        edges = [(rng.randrange(15), rng.randrange(15)) for _ in range(30)]
        epochs = [edges[i::3] for i in range(3)]
        run = LocalJob(pagerank_flow(4), {"edges": epochs}, rng.randint(1, 3), seed).run()
        assert run.finished, run.failure
        for epoch in range(3):
            got = {int(node): rank for node, rank in run.outputs["ranks"][epoch]}
            expected = pagerank_reference([e for part in epochs[: epoch + 1] for e in part], 4)
            assert got.keys() == expected.keys() and all(abs(got[n] - expected[n]) < 1e-9 for n in got), (seed, epoch)


def test_pagerank_rescaled_mid_epoch_is_refused_and_between_epochs_gives_the_same_ranks(store_root):
    """PageRank's rounds are not repeatable (it resets and adds): a rescale that would catch
    the loop's replicas at different rounds of an epoch is refused, naming the vertex, and
    the job goes on in its old widths; one between epochs is made. Either way every epoch's
    ranks are the reference's. (With the refusal taken out, the replica that took keys from
    replicas at two rounds ran the earlier one for all of them: wrong ranks, no error.)"""
    made = refused = 0
    for seed in range(40):
        rng = random.Random(seed)
        edges = [(rng.randrange(15), rng.randrange(15)) for _ in range(30)]
        epochs = [edges[i::3] for i in range(3)]
        parallelism = rng.randint(1, 3)
        calm = LocalJob(pagerank_flow(4), {"edges": epochs}, parallelism, seed).run()
        recovery = LocalRecovery(SnapshotStore(str(store_root / str(seed))), interval=rng.choice([3, 10, 30]))
        job = LocalJob(pagerank_flow(4), {"edges": epochs}, parallelism, seed, recovery=recovery)
        job.rescale({min(width_groups(job.plan)["pagerank"]): rng.randint(1, 3)}, at_step=rng.randrange(1, calm.steps))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            run = job.run(max_steps=100_000)
        assert run.finished and run.failure is None, f"seed {seed}: {run.failure!r}"
        for epoch in range(3):
            got = {int(node): rank for node, rank in run.outputs["ranks"][epoch]}
            expected = pagerank_reference([e for part in epochs[: epoch + 1] for e in part], 4)
            assert got.keys() == expected.keys() and all(abs(got[n] - expected[n]) < 1e-9 for n in got), (seed, epoch)
        assert all("vertex 'pagerank'" in str(why) and "not repeatable" in str(why) for _, why in run.refused)
        made, refused = made + len(run.rescales), refused + len(run.refused)
    assert made >= 3 and refused >= 3, (made, refused)
