"""Monte Carlo check of U(T), eqs. 4 and 10, as in the paper's figures 5 and 12.

Like the paper: R = 10 min, c = 5 min, delta = 0.5 min, lam in {0.1, 0.05, 0.025, 0.005}
per minute, 250 independent runs of 2000 / lam minutes each. The simulator plays out the
timeline event by event instead of summing the paper's geometric series, so it checks the
derivation, not only its algebra. Each run is seeded; the mean of the runs must lie within
4 standard errors of U(T).
"""

from __future__ import annotations

import math
import random
import statistics

import pytest

from raytide.snapshots import optimal_interval, utilization

RESTART_COST = 10.0
CHECKPOINT_COST = 5.0
HOP_DELAY = 0.5
RUNS = 250


def simulate_run(interval, checkpoint_cost, restart_cost, rate, depth, hop_delay, horizon, rng):
    """One run of a checkpointed job for at least ``horizon``; returns its useful time / elapsed time.

    After a start or restart at time s, period k spans [s + (k - 1) T, s + k T] and ends
    with c of checkpointing; its checkpoint commits (n - 1) delta later, once the barrier
    has crossed the critical path, and only then does its T - c of work count. Failures
    arrive as a Poisson process of rate lam, restarts included. A failure rolls back to
    the last committed checkpoint (uncommitted periods are lost) and starts a restart of
    length R, which a failure during it starts over.
    """
    commit_lag = (depth - 1) * hop_delay
    clock, useful = 0.0, 0.0
    next_failure = rng.expovariate(rate)
    while clock < horizon:
        commit = clock + interval + commit_lag
        while commit <= next_failure:
            useful += interval - checkpoint_cost
            commit += interval
        clock = next_failure
        next_failure = clock + rng.expovariate(rate)
        while next_failure < clock + restart_cost:
            clock = next_failure
            next_failure = clock + rng.expovariate(rate)
        clock += restart_cost
    return useful / clock


def monte_carlo(interval, rate, depth, seed):
    """Mean utilization of RUNS independent runs and its standard error."""
    rng = random.Random(seed)
    runs = [
        simulate_run(interval, CHECKPOINT_COST, RESTART_COST, rate, depth, HOP_DELAY, 2000.0 / rate, rng)
        for _ in range(RUNS)
    ]
    return statistics.fmean(runs), statistics.stdev(runs) / math.sqrt(RUNS)


@pytest.mark.parametrize("rate", [0.1, 0.05, 0.025, 0.005])
@pytest.mark.parametrize("depth", [1, 10, 50])
@pytest.mark.parametrize("interval_factor", [1.0, 3.0])
def test_simulation_agrees_with_the_model(rate, depth, interval_factor):
    """depth 1 is figure 5 (eq. 4); depths 10 and 50 are figure 12 (eq. 10); T = T* and 3 T*."""
    interval = interval_factor * optimal_interval(CHECKPOINT_COST, rate)
    mean, standard_error = monte_carlo(interval, rate, depth, seed=f"{rate}-{depth}-{interval_factor}")
    assert standard_error < 1e-3  # tight enough to tell the models below apart
    expected = utilization(interval, CHECKPOINT_COST, RESTART_COST, rate, depth, HOP_DELAY)
    assert abs(mean - expected) < 4.0 * standard_error


def test_simulation_tells_n_minus_1_hops_from_n():
    """The test has power: a checkpoint commits (n - 1) delta after its period, not n delta."""
    rate, depth = 0.05, 10
    interval = optimal_interval(CHECKPOINT_COST, rate)
    mean, standard_error = monte_carlo(interval, rate, depth, seed="power")
    off_by_one = utilization(interval, CHECKPOINT_COST, RESTART_COST, rate, depth + 1, HOP_DELAY)
    assert abs(mean - off_by_one) > 8.0 * standard_error
