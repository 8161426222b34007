"""The barrier-alignment state machine, driven directly."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.errors import SnapshotError
from raytide.snapshots.barriers import (
    BarrierAligner,
    Decision,
    ForwardBarrier,
    Release,
    SnapshotComplete,
    TakeSnapshot,
)


def _snapshot(k: int, logged: dict | None = None) -> list:
    """The effects of aligning snapshot ``k`` at a vertex without back edges (or the start of them)."""
    return [TakeSnapshot(k), ForwardBarrier(k)] + ([] if logged is None else [SnapshotComplete(k, logged)])


def test_single_input_aligns_at_once() -> None:
    aligner = BarrierAligner("map", inputs=["in"])
    assert aligner.on_record("in", 1) is Decision.DELIVER
    assert aligner.on_barrier("in", 1) == _snapshot(1, {})
    assert aligner.on_record("in", 2) is Decision.DELIVER
    assert aligner.blocked == frozenset()


def test_blocked_channel_holds_records_in_order_until_alignment() -> None:
    aligner = BarrierAligner("join", inputs=["a", "b", "c"])
    assert aligner.on_barrier("a", 1) == []
    assert [aligner.on_record("a", r) for r in "xyz"] == [Decision.BUFFER] * 3
    assert aligner.on_barrier("c", 1) == []
    assert aligner.on_record("c", "w") is Decision.BUFFER
    assert aligner.on_record("b", "v") is Decision.DELIVER
    assert (aligner.aligning, aligner.blocked) == (1, frozenset({"a", "c"}))
    assert aligner.on_barrier("b", 1) == _snapshot(1, {}) + [Release("a", ("x", "y", "z")), Release("c", ("w",))]
    assert (aligner.aligning, aligner.blocked) == (None, frozenset())
    assert aligner.on_record("a", "after") is Decision.DELIVER


def test_barrier_queued_behind_records_blocks_the_channel_again_on_release() -> None:
    aligner = BarrierAligner("join", inputs=["a", "b"])
    aligner.on_barrier("a", 1)
    aligner.on_record("a", "r1")
    assert aligner.on_barrier("a", 2) == []
    aligner.on_record("a", "r2")
    assert aligner.on_barrier("b", 1) == _snapshot(1, {}) + [Release("a", ("r1",))]
    assert (aligner.aligning, aligner.blocked) == (2, frozenset({"a"}))
    assert aligner.on_record("a", "r3") is Decision.BUFFER
    assert aligner.on_record("b", "s") is Decision.DELIVER
    assert aligner.on_barrier("b", 2) == _snapshot(2, {}) + [Release("a", ("r2", "r3"))]


def test_snapshot_ids_may_skip_numbers() -> None:
    aligner = BarrierAligner("map", inputs=["in"])
    aligner.on_barrier("in", 1)
    assert aligner.on_barrier("in", 5) == _snapshot(5, {})


def test_back_edge_records_are_logged_between_local_snapshot_and_barrier() -> None:
    head = BarrierAligner("head", inputs=["in", "fb"], back_edges=["fb"])
    assert head.on_record("fb", "before") is Decision.DELIVER
    assert head.on_barrier("in", 1) == _snapshot(1)
    assert head.waiting == (1,)
    assert head.on_record("in", "regular") is Decision.DELIVER
    assert [head.on_record("fb", r) for r in ("x", "y")] == [Decision.DELIVER_AND_LOG] * 2
    assert head.on_barrier("fb", 1) == [SnapshotComplete(1, {"fb": ("x", "y")})]
    assert head.waiting == ()
    assert head.on_record("fb", "after") is Decision.DELIVER


def test_back_edges_are_never_blocked_while_aligning() -> None:
    head = BarrierAligner("head", inputs=["a", "b", "fb"], back_edges=["fb"])
    head.on_barrier("a", 1)
    assert head.on_record("fb", "x") is Decision.DELIVER
    assert head.blocked == frozenset({"a"})


def test_snapshot_with_two_back_edges_completes_after_both_barriers() -> None:
    head = BarrierAligner("head", inputs=["in", "f1", "f2"], back_edges=["f1", "f2"])
    head.on_barrier("in", 1)
    head.on_record("f2", "y")
    assert head.on_barrier("f1", 1) == []
    assert head.on_record("f1", "after") is Decision.DELIVER
    assert head.on_record("f2", "z") is Decision.DELIVER_AND_LOG
    assert head.on_barrier("f2", 1) == [SnapshotComplete(1, {"f1": (), "f2": ("y", "z")})]


def test_overlapping_snapshots_log_back_edge_records_for_each() -> None:
    head = BarrierAligner("head", inputs=["in", "fb"], back_edges=["fb"])
    head.on_barrier("in", 1)
    head.on_record("fb", "r1")
    assert head.on_barrier("in", 2) == _snapshot(2)
    assert head.waiting == (1, 2)
    head.on_record("fb", "r2")
    assert head.on_barrier("fb", 1) == [SnapshotComplete(1, {"fb": ("r1", "r2")})]
    assert head.on_record("fb", "r3") is Decision.DELIVER_AND_LOG
    assert head.on_barrier("fb", 2) == [SnapshotComplete(2, {"fb": ("r2", "r3")})]


def test_source_snapshots_when_injected() -> None:
    source = BarrierAligner("numbers")
    assert source.inject(1) == _snapshot(1, {})
    assert source.inject(3) == _snapshot(3, {})


@pytest.mark.parametrize(
    ("inputs", "back_edges", "message"),
    [
        (["a", "a"], [], "repeat"),
        (["a"], ["b"], "not input"),
        (["a", "b"], ["a", "b"], "every input is a back edge"),
    ],
)
def test_malformed_channels_are_refused(inputs: list, back_edges: list, message: str) -> None:
    with pytest.raises(SnapshotError, match=f"vertex 'v'.*{message}"):
        BarrierAligner("v", inputs=inputs, back_edges=back_edges)


def test_unknown_channel_is_an_error() -> None:
    aligner = BarrierAligner("v", inputs=["a"])
    with pytest.raises(SnapshotError, match="vertex 'v': a record on channel 'x'"):
        aligner.on_record("x", 1)
    with pytest.raises(SnapshotError, match="vertex 'v': barrier 1 on channel 'x'"):
        aligner.on_barrier("x", 1)


def test_duplicate_barrier_is_an_error_even_on_a_blocked_channel() -> None:
    aligner = BarrierAligner("v", inputs=["a", "b"])
    aligner.on_barrier("a", 1)
    with pytest.raises(SnapshotError, match="vertex 'v': duplicate barrier 1 on channel 'a'"):
        aligner.on_barrier("a", 1)


def test_older_barrier_is_an_error() -> None:
    aligner = BarrierAligner("v", inputs=["a"])
    aligner.on_barrier("a", 2)
    with pytest.raises(SnapshotError, match="vertex 'v': older barrier 1 on channel 'a'.*barrier 2"):
        aligner.on_barrier("a", 1)


def test_channel_that_skips_the_aligning_snapshot_is_an_error() -> None:
    aligner = BarrierAligner("v", inputs=["a", "b"])
    aligner.on_barrier("a", 1)
    with pytest.raises(SnapshotError, match="vertex 'v': barrier 2 on channel 'b' while aligning snapshot 1"):
        aligner.on_barrier("b", 2)


def test_a_back_edge_barrier_before_the_local_snapshot_holds_that_edge_back_until_the_snapshot() -> None:
    """An exchanged back edge: another replica of the cycle aligned first and its barrier came
    round. What follows it on that edge was sent after that replica's snapshot: it waits for
    this one's, and the edge's barrier is already in (the snapshot logs nothing from it)."""
    head = BarrierAligner("head", inputs=["in", "fb"], back_edges=["fb"])
    assert head.on_record("fb", "before") is Decision.DELIVER
    assert head.on_barrier("fb", 1) == []
    assert head.on_record("fb", "after") is Decision.BUFFER
    assert head.on_record("in", "regular") is Decision.DELIVER
    assert head.on_barrier("in", 1) == [TakeSnapshot(1), ForwardBarrier(1), SnapshotComplete(1, {"fb": ()}),
                                        Release("fb", ("after",))]
    assert head.on_record("fb", "later") is Decision.DELIVER and not head.waiting


def test_back_edge_barriers_out_of_snapshot_order_are_an_error() -> None:
    head = BarrierAligner("head", inputs=["in", "fb"], back_edges=["fb"])
    head.on_barrier("in", 1)
    head.on_barrier("in", 2)
    with pytest.raises(SnapshotError, match="vertex 'head': barrier 2 on back edge 'fb'.*is 1"):
        head.on_barrier("fb", 2)


def test_injecting_at_a_vertex_with_inputs_is_an_error() -> None:
    with pytest.raises(SnapshotError, match="vertex 'v': snapshot 1 injected.*only a source"):
        BarrierAligner("v", inputs=["a"]).inject(1)


def test_injected_snapshot_ids_must_increase() -> None:
    source = BarrierAligner("s")
    source.inject(2)
    with pytest.raises(SnapshotError, match="vertex 's': snapshot 2 injected after snapshot 2"):
        source.inject(2)


def test_effects_are_frozen() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        TakeSnapshot(1).snapshot_id = 2  # type: ignore[misc]


@st.composite
def _channel_traffic(draw: st.DrawFn) -> tuple[dict[str, list], list[str]]:
    """Per channel, records and barriers 1..n in order; and an interleaving of the channels."""
    snapshots = draw(st.integers(0, 3))
    traffic: dict[str, list] = {}
    for channel in draw(st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True)):
        gaps = draw(st.lists(st.integers(0, 3), min_size=snapshots + 1, max_size=snapshots + 1))
        items: list = []
        for k, gap in enumerate(gaps):
            items += [(channel, len(items) + i) for i in range(gap)] + ([("barrier", k + 1)] if k < snapshots else [])
        traffic[channel] = items
    order = draw(st.permutations([c for c, items in traffic.items() for _ in items]))
    return traffic, order


@settings(max_examples=300, deadline=None, derandomize=True)
@given(_channel_traffic())
def test_alignment_processes_each_record_once_in_order_and_snapshots_a_consistent_cut(
    case: tuple[dict[str, list], list[str]],
) -> None:
    traffic, order = case
    aligner = BarrierAligner("v", inputs=list(traffic))
    pending = {c: list(items) for c, items in traffic.items()}
    processed: list = []
    cuts: dict[int, set] = {}
    for channel in order:
        item = pending[channel].pop(0)
        if item[0] != "barrier":
            if aligner.on_record(channel, item) is Decision.DELIVER:
                processed.append(item)
            continue
        for effect in aligner.on_barrier(channel, item[1]):
            if isinstance(effect, TakeSnapshot):
                cuts[effect.snapshot_id] = set(processed)
            elif isinstance(effect, Release):
                processed.extend(effect.records)
    for channel, items in traffic.items():
        assert [r for r in processed if r[0] == channel] == [r for r in items if r[0] != "barrier"]
    for k, cut in cuts.items():
        before = {r for items in traffic.values() for r in items[: items.index(("barrier", k))]}
        assert cut == {r for r in before if r[0] != "barrier"}
    snapshots = sum(r[0] == "barrier" for r in next(iter(traffic.values())))
    assert sorted(cuts) == list(range(1, snapshots + 1))
    assert aligner.blocked == frozenset()
