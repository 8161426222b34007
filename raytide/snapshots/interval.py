"""The checkpoint-interval model: utilization U(T), the optimal interval T*, and online estimates.

Source: S. Jayasekara, A. Harwood and S. Karunasekera, "A Utilization Model for
Optimization of Checkpoint Intervals in Distributed Stream Processing Systems" (The
University of Melbourne). Utilization is the fraction of
wall-clock time spent on useful work, i.e. not on checkpointing, on work lost to failures,
nor on detecting a failure and restarting.

The model. A job checkpoints every ``T``; the last ``c`` of each period writes the
checkpoint. Failures form a Poisson process of rate ``lam`` that runs all the time,
restarts included. A failure rolls the job back to the last committed checkpoint (the
work since then is lost) and the restart takes ``R``; a failure during a restart starts it
again. For one process (eq. 4):

    U(T) = lam (T - c) / (e^(lam (R + T)) - e^(lam R)).

In a dataflow the barrier needs ``delta`` per hop to cross a critical path of ``n``
vertices (source and sink included), so a checkpoint commits ``(n - 1) delta`` after its
period ends, and a failure in that window also loses the previous period. Eq. 10:

    U(T) = lam e^(delta lam) (T - c) / (e^(lam (R + T + delta n)) - e^(lam (R + delta n)))
         = e^(-lam (n - 1) delta) * U_eq4(T),

so ``n = 1`` (or ``delta = 0``) gives eq. 4 back. For a cyclic dataflow ``n`` is the longest
source-to-sink path once back edges are cut (the paper's footnote 1). Both forms peak at
the same interval (eqs. 4 and 10, sections 3.4 and 4.3), which depends on ``c`` and
``lam`` only:

    T* = (c lam + W0(-e^(-c lam - 1)) + 1) / lam,

with ``W0`` the principal branch of the Lambert W function. For small ``c lam`` it tends
to Young's ``sqrt(2 c / lam)``.

The paper's worked example (section 3.4, Fig. 4 and Fig. 10; times in minutes):

>>> t = optimal_interval(checkpoint_cost=5.0, failure_rate=0.005)
>>> round(t, 3)
46.452
>>> round(utilization(t, 5.0, 10.0, 0.005), 4)
0.7541
>>> round(utilization(t, 5.0, 10.0, 0.005, depth=50, hop_delay=0.5), 3)
0.667

The model functions take any one time unit (rates per that unit). The online part
(:class:`DurationEstimator`, :class:`FailureRateEstimator`, :class:`IntervalTuner`) works in
seconds, as raytide measures durations: it keeps ``c`` and ``R`` from measured snapshot and
recovery durations and ``lam`` from observed failures, so that ``interval="auto"`` can
recompute T* as the job runs, as the paper's conclusion suggests.
"""

from __future__ import annotations

import math
import operator

__all__ = [
    "DEFAULT_PRIOR_FAILURES",
    "DEFAULT_PRIOR_RATE",
    "DurationEstimator",
    "FailureRateEstimator",
    "IntervalTuner",
    "lambert_w0",
    "optimal_interval",
    "utilization",
]

_BRANCH_POINT = -math.exp(-1.0)
"""-1/e, where the two real branches of the Lambert W function meet (W0(-1/e) = -1)."""

# 1 + W0(x) as a power series in p = sqrt(2 (1 + e x)) around the branch point, from the
# p^1 coefficient up (Corless et al., "On the Lambert W function", 1996, eq. 4.22).
_BRANCH_SERIES = (1.0, -1.0 / 3.0, 11.0 / 72.0, -43.0 / 540.0, 769.0 / 17280.0, -221.0 / 8505.0)

# Below this p the series is exact to double precision (its next term, 680863/43545600 p^7,
# is under 2e-16), while Halley's residual drowns in rounding, as W0 is ill-conditioned at
# the branch point: its error there grows like 1e-16 / p.
_SERIES_MAX_P = 1e-2

_HALLEY_MAX_STEPS = 16  # a guard: from the initial guesses below, 4 steps suffice in practice

