"""A deterministic, seeded simulator of asynchronous barrier snapshotting over FIFO channels.

A `Graph` has sources, which emit a fixed list of records, and operators, joined
by regular edges that form a DAG and by back edges that each close a cycle
(from a vertex back to itself or to one of its ancestors). Every channel is a
FIFO queue. Each step of a `Simulation` picks, with one `random.Random`, one of
the things that can happen next: a source emits its next record, a source
takes the coordinator's barrier, or a channel delivers its oldest item. So one
seed reproduces a run exactly, and different seeds explore different
interleavings. Every vertex runs a `raytide.snapshots.barriers.BarrierAligner`
and carries out its effects.

Vertex logic is deterministic and stateful so that a lost or duplicated record
shows: an operator keeps a sum per key and routes each record to one of its
regular outputs by content; a vertex without regular outputs is a sink and
keeps the multiset of records it received. A record ``(key, value, trips)`` is
also sent on every back edge out of a vertex while ``trips > 0``, with
``trips`` one lower, so records in cycles die out. The multiset of outputs and
the per-key sums do not depend on the interleaving, so every run of a graph
ends in the same states.

`check_exactly_once` is the property the tests assert: a run with snapshots
triggered at random moments (overlapping ones included) ends as a run without
snapshots does, with every channel drained, nothing blocked and every snapshot
complete; and for every globally complete snapshot, restoring every vertex
from it, putting the logged back-edge records back into their channels and
rewinding the sources to their offsets, then running to the end, gives the
same final states again.
"""

from __future__ import annotations

import copy
import random
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from raytide.snapshots.barriers import (
    BarrierAligner,
    Decision,
    Effect,
    ForwardBarrier,
    Release,
    SnapshotComplete,
    TakeSnapshot,
)

Record = tuple[int, int, int]
"""(key, value, trips): trips is how many more times the record may cross a back edge."""

Channel = tuple[str, str]
"""(sender, receiver); unique because there is at most one edge between two vertices."""

AlignerFactory = Callable[..., BarrierAligner]
"""Called as ``factory(vertex, inputs=..., back_edges=...)``; `BarrierAligner` itself or a variant."""


@dataclass(frozen=True)
class Graph:
    """A dataflow graph.

    Attributes:
        sources: Each source's name and the records it emits, in order.
        operators: The operators' names, in a topological order of the regular edges.
        edges: The regular edges; they form a DAG.
        back_edges: Edges from a vertex to itself or to one of its ancestors.
    """

    sources: Mapping[str, tuple[Record, ...]]
    operators: tuple[str, ...]
    edges: tuple[Channel, ...]
    back_edges: tuple[Channel, ...]

    @property
    def vertices(self) -> tuple[str, ...]:
        """Every vertex, sources first."""
        return (*self.sources, *self.operators)

    def inputs(self, vertex: str) -> tuple[Channel, ...]:
        """Every input channel of ``vertex``, back edges included."""
        return tuple(c for c in self.edges + self.back_edges if c[1] == vertex)

    def outputs(self, vertex: str, *, back: bool) -> tuple[Channel, ...]:
        """The back-edge (``back=True``) or regular output channels of ``vertex``."""
        return tuple(c for c in (self.back_edges if back else self.edges) if c[0] == vertex)


@dataclass(frozen=True)
class Snapshot:
    """A globally complete snapshot.

    Attributes:
        snapshot_id: Its id.
        states: Every vertex's state at its local snapshot (a source's state is its offset).
        logs: Every back edge's logged records, oldest first.
    """

    snapshot_id: int
    states: Mapping[str, Any]
    logs: Mapping[Channel, tuple[Record, ...]]


@dataclass(frozen=True)
class RunResult:
    """How a run ended.

    Attributes:
        final_states: Every vertex's state at the end.
        snapshots: The globally complete snapshots, by id.
        stuck: Why the run did not end cleanly (blocked channels, unfinished snapshots); empty if it did.
        overlapped: Whether some snapshot was triggered before the previous one completed.
    """

    final_states: Mapping[str, Any]
    snapshots: tuple[Snapshot, ...]
    stuck: tuple[str, ...]
    overlapped: bool


@dataclass(frozen=True)
class _Barrier:
    snapshot_id: int


def random_graph(rng: random.Random, *, cyclic: bool) -> Graph:
    """A random graph of 1-2 sources and 2-5 operators; with 1-2 back edges if ``cyclic``."""
    sources = {f"s{i}": _random_records(rng) for i in range(rng.randint(1, 2))}
    operators = tuple(f"v{i}" for i in range(rng.randint(2, 5)))
    edges: list[Channel] = []
    earlier = list(sources)
    for op in operators:
        edges.extend((sender, op) for sender in rng.sample(earlier, rng.randint(1, min(3, len(earlier)))))
        earlier.append(op)
    edges.extend((s, rng.choice(operators)) for s in sources if all(e[0] != s for e in edges))
    back_edges = _random_back_edges(rng, operators, edges) if cyclic else ()
    return Graph(sources, operators, tuple(edges), back_edges)


