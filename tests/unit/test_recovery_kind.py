"""Which recovery a death calls for (:func:`raytide.supervisor.alone.decide`): one clause of
the rule each, on compiled plans."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import raytide as rt
from raytide.engine.replica import ReplicaCore
from raytide.physical.plan import PhysicalPlan, compile_plan
from raytide.physical.protocol import ReplicaKey
from raytide.supervisor.alone import decide, logged_chains, numbering_for, recovered_how
from tests.unit.test_replica_core import Recorder


def _plan(input_width: int = 1, stage: str = "map") -> PhysicalPlan:
    """An input, a 4-replica middle stage (a map, or a stateful map: it may notify) and a
    one-replica output after it (not fused into the stage)."""
    flow = rt.Dataflow("kinds")
    source = flow.input("x", parallelism=input_width)
    middle = (source.map(lambda r: r, name="m", parallelism=4) if stage == "map"
              else source.stateful_map(lambda r: r, lambda s, r: (s, r), name="m", parallelism=4))
    middle.map(lambda r: r, name="last", parallelism=1).output("out")
    return compile_plan(flow)


def test_a_stage_fed_by_one_channel_that_never_notifies_is_recovered_alone():
    kind = decide(_plan(), [ReplicaKey("m", 2)])
    assert kind.kind == "alone" and "replica m[2]" in kind.why and "ChannelId(source='x'" in kind.why


def test_an_input_replica_is_recovered_alone_from_the_drivers_call_log():
    kind = decide(_plan(input_width=2), [ReplicaKey("x", 1)])
    assert kind.kind == "alone" and "the driver's call log" in kind.why


def test_several_channels_fall_back_as_their_order_is_not_logged():
    kind = decide(_plan(input_width=3), [ReplicaKey("m", 0)])
    assert kind.kind == "job" and "takes 3 channels" in kind.why and "not logged" in kind.why


def test_a_vertex_that_may_notify_falls_back():
    kind = decide(_plan(stage="stateful"), [ReplicaKey("m", 0)])
    assert kind.kind == "job" and "vertex 'm' asks for notifications" in kind.why


def test_an_output_falls_back():
    plan = _plan()
    chain = plan.chain_of("out").name
    kind = decide(plan, [ReplicaKey(chain, 0)])
    assert kind.kind == "job" and "vertex 'out' is an output" in kind.why


def test_a_replica_inside_a_loop_falls_back():
    flow = rt.Dataflow("loop")
    loop = flow.loop("loop")
    back = loop.feedback(name="back")
    rounds = flow.vertex(rt.Vertex, [loop.enter(flow.input("x"), name="enter"), back.stream], name="body")[0]
    back.connect(rounds)
    loop.leave(rounds, name="leave").output("out")
    plan = compile_plan(flow, 2)
    kind = decide(plan, [ReplicaKey(plan.chain_of("body").name, 1)])
    assert kind.kind == "job" and "sits inside a loop" in kind.why


def test_an_event_time_input_falls_back():
    flow = rt.Dataflow("clocked")
    flow.input("x", parallelism=2, event_time=rt.EventTime(lambda r: r)).map(str, parallelism=1).output("out")
    kind = decide(compile_plan(flow), [ReplicaKey("x", 0)])
    assert kind.kind == "job" and "input 'x' has event time" in kind.why


def test_two_deaths_another_actor_or_a_rescale_fall_back():
    plan = _plan()
    assert "2 replicas died at once (m[0], m[1])" in decide(plan, [ReplicaKey("m", 0), ReplicaKey("m", 1)]).why
    assert decide(plan, [ReplicaKey("m", 0)], others=["the progress actor"]).why.startswith("the progress actor died")
    assert "a rescale was under way" in decide(plan, [ReplicaKey("m", 0)], rescaling=True).why


def test_what_both_worlds_carry_out_alone_leaves_inputs_and_relays_to_the_whole_job():
    """``recovered_how``: ``decide``'s rule, narrowed to what the simulator's and the Ray
    driver's steps carry out (an input replica's replay and a relay's lost gathering are not)."""
    plan = _plan()
    assert recovered_how(plan, [ReplicaKey("m", 2)]) == decide(plan, [ReplicaKey("m", 2)])
    assert recovered_how(plan, [ReplicaKey("m", 2)]).kind == "alone"
    kind = recovered_how(_plan(input_width=2), [ReplicaKey("x", 1)])
    assert kind.kind == "job" and "replica x[1] is an input's" in kind.why
    kind = recovered_how(plan, [ReplicaKey("m", 2)], relays={ReplicaKey("m", 2)})
    assert kind.kind == "job" and "its node's progress relay" in kind.why
    assert recovered_how(plan, [ReplicaKey("m", 0), ReplicaKey("m", 1)]).kind == "job"


def test_alone_numbers_only_a_plan_with_a_replica_the_rule_recovers_alone():
    """``numbering_for`` turns ``alone`` off on a plan none of whose replicas the rule recovers
    alone (no numbering, no logs kept for a replay that never comes), and keeps what was asked
    otherwise; ``alone`` is on by default."""
    on, off = rt.Recovery("x"), rt.Recovery("x", alone=False)
    assert on.alone
    assert numbering_for(_plan(), on) == on and numbering_for(_plan(), on).logged == {"m"}
    assert numbering_for(_plan(), off) is off
    for plan in (_plan(input_width=3), _plan(stage="stateful")):  # every stage takes 3 channels, or notifies
        assert numbering_for(plan, on) == off and not numbering_for(plan, on).alone


def _small_plan(input_width: int, stage: str, width: int, chaining: bool) -> PhysicalPlan:
    """An input, a middle stage of ``width`` (a map, a stateful map that may notify, or a keyed
    exchange into a map), a map after it, an output: chained or not."""
    flow = rt.Dataflow("small")
    source = flow.input("x", parallelism=input_width)
    middle = (source.stateful_map(lambda r: r, lambda s, r: (s, r), name="m", parallelism=width) if stage == "stateful"
              else source.exchange(lambda r: r, name="m", parallelism=width) if stage == "keyed"
              else source.map(lambda r: r, name="m", parallelism=width))
    middle.map(lambda r: r, name="last", parallelism=width).output("out")
    return compile_plan(flow, chaining=chaining)


@given(st.integers(1, 3), st.sampled_from(["map", "stateful", "keyed"]), st.integers(1, 4), st.booleans())
@settings(max_examples=40, deadline=None)
def test_every_channel_into_a_replica_recovered_alone_is_logged_and_no_other(input_width, stage, width, chaining):
    """``logged_chains`` against ``decide`` by brute force: every replica ``decide`` recovers
    alone (but an input's, which the driver's call log replays) is in a logged chain, so each
    of its senders' cores keeps every channel into it; a chain none of whose replicas is
    recovered alone keeps nothing."""
    plan = _small_plan(input_width, stage, width, chaining)
    logged = logged_chains(plan)
    alone = {key for key in plan.replica_keys() if decide(plan, [key]).kind == "alone"
             and plan.vertex(plan.chain(key.chain).vertices[0]).role != "input"}
    assert {key.chain for key in alone} == logged
    for key in plan.replica_keys():
        core = ReplicaCore(plan, key.chain, key.replica, Recorder(), numbered=True, logged=logged)
        for to, channel, _ in core.outbox.token_channels(frozenset(plan.vertices)):
            assert core.outbox.numbering.log.keeps((to, channel)) == (to.chain in logged), (key, to, channel)
