"""A replica's local snapshot: what take, complete and load keep, and the reuse of pickled kept records."""

from __future__ import annotations

from raytide.physical.protocol import ReplicaKey
from raytide.progress.timestamps import Timestamp
from raytide.snapshots.replica_state import ReplicaState, complete, load, pickle_outputs, take, unpickle_outputs


def state(kept: dict[str, dict[int, list]], user: dict | None = None) -> ReplicaState:
    return ReplicaState(user or {}, {"sum": {Timestamp(2)}}, {"in": 3}, {"in": 7}, kept, {}, {})


def test_a_snapshot_restores_the_kept_records_and_a_user_state_holding_a_function():
    kept = {"out": {1: [("a", 1)], 2: [("b", 2), ("c", 3)]}}
    taken, _ = take(state(kept, {"sum": {"total": 5, "scale": lambda x: 2 * x}}), 0.1)
    snapshot = complete(4, ReplicaKey("sum", 0), taken, {})
    restored, batches = load(snapshot.data)
    assert restored.kept == kept and batches == []
    assert restored.user["sum"]["total"] == 5 and restored.user["sum"]["scale"](3) == 6
    assert (restored.notifications, restored.input_epochs, restored.positions) == ({"sum": {Timestamp(2)}}, {"in": 3}, {"in": 7})
    assert unpickle_outputs(snapshot.summary.outputs) == kept


def test_the_snapshot_is_a_copy_that_later_appends_do_not_reach():
    kept = {"out": {1: ["a"]}}
    taken, pickles = take(state(kept), 0.0)
    kept["out"][1].append("b")
    kept["out"][2] = ["c"]
    assert load(complete(1, ReplicaKey("out", 0), taken, {}).data)[0].kept == {"out": {1: ["a"]}}
    again, _ = take(state(kept), 0.0, pickles)
    assert load(complete(2, ReplicaKey("out", 0), again, {}).data)[0].kept == {"out": {1: ["a", "b"], 2: ["c"]}}


def test_kept_records_are_pickled_again_only_when_their_list_grew_or_was_replaced():
    same, grown = ["a"], ["b"]
    kept = {"out": {1: same, 2: grown}}
    first, pickles = pickle_outputs(kept, {})
    grown.append("c")
    kept["out"][3] = ["d"]
    second, pickles = pickle_outputs(kept, pickles)
    assert second["out"][1] is first["out"][1] and second["out"][2] is not first["out"][2]
    kept["out"][1] = ["a"]  # an equal list of the same length, but another one: pickled afresh
    del kept["out"][2]
    third, pickles = pickle_outputs(kept, pickles)
    assert third["out"][1] is not first["out"][1] and set(pickles) == {("out", 1), ("out", 3)}
    assert unpickle_outputs(third) == {"out": {1: ["a"], 3: ["d"]}}
