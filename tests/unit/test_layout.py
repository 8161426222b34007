"""Replica states laid out for other widths (``raytide.rescale.layout``), against brute force.

Random cuts of a keyed ``stateful_map`` (each replica holding the keys its group table
gives it: their values and, per time, the records waiting for a notification) are split
at ``p`` replicas and merged at ``q``. The oracle is the whole state taken together:

* every key's value and waiting records end up exactly once, at the replica that owns
  its group in the new table, in their order;
* the pointstamps the new replicas hold cover the same (location, time) pairs as the old
  ones: a time keeps its notification exactly where records wait for it, and the
  progress tracker's frontier does not move;
* kept output records and back-edge batches are neither lost nor duplicated.
"""

from __future__ import annotations

import collections

from hypothesis import given, settings
from hypothesis import strategies as st

import raytide as rt
from raytide.core.keygroups import DEFAULT_KEY_GROUPS, KeyGroupAssignment, key_group
from raytide.physical.plan import compile_plan
from raytide.physical.protocol import ReplicaKey
from raytide.progress.timestamps import Timestamp
from raytide.rescale.layout import _MovingContext, merge, new_tables, split
from raytide.rescale.widths import new_widths
from raytide.snapshots.replica_state import ReplicaState, capabilities, summed


def running_sums() -> rt.Dataflow:
    flow = rt.Dataflow("sums")
    flow.input("n").stateful_map(lambda r: r[0], lambda s, r: ((s or 0) + r[1], r), name="sum").output("out")
    return flow


cuts = st.fixed_dictionaries({
    "old": st.integers(1, 5),
    "new": st.integers(1, 5),
    "values": st.dictionaries(st.integers(0, 60), st.integers(-9, 9), max_size=40),  # each key's running sum
    "waiting": st.lists(st.tuples(st.integers(0, 60), st.integers(0, 3), st.integers(-9, 9)), max_size=40),
    "kept": st.lists(st.tuples(st.integers(0, 4), st.integers(0, 3)), max_size=10),  # (old replica, epoch)
})


def _cut(flow: rt.Dataflow, width: int, values: dict, waiting: list, kept: list):
    """The old replicas' states: the keys of each where the contiguous table puts them."""
    plan = compile_plan(flow, width)
    table = KeyGroupAssignment.contiguous(width, DEFAULT_KEY_GROUPS)
    states = {}
    for replica in range(width):
        vertex, context = plan.vertex("sum").factory(), _MovingContext("sum", replica, width)
        vertex.bind(context)
        for key, value in values.items():
            if table.owners[key_group(key, DEFAULT_KEY_GROUPS)] == replica:
                vertex.state[key] = value
        for key, epoch, number in waiting:
            if table.owners[key_group(key, DEFAULT_KEY_GROUPS)] == replica:
                vertex.on_recv(0, [(key, number)], Timestamp(epoch))
        outputs: dict[int, list] = collections.defaultdict(list)
        for old, epoch in kept:
            if old % width == replica:
                outputs[epoch].append(("out", replica, epoch))
        states[ReplicaKey("sum+out", replica)] = ReplicaState(
            {"sum": vertex.snapshot()}, {"sum": set(context.notifications)}, {}, {}, {"out": dict(outputs)}, {}, {})
        states[ReplicaKey("n", replica)] = ReplicaState({}, {}, {"n": 4}, {"n": 7 + replica}, {}, {("n", 0, 0): table}, {})
    return plan, states


@settings(max_examples=150, deadline=None)
@given(cuts)
def test_split_and_merge_move_each_key_once_to_its_new_owner_and_keep_the_frontier(cut):
    flow = running_sums()
    plan, states = _cut(flow, cut["old"], cut["values"], cut["waiting"], cut["kept"])
    after = compile_plan(flow, cut["old"], widths=new_widths(plan, {"sum": cut["new"]}))
    old_widths = {name: plan.width(name) for name in plan.vertices}
    before = summed(pair for state in states.values() for pair in capabilities(state))
    tables = new_tables(after, old_widths, [state.tables for state in states.values()])
    pieces = collections.defaultdict(list)
    for key, state in states.items():
        for new, piece in split(after, old_widths, tables, key.replica, state, []).items():
            pieces[new].append(piece)
    merged = {key: merge(after, old_widths, tables, key, pieces[key])[0] for key in after.replica_keys()}

    values, waiting, owners = {}, collections.defaultdict(list), tables["sum"].owners
    for key, state in merged.items():
        if "sum" not in state.user:
            continue
        for k, value in state.user["sum"]["state"].items():
            assert k not in values and owners[key_group(k, DEFAULT_KEY_GROUPS)] == key.replica
            values[k] = value
        for time, records in state.user["sum"]["waiting"].items():
            assert time in state.notifications["sum"]  # a time with records keeps its notification here
            for record in records:
                assert owners[key_group(record[0], DEFAULT_KEY_GROUPS)] == key.replica
                waiting[(record[0], time.epoch)].append(record[1])
        assert state.notifications["sum"] <= set(state.user["sum"]["waiting"])  # and only there
    assert values == cut["values"]
    expected = collections.defaultdict(list)
    for key, epoch, number in cut["waiting"]:
        expected[(key, epoch)].append(number)
    assert waiting == expected  # every record once, in its key's order
    after_stamps = summed(pair for state in merged.values() for pair in capabilities(state))
    assert {stamp for stamp, _ in after_stamps} == {stamp for stamp, _ in before}  # the same frontier
    kept = sorted(record for state in merged.values() for epochs in state.kept.values()
                  for records in epochs.values() for record in records)
    assert kept == sorted(("out", old % cut["old"], epoch) for old, epoch in cut["kept"])
    positions = {key.replica: state.positions for key, state in merged.items() if state.positions}
    assert positions == {replica: {"n": 7 + replica} for replica in range(cut["old"])}  # inputs keep their index
