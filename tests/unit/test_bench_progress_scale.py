"""The progress-load simulation of ``bench/bench_progress_scale.py`` at a small size: both
jobs finish with their plain-Python output, and the counts it reports are those of the
progress core."""

from __future__ import annotations

from bench.bench_progress_scale import measure


def test_both_jobs_finish_with_the_reference_output_and_report_the_central_load():
    found = measure(nodes=2, per_node=8, epochs=2, records_per_replica=3, seed=1)
    for job, replicas in (("keyed", 16), ("loop", 15)):
        assert found[f"{job}_replicas"] == replicas
        # every replica reports at least once an epoch, and output parts are no call of their own
        assert found[f"{job}_replicas"] <= found[f"{job}_calls_per_epoch"] < found[f"{job}_messages_per_epoch"]
        assert found[f"{job}_calls_per_node_per_epoch"] == found[f"{job}_calls_per_epoch"] / 2
        assert found[f"{job}_core_ms_per_epoch"] > 0