DEFAULT_PRIOR_RATE = 1.0 / 3600.0
"""Prior mean failure rate of :class:`FailureRateEstimator`: one failure per hour, per second."""

DEFAULT_PRIOR_FAILURES = 1.0
"""Prior weight of :class:`FailureRateEstimator`, in pseudo-failures (the Gamma shape)."""


def lambert_w0(x: float) -> float:
    """The principal branch W0 of the Lambert W function: the ``w >= -1`` with ``w e^w = x``.

    Near the branch point ``x = -1/e`` it sums the series in ``p = sqrt(2 (1 + e x))``;
    elsewhere it runs Halley's iteration on ``w - x e^-w = 0`` (the scaled residual never
    overflows), starting from the series, ``log1p(x)`` or the asymptotic ``L1 - L2 + L2/L1``.

    Args:
        x: a finite number, at least -1/e.

    Returns:
        W0(x), in [-1, inf).

    Raises:
        ValueError: if ``x`` is not finite or below -1/e (W has no real value there).

    >>> lambert_w0(math.e), lambert_w0(0.0), lambert_w0(-math.exp(-1.0))
    (1.0, 0.0, -1.0)
    """
    if not math.isfinite(x) or x < _BRANCH_POINT:
        raise ValueError(f"lambert_w0 is defined for finite x >= -1/e = {_BRANCH_POINT!r}, got {x!r}")
    p = math.sqrt(2.0 * max(0.0, 1.0 + math.e * x))
    if p < _SERIES_MAX_P:
        return _branch_series(p) - 1.0
    return _halley(x, _initial_guess(x, p))


def _branch_series(p: float) -> float:
    """1 + W0(x) from ``p = sqrt(2 (1 + e x))``: p - p^2/3 + 11 p^3/72 - ... (Horner form)."""
    total = 0.0
    for coefficient in reversed(_BRANCH_SERIES):
        total = (total + coefficient) * p
    return total


def _initial_guess(x: float, p: float) -> float:
    """A starting point for Halley's iteration, within a few percent of W0(x)."""
    if p < 1.0:
        return _branch_series(p) - 1.0
    if x < math.e:
        return math.log1p(x)
    l1 = math.log(x)
    l2 = math.log(l1)
    return l1 - l2 + l2 / l1


def _halley(x: float, w: float) -> float:
    """Refine ``w`` towards W0(x) by Halley steps on ``g(w) = w - x e^-w`` (= (w e^w - x) e^-w).

    Convergence is cubic, so the steps shrink fast until rounding noise takes over; it stops
    at a step of a few ulps or at the first step that does not shrink (noise).
    """
    previous = math.inf
    for _ in range(_HALLEY_MAX_STEPS):
        g = w - x * math.exp(-w)
        step = g / ((w + 1.0) - (w + 2.0) * g / (2.0 * (w + 1.0)))
        if abs(step) >= previous:
            break
        w -= step
        previous = abs(step)
        if previous <= 4.0 * math.ulp(max(1.0, abs(w))):
            break
    return w


def optimal_interval(checkpoint_cost: float, failure_rate: float) -> float:
    """The checkpoint interval T* that maximizes utilization (eqs. 4 and 10, sections 3.4 and 4.3).

    ``T* = (c lam + W0(-e^(-c lam - 1)) + 1) / lam``. It does not depend on the restart cost
    nor on the dataflow's depth and hop delay. When ``c lam`` is tiny the argument of W0
    sits next to the branch point, where W0 is ill-conditioned; there ``1 + W0`` is summed
    from ``p = sqrt(-2 expm1(-c lam))``, which is exact, instead of from the rounded argument.
    The relative error stays below about 1e-11 (tested against a 50-digit reference).

    Args:
        checkpoint_cost: c, the time a checkpoint costs; at least 0 (0 gives T* = 0).
        failure_rate: lam, failures per unit of time; positive.

    Returns:
        T*, in the time unit of ``checkpoint_cost``; always more than ``c`` when ``c > 0``.

    Raises:
        ValueError: if ``checkpoint_cost`` is negative or ``failure_rate`` not positive,
            or either is not finite.

    >>> round(optimal_interval(1.6 / 60.0, 0.05), 4)  # Table 1, first row: minutes
    1.0418
    """
    _require_nonnegative("checkpoint_cost", checkpoint_cost)
    _require_positive("failure_rate", failure_rate)
    y = checkpoint_cost * failure_rate
    p = math.sqrt(-2.0 * math.expm1(-y))
    if p < _SERIES_MAX_P:
        w_plus_one = _branch_series(p)
    else:
        w_plus_one = lambert_w0(-math.exp(-y - 1.0)) + 1.0
    return (y + w_plus_one) / failure_rate


