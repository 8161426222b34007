"""Memory on a real local Ray: no process grows with the epochs once results are consumed, and
a large record costs the driver and the actors no copy of their own.

Each test runs a measurement of bench/ (bench_soak.py, bench_large_record.py) in a child
process with a Ray of its own, so that the driver and the actors measured hold nothing
but that one job (the test session's driver and its pooled hosts carry other tests' garbage).
"""

from __future__ import annotations

import pytest

from bench.bench_soak import run_child
from tests.ray.own_ray import until_ray_starts

pytestmark = [pytest.mark.ray, pytest.mark.slow]

#: Epochs of the soak, and those before its first reading. A driver that kept every
#: consumed epoch grows by about 25 MiB per 1,000 epochs (45 MiB here); a process that
#: stays flat grew by 1-3 MiB in this test.
EPOCHS, WARMUP = 2000, 200
#: Growth allowed to a process that stays flat (allocator and Ray noise).
NOISE_MIB = 15
#: The record's size; resident memory may grow by this multiple of it in any process: the
#: driver writes it into Ray's object store once and reads the copy that comes back (2x),
#: an actor reads what it receives and writes what it sends (2x). Copies of their own made
#: it 3-4x in the driver and 5x in the actors.
RECORD_MB, PEAK_X = 100, 2.5


def test_no_process_grows_with_the_epochs_once_results_are_consumed(own_ray_env):
    metrics = until_ray_starts(lambda: run_child("bench.bench_soak", {"epochs": EPOCHS, "warmup": WARMUP, "parallelism": 2},
                                                 env=own_ray_env, timeout=300))
    assert metrics["wrong_epochs"] == 0
    processes = [name.removesuffix("_start_mib") for name in metrics if name.endswith("_start_mib")]
    grown = {name: metrics[f"{name}_end_mib"] - metrics[f"{name}_start_mib"] for name in processes}
    assert {"driver", "progress"} < set(grown), grown  # and the vertex actors
    assert max(grown.values()) <= NOISE_MIB, grown


def test_a_large_array_arrives_bit_identical_and_no_process_copies_it(own_ray_env):
    metrics = until_ray_starts(lambda: run_child("bench.bench_large_record", {"mb": RECORD_MB}, env=own_ray_env, timeout=300))
    assert metrics["identical"] == 1
    assert metrics["driver_peak_x"] <= PEAK_X, metrics
    assert metrics["vertex_peak_x"] <= PEAK_X, metrics
