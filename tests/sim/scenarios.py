"""Dataflows with random inputs and plain-Python references, for the in-process runtime.

Each scenario builds a dataflow, draws its inputs from a seeded ``random.Random`` and
computes, without raytide, what every output must hold per epoch (as a ``Counter``,
since replicas may deliver an epoch's records in any order). Epochs without records do
not appear in a job's output, so references leave them out too. Each takes the number of
epochs to draw (3 by default: the simulations run thousands of short jobs).
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import raytide as rt

Reference = dict[str, dict[int, Counter]]


@dataclass(frozen=True)
class Scenario:
    """A dataflow, its inputs and what its outputs must be."""

    name: str
    flow: rt.Dataflow
    inputs: dict[str, list[list[Any]]]
    expected: Reference


def as_counters(outputs: dict[str, dict[int, list]]) -> Reference:
    """A run's outputs in the references' form."""
    return {name: {epoch: Counter(records) for epoch, records in epochs.items() if records}
            for name, epochs in outputs.items()}


def with_input_width(flow: rt.Dataflow, width: int) -> rt.Dataflow:
    """``flow`` with its inputs at ``width`` replicas whatever the job's parallelism (as
    ``flow.input(name, parallelism=width)`` would have built it)."""
    for name, vertex in list(flow.vertices.items()):
        if vertex.role == "input":
            flow.vertices[name] = dataclasses.replace(vertex, parallelism=width)
    return flow


def _epochs(rng: random.Random, draw: Callable[[], Any], epochs: int = 3, most: int = 6) -> list[list[Any]]:
    return [[draw() for _ in range(rng.randrange(most + 1))] for _ in range(epochs)]


def _drop_empty(per_epoch: dict[int, Counter]) -> dict[int, Counter]:
    return {epoch: counts for epoch, counts in per_epoch.items() if counts}


def word_count(rng: random.Random, epochs: int = 3) -> Scenario:
    """``flat_map(str.split)`` then ``count_by_key`` (a combiner before the exchange)."""
    flow = rt.Dataflow("wordcount")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w, name="count").output("counts")
    lines = _epochs(rng, lambda: " ".join(rng.choice("ab cd ef a b") for _ in range(rng.randrange(4))), epochs)
    expected = {e: Counter(Counter(w for line in ls for w in line.split()).items()) for e, ls in enumerate(lines)}
    return Scenario("word count", flow, {"lines": lines}, {"counts": _drop_empty(expected)})


def keyed(rng: random.Random, epochs: int = 3) -> Scenario:
    """map, filter, a non-idempotent ``reduce_by_key``, and a ``stateful_map`` whose state spans epochs."""
    flow = rt.Dataflow("keyed")
    numbers = flow.input("numbers").map(lambda x: x * 3, name="triple").filter(lambda x: x % 2 == 0, name="even")
    numbers.reduce_by_key(lambda x: x % 4, lambda a, b: a + b, value=lambda x: x * x, name="squares").output("sums")
    numbers.stateful_map(lambda x: x % 3, lambda seen, x: ((seen or 0) + 1, (seen or 0) + 1),
                         name="seen").output("running")
    data = _epochs(rng, lambda: rng.randrange(20), epochs)
    sums: dict[int, Counter] = {}
    running: dict[int, Counter] = {}
    seen: Counter = Counter()
    for epoch, xs in enumerate(data):
        kept = [x * 3 for x in xs if (x * 3) % 2 == 0]
        per_key: dict[int, int] = defaultdict(int)
        for x in kept:
            per_key[x % 4] += x * x
        sums[epoch] = Counter(per_key.items())
        outputs = []
        for x in kept:
            seen[x % 3] += 1
            outputs.append((x % 3, seen[x % 3]))
        running[epoch] = Counter(outputs)
    return Scenario("keyed", flow, {"numbers": data}, {"sums": _drop_empty(sums), "running": _drop_empty(running)})


def join(rng: random.Random, epochs: int = 3) -> Scenario:
    """A per-epoch keyed join of two inputs."""
    flow = rt.Dataflow("join")
    left, right = flow.input("left"), flow.input("right")
    left.join(right, lambda r: r[0], name="join").output("joined")
    draw = lambda: (rng.randrange(4), rng.randrange(100))  # noqa: E731
    lefts, rights = _epochs(rng, draw, epochs), _epochs(rng, draw, epochs)
    expected = {e: Counter((a[0], a, b) for a in ls for b in rs if a[0] == b[0])
                for e, (ls, rs) in enumerate(zip(lefts, rights))}
    return Scenario("join", flow, {"left": lefts, "right": rights}, {"joined": _drop_empty(expected)})


def halvings(x: int) -> list[int]:
    """``x // 2``, ``x // 4``, ... down to and including 0."""
    out = []
    while True:
        x //= 2
        out.append(x)
        if x <= 0:
            return out