def utilization(
    interval: float,
    checkpoint_cost: float,
    restart_cost: float,
    failure_rate: float,
    depth: int = 1,
    hop_delay: float = 0.0,
) -> float:
    """Expected fraction of time spent on useful work, eq. 10 (eq. 4 when ``depth = 1``).

    ``U(T) = lam e^(delta lam) (T - c) / (e^(lam (R + T + delta n)) - e^(lam (R + delta n)))``,
    evaluated as ``lam (T - c) e^(-lam (R + (n - 1) delta + T)) / (1 - e^(-lam T))``, which
    neither overflows for large ``lam T`` nor cancels for small ``lam T``.

    Args:
        interval: T, the checkpoint period; positive.
        checkpoint_cost: c, the part of each period spent checkpointing; in [0, T].
        restart_cost: R, the time to detect a failure and restart; at least 0.
        failure_rate: lam, failures per unit of time; positive.
        depth: n, the number of vertices on the dataflow's critical path, source and sink
            included; 1 for a single process.
        hop_delay: delta, the time a checkpoint barrier takes to cross one hop; at least 0.

    Returns:
        U(T), in [0, 1].

    Raises:
        ValueError: on a non-finite or out-of-range argument (see Args).
        TypeError: if ``depth`` is not an integer.
    """
    _require_positive("interval", interval)
    _require_nonnegative("checkpoint_cost", checkpoint_cost)
    if checkpoint_cost > interval:
        raise ValueError(f"checkpoint_cost {checkpoint_cost!r} must not exceed interval {interval!r}")
    _require_nonnegative("restart_cost", restart_cost)
    _require_positive("failure_rate", failure_rate)
    if operator.index(depth) < 1:
        raise ValueError(f"depth must be at least 1, got {depth!r}")
    _require_nonnegative("hop_delay", hop_delay)
    survived = restart_cost + (depth - 1) * hop_delay + interval
    useful = failure_rate * (interval - checkpoint_cost)
    return useful * math.exp(-failure_rate * survived) / -math.expm1(-failure_rate * interval)


class DurationEstimator:
    """Online estimate of a mean duration: the checkpoint cost c or the restart cost R.

    The k-th measurement ``x`` updates the estimate ``m`` by ``m += max(smoothing, 1/k) (x - m)``:
    the first ``1/smoothing`` measurements give their plain running mean, later ones an
    exponentially weighted moving average that follows drift (the checkpoint cost grows
    with the state and with the input rate, as the paper's conclusion notes). With
    ``smoothing=None`` it is the running mean throughout.

    Args:
        smoothing: weight of a new measurement once warmed up, in (0, 1], or None.
        min_samples: measurements needed before :attr:`value` is reported.

    Raises:
        ValueError: if ``smoothing`` is outside (0, 1] or ``min_samples`` below 1.
    """

    def __init__(self, smoothing: float | None = 0.1, min_samples: int = 1) -> None:
        if smoothing is not None and not 0.0 < smoothing <= 1.0:
            raise ValueError(f"smoothing must be in (0, 1] or None, got {smoothing!r}")
        if min_samples < 1:
            raise ValueError(f"min_samples must be at least 1, got {min_samples!r}")
        self._smoothing = 0.0 if smoothing is None else smoothing
        self._min_samples = min_samples
        self._count = 0
        self._mean = 0.0

    def observe(self, duration: float) -> None:
        """Add one measured duration (finite, at least 0).

        Raises:
            ValueError: if ``duration`` is negative or not finite.
        """
        _require_nonnegative("duration", duration)
        self._count += 1
        self._mean += max(self._smoothing, 1.0 / self._count) * (duration - self._mean)

    @property
    def count(self) -> int:
        """How many durations were observed."""
        return self._count

    @property
    def value(self) -> float | None:
        """The estimated mean duration, or None before ``min_samples`` measurements."""
        return self._mean if self._count >= self._min_samples else None


