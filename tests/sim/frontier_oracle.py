"""The hold-back rule's oracle: the progress tracker's frontiers against every pointstamp
that really exists in a simulated job, read from the whole system at once."""

from __future__ import annotations

import functools
from collections import Counter

from raytide.progress import Location, PathSummary, Timestamp
from raytide.testing.local import LocalJob


def true_pointstamps(job: LocalJob) -> Counter:
    """Every pointstamp that really exists now: messages not yet consumed (in flight to a
    replica of their incarnation, held back by barrier alignment, or restored from a
    snapshot's back-edge log and not delivered yet), pending notifications, and open
    inputs' capabilities."""
    counts: Counter = Counter()
    for (_, receiver), queue in job.mail.links.items():
        for incarnation, message in queue:
            if message[0] == "data" and job.incarnations[receiver] == incarnation:
                _, channel, vertex, time, _ = message
                counts[(Location.of_input(vertex, channel.port), time)] += 1
    for core in job.replicas.values():
        for channel, vertex, time, _ in [*core.aligner.buffered(), *core.replay]:
            counts[(Location.of_input(vertex, channel.port), time)] += 1
        for vertex, pending in core.notifications.pending.items():
            counts.update((Location.of_vertex(vertex), t) for t in pending)
        for name, epoch in core.input_epochs.items():
            if epoch is not None:
                counts[(Location.of_vertex(name), Timestamp(epoch))] += 1
    return counts


@functools.lru_cache(maxsize=4096)
def paths(plan, location: Location) -> list[tuple[Location, list[PathSummary]]]:
    """Every vertex input reachable from ``location``, with the summaries of the paths there."""
    targets = [Location.of_input(v, p) for v, vertex in plan.vertices.items() for p in range(len(vertex.inputs))]
    reached = [(t, list(plan.graph.summaries(location, t)) + ([PathSummary.identity()] if t == location else []))
               for t in targets]
    return [(target, summaries) for target, summaries in reached if summaries]


@functools.lru_cache(maxsize=65536)
def reached_from(plan, location: Location, time: Timestamp) -> frozenset[tuple[Location, Timestamp]]:
    """Every (vertex input, time) that pointstamp ``(location, time)`` may still cause."""
    return frozenset((target, reached) for target, summaries in paths(plan, location) for summary in summaries
                     if (reached := summary.results_in(time)) is not None)


def check_frontiers_cover_the_truth(job: LocalJob) -> None:
    """Safety: the tracker's frontier at every vertex input is at or below every time that
    really may still arrive there. Holding deltas back may keep a frontier low, never high.

    Checked only while the job is whole: not between a death and the end of the recovery
    it causes (the dead actor's state is gone, and the survivors' is rolled back).
    """
    if job.dead or job.failures or job.recovery_steps or job.progress is None:
        return
    tracker = job.progress.publisher.tracker
    causes: dict[tuple[Location, Timestamp], tuple[Location, Timestamp]] = {}  # (input, time) -> one pointstamp causing it
    for location, time in true_pointstamps(job):
        for caused in reached_from(job.plan, location, time):
            causes.setdefault(caused, (location, time))
    for (target, reached), (location, time) in causes.items():
        if not any(f.less_equal(reached) for f in tracker.frontier(target)):
            raise AssertionError(f"the frontier at {target} is {tracker.frontier(target)}, past {reached} "
                                 f"which ({time} at {location}) may still cause")
