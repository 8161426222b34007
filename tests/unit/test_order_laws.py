"""Order laws of timestamps and path summaries, and the algebra of summary composition.

Laws of the form "if a <= b and b <= c then ..." are never checked under that guard on
independent random draws: the guard holds for about 3 examples in 100 once the elements
are distinct and carry counters, so the law would go unchecked almost always. Ordered
timestamps are built directly instead (``at_or_above``), and the order of summaries is
checked exhaustively over a small universe of canonical summaries.
"""

from __future__ import annotations

import itertools
import pickle

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from raytide.progress import PathSummary, Timestamp
from tests.strategies import (
    any_timestamps,
    applicable_depth,
    apply_steps,
    compose,
    primitive_summaries,
    step_sequences,
    timestamps,
)

# -- timestamps --------------------------------------------------------------------


def product_le(a: Timestamp, b: Timestamp) -> bool:
    """The product order spelled out: epochs compared, then counters lexicographically, by hand."""
    if a.epoch > b.epoch:
        return False
    for x, y in zip(a.counters, b.counters):
        if x != y:
            return x < y
    return True


@st.composite
def at_or_above(draw: st.DrawFn, time: Timestamp) -> Timestamp:
    """Any timestamp ``>= time``: a larger or equal epoch, and counters equal or greater
    lexicographically (the first counter that changes grows, the ones after it are free)."""
    epoch = time.epoch + draw(st.integers(0, 3))
    first_change = draw(st.integers(0, time.depth))
    if first_change == time.depth:
        return Timestamp(epoch, time.counters)
    grown = time.counters[first_change] + draw(st.integers(1, 3))
    rest = draw(st.tuples(*[st.integers(0, 6)] * (time.depth - first_change - 1)))
    return Timestamp(epoch, time.counters[:first_change] + (grown,) + rest)


def ordered(count: int) -> st.SearchStrategy[list[Timestamp]]:
    """``count`` timestamps of one depth, each ``>=`` the one before."""

    @st.composite
    def chain(draw: st.DrawFn) -> list[Timestamp]:
        times = [draw(any_timestamps())]
        for _ in range(count - 1):
            times.append(draw(at_or_above(times[-1])))
        return times

    return chain()


same_depth_pairs = st.integers(0, 3).flatmap(lambda d: st.tuples(timestamps(d), timestamps(d)))


@given(ordered(3))
def test_timestamp_order_is_transitive(chain):
    a, b, c = chain
    assert product_le(a, b) and product_le(b, c), "the generator builds ordered triples"
    assert a <= b and b <= c and a <= c
    assert c >= b and b >= a and c >= a


@given(st.one_of(same_depth_pairs, ordered(2)))
def test_timestamp_order_is_the_product_order_and_antisymmetric(pair):
    a, b = pair
    assert (a <= b) == product_le(a, b) == a.less_equal(b) == (b >= a)
    assert a.less_than(b) == (product_le(a, b) and a != b)
    assert a <= a and a >= a and not a.less_than(a)
    assert (a <= b and b <= a) == (a == b)


def test_timestamps_are_not_totally_ordered():
    a, b = Timestamp(0, (5,)), Timestamp(1, (2,))
    assert not a <= b and not b <= a
    assert not a >= b and not b >= a


def test_sorting_min_and_max_without_a_key_raise():
    """With a partial order they would silently depend on the input order; they must fail loudly."""
    incomparable, chain = [Timestamp(1, (2,)), Timestamp(0, (5,))], [Timestamp(0), Timestamp(1)]
    for times in (incomparable, chain):
        for misuse in (sorted, min, max):
            with pytest.raises(TypeError, match="key=Timestamp.sort_key"):
                misuse(times)
    with pytest.raises(TypeError, match="partially ordered"):
        _ = Timestamp(0) < Timestamp(1)
    with pytest.raises(TypeError, match="partially ordered"):
        _ = Timestamp(1) > Timestamp(0)
    with pytest.raises(TypeError, match="partially ordered"):  # inside tuples too (pointstamps)
        sorted([(Timestamp(1), "a"), (Timestamp(0), "b")])


