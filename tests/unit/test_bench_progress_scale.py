"""The progress-load simulation of ``bench/bench_progress_scale.py`` at a small size: both
jobs finish with their plain-Python output in both designs, and the counts it reports are
those of the progress core."""

from __future__ import annotations

from bench.bench_progress_scale import measure


def test_both_jobs_finish_with_the_reference_output_and_report_the_central_load():
    found = measure(nodes=2, per_node=8, epochs=2, records_per_replica=3, seed=1)
    for job, replicas in (("keyed", 16), ("loop", 15)):
        direct, relayed = f"{job}_direct", f"{job}_relayed"
        assert found[f"{direct}_replicas"] == found[f"{relayed}_replicas"] == replicas
        # every replica reports at least once an epoch, and output parts are no call of their own
        assert found[f"{direct}_replicas"] <= found[f"{direct}_calls_per_epoch"] < found[f"{direct}_messages_per_epoch"]
        # a relay per node: the same kind of messages in fewer calls
        assert found[f"{relayed}_calls_per_epoch"] < found[f"{direct}_calls_per_epoch"]
        assert found[f"{relayed}_calls_per_epoch"] < found[f"{relayed}_messages_per_epoch"]
        for design in (direct, relayed):
            assert found[f"{design}_calls_per_node_per_epoch"] == found[f"{design}_calls_per_epoch"] / 2
            assert found[f"{design}_core_ms_per_epoch"] > 0
