"""The exactly-once check of the killed stream drivers (``tests/stream_driver.py``), on
histories written here: it passes the one a correct run leaves, with the epoch in hand at a
kill seen twice, and refuses a repeat that differs (whichever copy is wrong), comes late,
or comes once too often."""

from __future__ import annotations

from pathlib import Path

import pytest

from raytide.integrations.parquet import ParquetSink
from tests.stream_driver import check_exactly_once, file_counts

FILES = 3


def history(root: Path, seen: list[tuple[int, list]]) -> Path:
    """A run's traces under ``root``: the consumer's log of ``seen``, and the sink the driver
    wrote first (each epoch once, as a committed Parquet file is kept)."""
    sink = ParquetSink(str(root / "parquet"), "counts")
    with open(root / "consumed.txt", "w") as log:
        for epoch, records in seen:
            if records:
                sink.write(epoch, records)
            log.write(f"{epoch} {sorted(records)!r}\n")
    return root


def epoch(index: int) -> tuple[int, list]:
    return index, sorted(file_counts(index))


def test_a_run_with_the_epoch_in_hand_seen_again_after_a_kill_passes(tmp_path):
    check_exactly_once(history(tmp_path, [epoch(0), epoch(1), epoch(1), epoch(2)]), FILES)


WRONG = [(word, 2 * count) for word, count in sorted(file_counts(1))]  # every word counted twice


@pytest.mark.parametrize("seen, why", [
    ([epoch(0), (1, []), epoch(1), epoch(2)], "epoch 1 differs the second time"),  # first empty: not in the sink
    ([epoch(0), epoch(1), (1, WRONG), epoch(2)], "epoch 1 differs the second time"),
    ([epoch(0), epoch(1), epoch(2), epoch(1)], "epoch 1 came again after epoch 2"),
    ([epoch(0), epoch(0), epoch(1), epoch(1), epoch(2)], r"saw twice: \[0, 1\]"),
])
def test_a_repeat_that_differs_comes_late_or_too_often_is_refused(tmp_path, seen, why):
    with pytest.raises(AssertionError, match=why):
        check_exactly_once(history(tmp_path, seen), FILES)