def _random_records(rng: random.Random) -> tuple[Record, ...]:
    return tuple((rng.randrange(4), rng.randrange(50), rng.randrange(3)) for _ in range(rng.randint(3, 8)))


def _random_back_edges(rng: random.Random, operators: tuple[str, ...], edges: list[Channel]) -> tuple[Channel, ...]:
    ancestors: dict[str, set[str]] = {}
    for op in operators:  # topological order: senders' ancestors are known
        senders = [s for s, r in edges if r == op and s in ancestors]
        ancestors[op] = set(senders).union(*(ancestors[s] for s in senders))
    chosen = set()
    for _ in range(rng.randint(1, 2)):
        tail = rng.choice(operators)
        chosen.add((tail, rng.choice(sorted(ancestors[tail] | {tail}))))
    return tuple(sorted(chosen))


class Simulation:
    """One run of a graph, optionally restored from a snapshot.

    Args:
        graph: The dataflow.
        rng: Drives every choice of the run.
        aligner_factory: Makes each vertex's aligner.
        restore: Start from this snapshot instead of from the beginning.
        reinject_logs: When restoring, put the logged back-edge records back into their
            channels (turning this off shows that the logs matter).
    """

    def __init__(
        self,
        graph: Graph,
        rng: random.Random,
        *,
        aligner_factory: AlignerFactory = BarrierAligner,
        restore: Snapshot | None = None,
        reinject_logs: bool = True,
    ) -> None:
        self._graph = graph
        self._rng = rng
        self._aligners = {
            v: aligner_factory(v, inputs=graph.inputs(v), back_edges=[c for c in graph.back_edges if c[1] == v])
            for v in graph.vertices
        }
        self._routes = {v: (graph.outputs(v, back=False), graph.outputs(v, back=True)) for v in graph.vertices}
        self._salt = {v: i for i, v in enumerate(graph.vertices)}
        self._channels: dict[Channel, deque[Any]] = {c: deque() for c in graph.edges + graph.back_edges}
        self._states = copy.deepcopy(dict(restore.states)) if restore else _initial_states(graph)
        if restore and reinject_logs:
            for channel, records in restore.logs.items():
                self._channels[channel].extend(records)
        self._injections: dict[str, deque[int]] = {s: deque() for s in graph.sources}
        self._taken: dict[int, dict[str, Any]] = {}
        self._logs: dict[int, dict[Channel, tuple[Record, ...]]] = {}
        self._completed: dict[int, set[str]] = {}
        self._overlapped = False

    def run(self, trigger_steps: Iterable[int] = (), first_id: int = 1) -> RunResult:
        """Run until nothing can happen any more.

        Args:
            trigger_steps: Before each of these steps the coordinator triggers a snapshot
                (a step listed twice triggers two).
            first_id: The first triggered snapshot's id; later ones count up.

        Returns:
            How the run ended.
        """
        triggers = Counter(trigger_steps)
        next_id = first_id
        step = 0
        while True:
            for _ in range(triggers[step]):
                self._trigger(next_id)
                next_id += 1
            actions = self._actions()
            if not actions:
                return self._result()
            self._perform(self._rng.choice(actions))
            step += 1

    def _trigger(self, snapshot_id: int) -> None:
        self._overlapped |= any(len(done) < len(self._aligners) for done in self._completed.values())
        self._completed[snapshot_id] = set()
        for queue in self._injections.values():
            queue.append(snapshot_id)

    def _actions(self) -> list[tuple[str, Any]]:
        offsets = self._states
        return [
            *(("deliver", c) for c, queue in self._channels.items() if queue),
            *(("emit", s) for s, records in self._graph.sources.items() if offsets[s] < len(records)),
            *(("inject", s) for s, queue in self._injections.items() if queue),
        ]

    def _perform(self, action: tuple[str, Any]) -> None:
        kind, where = action
        if kind == "emit":
            record = self._graph.sources[where][self._states[where]]
            self._states[where] += 1
            self._send_on(self._routes[where][0], record)
        elif kind == "inject":
            self._apply(where, self._aligners[where].inject(self._injections[where].popleft()))
        else:
            self._deliver(where, self._channels[where].popleft())

    def _deliver(self, channel: Channel, item: Any) -> None:
        vertex = channel[1]
        aligner = self._aligners[vertex]
        if isinstance(item, _Barrier):
            self._apply(vertex, aligner.on_barrier(channel, item.snapshot_id))
        elif aligner.on_record(channel, item) is not Decision.BUFFER:
            self._process(vertex, item)

    def _apply(self, vertex: str, effects: list[Effect]) -> None:
        for effect in effects:
            match effect:
                case TakeSnapshot(snapshot_id):
                    self._taken.setdefault(snapshot_id, {})[vertex] = copy.deepcopy(self._states[vertex])
                case ForwardBarrier(snapshot_id):
                    for channel in self._routes[vertex][0] + self._routes[vertex][1]:
                        self._channels[channel].append(_Barrier(snapshot_id))
                case Release(_, records):
                    for record in records:
                        self._process(vertex, record)
                case SnapshotComplete(snapshot_id, logged):
                    self._logs.setdefault(snapshot_id, {}).update(logged)
                    self._completed[snapshot_id].add(vertex)

    def _process(self, vertex: str, record: Record) -> None:
        key, value, trips = record
        regular, back = self._routes[vertex]
        state = self._states[vertex]
        out = (key, (value * 7 + self._salt[vertex]) % 101, trips)
        if regular:
            state[key] += value
            self._send_on(regular, out)
        else:
            state[record] += 1
        if trips > 0:
            for channel in back:
                self._channels[channel].append((key, out[1], trips - 1))

    def _send_on(self, regular: tuple[Channel, ...], record: Record) -> None:
        key, value, _ = record
        self._channels[regular[(key + value) % len(regular)]].append(record)

    def _result(self) -> RunResult:
        complete = sorted(k for k, done in self._completed.items() if len(done) == len(self._aligners))
        return RunResult(
            final_states=self._states,
            snapshots=tuple(Snapshot(k, self._taken[k], self._logs[k]) for k in complete),
            stuck=self._stuck(),
            overlapped=self._overlapped,
        )

    def _stuck(self) -> tuple[str, ...]:
        stuck = [f"{a.vertex}: channels {sorted(a.blocked)} blocked" for a in self._aligners.values() if a.blocked]
        stuck += [
            f"{a.vertex}: snapshots {a.waiting} wait for back edges" for a in self._aligners.values() if a.waiting
        ]
        stuck += [
            f"snapshot {k} incomplete at {sorted(set(self._aligners) - done)}"
            for k, done in self._completed.items()
            if len(done) < len(self._aligners)
        ]
        return tuple(stuck)


