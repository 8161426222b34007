"""A replica's calls for a rescale (:class:`RescaleCalls`, a part of
:class:`~raytide.actors.vertex_actor.VertexActor`): the whole-job switch's hand-over and
adoption of state pieces, and a stepped rescale's plan and the driver's look at its steps
(docs/rescaling.md). Kept apart from the data path's calls; the same thin shell over the
:class:`~raytide.engine.replica.ReplicaCore`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import ray

from raytide.actors.ray_transport import RayTransport
from raytide.core.keygroups import KeyGroupAssignment
from raytide.engine.replica import ReplicaCore
from raytide.errors import RaytideError, RescaleError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ProgressRoute, ReplicaKey, StepPlanMessage
from raytide.progress.reachability import Location

if TYPE_CHECKING:  # not imported by a host: a job without rescales never loads it
    from raytide.rescale.layout import Piece


class RescaleCalls:
    """The rescale calls of a vertex replica (what :class:`VertexActor` keeps that they use is declared here)."""

    plan: PhysicalPlan
    core: ReplicaCore
    transport: RayTransport
    key: ReplicaKey
    kept: tuple[int, ReplicaKey, Piece] | None
    failed: RaytideError | None
    _current: Callable[[int], bool]
    _guard: Callable[..., None]
    _reset: Callable[[int, dict[ReplicaKey, Any], ProgressRoute, Any], None]

    def hand_over(self, incarnation: int, into: int, plan: PhysicalPlan, old_widths: dict[str, int],
                  tables: dict[str, KeyGroupAssignment]) -> dict[ReplicaKey, Any]:
        """A rescale to ``plan`` in incarnation ``into``: this replica, held at its cut, splits
        its state into a piece per replica of ``plan`` (:meth:`ReplicaCore.hand_over`). The
        piece for the replica of the same key, which this host goes on playing, stays here,
        not copied (:class:`~raytide.actors.hosts.VertexHost` passes it to the new role); the
        others go to the object store. Returns their refs."""
        if not self._current(incarnation):
            raise RescaleError(f"replica {self.transport.job}/{self.key} is in incarnation "
                               f"{self.transport.incarnation}, not {incarnation}: it cannot hand over its state")
        pieces = self.core.hand_over(plan, old_widths, tables)
        own = pieces.pop(self.key, None)
        self.kept = None if own is None else (into, self.key, own)
        return {key: ray.put(piece) for key, piece in pieces.items()}

    def adopt(self, incarnation: int, refs: list, old_widths: dict[str, int], tables: dict[str, KeyGroupAssignment],
              peers: dict[ReplicaKey, Any], progress: ProgressRoute, coordinator: Any) -> tuple[list[Location] | RaytideError, list]:
        """Start incarnation ``incarnation`` of a rescaled job as this replica, from the pieces
        the held replicas handed over (``refs``, and what this host kept for it); nothing
        runs until :meth:`resume`. Returns the locations to subscribe to (or what the adoption
        raised, as :meth:`restore`) and the pointstamps the replica holds."""
        self._reset(incarnation, peers, progress, coordinator)
        pieces = list(ray.get(refs)) if refs else []
        if self.kept is not None and self.kept[:2] == (incarnation, self.key):
            pieces.append(self.kept[2])
        self.kept = None
        held: list = []
        self._guard(lambda: held.extend(self.core.adopt(old_widths, tables, pieces)))
        return self.failed or self.core.subscriptions(), held

    def install_plan(self, incarnation: int, message: StepPlanMessage, peers: dict[ReplicaKey, Any]) -> None:
        """A stepped rescale's plan from the driver (:meth:`ReplicaCore.install_plan`; refused, failing the job, if one of
        this replica's inputs reached its first step's epoch), with the handles of the replicas it hands groups to."""
        if self._current(incarnation):
            self.transport.peers.update(peers)
            self._guard(self.core.install_plan, message)

    def stepping(self) -> tuple[dict[tuple[str, int, int], KeyGroupAssignment], list[str]]:
        """The driver's look at a stepped rescale here: the routing tables (after a plan's last step) and the
        vertices with steps left (:mod:`raytide.driver.stepped`)."""
        return self.core.outbox.tables(), sorted(name for name, steps in self.core.stepped.items() if not steps.moves.done)

    def widen(self, incarnation: int, plan: PhysicalPlan, peers: dict[ReplicaKey, Any]) -> None:
        """A growing stepped rescale's join (docs/rescaling.md): play ``plan`` from now
        (:meth:`ReplicaCore.widen`), reaching the joined replicas ``peers`` it sends to; or a
        shrink's retiring switch: ``plan`` narrower, the links to the retiring replicas closed.
        The driver gives the old plan back the same way if a death stops either (before the
        recovery's restore, which builds the core from it)."""
        if self._current(incarnation):
            self.plan = self.transport.plan = plan
            transport, keys = self.transport, set(plan.replica_keys())
            kept = {key: handle for key, handle in {**transport.peers, **peers}.items() if key in keys}
            transport.connect(kept, transport.unbounded, transport.route)
            self._guard(self.core.widen, plan)

    def retire(self, incarnation: int) -> tuple[str | None, int]:
        """A shrink's retiring switch (docs/rescaling.md): why this replica, emptied by the plan's
        steps, cannot leave yet, or None, its progress shipped; with the number of its messages the
        progress actor must apply first (:meth:`ReplicaCore.retire`). Another incarnation's: it
        is not this job's replica any more."""
        if not self._current(incarnation):
            return f"replica {self.key} is not in incarnation {incarnation}", 0
        return self.core.retire()