def test_comparing_with_a_plain_tuple_raises_instead_of_using_tuple_order():
    t, plain = Timestamp(1, (0,)), (0, (9,))
    for compare in (lambda: t <= plain, lambda: plain <= t, lambda: t >= plain, lambda: plain >= t):
        with pytest.raises(TypeError, match="only with another Timestamp"):
            compare()


@given(st.one_of(same_depth_pairs, ordered(2)), st.randoms(use_true_random=False))
def test_sort_key_is_a_deterministic_linear_extension(pair, rng):
    a, b = pair
    if a.less_than(b):
        assert Timestamp.sort_key(a) < Timestamp.sort_key(b)
    assert (Timestamp.sort_key(a) == Timestamp.sort_key(b)) == (a == b)
    times = [a, b, a.join(b), a.meet(b)]
    shuffled = rng.sample(times, len(times))
    assert sorted(shuffled, key=Timestamp.sort_key) == sorted(times, key=Timestamp.sort_key)


@pytest.mark.parametrize("depth", [0, 1, 2])
def test_join_and_meet_are_least_upper_and_greatest_lower_bounds(depth):
    """Exhaustively, against the bounds found by brute force among all small timestamps."""
    universe = [Timestamp(e, cs) for e in range(4) for cs in itertools.product(range(4), repeat=depth)]
    for a, b in itertools.product(universe, repeat=2):
        uppers = [u for u in universe if product_le(a, u) and product_le(b, u)]
        lowers = [u for u in universe if product_le(u, a) and product_le(u, b)]
        j, m = a.join(b), a.meet(b)
        assert j in uppers and all(product_le(j, u) for u in uppers), (a, b, j)
        assert m in lowers and all(product_le(u, m) for u in lowers), (a, b, m)


@given(any_timestamps())
def test_timestamps_survive_pickling(t):
    assert pickle.loads(pickle.dumps(t)) == t


# -- summaries: composition --------------------------------------------------------

#: Primitive steps including a feedback bounded at 0 (``max_iterations=1``: drops everything).
steps_with_zero_bounds = st.lists(st.one_of(primitive_summaries(), st.just(PathSummary.feedback(0))), max_size=6)


@given(steps_with_zero_bounds, steps_with_zero_bounds, steps_with_zero_bounds)
def test_followed_by_is_associative(x, y, z):
    sx, sy, sz = compose(x), compose(y), compose(z)
    assume(None not in (sx, sy, sz))
    left = sx.followed_by(sy)
    right = sy.followed_by(sz)
    left = None if left is None else left.followed_by(sz)
    right = None if right is None else sx.followed_by(right)
    assume(left is not None and right is not None)
    assert left == right


@given(steps_with_zero_bounds, st.data())
def test_composed_summary_agrees_with_stepwise_application(steps, data):
    summary = compose(steps)
    depth = applicable_depth(steps)
    time = data.draw(timestamps(depth + data.draw(st.integers(0, 2))))
    stepwise = apply_steps(steps, time)
    if stepwise is not None:
        assert summary is not None and summary.results_in(time) == stepwise
    unbounded = compose([s.unbounded() for s in steps])
    assert unbounded.results_in(time) == apply_steps([s.unbounded() for s in steps], time)


def test_a_feedback_bounded_at_zero_drops_everything_and_composes_to_nothing():
    last = PathSummary.feedback(0)
    assert last.results_in(Timestamp(0, (0,))) is None
    assert PathSummary.ingress().followed_by(last) is None
    assert last.strictly_advances()
    with pytest.raises(ValueError, match="must not be negative"):
        PathSummary.feedback(-1)


@given(steps_with_zero_bounds)
def test_identity_is_neutral(steps):
    s = compose(steps)
    assume(s is not None)
    assert PathSummary.identity().followed_by(s) == s
    assert s.followed_by(PathSummary.identity()) == s


@given(step_sequences(), st.data())
def test_results_in_is_monotone_in_the_timestamp(steps, data):
    summary = compose([s.unbounded() for s in steps])
    depth = applicable_depth(steps) + data.draw(st.integers(0, 2))
    a = data.draw(timestamps(depth))
    b = data.draw(at_or_above(a))
    assert summary.results_in(a) <= summary.results_in(b)


# -- summaries: the order, exhaustively over small canonical summaries --------------