class FailureRateEstimator:
    """Online estimate of the failure rate lam: the posterior mean under a Gamma prior.

    Failures are a Poisson process; with a Gamma(alpha, beta) prior on its rate, ``k``
    failures in ``t`` of observed time give the posterior mean

        lam_hat = (alpha + k) / (beta + t),   alpha = prior_failures, beta = alpha / prior_rate.

    So the prior counts as ``alpha`` failures seen in ``beta`` of time: before any data
    ``lam_hat`` is ``prior_rate``, and the data dominate once ``k >> alpha`` and ``t >> beta``.
    A failure-free job sees ``lam_hat`` fall as ``alpha / (beta + t)``, so T* grows with the
    evidence (as ``sqrt(t)``) instead of jumping to infinity as the maximum-likelihood
    ``k / t = 0`` would make it.

    Default prior: one pseudo-failure in one pseudo-hour (``DEFAULT_PRIOR_FAILURES`` = 1,
    ``DEFAULT_PRIOR_RATE`` = 1/3600 per second). It is pessimistic on purpose, at the top of
    the 0.06 to 0.85 failures per hour the paper reports for production systems (section 5),
    because the two ways of being wrong differ. An interval k times too long or too short
    costs about ``sqrt(c lam / 2) (k + 1/k - 2)`` of utilization, so a wrong guess matters
    only when the true ``lam`` is high, where this prior is about right; when failures are
    rare, a too-short interval costs at most ``c / T``. And an hour of weight lets experience
    take over quickly: a failure-free day brings ``lam_hat`` down to 1/25 per hour, whereas a
    prior of one failure per day would take about a day to notice a job that fails every ten
    minutes. A known rate goes in ``prior_rate``, with a large ``prior_failures`` to pin it.

    Args:
        prior_rate: the prior mean failure rate, per second; positive.
        prior_failures: alpha, the prior's weight in pseudo-failures; positive.

    Raises:
        ValueError: if either argument is not positive and finite.
    """

    def __init__(
        self, prior_rate: float = DEFAULT_PRIOR_RATE, prior_failures: float = DEFAULT_PRIOR_FAILURES
    ) -> None:
        _require_positive("prior_rate", prior_rate)
        _require_positive("prior_failures", prior_failures)
        self._alpha = prior_failures
        self._beta = prior_failures / prior_rate
        self._failures = 0
        self._exposure = 0.0

    def observe_time(self, duration: float) -> None:
        """Add observed (wall-clock) time, recoveries included: failures can strike then too.

        Raises:
            ValueError: if ``duration`` is negative or not finite.
        """
        _require_nonnegative("duration", duration)
        self._exposure += duration

    def observe_failure(self, count: int = 1) -> None:
        """Count ``count`` failures (at least 0).

        Raises:
            ValueError: if ``count`` is negative.
        """
        if operator.index(count) < 0:
            raise ValueError(f"count must be at least 0, got {count!r}")
        self._failures += count

    @property
    def failures(self) -> int:
        """How many failures were observed."""
        return self._failures

    @property
    def exposure(self) -> float:
        """How much time was observed."""
        return self._exposure

    @property
    def value(self) -> float:
        """The estimated failure rate ``(alpha + failures) / (beta + exposure)``."""
        return (self._alpha + self._failures) / (self._beta + self._exposure)


