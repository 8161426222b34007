"""What the driver says when snapshots stop committing (raytide.driver.snapshot_health):
each change said once, a committed output's job failed once snapshots failed too long,
a silent coordinator named. On Ray: tests/ray/test_snapshot_stalls.py."""

from __future__ import annotations

import logging

import raytide as rt
from raytide.driver.snapshot_health import SILENT_AFTER, SnapshotHealth
from raytide.errors import SnapshotError


def failing(in_a_row: int, for_s: float) -> dict:
    return {"in_a_row": in_a_row, "for_s": for_s, "last": "snapshot 3: replica r/0 could not write its part: OSError(28)"}


def test_failing_snapshots_are_said_once_a_streak_and_fail_only_a_job_whose_output_waits_for_them(caplog):
    caplog.set_level(logging.WARNING)
    runs_on = SnapshotHealth("j", rt.Recovery("/stores/j", timeout=2.0))
    waits = SnapshotHealth("k", rt.Recovery("/stores/k", timeout=2.0, output_commit="snapshot"))
    for health in (runs_on, waits):
        assert health.answered(failing(1, 0.0), 0.0) is None
        assert health.answered(failing(2, 1.0), 1.0) is None
    assert caplog.text.count("a snapshot could not be taken") == 2 and "OSError(28)" in caplog.text
    assert "'/stores/j'" in caplog.text and "its output waits for one" in caplog.text
    assert runs_on.answered(failing(5, 3.0), 3.0) is None, "with output_commit='epoch' the job runs on"
    error = waits.answered(failing(5, 3.0), 3.0)
    assert isinstance(error, SnapshotError) and "'/stores/k'" in str(error) and "OSError(28)" in str(error)
    assert runs_on.answered(None, 4.0) is None and "committed to store '/stores/j' again, after 5 failed" in caplog.text
    assert caplog.text.count("could not be taken") == 2, "each streak is said once"


def test_a_coordinator_that_leaves_the_sync_unanswered_is_named_once_and_its_return_said(caplog):
    caplog.set_level(logging.WARNING)
    health = SnapshotHealth("j", rt.Recovery("/stores/j"))
    health.sent(10.0)
    health.waiting(10.5, "the coordinator j/coordinator (process 7)")
    assert not health.is_silent(10.5) and health.silent(10.5, "c") is None and caplog.text == ""
    for now in (10.0 + SILENT_AFTER, 11.0 + SILENT_AFTER):
        health.waiting(now, "the coordinator j/coordinator (process 7)")
    assert caplog.text.count("(process 7) has not answered for") == 1
    assert health.silent(11.0 + SILENT_AFTER, "c")["silent_s"] == 1.0 + SILENT_AFTER
    assert health.silent(10.1, "c", waited=SILENT_AFTER) is not None, "job.stats()'s own call unanswered"
    health.answered(None, 12.0 + SILENT_AFTER)
    assert "answers again" in caplog.text and not health.is_silent(20.0)


def test_a_finished_jobs_sync_left_in_flight_is_no_silence_but_the_figures_own_call_still_is():
    """Once a job has finished the driver reads no more ``sync`` answers: the call left in
    flight aged past ``SILENT_AFTER`` and ``job.stats()["snapshots"]`` lost its figures about
    3 s after every job's end. Only ``job.stats()``'s own call counts then, for what it waited."""
    health = SnapshotHealth("j", rt.Recovery("/stores/j"))
    health.sent(10.0)
    later = 20.0 + SILENT_AFTER
    assert health.silent(later, "c")["silent_s"] == 10.0 + SILENT_AFTER, "a running job's sync unanswered"
    assert health.silent(later, "c", syncing=False) is None
    assert health.silent(later, "c", 0.5, syncing=False) is None
    said = health.silent(later, "c", SILENT_AFTER + 0.5, syncing=False)
    assert said is not None and said["silent_s"] == SILENT_AFTER + 0.5, said


def test_the_consumers_record_that_cannot_be_written_is_said_until_it_is(caplog):
    caplog.set_level(logging.WARNING)
    health = SnapshotHealth("j", rt.Recovery("/stores/j"))
    health.record_failed(PermissionError(13, "denied"))
    health.record_failed(PermissionError(13, "denied"))
    assert caplog.text.count("could not be written to store '/stores/j'") == 1
    assert health.stats() == {"consumed_record": "PermissionError(13, 'denied')"}
    health.record_written()
    assert health.stats() == {}
