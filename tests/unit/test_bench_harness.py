"""The bench harness's ratios: of the medians, and run by run against brute force."""

from __future__ import annotations

import os
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench import harness
from bench.harness import format_report, paired_ratios, ratios, summarize

PAIRS = [("a over b", "a", "b")]


def test_the_report_gives_the_ratio_of_the_medians_and_the_runs_own_ratios():
    """a is a tenth of b in runs 0 and 2, which ran at different speeds; run 1 was slowed on
    b's side only. The ratio of the medians takes b from one run and a from another."""
    runs = [{"a": 0.1, "b": 1.0}, {"a": 0.1, "b": 3.0}, {"a": 0.3, "b": 3.0}]
    summary = summarize(runs)
    assert ratios(summary, PAIRS) == {"a over b": 0.1 / 3.0}
    assert paired_ratios(runs, PAIRS) == {"a over b": pytest.approx({"median": 0.1, "min": 0.1 / 3.0, "max": 0.1})}
    report = {"benchmark": "x", "repeat": 3, "metrics": summary, "ratios": ratios(summary, PAIRS),
              "paired_ratios": paired_ratios(runs, PAIRS)}
    assert "ratio a over b: 0.033 (run by run: median 0.100, 0.033-0.100)" in format_report(report)


@given(st.lists(st.tuples(st.floats(0.001, 100), st.floats(0.001, 100)), min_size=1, max_size=9))
def test_paired_ratios_are_the_median_and_spread_of_each_runs_quotient(pairs):
    runs = [{"a": a, "b": b} for a, b in pairs]
    quotients = [a / b for a, b in pairs]
    assert paired_ratios(runs, PAIRS) == {"a over b": {"median": statistics.median(quotients),
                                                        "min": min(quotients), "max": max(quotients)}}


def test_a_pair_whose_metrics_a_run_did_not_measure_is_left_out():
    assert paired_ratios([{"a": 1.0}], PAIRS) == {}


def test_start_up_children_run_with_every_module_compiled_beforehand(tmp_path, monkeypatch):
    """bench startup's and fixed_costs' children have bytecode, as an installed raytide has:
    written under the cache prefix before any clock, PYTHONDONTWRITEBYTECODE dropped (the
    machine's environment sets it, and every host then compiled raytide again); without
    ``cached``, the environment as it is. A package of two modules stands in for the checkout."""
    for package in ("raytide", "bench"):
        (tmp_path / package).mkdir()
        (tmp_path / package / "piece.py").write_text("VALUE = 1\n")
    monkeypatch.setattr(harness, "ROOT", tmp_path)
    monkeypatch.setattr(harness, "PYCACHE", tmp_path / "cache")
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    assert harness.bytecode_env(False) == dict(os.environ)
    env = harness.bytecode_env(True)
    assert "PYTHONDONTWRITEBYTECODE" not in env and env["PYTHONPYCACHEPREFIX"] == str(tmp_path / "cache")
    compiled = sorted(path.parent.name for path in (tmp_path / "cache").rglob("piece.*.pyc"))
    assert compiled == ["bench", "raytide"]
