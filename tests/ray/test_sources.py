"""Parallel sources read inside the input replicas, on a real local Ray."""

from __future__ import annotations

from collections import Counter

import pytest

import raytide as rt
from raytide.sources import TextFileSource

pytestmark = pytest.mark.ray


def test_word_count_from_a_text_file_in_epochs_of_n_lines(ray_session, tmp_path):
    lines = [f"w{i % 7} w{i % 3} x" for i in range(5000)]
    path = tmp_path / "words.txt"
    path.write_text("\n".join(lines) + "\n")
    flow = rt.Dataflow("textwc")
    flow.input("lines").flat_map(str.split).count_by_key(lambda w: w).output("counts")
    with rt.run(flow, inputs={"lines": TextFileSource(str(path), lines_per_epoch=1000, batch_lines=300)}, parallelism=2) as job:
        job.wait(timeout=120)
        result = job.collect("counts")
    expected = {e: Counter(w for l in lines[e * 1000:(e + 1) * 1000] for w in l.split()) for e in range(5)}
    assert {e: dict(r) for e, r in result.items()} == expected


def test_a_missing_file_is_a_clear_error(ray_session, tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        TextFileSource(str(tmp_path / "nope.txt")).readers(2)
