"""Changing the parallelism of a running job's vertices (``job.rescale``), and what widths it asks for.

A rescale runs in these steps; the job object, the driver, its inputs and outputs, the
progress actor, the coordinator and the hosts stay, nothing is written to the snapshot
store, nothing is redone and nothing is handed out twice::

    driver ──lease + ping──▶ new hosts from the warm pool            (the job runs meanwhile)
    driver ──hold_now──▶ coordinator ──hold marker──▶ input replicas  (*waits* for every report)
        each replica aligns on the marker as on a snapshot barrier (a loop head logs its back
        edge until the marker comes round), then holds: it keeps its state there, by
        reference, and runs nothing more (later records and driver calls are dropped: the
        inputs replay them to the new configuration)
        replica ──acknowledge(HeldReport: pointstamps, positions, kept outputs, tables)──▶ coordinator
    driver: the new routing tables (raytide.rescale.layout.new_tables)
    driver ──hand_over(new plan, tables)──▶ every held replica        (*waits*)
        each splits its state by key group (raytide.rescale.layout.split): the piece for the
        replica of its own key stays in its process, the others go to the object store
    driver ──reconfigure──▶ coordinator; ──take the new role──▶ every host (a kept host's
        new role inherits the piece its old one kept); retiring hosts go back to the pool
    driver ──adopt(refs of its pieces)──▶ every new replica           (*waits*: its pointstamps)
        each merges its pieces (raytide.rescale.layout.merge: put_keys, notifications,
        logged back-edge batches, kept outputs)
    driver ──restore(summed pointstamps, kept outputs)──▶ progress actor; ──resume──▶ every
        replica; the inputs replay the calls after their positions at the cut
    driver ──start──▶ coordinator                                     (periodic snapshots again)

The pause is the alignment plus the moving key groups through the object store; the state
that stays where it is is neither copied nor pickled. A death before the hand-over is done
recovers the job in its old configuration from its last committed snapshot, and the cut is
taken again; after it, the job is in the new one, and the recovery restores the last
committed snapshot laid out for the new widths (:mod:`raytide.rescale.reshard`). Either way,
one consistent configuration. The next periodic snapshot is the rescaled job's.

Which vertices change: the ones asked for, and with each the vertices that must keep its
width. A vertex whose only input is one pipeline edge from a vertex of its width (other
than an input) reads that vertex's records replica by replica, so its keys live where that
vertex's do: a pipeline between different widths deals batches round robin and would
scatter a key's records. Such a vertex and the one it reads are rescaled together.
"""

from __future__ import annotations

from collections.abc import Mapping

from raytide.core.arguments import positive_int
from raytide.errors import GraphError, RescaleError
from raytide.physical.plan import PhysicalPlan


def _follows(plan: PhysicalPlan, name: str) -> str | None:
    """The vertex ``name`` reads replica by replica and must keep the width of, if any."""
    edges = [edge for port in plan.vertex(name).inputs for edge in port]
    if len(edges) != 1 or edges[0].channel.kind != "pipeline":
        return None
    source = edges[0].source
    if source in plan.inputs or plan.width(source) != plan.width(name):
        return None
    return source


def group_leaders(plan: PhysicalPlan) -> dict[str, str]:
    """Per vertex, the leader of the vertices rescaled with it: the one the others read
    replica by replica (directly or through each other), itself if none."""
    leader: dict[str, str] = {}

    def find(name: str) -> str:
        while leader.get(name, name) != name:
            name = leader[name]
        return name

    for name in plan.vertices:
        upstream = _follows(plan, name)
        if upstream is not None:
            leader[find(name)] = find(upstream)
    return {name: find(name) for name in plan.vertices}


def width_groups(plan: PhysicalPlan) -> dict[str, frozenset[str]]:
    """Per vertex, the vertices that are rescaled with it (itself included)."""
    leaders = group_leaders(plan)
    members: dict[str, set[str]] = {}
    for name, leader in leaders.items():
        members.setdefault(leader, set()).add(name)
    return {name: frozenset(members[leader]) for name, leader in leaders.items()}


def new_widths(plan: PhysicalPlan, asked: Mapping[str, int]) -> dict[str, int]:
    """Every vertex's width after a rescale that asks for ``asked`` (``{vertex: n}``).

    Raises:
        GraphError: ``asked`` names a vertex the job does not have.
        ArgumentError: a width that is not a positive integer.
        RescaleError: ``asked`` changes an input's width (its positions are per replica,
            see :mod:`raytide.rescale.reshard`), or gives two vertices that must keep one
            width (:func:`width_groups`) different ones.
    """
    unknown = sorted(set(asked) - set(plan.vertices))
    if unknown:
        raise GraphError(f"job of dataflow {plan.name!r} has no vertex {unknown[0]!r}; its vertices: "
                         f"{sorted(plan.vertices)}")
    asked = {name: positive_int(width, f"the parallelism of vertex {name!r}") for name, width in asked.items()}
    inputs = sorted(name for name, width in asked.items() if name in plan.inputs and width != plan.width(name))
    if inputs:
        raise RescaleError(f"input {inputs[0]!r} cannot change its parallelism ({plan.width(inputs[0])}) while the job "
                           f"runs: its position in the stream is per replica; rescale the vertices after it")
    widths = {name: plan.width(name) for name in plan.vertices}
    groups = width_groups(plan)
    for name, width in asked.items():
        for member in groups[name]:
            other = asked.get(member, width)
            if other != width:
                raise RescaleError(f"vertices {name!r} and {member!r} must keep one width ({member!r} reads {name!r}'s "
                                   f"records replica by replica, or the other way round), but {width} and {other} "
                                   f"were asked for")
            widths[member] = width
    return widths
