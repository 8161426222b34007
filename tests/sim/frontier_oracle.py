"""The hold-back rule's oracle: the progress tracker's frontiers against every pointstamp
that really exists in a simulated job, read from the whole system at once."""

from __future__ import annotations

import functools

from raytide.physical.protocol import EpochClosed
from raytide.progress import Location, PathSummary, Timestamp
from raytide.progress.timestamps import minimal_elements
from raytide.testing.local import LocalJob

Pointstamp = tuple[Location, Timestamp]


def is_token(batch: object) -> bool:
    """Whether a batch in flight is an epoch token (no pointstamp: it is not a message)."""
    return isinstance(batch, EpochClosed)


def true_pointstamps(job: LocalJob) -> frozenset[Pointstamp]:
    """Every pointstamp that really exists now: messages not yet consumed (in flight to a
    replica of their incarnation, held back by barrier alignment, or restored from a
    snapshot's back-edge log and not delivered yet; epoch tokens are none), pending notifications, and open
    inputs' capabilities. It runs after every step of the trials it checks: it skips what is
    empty, and makes each location once (:func:`_input`)."""
    found: set[Pointstamp] = set()
    incarnations = job.incarnations
    for (_, receiver), queue in job.mail.links.items():
        for incarnation, message in queue:
            if message[0] == "data" and incarnations[receiver] == incarnation and not is_token(message[4]):
                found.add((_input(message[2], message[1].port), message[3]))
    for core in job.replicas.values():
        for channel, vertex, time, batch in [*core.aligner.buffered(), *core.replay]:
            if not is_token(batch):
                found.add((_input(vertex, channel.port), time))
        for vertex, pending in core.notifications.pending.items():
            if pending:
                found.update((_vertex(vertex), t) for t in pending)
        for name, epoch in core.input_epochs.items():
            if epoch is not None:
                found.add((_vertex(name), Timestamp(epoch)))
    return frozenset(found)


@functools.lru_cache(maxsize=4096)
def _input(vertex: str, port: int) -> Location:
    """``Location.of_input``, made once per input (the oracle names millions)."""
    return Location.of_input(vertex, port)


@functools.lru_cache(maxsize=4096)
def _vertex(vertex: str) -> Location:
    """``Location.of_vertex``, made once per vertex."""
    return Location.of_vertex(vertex)


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


@functools.lru_cache(maxsize=65536)
def least_reached(plan, location: Location, time: Timestamp) -> tuple[tuple[Location, Timestamp], ...]:
    """The least of :func:`reached_from` ``(location, time)`` at each vertex input."""
    at: dict[Location, list[Timestamp]] = {}
    for target, reached in reached_from(plan, location, time):
        at.setdefault(target, []).append(reached)
    return tuple((target, least) for target, times in at.items() for least in minimal_elements(times))


@functools.lru_cache(maxsize=16384)
def least_caused(plan, pointstamps: frozenset[Pointstamp]) -> list[tuple[Location, Timestamp, Pointstamp]]:
    """The least times that ``pointstamps`` may still cause at each vertex input, each with
    one pointstamp causing it. A frontier at or below these is at or below every time they
    may cause (the order is transitive), so checking these checks them all. The least of
    all are the least of each pointstamp's least (:func:`least_reached`, kept per pointstamp:
    a time below another one pointstamp causes is below it among them all too), found in one
    sweep (``minimal_elements``): inserting each time into an ``Antichain`` took a third of
    the CPU of the runs the oracle checks."""
    causes: dict[tuple[Location, Timestamp], Pointstamp] = {}
    for location, time in pointstamps:
        causes.update(dict.fromkeys(least_reached(plan, location, time), (location, time)))
    at: dict[Location, list[Timestamp]] = {}
    for target, reached in causes:
        at.setdefault(target, []).append(reached)
    return [(target, reached, causes[(target, reached)]) for target, times in at.items() for reached in minimal_elements(times)]


def check_frontiers_cover_the_truth(job: LocalJob) -> None:
    """Safety: the tracker's frontier at every vertex input is at or below every time that
    really may still arrive there. Holding deltas back may keep a frontier low, never high.

    Checked only while the job is whole: not between a death and the end of the recovery
    it causes (the dead actor's state is gone, and the survivors' is rolled back).
    """
    if job.dead or job.failures or job.recovery_steps or job.progress is None:
        return
    tracker = job.progress.publisher.tracker
    frontiers: dict[Location, list[Timestamp]] = {}
    for target, reached, (location, time) in least_caused(job.plan, true_pointstamps(job)):
        frontier = frontiers.get(target)
        if frontier is None:
            frontier = frontiers[target] = tracker.frontier(target)
        if not any(f.less_equal(reached) for f in frontier):
            raise AssertionError(f"the frontier at {target} is {frontier}, past {reached} "
                                 f"which ({time} at {location}) may still cause")