def summaries_with_depth_change(change: int, bounded: bool = True, values: int = 3) -> list[PathSummary]:
    """Every canonical summary adding ``change`` counters with at most 2 pops, increments
    and pushed counters below ``values``, and small bounds."""
    bounds = (None, 2, 4) if bounded else (None,)
    return [
        PathSummary(pops, increment, pushes, bound)
        for pops in range(max(0, -change), 3)
        for increment in range(values)
        for pushes in itertools.product(range(values), repeat=pops + change)
        for bound in bounds
    ]


def order_matrix(universe: list[PathSummary]) -> list[list[bool]]:
    return [[x <= y for y in universe] for x in universe]


@pytest.mark.parametrize("change", [-1, 0, 1])
def test_summary_order_is_a_partial_order(change):
    """Reflexive, antisymmetric and transitive over every pair and triple of the universe."""
    universe = summaries_with_depth_change(change)
    le = order_matrix(universe)
    above = [{j for j, ok in enumerate(row) if ok} for row in le]
    for i, x in enumerate(universe):
        assert le[i][i], x
        for j in above[i]:
            assert le[j][i] == (i == j), (x, universe[j])
            assert above[j] <= above[i], (x, universe[j], [universe[k] for k in above[j] - above[i]])
    assert sum(map(len, above)) > 2 * len(universe), "the universe holds ordered pairs, not just x <= x"


@pytest.mark.parametrize("change", [-1, 0, 1])
def test_summary_order_is_sound_pointwise(change):
    """``sx <= sy`` implies ``sx(t) <= sy(t)`` wherever ``sy(t)`` is defined."""
    universe = summaries_with_depth_change(change)
    grid = [Timestamp(0, cs) for cs in itertools.product((0, 1, 5), repeat=3)]
    for sx, sy in itertools.product(universe, repeat=2):
        if sx <= sy:
            for time in grid:
                small, big = sx.results_in(time), sy.results_in(time)
                assert big is None or (small is not None and small <= big), (sx, sy, time)


@pytest.mark.parametrize("change", [-1, 0, 1])
def test_unbounded_summary_order_is_exactly_pointwise(change):
    """The converse: if one summary is below another on every timestamp, the order says so."""
    universe = summaries_with_depth_change(change, bounded=False)
    grid = [Timestamp(0, cs) for cs in itertools.product((0, 4), repeat=3)]
    for sx, sy in itertools.product(universe, repeat=2):
        pointwise = all(sx.results_in(t) <= sy.results_in(t) for t in grid)
        assert pointwise == (sx <= sy), (sx, sy)


def test_composition_is_monotone_for_unbounded_summaries():
    """``ux <= uy`` implies ``uz.ux <= uz.uy`` and ``ux.uz <= uy.uz`` (what reachability relies on)."""
    by_change = {c: summaries_with_depth_change(c, bounded=False, values=2) for c in (-1, 0, 1)}
    everything = [s for universe in by_change.values() for s in universe]
    checked = 0
    for universe in by_change.values():
        for ux, uy in itertools.product(universe, repeat=2):
            if ux <= uy:
                for uz in everything:
                    assert uz.followed_by(ux) <= uz.followed_by(uy), (uz, ux, uy)
                    assert ux.followed_by(uz) <= uy.followed_by(uz), (ux, uy, uz)
                    checked += 1
    assert checked > 10 * len(everything)


# -- summaries: primitive steps ----------------------------------------------------


def test_primitive_steps():
    t = Timestamp(2, (3,))
    assert PathSummary.ingress().results_in(t) == Timestamp(2, (3, 0))
    assert PathSummary.egress().results_in(t) == Timestamp(2)
    assert PathSummary.feedback().results_in(t) == Timestamp(2, (4,))
    assert PathSummary.feedback(bound=3).results_in(t) is None
    assert PathSummary.feedback(bound=4).results_in(t) == Timestamp(2, (4,))


def test_egress_then_ingress_resets_and_does_not_advance():
    reset = PathSummary.egress().followed_by(PathSummary.ingress())
    assert reset.results_in(Timestamp(0, (1, 7))) == Timestamp(0, (1, 0))
    assert not reset.strictly_advances()
    outer_step = PathSummary.egress().followed_by(PathSummary.feedback()).followed_by(PathSummary.ingress())
    assert outer_step.strictly_advances()
