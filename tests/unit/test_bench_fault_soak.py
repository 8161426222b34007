"""The fault soak's reading of its two sides: each role's growth, raytide's and plain Ray's."""

from __future__ import annotations

from bench.bench_fault_soak import role_growth

RAYTIDE = {"growth_mib_per_hour_check+out/0#7": 7.0, "growth_mib_per_hour_check+out/1#8": 4.0,
           "growth_mib_per_hour_check+out/2#9": 6.0, "growth_mib_per_hour_driver#1": 8.0,
           "growth_mib_per_hour_progress#2": 3.0, "growth_mib_per_hour_records/0#3": 4.0,
           "growth_mib_per_hour_records/1#4": 10.0, "rss_growth_mib_per_hour_driver#1": 99.0,
           "driver_growth_mib_per_hour": 99.0}
PLAIN = {"growth_mib_per_hour_coordinator#5": 2.0, "growth_mib_per_hour_driver#1": 5.0,
         "growth_mib_per_hour_input/0#2": 2.0, "growth_mib_per_hour_input/1#3": 6.0,
         "growth_mib_per_hour_keyed/1#4": 3.5, "growth_mib_per_hour_progress#6": 3.5}


def test_each_role_grows_by_the_median_of_its_processes_private_memory():
    """The median over a role's processes, from their private memory only (not the resident
    size, nor the summary figures); a role no process of which lived long enough is absent."""
    assert role_growth(RAYTIDE, 0) == {"growth_role_driver": 8.0, "growth_role_progress": 3.0,
                                       "growth_role_inputs": 7.0, "growth_role_keyed": 6.0}


def test_the_plain_soaks_processes_are_read_by_their_own_names():
    assert role_growth(PLAIN, 1) == {"growth_role_driver": 5.0, "growth_role_progress": 3.5,
                                     "growth_role_coordinator": 2.0, "growth_role_inputs": 4.0,
                                     "growth_role_keyed": 3.5}
