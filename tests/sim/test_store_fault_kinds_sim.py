"""Each fault of a snapshot store (issue 73, 11), its behaviour decided and checked in seeded
trials: a recovery trial's crashes (``tests/sim/chaos.py``) on a store whose filesystem fails
beneath the store's own code (:class:`~raytide.testing.store_faults.FaultyStore`), on fixed
seeds and, besides them, a few that rotate between runs (``tests/sim/seeds.py``; a failure
names its seed). What users of a stream processor expect, per fault:

* an ambiguous commit (the manifest in place, the call failed) is a commit: read back, counted
  committed, never committed again, the output exactly the failure-free run's;
* a torn write (a part or a manifest half written, loudly or silently) is never restored from:
  the snapshot is not committed, or is skipped as damaged for the one before it;
* a failed read is tried again; if every attempt fails, the job fails with an error naming
  the store, the snapshot and the file (never a raw ``OSError``, never a hang);
* a failed retention delete fails no commit (the snapshot is counted committed), leaves no
  committed snapshot with parts missing, and a later retention finishes the job;
* a retention racing with a restore never deletes the snapshot being restored.

Each has a planted bug that its test catches (``test_*_is_caught``)."""

from __future__ import annotations

import pickle
import re
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest

from raytide.errors import RecoveryError
from raytide.snapshots import reads
from raytide.snapshots import recovery as recovery_module
from raytide.snapshots.reads import UnreadableFile
from raytide.snapshots.store import SnapshotStore
from raytide.testing import snapshotting
from raytide.testing.store_faults import StoreFaults
from tests.sim.seeds import seeds
from tests.sim.store_trials import NAMES, Trial, store_trial

pytestmark = [pytest.mark.filterwarnings("ignore:skipping snapshot:RuntimeWarning"),
              pytest.mark.filterwarnings("ignore:snapshot .* is committed, but deleting:RuntimeWarning")]

FIXED = 40
#: The faults' rates: high enough that most trials meet several.
AMBIGUOUS, TORN, READS, DELETES, RACES = (StoreFaults(ambiguous=0.3), StoreFaults(torn=0.15), StoreFaults(reads=0.1),
                                          StoreFaults(deletes=0.5), StoreFaults(races=0.3))


def trials(faults: StoreFaults, root: Path, salt: str, output_commit: str = "epoch",
           fixed: int = FIXED) -> list[Trial]:
    """Every scenario's trials on a store failing as ``faults`` draws (fixed seeds and rotating ones)."""
    return [store_trial(name, seed, str(root / f"{salt}-{name}-{seed}".replace(" ", "_")), faults, output_commit)
            for name in NAMES for seed in seeds(fixed, f"{salt}-{name}")]


def first_failed(faults: StoreFaults, root: Path, failed: Callable[[Trial], bool], output_commit: str = "epoch",
                 fixed: int = FIXED) -> tuple[str, int] | None:
    """The first of the fixed trials that ``failed``, or raised what unpickling garbage raises
    (where a planted bug shows), as ``(scenario, seed)``; None if none did. Anything else a
    trial raises is a bug of the test or the plant, and propagates (``tests/sim/chaos.py``)."""
    for name in NAMES:
        for seed in range(fixed):
            directory = str(root / f"plant-{name}-{seed}".replace(" ", "_"))
            try:
                if failed(store_trial(name, seed, directory, faults, output_commit)):
                    return name, seed
            except (pickle.UnpicklingError, EOFError):  # a part restored from a torn file
                return name, seed
    return None


def uncounted(trial: Trial) -> set[int]:
    """The snapshots whose manifest went in place but which the run does not count committed."""
    assert trial.run is not None
    return set(trial.store.files.published) - set(trial.run.snapshots)


def damaged(trial: Trial) -> list[str]:
    """What is wrong with the committed snapshots left in the trial's store (read without faults)."""
    store = SnapshotStore(trial.store.uri)
    return [f"snapshot {m.snapshot_id}: {problem}" for m in store.committed() if (problem := store._verify_parts(m))]