class IterationCounter(rt.Vertex):
    """Inside a loop: counts each iteration's records and reports them when the iteration is complete."""

    def __init__(self) -> None:
        self.counts: Counter = Counter()

    def on_recv(self, edge: int, message: Any, time: rt.Timestamp) -> None:
        if time not in self.counts:
            self.notify_at(time)
        self.counts[time] += len(message)

    def on_notify(self, time: rt.Timestamp) -> None:
        self.send_by(0, [(time.counters, self.counts.pop(time))], time)

    def snapshot(self) -> Counter:
        return self.counts

    def restore(self, state: Counter) -> None:
        self.counts = state

    def take_keys(self, moving: Callable[[Any], bool]) -> Counter:
        """Every record here has the key 0 (the ``gather`` exchange before it): all or nothing moves."""
        if not moving(0):
            return Counter()
        taken, self.counts = self.counts, Counter()
        for time in taken:
            self.cancel_notify(time)
        return taken

    def put_keys(self, counts: Counter) -> None:
        for time, count in counts.items():
            if time not in self.counts:
                self.notify_at(time)
            self.counts[time] += count


def loop(rng: random.Random, epochs: int = 3) -> Scenario:
    """Halving to a fixed point, exchanged every round, with a notified vertex inside the loop."""
    flow = rt.Dataflow("loop")
    lp = flow.loop("halve")
    back = lp.feedback(name="back")
    rounds = lp.enter(flow.input("numbers"), name="enter").concat(back.stream, name="this_round")
    halved = rounds.exchange(lambda x: x, name="spread").map(lambda x: x // 2, name="half")
    back.connect(halved.filter(lambda x: x > 0, name="positive"))
    lp.leave(halved, name="leave").output("out")
    counted = rounds.exchange(lambda x: 0, name="gather").unary(IterationCounter, name="per_round")
    lp.leave(counted, name="leave_counts").output("rounds")
    data = _epochs(rng, lambda: rng.randrange(1, 40), epochs)
    out = {e: Counter(h for x in xs for h in halvings(x)) for e, xs in enumerate(data)}
    per_round = {e: Counter(Counter((j,) for x in xs for j in range(len(halvings(x)))).items())
                 for e, xs in enumerate(data)}
    return Scenario("loop", flow, {"numbers": data}, {"out": _drop_empty(out), "rounds": _drop_empty(per_round)})


def nested_loop(rng: random.Random, epochs: int = 3) -> Scenario:
    """An outer loop counting each number down, an inner loop halving each value, and a vertex
    notified at every ``(outer, inner)`` round."""
    flow = rt.Dataflow("nested")
    outer = flow.loop("outer")
    outer_back = outer.feedback(name="outer_back")
    values = outer.enter(flow.input("numbers"), name="outer_enter").concat(outer_back.stream, name="values")
    outer_back.connect(values.map(lambda x: x - 1, name="down").filter(lambda x: x > 0, name="still"))
    inner = outer.loop("inner")
    inner_back = inner.feedback(name="inner_back")
    rounds = inner.enter(values, name="inner_enter").concat(inner_back.stream, name="this_round")
    halved = rounds.exchange(lambda x: x, name="spread").map(lambda x: x // 2, name="half")
    inner_back.connect(halved.filter(lambda x: x > 0, name="positive"))
    outer.leave(inner.leave(halved, name="inner_leave"), name="outer_leave").output("out")
    counted = rounds.exchange(lambda x: 0, name="gather").unary(IterationCounter, name="per_round")
    outer.leave(inner.leave(counted, name="counts_inner_leave"), name="counts_outer_leave").output("rounds")
    data = _epochs(rng, lambda: rng.randrange(1, 7), epochs, most=3)
    out, per_round = {}, {}
    for epoch, xs in enumerate(data):
        walks = [(i, n - i) for n in xs for i in range(n)]  # (outer iteration, value entering the inner loop)
        out[epoch] = Counter(h for _, v in walks for h in halvings(v))
        per_round[epoch] = Counter(Counter((i, j) for i, v in walks for j in range(len(halvings(v)))).items())
    return Scenario("nested loop", flow, {"numbers": data}, {"out": _drop_empty(out), "rounds": _drop_empty(per_round)})


SCENARIOS: dict[str, Callable[[random.Random], Scenario]] = {
    "word count": word_count,
    "keyed": keyed,
    "join": join,
    "loop": loop,
    "nested loop": nested_loop,
}