class IntervalTuner:
    """Chooses the checkpoint interval as the job runs (``interval="auto"``), in seconds.

    Feed it what the job measures: :meth:`record_checkpoint` with each snapshot's duration
    (c), :meth:`record_recovery` with each recovery's duration from failure to running
    again (R), :meth:`record_failure` at each failure and :meth:`record_elapsed` with the
    wall-clock time that passed. :meth:`interval` answers T*(c_hat, lam_hat) clamped to
    ``[min_interval, max_interval]``, or ``initial_interval`` (clamped too) until the
    checkpoint cost is known.

    Args:
        min_interval: the shortest interval to answer; positive.
        max_interval: the longest; at least ``min_interval``; may be ``math.inf``.
        initial_interval: the answer until the checkpoint cost has an estimate.
        checkpoint_estimator: the estimator of c; by default a 0.1-weighted average
            reported from the 3rd snapshot on (the first ones, of a young state, are cheaper).
        restart_estimator: the estimator of R; by default reported from the first recovery.
        failure_estimator: the estimator of lam; by default with the Gamma prior described
            in :class:`FailureRateEstimator`.

    Attributes:
        checkpoint_estimator: the estimator of c.
        restart_estimator: the estimator of R.
        failure_estimator: the estimator of lam.

    Raises:
        ValueError: if the bounds are not positive or ``min_interval > max_interval``.
    """

    def __init__(
        self,
        min_interval: float = 1.0,
        max_interval: float = 3600.0,
        initial_interval: float = 60.0,
        checkpoint_estimator: DurationEstimator | None = None,
        restart_estimator: DurationEstimator | None = None,
        failure_estimator: FailureRateEstimator | None = None,
    ) -> None:
        _require_positive("min_interval", min_interval)
        if not max_interval >= min_interval:
            raise ValueError(f"max_interval {max_interval!r} is below min_interval {min_interval!r}")
        _require_positive("initial_interval", initial_interval)
        self._min_interval = min_interval
        self._max_interval = max_interval
        self._initial_interval = initial_interval
        self.checkpoint_estimator = checkpoint_estimator or DurationEstimator(min_samples=3)
        self.restart_estimator = restart_estimator or DurationEstimator()
        self.failure_estimator = failure_estimator or FailureRateEstimator()

    def record_checkpoint(self, duration: float) -> None:
        """A snapshot completed and took ``duration`` seconds."""
        self.checkpoint_estimator.observe(duration)

    def record_recovery(self, duration: float) -> None:
        """A recovery took ``duration`` seconds from the failure until the job ran again."""
        self.restart_estimator.observe(duration)

    def record_failure(self) -> None:
        """A failure happened."""
        self.failure_estimator.observe_failure()

    def record_elapsed(self, duration: float) -> None:
        """``duration`` more seconds of wall-clock time passed (recoveries included)."""
        self.failure_estimator.observe_time(duration)

    def interval(self) -> float:
        """The checkpoint interval to use now: clamped T*, or the initial interval while c is unknown."""
        cost = self.checkpoint_estimator.value
        if cost is None:
            best = self._initial_interval
        else:
            best = optimal_interval(cost, self.failure_estimator.value)
        return min(self._max_interval, max(self._min_interval, best))

    def expected_utilization(self, depth: int = 1, hop_delay: float = 0.0) -> float | None:
        """U at :meth:`interval` under the current estimates (eq. 10); None while c or R is unknown.

        It is 0 when ``max_interval`` keeps the interval at or below the checkpoint cost.

        Args:
            depth: n, the vertices on the dataflow's critical path (see :func:`utilization`).
            hop_delay: delta, the seconds a barrier takes per hop.
        """
        cost, restart = self.checkpoint_estimator.value, self.restart_estimator.value
        if cost is None or restart is None:
            return None
        interval = self.interval()
        if interval <= cost:
            return 0.0
        return utilization(interval, cost, restart, self.failure_estimator.value, depth, hop_delay)


def _require_positive(name: str, value: float) -> None:
    """Raise ValueError unless ``value`` is finite and > 0."""
    if not (math.isfinite(value) and value > 0.0):
        raise ValueError(f"{name} must be positive and finite, got {value!r}")


def _require_nonnegative(name: str, value: float) -> None:
    """Raise ValueError unless ``value`` is finite and >= 0."""
    if not (math.isfinite(value) and value >= 0.0):
        raise ValueError(f"{name} must be at least 0 and finite, got {value!r}")
