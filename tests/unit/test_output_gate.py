"""When completed output epochs reach the user: the output gate, and which epochs a snapshot
holds complete (what ``output_commit="snapshot"`` releases at its commit)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

import raytide as rt
from raytide.engine.output_gate import OutputGate
from raytide.physical.plan import compile_plan
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.snapshots.recovery import complete_at_cut
from raytide.snapshots.replica_state import ReplicaSummary

#: A script: ("complete", None) completes the next epoch; ("commit", e) commits a snapshot
#: holding epochs up to e complete (None: all); ("rollback", None) is a recovery.
steps = st.lists(st.one_of(st.tuples(st.just("complete"), st.none()),
                           st.tuples(st.just("commit"), st.one_of(st.none(), st.integers(-1, 12))),
                           st.tuples(st.just("rollback"), st.none())), max_size=40)


@given(steps)
def test_an_epoch_passes_once_in_order_and_only_once_a_commit_holds_it(script):
    gate = OutputGate(["out"], "snapshot")
    shown: list[int] = []
    next_epoch, watermark = 0, -1  # the oracle: epochs up to the highest committed watermark may pass
    for action, value in script:
        if action == "complete":
            shown += [epoch for epoch, _ in gate.offer("out", next_epoch, f"records {next_epoch}")]
            next_epoch += 1
        elif action == "commit":
            # A snapshot holds complete only epochs that have completed (or all, once finished).
            held_complete = next_epoch - 1 if value is None else min(value, next_epoch - 1)
            watermark = max(watermark, held_complete)
            shown += [epoch for _, epoch, _ in gate.release({"out": held_complete})]
        else:
            gate.rollback()
            next_epoch = len(shown)  # the restored job computes the rest again, from the first not shown
    assert shown == list(range(len(shown))), "each epoch once, in order"
    assert all(epoch <= watermark for epoch in shown), "nothing passes before a commit holds it"
    assert len(shown) == watermark + 1, "what a commit holds passes at once"


def test_per_epoch_commit_lets_everything_pass_and_finishing_releases_what_is_held():
    eager = OutputGate(["out"])
    assert eager.offer("out", 0, "a") == [(0, "a")]
    gate = OutputGate(["out", "other"], "snapshot")
    assert gate.offer("out", 0, "a") == [] and gate.offer("out", 1, "b") == []
    assert gate.release({"out": 0}) == [("out", 0, "a")]
    assert gate.finish() == [("out", 1, "b")]
    assert gate.offer("out", 2, "c") == [(2, "c")], "after the end nothing is held"


def test_a_snapshot_holds_complete_the_epochs_no_pointstamp_can_still_reach():
    flow = rt.Dataflow("two")
    flow.input("numbers").map(lambda x: x, name="same").output("out")
    flow.input("other").output("side")
    plan = compile_plan(flow, 1, chaining=False)

    def summary(*pointstamps: tuple[str, int]) -> ReplicaSummary:
        return ReplicaSummary([((Location.of_vertex(v), Timestamp(e)), 1) for v, e in pointstamps], {}, {})

    # The input at epoch 3 and a notification at 2 downstream of it: epochs up to 1 are complete.
    complete = complete_at_cut(plan, {"a": summary(("numbers", 3)), "b": summary(("same", 2))})
    assert complete == {"out": 1, "side": None}, "nothing reaches 'side': every epoch of it is complete"
    assert complete_at_cut(plan, {"a": summary(("numbers", 0), ("other", 5))}) == {"out": -1, "side": 4}
