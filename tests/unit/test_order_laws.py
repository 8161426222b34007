"""Order laws of timestamps and path summaries, and the algebra of summary composition."""

from __future__ import annotations

from hypothesis import assume, given
from hypothesis import strategies as st

from raytide.progress import PathSummary, Timestamp
from tests.strategies import any_timestamps, applicable_depth, apply_steps, compose, step_sequences, timestamps

same_depth_triples = st.integers(0, 3).flatmap(lambda d: st.tuples(timestamps(d), timestamps(d), timestamps(d)))


@given(same_depth_triples)
def test_timestamp_order_is_a_partial_order(triple):
    a, b, c = triple
    assert a <= a
    if a <= b and b <= a:
        assert a == b
    if a <= b and b <= c:
        assert a <= c


@given(same_depth_triples)
def test_timestamp_order_is_product_of_epoch_and_lexicographic_counters(triple):
    a, b, _ = triple
    assert (a <= b) == (a.epoch <= b.epoch and a.counters <= b.counters)
    assert (a < b) == (a <= b and a != b)


def test_timestamps_are_not_totally_ordered():
    a, b = Timestamp(0, (5,)), Timestamp(1, (2,))
    assert not a <= b and not b <= a


@given(same_depth_triples)
def test_join_and_meet_are_bounds(triple):
    a, b, c = triple
    j, m = a.join(b), a.meet(b)
    assert a <= j and b <= j and m <= a and m <= b
    if a <= c and b <= c:
        assert j <= c
    if c <= a and c <= b:
        assert c <= m


@given(step_sequences(), step_sequences(), step_sequences())
def test_followed_by_is_associative(x, y, z):
    sx, sy, sz = compose(x), compose(y), compose(z)
    assume(None not in (sx, sy, sz))
    left = sx.followed_by(sy)
    right = sy.followed_by(sz)
    left = None if left is None else left.followed_by(sz)
    right = None if right is None else sx.followed_by(right)
    assume(left is not None and right is not None)
    assert left == right


@given(step_sequences(), st.data())
def test_composed_summary_agrees_with_stepwise_application(steps, data):
    summary = compose(steps)
    depth = applicable_depth(steps)
    time = data.draw(timestamps(depth + data.draw(st.integers(0, 2))))
    stepwise = apply_steps(steps, time)
    if stepwise is not None:
        assert summary is not None and summary.results_in(time) == stepwise
    unbounded = compose([s.unbounded() for s in steps])
    assert unbounded.results_in(time) == apply_steps([s.unbounded() for s in steps], time)


@given(step_sequences())
def test_identity_is_neutral(steps):
    s = compose(steps)
    assume(s is not None)
    assert PathSummary.identity().followed_by(s) == s
    assert s.followed_by(PathSummary.identity()) == s


@given(step_sequences(), st.data())
def test_results_in_is_monotone_in_the_timestamp(steps, data):
    summary = compose([s.unbounded() for s in steps])
    depth = applicable_depth(steps) + data.draw(st.integers(0, 2))
    a, b = data.draw(timestamps(depth)), data.draw(timestamps(depth))
    assume(a <= b)
    assert summary.results_in(a) <= summary.results_in(b)


def summaries_with_depth_change(change: int, bounded: bool = True) -> st.SearchStrategy[PathSummary]:
    """Canonical summaries that add ``change`` counters, possibly bounded."""
    return st.integers(max(0, -change), 2).flatmap(
        lambda pops: st.builds(
            PathSummary,
            st.just(pops),
            st.integers(0, 3),
            st.tuples(*[st.integers(0, 3)] * (pops + change)),
            st.one_of(st.none(), st.integers(3, 8)) if bounded else st.none(),
        )
    )


@given(st.integers(-1, 1), st.data())
def test_summary_order_is_pointwise(change, data):
    sx = data.draw(summaries_with_depth_change(change))
    sy = data.draw(summaries_with_depth_change(change))
    time = data.draw(timestamps(3 + data.draw(st.integers(0, 1)), max_counter=8))
    small, big = sx.results_in(time), sy.results_in(time)
    if sx <= sy and big is not None:
        assert small is not None and small <= big
    if small is not None and big is not None and not small <= big:
        assert not sx <= sy


@given(st.integers(-1, 1), st.data())
def test_unbounded_summary_order_is_exactly_pointwise(change, data):
    """The converse: if one summary is below another on every timestamp, the order says so."""
    sx = data.draw(summaries_with_depth_change(change, bounded=False))
    sy = data.draw(summaries_with_depth_change(change, bounded=False))
    grid = [Timestamp(0, (a, b, c)) for a in (0, 4) for b in (0, 4) for c in (0, 4)]
    pointwise = all(sx.results_in(t) <= sy.results_in(t) for t in grid)
    assert pointwise == (sx <= sy)


@given(st.integers(-1, 1), st.data())
def test_summary_order_laws_across_shapes(change, data):
    sx, sy, sz = (data.draw(summaries_with_depth_change(change)) for _ in range(3))
    assert sx <= sx
    if sx <= sy and sy <= sx:
        assert sx == sy
    if sx <= sy and sy <= sz:
        assert sx <= sz


@given(step_sequences(), step_sequences(), step_sequences())
def test_summary_order_is_a_partial_order_and_composition_is_monotone(x, y, z):
    sx, sy, sz = compose(x), compose(y), compose(z)
    assume(None not in (sx, sy, sz))
    assert sx <= sx
    if sx <= sy and sy <= sx:
        assert sx == sy
    if sx <= sy and sy <= sz:
        assert sx <= sz
    ux, uy, uz = sx.unbounded(), sy.unbounded(), sz.unbounded()
    if ux <= uy:  # composition is monotone for the unbounded summaries reachability uses
        assert uz.followed_by(ux) <= uz.followed_by(uy)
        assert ux.followed_by(uz) <= uy.followed_by(uz)


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


@given(any_timestamps())
def test_timestamps_survive_pickling(t):
    import pickle

    assert pickle.loads(pickle.dumps(t)) == t
