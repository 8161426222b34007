"""Tracker throughput: pointstamp updates applied per second, with frontier maintenance.

The workload is what the progress actor sees from a running pipeline with a loop: for
each epoch in flight, batches of messages move from location to location (a ``-1`` where
a message was consumed, a ``+1`` where its result went), inputs advance their epoch
capability when an epoch has left them, and every batch of updates is followed by a
``propagate()``.

One run measures, on the same graphs of 20, 100 and 1,000 locations and the same batches,
the incremental tracker (:class:`raytide.progress.Tracker`, edge by edge) and the
all-pairs tracker it replaced (``tests/all_pairs.py``), which drives only the first
``oracle_updates`` updates (at 1,000 locations it manages about a thousand a second).
The ratios give how the cost per update grows from 20 to 1,000 locations for each, and
the incremental tracker's speed-up at 1,000. It also times building the 1,000-location
graph, and the all-pairs summaries that building it computed before (the all-pairs
tracker still does). The cost per update is also measured for 1, 8 and 64 epochs in
flight on the 20-location graph, to show how it grows with the number of active
pointstamps.

Times are CPU seconds of this process (``time.process_time``), not wall time: the
trackers are single-threaded pure Python, so on an idle machine the two agree, while on a
machine shared with other jobs wall time measures mostly those (a 5-run median can come out
several times the CPU time).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from raytide.progress import GraphBuilder, Location, PathSummary, ProgressGraph, Timestamp, Tracker
from raytide.progress.reachability import all_pairs, non_advancing_cycle
from tests.all_pairs import AllPairsTracker

PARAMS = {"updates": 200_000, "oracle_updates": 5_000}
#: Graph sizes in vertices, for 20, 100 and 1,000 locations.
SIZES = (10, 50, 500)
RATIOS = [
    ("incremental: cost per update, 1000 vs 20 locations (target <= 2)", "us_per_update_1000loc", "us_per_update_20loc"),
    ("all-pairs: cost per update, 1000 vs 20 locations", "allpairs_us_per_update_1000loc", "allpairs_us_per_update_20loc"),
    ("incremental vs all-pairs, updates/s at 1000 locations", "updates_per_s_1000loc", "allpairs_updates_per_s_1000loc"),
    ("incremental vs all-pairs, updates/s at 20 locations", "updates_per_s_20loc", "allpairs_updates_per_s_20loc"),
    ("building the 1000-location graph: all-pairs summaries vs now", "allpairs_summaries_ms_1000loc", "graph_build_ms_1000loc"),
    ("cost per update, 64 vs 8 epochs in flight", "us_per_update_20loc_64epochs", "us_per_update_20loc_8epochs"),
    ("cost per update, 8 vs 1 epochs in flight", "us_per_update_20loc_8epochs", "us_per_update_20loc_1epochs"),
]


def looped_builder(vertices: int) -> tuple[GraphBuilder, list[str]]:
    """A source, a chain of operators with a loop (enter, body, feedback, leave) in the middle,
    a sink; returns the builder and the chain of vertices a message travels."""
    b = GraphBuilder()
    chain = ["src"]
    b.add_vertex("src", inputs=0)
    half = max(1, (vertices - 5) // 2)
    for i in range(half):
        b.add_vertex(f"pre{i}")
        chain.append(f"pre{i}")
    b.add_vertex("enter", summaries=[PathSummary.ingress()])
    b.add_vertex("body", inputs=2, depth=1)
    b.add_vertex("back", depth=1, summaries=[PathSummary.feedback()])
    b.add_vertex("leave", depth=1, summaries=[PathSummary.egress()])
    chain += ["enter", "body", "leave"]
    for i in range(max(1, vertices - 5 - half)):
        b.add_vertex(f"post{i}")
        chain.append(f"post{i}")
    for a, c in zip(chain, chain[1:]):
        b.add_edge(a, 0, c, 0)
    b.add_edge("body", 0, "back", 0)
    b.add_edge("back", 0, "body", 1)
    return b, chain


def looped_pipeline(vertices: int) -> tuple[ProgressGraph, list[Location]]:
    """The graph of :func:`looped_builder` and the input ports a message travels through."""
    b, chain = looped_builder(vertices)
    return b.build(), [Location.of_input(v, 0) for v in chain[1:]]


def _time_at(graph: ProgressGraph, location: Location, epoch: int, rng: random.Random) -> Timestamp:
    return Timestamp(epoch, (rng.randrange(3),) * graph.depth(location))


Batch = list[tuple[tuple[Location, Timestamp], int]]


def workload(graph: ProgressGraph, path: list[Location], epochs_in_flight: int, updates: int, seed: int = 0) -> list[Batch]:
    """Batches of 8 message moves (about 16 updates) as a running job would produce them."""
    rng = random.Random(seed)
    src = Location.of_vertex("src")
    setup: Batch = []
    messages: list[tuple[int, Timestamp]] = []
    for epoch in range(epochs_in_flight):
        setup.append(((src, Timestamp(epoch)), 1))
        for _ in range(4):
            messages.append((0, _time_at(graph, path[0], epoch, rng)))
            setup.append(((path[0], messages[-1][1]), 1))
    batches, next_epoch, produced = [setup], epochs_in_flight, 0
    while produced < updates:
        batch: Batch = []
        for _ in range(8):
            i = rng.randrange(len(messages))
            hop, t = messages[i]
            batch.append(((path[hop], t), -1))
            if hop + 1 < len(path):
                messages[i] = (hop + 1, _time_at(graph, path[hop + 1], t.epoch, rng))
                batch.append(((path[hop + 1], messages[i][1]), 1))
            else:
                messages[i] = (0, _time_at(graph, path[0], next_epoch, rng))
                batch += [((src, Timestamp(t.epoch)), -1), ((src, Timestamp(next_epoch)), 1), ((path[0], messages[i][1]), 1)]
                next_epoch += 1
        produced += len(batch)
        batches.append(batch)
    return batches


def drive(tracker: Tracker | AllPairsTracker, batches: list[Batch]) -> float:
    """Apply every batch to ``tracker``, propagating after each; return the CPU seconds it took."""
    started = time.process_time()
    for batch in batches:
        tracker.update_all(batch)
        tracker.propagate()
    return time.process_time() - started


def prefix(batches: list[Batch], updates: int) -> list[Batch]:
    """The first batches, up to about ``updates`` updates."""
    taken, count = [], 0
    for batch in batches:
        if count >= updates:
            break
        taken.append(batch)
        count += len(batch)
    return taken


def per_size(name: str, make: Callable[[ProgressGraph], Tracker | AllPairsTracker], graph: ProgressGraph,
             batches: list[Batch]) -> dict[str, float]:
    """Updates per second and microseconds per update of a fresh tracker from ``make`` (not timed) on ``batches``."""
    seconds = drive(make(graph), batches)
    updates = sum(map(len, batches))
    return {f"{name}updates_per_s_{len(graph.locations)}loc": updates / seconds,
            f"{name}us_per_update_{len(graph.locations)}loc": seconds / updates * 1e6}


def build_times() -> dict[str, float]:
    """CPU milliseconds to build the 1,000-location graph now, and to compute what building it
    computed before: all-pairs summaries and the cycle check on them."""
    builder, _ = looped_builder(SIZES[-1])
    started = time.process_time()
    graph = builder.build()
    built = time.process_time() - started
    started = time.process_time()
    non_advancing_cycle(graph.location_edges, all_pairs(graph.location_edges, graph.locations))
    return {"graph_build_ms_1000loc": built * 1e3, "allpairs_summaries_ms_1000loc": (time.process_time() - started) * 1e3}


def measure(updates: int, oracle_updates: int) -> dict[str, float]:
    """One run: both trackers per graph size, the graph's build time, and the cost per update per epochs in flight."""
    result: dict[str, float] = {}
    for vertices in SIZES:
        graph, path = looped_pipeline(vertices)
        batches = workload(graph, path, 8, updates)
        result |= per_size("", Tracker, graph, batches)
        result |= per_size("allpairs_", AllPairsTracker, graph, prefix(batches, oracle_updates))
    result |= build_times()
    graph, path = looped_pipeline(SIZES[0])
    for epochs in (1, 8, 64):
        batches = workload(graph, path, epochs, updates)
        result[f"us_per_update_{len(graph.locations)}loc_{epochs}epochs"] = drive(Tracker(graph), batches) / sum(map(len, batches)) * 1e6
    return result
