"""Barrier alignment proven end to end on random dataflows by the seeded ABS simulator."""

from __future__ import annotations

import pytest

from raytide.snapshots.barriers import BarrierAligner, ChannelKey, Decision
from tests.sim.abs_simulator import Channel, check_exactly_once

SEEDS = range(300)
"""Per graph kind (acyclic, cyclic): 600 seeded runs in all."""


class _NoAlignment(BarrierAligner):
    """Broken on purpose: processes records on a regular channel whose barrier already came."""

    def on_record(self, channel: ChannelKey, record: object) -> Decision:
        if channel in self.back_edges:
            return super().on_record(channel, record)
        return Decision.DELIVER


def _back_edges_treated_as_regular(
    vertex: str, inputs: tuple[Channel, ...], back_edges: list[Channel]
) -> BarrierAligner:
    """Broken on purpose: aligns on back edges too, as the acyclic algorithm would."""
    return BarrierAligner(vertex, inputs=inputs)


@pytest.mark.parametrize("seed", SEEDS)
def test_acyclic_recovery_is_exactly_once(seed: int) -> None:
    verdict = check_exactly_once(seed, cyclic=False)
    assert verdict.problems == (), f"seed {seed}"


@pytest.mark.parametrize("seed", SEEDS)
def test_cyclic_recovery_is_exactly_once_and_terminates(seed: int) -> None:
    verdict = check_exactly_once(seed, cyclic=True)
    assert verdict.problems == (), f"seed {seed}"


@pytest.mark.parametrize("cyclic", [False, True])
def test_seeds_cover_overlapping_snapshots_and_back_edge_logs(cyclic: bool) -> None:
    verdicts = [check_exactly_once(seed, cyclic=cyclic) for seed in SEEDS]
    assert sum(v.snapshots_checked for v in verdicts) > len(SEEDS)
    assert sum(v.overlapped for v in verdicts) > len(SEEDS) // 10
    assert (sum(v.logged_records for v in verdicts) > 0) == cyclic


def test_same_seed_same_run() -> None:
    assert check_exactly_once(7, cyclic=True) == check_exactly_once(7, cyclic=True)


@pytest.mark.parametrize("cyclic", [False, True])
def test_skipping_alignment_duplicates_records_on_recovery(cyclic: bool) -> None:
    failing = [s for s in SEEDS if check_exactly_once(s, cyclic=cyclic, aligner_factory=_NoAlignment).problems]
    assert failing, "a checker that cannot tell missing alignment apart has no teeth"
    problems = check_exactly_once(failing[0], cyclic=cyclic, aligner_factory=_NoAlignment).problems
    assert all(p.startswith("restored from snapshot") for p in problems)


def test_dropping_back_edge_logs_loses_records_on_recovery() -> None:
    assert any(check_exactly_once(s, cyclic=True, reinject_logs=False).problems for s in SEEDS)


def test_aligning_on_back_edges_never_completes_a_snapshot() -> None:
    for seed in SEEDS[:20]:
        problems = check_exactly_once(seed, cyclic=True, aligner_factory=_back_edges_treated_as_regular).problems
        assert any("blocked" in p for p in problems), f"seed {seed}"
        assert any("incomplete" in p for p in problems), f"seed {seed}"
