"""The progress-load simulation of ``bench/bench_progress_scale.py`` at a small size: both
jobs finish with their plain-Python output in each design, and the counts it reports are
those of the progress core, Ray's work priced as given (the bench measures it on Ray)."""

from __future__ import annotations

import pytest

from bench.bench_progress_scale import central_load


def test_both_jobs_finish_with_the_reference_output_and_report_the_central_load():
    ray_ms = {"receive": 0.4, "submit": 0.25}
    found = central_load(nodes=2, per_node=8, epochs=2, records_per_replica=3, seed=1, ray_ms=ray_ms, fed=(100.0, 0.1, 3))
    for job, replicas in (("keyed", 16), ("loop", 15)):
        direct, relayed = f"{job}_direct", f"{job}_relayed"
        assert found[f"{direct}_replicas"] == found[f"{relayed}_replicas"] == replicas
        # every replica reports at least once an epoch, each message a call of its own
        assert found[f"{direct}_replicas"] <= found[f"{direct}_calls_per_epoch"] == found[f"{direct}_messages_per_epoch"]
        # a relay per node: the same kind of messages in fewer calls
        assert found[f"{relayed}_calls_per_epoch"] < found[f"{direct}_calls_per_epoch"]
        assert found[f"{relayed}_calls_per_epoch"] < found[f"{relayed}_messages_per_epoch"]
        # each push a call of its own without relays; a call per relay it goes down with them
        assert found[f"{direct}_push_calls_per_epoch"] == found[f"{direct}_pushes_per_epoch"]
        assert found[f"{relayed}_push_calls_per_epoch"] <= found[f"{relayed}_pushes_per_epoch"]
        paced = f"{job}_paced"
        assert found[f"{paced}_replicas"] == replicas
        assert 0 < found[f"{paced}_central_busy_share"] <= 1 and found[f"{paced}_model_s"] > 0
        assert 0 < found[f"{paced}_busiest_other_share"] <= 1
        assert found[f"{paced}_job_epochs_per_s"] == pytest.approx(2 / found[f"{paced}_model_s"])
        fed = f"{job}_fed"  # three epochs, one every 10 ms: the last is fed at 20 ms
        assert found[f"{fed}_model_s"] > 0.02 and found[f"{fed}_job_epochs_per_s"] == pytest.approx(3 / found[f"{fed}_model_s"])
        # the last epoch completes after it is fed, within the run; the later epochs at some rate
        assert 0 < found[f"{fed}_last_epoch_after_fed_ms"] < found[f"{fed}_model_s"] * 1000 - 20
        assert found[f"{fed}_sustained_epochs_per_s"] > 0
        one_level = f"{job}_fed_one_level"  # two nodes: no groups' relays either way
        assert found[f"{one_level}_replicas"] == replicas and found[f"{one_level}_model_s"] > 0.02
        for design in (direct, relayed, paced, fed, one_level):
            assert found[f"{design}_calls_per_node_per_epoch"] == found[f"{design}_calls_per_epoch"] / 2
            assert found[f"{design}_core_ms_per_epoch"] > 0 and found[f"{design}_unpickle_ms_per_epoch"] > 0
            ray_share = (found[f"{design}_calls_per_epoch"] * ray_ms["receive"]
                         + found[f"{design}_push_calls_per_epoch"] * ray_ms["submit"])
            assert found[f"{design}_ray_ms_per_epoch"] == pytest.approx(ray_share)
            central = sum(found[f"{design}_{part}_ms_per_epoch"] for part in ("core", "unpickle", "ray"))
            assert found[f"{design}_central_ms_per_epoch"] == pytest.approx(central)
            assert found[f"{design}_central_epochs_per_s"] == pytest.approx(1000 / central)