# -- an ambiguous commit --------------------------------------------------------------------

def test_an_ambiguous_commit_is_counted_committed_once_and_the_output_stays_exact(store_root):
    done = trials(AMBIGUOUS, store_root, "ambiguous", "snapshot")  # output handed out at commits: the stricter
    for trial in done:
        assert trial.exact, f"{trial.name}, seed {trial.seed}: {trial.error!r}"
        assert not uncounted(trial), f"{trial.name}, seed {trial.seed}: committed, not counted: {uncounted(trial)}"
    assert sum(len(trial.store.files.ambiguous_ids) for trial in done) >= len(done) // 2


def test_an_ambiguous_commit_taken_for_a_failed_one_is_caught(store_root, monkeypatch):
    monkeypatch.setattr(SnapshotStore, "_published", lambda self, snapshot_id, text: False)  # no read-back
    caught = first_failed(AMBIGUOUS, store_root, lambda trial: not trial.exact or bool(uncounted(trial)))
    assert caught is not None, "no trial caught an ambiguous commit reported as failed"


# -- torn writes ----------------------------------------------------------------------------

def test_a_torn_write_is_never_restored_from(store_root):
    skipped = 0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        done = trials(TORN, store_root, "torn")
    failed = [trial for trial in done if not trial.exact]
    for trial in failed:  # every snapshot the driver's replay log still covers was torn: said, not lost
        assert isinstance(trial.error, RecoveryError) and UNCOVERED.search(str(trial.error)), \
            f"{trial.name}, seed {trial.seed}: {trial.error!r}"
    assert len(failed) <= len(done) // 10, f"{len(failed)} of {len(done)} trials could not go back: {failed[:3]}"
    skipped = sum(1 for warning in caught if re.search(r"skipping snapshot \d+ .*is corrupt", str(warning.message)))
    assert skipped >= 5, f"recoveries passed over a torn snapshot only {skipped} times: the test proves little"


#: What a recovery says when the snapshots its replay log covers were all torn silently (bytes
#: rotted at the right size, found only by checksum when read): with ``retain=1`` the only one.
UNCOVERED = re.compile(r"cannot go back to command \d+: the driver kept its calls from command \d+ on only "
                       r"\(a newer snapshot was damaged\?\)")


def _sizes_only(self: SnapshotStore, snapshot_id: int, part, keep: bool = True) -> bytes:  # type: ignore[no-untyped-def]
    """A planted bug: a store that checks a part's size, not its checksum."""
    with self.filesystem.open_input_stream(self.part_path(snapshot_id, part.name)) as source:
        data = source.read()
    if len(data) != part.size:
        raise recovery_module.SnapshotError(f"snapshot {snapshot_id}: part {part.name!r} has {len(data)} bytes")
    return data


def test_a_torn_part_taken_for_an_intact_one_is_caught(store_root, monkeypatch):
    monkeypatch.setattr(SnapshotStore, "_read_verified", _sizes_only)
    caught = first_failed(TORN, store_root, lambda trial: not trial.exact)
    assert caught is not None, "no trial caught a snapshot restored from a silently torn part"


# -- failed reads ---------------------------------------------------------------------------

def names_the_store_and_the_snapshot(trial: Trial) -> bool:
    error = trial.error
    return (isinstance(error, UnreadableFile) and trial.store.uri in str(error)
            and re.search(r"of snapshot \d+", str(error)) is not None)


def test_a_failed_read_is_retried_or_fails_naming_the_store_and_the_snapshot(store_root):
    done = trials(READS, store_root, "reads")
    for trial in done:
        assert trial.exact or names_the_store_and_the_snapshot(trial), f"{trial.name}, seed {trial.seed}: {trial.error!r}"
    exact = sum(trial.exact for trial in done)
    assert exact >= 0.95 * len(done), f"only {exact} of {len(done)} trials recovered through failed reads"
    assert sum(trial.store.files.injected["reads"] for trial in done) >= len(done)


