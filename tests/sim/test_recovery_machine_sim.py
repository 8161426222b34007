"""The recovery machine the Ray driver runs, run by the in-process runtime: a planted
departure from its steps is caught by the seeded crash trials."""

from __future__ import annotations

from raytide.snapshots import recovering
from tests.sim.chaos import caught_by
from tests.sim.test_recovery_sim import trial


def test_a_recovery_pauses_the_coordinator_before_it_reads_the_restore_point(store_root, monkeypatch):
    """Without the pause, a snapshot of the lost incarnation that was almost complete commits
    while the replicas are restored from the one before it, and its retention deletes the
    files they read (found by these trials once the simulator ran the driver's machine: the
    old simulator reset its coordinator at once, the Ray driver only at the end)."""
    begin = recovering.Recovering._begin

    def without_the_pause(self: recovering.Recovering, cause: str) -> list:
        return [effect for effect in begin(self, cause) if not isinstance(effect, recovering.PauseCoordinator)]

    with monkeypatch.context() as planted:
        planted.setattr(recovering.Recovering, "_begin", without_the_pause)
        caught = caught_by(["keyed"], 110, lambda name, seed: not trial(name, seed, str(store_root / f"p{seed}")).exact)
    assert caught, "no trial caught a recovery that leaves the coordinator running"
    ((name, seed),) = caught
    assert trial(name, seed, str(store_root / "paused")).exact, "the same trial, with the pause, is exact"
