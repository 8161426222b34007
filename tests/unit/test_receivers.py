"""Whom a replica sends to (:func:`raytide.engine.outbox.receivers`), the only replicas whose
handles the driver gives it: against brute force from the other side, every channel into
every chain head's replicas (:meth:`PhysicalPlan.input_channels`), over random widths."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import raytide as rt
from raytide.engine.outbox import receivers
from raytide.physical.plan import PhysicalPlan, compile_plan
from raytide.physical.protocol import ReplicaKey


def senders_into(plan: PhysicalPlan, key: ReplicaKey) -> set[ReplicaKey]:
    """Brute force: the other replicas with a channel from replica ``key`` into their chain's head."""
    sources = set(plan.chain(key.chain).vertices)
    return {ReplicaKey(chain.name, replica)
            for chain in plan.chains for replica in range(chain.parallelism)
            for channel in plan.input_channels(chain.vertices[0], replica)
            if channel.source in sources and channel.sender == key.replica} - {key}


def flows() -> list[rt.Dataflow]:
    """A pipeline and its fan-out, an exchange, a broadcast, and a loop whose body exchanges."""
    fanout = rt.Dataflow("fanout")
    s = fanout.input("x").map(str, name="m")
    s.map(len, name="a").output("oa")
    s.broadcast(name="b").output("ob")
    s.exchange(len, name="e").output("oe")
    looped = rt.Dataflow("loop")
    loop = looped.loop("loop")
    back = loop.feedback(name="back")
    rounds, reports = looped.vertex(rt.Vertex, [loop.enter(looped.input("x"), name="enter"), back.stream], outputs=2,
                                    exchange=[None, lambda r: r], name="body")
    back.connect(rounds)
    loop.leave(reports, name="leave").output("out")
    return [fanout, looped]


@given(widths=st.lists(st.integers(1, 4), min_size=8, max_size=8), default=st.integers(1, 3))
def test_a_replica_sends_to_exactly_the_replicas_with_a_channel_from_it(widths, default):
    for flow in flows():
        plan = compile_plan(flow, default, widths=dict(zip(sorted(flow.vertices), widths)))
        for key in plan.replica_keys():
            assert receivers(plan, key) == senders_into(plan, key), key


def test_a_keyed_vertex_feeding_only_an_output_sends_to_nobody_and_its_inputs_to_all_its_replicas():
    flow = rt.Dataflow("keyed")
    flow.input("records").stateful_map(lambda r: r[0], lambda s, r: (s, r), name="check").output("out")
    plan = compile_plan(flow, 2, widths={"check": 3, "out": 3})
    (keyed,) = [chain.name for chain in plan.chains if "check" in chain.vertices]
    assert receivers(plan, ReplicaKey(keyed, 1)) == frozenset()
    assert receivers(plan, ReplicaKey("records", 0)) == {ReplicaKey(keyed, r) for r in range(3)}
