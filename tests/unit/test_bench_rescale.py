"""bench rescale's issue-74 measures on made-up times: which groups each rescale moves, the
longest idle time of the groups that stay, and the throughput over a window."""

from __future__ import annotations

import pytest

from bench.bench_rescale import _group_times, _idle, _issue_measures, epoch_records, moved_groups
from raytide.core.keygroups import key_group


def test_the_rescales_1_2_1_move_the_second_half_of_the_groups_each_time():
    moved = moved_groups(3)
    assert moved == [set(range(64, 128))] * 3


def test_the_idle_time_is_the_longest_gap_of_a_staying_group_that_overlaps_the_window():
    times = {1: [0.0, 0.1, 0.5, 0.6], 2: [0.0, 0.9]}
    assert _idle(times, {1}, 0.2, 0.3) == pytest.approx(0.4)
    assert _idle(times, {1, 2}, 0.2, 0.3) == pytest.approx(0.9)
    assert _idle(times, {1}, 0.7, 0.8) == 0.0  # no gap of group 1 overlaps


def test_the_issue_measures_take_the_window_against_the_calm_epochs():
    key = next(k for k in range(1000) if key_group(k) < 64)  # a group the rescale 1 -> 2 does not move
    out = {e: [(key, e * 0.1 + 0.01)] for e in range(1, 20)}
    for epoch in range(10, 15):  # pushed in the window [1.0, 1.4], all done at 1.5
        out[epoch] = [(key, 1.5)]
    pushed = {e: e * 0.1 for e in range(1, 20)}
    done = {e: max(at for _, at in part) for e, part in out.items()}
    found = _issue_measures(out, pushed, done, [(1.0, 1.4)], moved_groups(1))
    assert found["unmoved_idle_s"] == [pytest.approx(1.5 - 0.91)]
    assert found["latency_p99_ratio"][0] == pytest.approx(0.5 / 0.01, rel=0.02)
    assert found["throughput_ratio"][0] == pytest.approx(0.0)
    assert set(_group_times(out)) == {key_group(key)}


def test_every_epoch_has_a_record_of_every_key_group_and_as_many_records_as_asked():
    records = epoch_records(7, keys=1000, per_epoch=200)
    assert len(records) == 200 and {key_group(key) for key, _ in records} == set(range(128))