def test_a_store_that_reads_once_is_caught(store_root, monkeypatch):
    monkeypatch.setattr("raytide.snapshots.store.retried",
                        lambda read, what, uri, pauses=(): reads.retried(read, what, uri, ()))
    done = trials(READS, store_root, "reads-once", fixed=20)
    exact = sum(trial.exact for trial in done)
    assert exact < 0.95 * len(done), "reading once, as many trials recovered as with retries"


# -- failed retention deletes ---------------------------------------------------------------

@pytest.mark.parametrize("faults", [DELETES, StoreFaults(deletes=1.0)], ids=["now and then", "always"])
def test_a_failed_retention_delete_fails_no_commit_and_leaves_the_store_usable(store_root, faults):
    done = trials(faults, store_root, f"deletes-{faults.deletes}", "snapshot")
    for trial in done:
        assert trial.exact, f"{trial.name}, seed {trial.seed}: {trial.error!r}"
        assert not uncounted(trial), f"{trial.name}, seed {trial.seed}: committed, not counted: {uncounted(trial)}"
        assert not damaged(trial), f"{trial.name}, seed {trial.seed}: {damaged(trial)}"
        plain = SnapshotStore(trial.store.uri)
        kept = [manifest.snapshot_id for manifest in plain.committed()][-1:]
        plain.retain(1)  # the store is usable: a retention that works deletes what the failed ones left
        assert plain._ids() == kept or plain._ids()[: len(kept)] == kept, f"{trial.name}, seed {trial.seed}: {plain._ids()}"
    assert sum(trial.store.files.injected["deletes"] for trial in done) >= len(done) // 2


def _retain_failing_the_commit(store, plan, commit, delivered, retain):  # type: ignore[no-untyped-def]
    """A planted bug: a retention that raises fails the commit it follows."""
    complete = recovery_module.commit_snapshot(store, plan, commit, delivered, 10**9)
    store.retain(retain)
    return complete


def test_a_failed_delete_failing_its_commit_is_caught(store_root, monkeypatch):
    monkeypatch.setattr(snapshotting, "commit_snapshot", _retain_failing_the_commit)
    caught = first_failed(DELETES, store_root, lambda trial: not trial.exact or bool(uncounted(trial)), "snapshot")
    assert caught is not None, "no trial caught a commit reported failed for its retention"


def test_a_delete_of_parts_before_the_manifest_is_caught(store_root, monkeypatch):
    monkeypatch.setattr(SnapshotStore, "_delete", lambda self, snapshot_id: self.filesystem.delete_dir(
        self.snapshot_dir(snapshot_id)))
    caught = first_failed(DELETES, store_root, lambda trial: bool(damaged(trial)), "snapshot")
    assert caught is not None, "no trial caught a committed snapshot left with parts deleted"


# -- retention racing with a restore --------------------------------------------------------

def test_a_retention_racing_with_a_restore_never_deletes_what_is_restored(store_root):
    done = trials(RACES, store_root, "races")
    for trial in done:
        assert trial.exact, f"{trial.name}, seed {trial.seed}: {trial.error!r}"
    assert sum(trial.store.files.injected["races"] for trial in done) >= len(done)


def _keeping_the_newest_directories(self: SnapshotStore, keep: int) -> list[int]:
    """A planted bug: retention that keeps the newest directories, committed or not."""
    doomed = self._ids()[:-keep]
    for snapshot_id in doomed:
        self._delete(snapshot_id)
    return doomed


def test_a_retention_that_deletes_the_snapshot_being_restored_is_caught(store_root, monkeypatch):
    monkeypatch.setattr(SnapshotStore, "retain", _keeping_the_newest_directories)
    caught = first_failed(RACES, store_root, lambda trial: not trial.exact)
    assert caught is not None, "no trial caught a racing retention deleting the snapshot being restored"
