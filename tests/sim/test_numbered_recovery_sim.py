"""The engine's numbered channels (:mod:`raytide.engine.numbered_channels`) under the whole-job
recovery: with ``LocalRecovery(alone=True)`` every replica numbers its sends, keeps them in
its upstream log (trimmed when a barrier says a snapshot committed), admits what it receives
by number, and saves and restores both with its snapshot. The seeded crash trials of
``test_recovery_sim`` (five dataflows, crashes of a replica, the progress core or the
coordinator at any step) must end exactly as the failure-free run: a restored sender numbers
on from the marks its receivers' positions name, so no message is dropped as a duplicate and
no gap is refused (the few deaths ``decide`` allows are recovered alone). Planted: a sender
restored numbering from 0 (its receivers drop what it sends again as duplicates), and
positions saved as they are at the snapshot rather than at each channel's barrier (an
aligned channel runs ahead: what the restored sender sends again is dropped). A log never
trimmed is caught by ``tests/unit/test_numbered_channels.py``."""

from __future__ import annotations

import pytest

from raytide.engine.numbered_channels import Numbering
from raytide.snapshots.replica_state import Sequences
from raytide.supervisor.alone import logged_chains
from tests.sim.scenarios import SCENARIOS
from tests.sim.seeds import seeds
from tests.sim.test_recovery_sim import Trial, trial

#: Trials per scenario (about 0.05 s of CPU each; the loops cost four times as much).
TRIALS = {"word count": 10, "keyed": 10, "join": 8, "loop": 4, "nested loop": 4}


def numbered_trial(name: str, seed: int, store_root) -> Trial:
    """With ``alone=True`` (numbering implied): where ``decide`` refuses (most deaths here:
    notifying stages, loops, outputs, inputs) the whole job rolls back, numbered."""
    return trial(name, seed, str(store_root / f"{name}-{seed}"), alone=True)


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_numbered_channels_recover_with_exactly_the_failure_free_output(name, store_root):
    recoveries = kept = sent = 0
    for seed in seeds(TRIALS[name], f"numbered recovery {name}"):
        result = numbered_trial(name, seed, store_root)
        assert result.exact, f"{name}, seed {seed}: {result.describe()}"
        recoveries += len(result.run.recoveries) if result.run else 0
        logs = [core.outbox.numbering.log for core in result.job.replicas.values()]
        logged = logged_chains(result.job.plan)  # a plan without: every send numbered, none kept
        kept_here = sum(log.size() for log in logs)
        assert logged or not kept_here, f"{name}, seed {seed}: {kept_here} messages kept for no replay"
        kept += kept_here
        sent += sum(sum(log.positions().values()) for log in logs)
    assert recoveries >= TRIALS[name] // 2, recoveries
    assert 0 <= kept < sent, f"the logs kept {kept} of {sent} messages: numbered, and trimmed at commits"


@pytest.mark.parametrize("plant", ["senders restored at zero", "positions at the snapshot"])
def test_a_planted_bug_in_the_numbering_is_caught(monkeypatch, store_root, plant):
    original_restore, original_take = Numbering.restore, Numbering.take
    if plant == "senders restored at zero":
        def restore(self: Numbering, sequences: Sequences | None) -> None:
            original_restore(self, Sequences(sequences.taken, {}) if sequences else None)
        monkeypatch.setattr(Numbering, "restore", restore)
    elif plant == "positions at the snapshot":
        def take(self: Numbering, snapshot_id: int) -> Sequences | None:
            self._barriers.clear()
            return original_take(self, snapshot_id)
        monkeypatch.setattr(Numbering, "take", take)
    for name in sorted(SCENARIOS):
        for seed in range(TRIALS[name]):
            if not numbered_trial(name, seed, store_root).exact:
                return
    pytest.fail(f"plant {plant!r}: every trial passed")
