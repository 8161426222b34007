"""Where a restored input replica resumes (raytide/driver/inputs.py, Resume): replays at or
before the restored epoch are dropped, calls past it are new, a half replay is refused."""

from __future__ import annotations

import pytest

from raytide.driver.inputs import Resume
from raytide.errors import RecoveryError


def test_a_feed_from_the_start_replays_what_was_consumed_then_sends_the_rest():
    resume = Resume("numbers", 0, consumed=4, epoch=2, left=4)  # push 0, advance 1, push 1, advance 2
    assert [resume.replayed(at, 1) for at in (0, 1, 1, 2)] == [True] * 4
    assert not resume.replayed(2, 1) and not resume.replayed(3, 1), "more than was consumed is new"


def test_a_feed_that_continues_past_the_restored_epoch_is_new_data_at_once():
    resume = Resume("numbers", 0, consumed=4, epoch=2, left=4)
    assert not resume.replayed(3, 1) and not resume.replayed(3, 1) and resume.left == 0


def test_a_half_replay_that_moves_on_is_refused_and_a_closed_input_replays_everything():
    resume = Resume("numbers", 1, consumed=4, epoch=2, left=4)
    resume.replayed(0, 1)
    with pytest.raises(RecoveryError, match="replica 1: .* consumed 4 commands, up to epoch 2; this feed replayed "
                                            "only 1 of them before moving on to epoch 5: .* push only epochs after 2"):
        resume.replayed(5, 1)
    closed = Resume("numbers", 0, consumed=2, epoch=None, left=2)
    assert closed.replayed(7, 1) and closed.replayed(None, 1) and not closed.replayed(None, 1)
