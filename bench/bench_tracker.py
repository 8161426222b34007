"""Tracker throughput: pointstamp updates applied per second, with frontier maintenance.

The workload is what the progress actor sees from a running pipeline with a loop: for
each epoch in flight, batches of messages move from location to location (a ``-1`` where
a message was consumed, a ``+1`` where its result went), inputs advance their epoch
capability when an epoch has left them, and every batch of updates is followed by a
``propagate()``. Graph sizes of about 10, 100 and 1,000 locations; the cost per update is
also measured for 1, 8 and 64 epochs in flight on the 20-location graph, to show how it
grows with the number of active pointstamps.
"""

from __future__ import annotations

import random
import time

from raytide.progress import GraphBuilder, Location, PathSummary, ProgressGraph, Timestamp, Tracker

PARAMS = {"updates": 200_000}
RATIOS = [
    ("cost per update, 64 vs 8 epochs in flight", "us_per_update_20loc_64epochs", "us_per_update_20loc_8epochs"),
    ("cost per update, 8 vs 1 epochs in flight", "us_per_update_20loc_8epochs", "us_per_update_20loc_1epochs"),
]


def looped_pipeline(vertices: int) -> tuple[ProgressGraph, list[Location]]:
    """A source, a chain of operators with a loop (enter, body, feedback, leave) in the middle, a sink."""
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
    graph = b.build()
    path = [Location.of_input(v, 0) for v in chain[1:]]
    return graph, path


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


def drive(graph: ProgressGraph, batches: list[Batch]) -> float:
    """Apply every batch to a fresh tracker, propagating after each; return the seconds it took."""
    tracker = Tracker(graph)
    started = time.perf_counter()
    for batch in batches:
        tracker.update_all(batch)
        tracker.propagate()
    return time.perf_counter() - started


def measure(updates: int) -> dict[str, float]:
    """One run: updates per second per graph size, and the cost per update per epochs in flight."""
    result: dict[str, float] = {}
    for vertices in (6, 50, 500):
        graph, path = looped_pipeline(vertices)
        batches = workload(graph, path, 8, updates if vertices < 500 else updates // 20)
        seconds = drive(graph, batches)
        result[f"updates_per_s_{len(graph.locations)}loc_8epochs"] = sum(map(len, batches)) / seconds
    graph, path = looped_pipeline(10)
    for epochs in (1, 8, 64):
        batches = workload(graph, path, epochs, updates)
        result[f"us_per_update_{len(graph.locations)}loc_{epochs}epochs"] = drive(graph, batches) / sum(map(len, batches)) * 1e6
    result["updates_per_s_20loc_8epochs"] = 1e6 / result["us_per_update_20loc_8epochs"]
    return result