def _initial_states(graph: Graph) -> dict[str, Any]:
    return {v: 0 if v in graph.sources else Counter() for v in graph.vertices}


@dataclass(frozen=True)
class Verdict:
    """What `check_exactly_once` found for one seed.

    Attributes:
        problems: Every violation found; empty if the property holds.
        snapshots_checked: How many snapshots were restored from.
        logged_records: How many back-edge records those snapshots logged.
        overlapped: Whether the snapshotted run had overlapping snapshots.
    """

    problems: tuple[str, ...]
    snapshots_checked: int
    logged_records: int
    overlapped: bool


def check_exactly_once(
    seed: int,
    *,
    cyclic: bool,
    aligner_factory: AlignerFactory = BarrierAligner,
    reinject_logs: bool = True,
) -> Verdict:
    """Check that snapshots neither perturb a run nor lose or duplicate records on recovery.

    Args:
        seed: Determines the graph and every interleaving.
        cyclic: Whether the graph has back edges.
        aligner_factory: The aligner under test.
        reinject_logs: Whether recovery puts logged back-edge records back.

    Returns:
        The problems found (none if the property holds) and what was covered.
    """
    rng = random.Random(seed)
    graph = random_graph(rng, cyclic=cyclic)
    expected = Simulation(graph, rng).run().final_states
    triggers = _random_triggers(rng, graph, _initial_states(graph))
    run = Simulation(graph, rng, aligner_factory=aligner_factory).run(triggers)
    problems = [f"with snapshots: {p}" for p in _compare(expected, run)]
    for snapshot in run.snapshots:
        recovery = Simulation(
            graph, rng, aligner_factory=aligner_factory, restore=snapshot, reinject_logs=reinject_logs
        )
        recovered = recovery.run(_random_triggers(rng, graph, snapshot.states), first_id=snapshot.snapshot_id + 1)
        problems += [f"restored from snapshot {snapshot.snapshot_id}: {p}" for p in _compare(expected, recovered)]
    logged = sum(len(records) for s in run.snapshots for records in s.logs.values())
    return Verdict(tuple(problems), len(run.snapshots), logged, run.overlapped)


def _random_triggers(rng: random.Random, graph: Graph, states: Mapping[str, Any]) -> list[int]:
    """1-3 trigger steps, early enough that they happen: a run has a step per record left to emit."""
    left = sum(len(records) - states[s] for s, records in graph.sources.items())
    return [rng.randrange(max(1, left)) for _ in range(rng.randint(1, 3))]


def _compare(expected: Mapping[str, Any], result: RunResult) -> list[str]:
    problems = list(result.stuck)
    problems += [
        f"{v} ended in {result.final_states[v]!r}, expected {state!r}"
        for v, state in expected.items()
        if result.final_states[v] != state
    ]
    return problems
