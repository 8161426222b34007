"""A replica's actor object, left behind when its host takes a new role (a rescale, a
recovery), is freed at once by reference counting, not at Python's next full collection.

A host process keeps long-lived objects by the hundred thousand (Ray, NumPy, the plan), so
its full collections are rare; a replica left in a reference cycle kept its transport, and
every actor handle in it, until then: in the fault soak each rescale left one per host,
and the handles' count grew without bound between collections (issue 32).
"""

from __future__ import annotations

import gc
import weakref

import raytide as rt
from raytide.actors.vertex_actor import VertexActor
from raytide.physical.plan import compile_plan


def test_a_replica_no_longer_referenced_is_freed_without_a_collection():
    flow = rt.Dataflow("lifetime")
    flow.input("records").map(lambda x: x).output("out")
    plan = compile_plan(flow, 1)
    gc.disable()  # only reference counting may free it
    try:
        replica = VertexActor(plan, "lifetime", plan.chains[-1].name, 0, max_inflight=8, myself=object())
        gone = weakref.ref(replica)
        del replica
        assert gone() is None, f"a replica stays in a cycle, held by {[type(r).__name__ for r in gc.get_referrers(gone())]}"
    finally:
        gc.enable()
