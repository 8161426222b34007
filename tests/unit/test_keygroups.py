"""Key groups: the stable key hash, ownership invariants, and minimal-move rescaling against a brute-force oracle."""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.core.keygroups import DEFAULT_KEY_GROUPS, KeyGroupAssignment, KeyGroupMove, key_group, key_groups_of
from raytide.errors import RescaleError

FULL_HASH = 2**64  # with this many groups, key_group returns the whole 8-byte digest


# ---------------------------------------------------------------- key_group


def test_key_group_is_pinned_so_it_is_stable_across_processes_and_releases():
    # Python's hash() of a str changes with PYTHONHASHSEED; these must never change.
    assert key_group("user-42") == 44
    assert key_group(1) == 10
    assert key_group(b"1") == 90
    assert key_group(("a", 1)) == 7
    assert key_group("user-42", FULL_HASH) == 13088657904087159980


def test_key_group_default_is_128_groups():
    assert DEFAULT_KEY_GROUPS == 128
    assert all(0 <= key_group(f"k{i}") < 128 for i in range(1000))


def test_keys_of_different_types_hash_differently():
    digests = {key_group(k, FULL_HASH) for k in (1, "1", b"1", (1,), ("1",), (b"1",), ((1,),))}
    assert len(digests) == 7


def test_tuple_encoding_is_unambiguous():
    assert key_group(("ab", "c"), FULL_HASH) != key_group(("a", "bc"), FULL_HASH)
    assert key_group(("a", ""), FULL_HASH) != key_group(("a",), FULL_HASH)
    assert key_group((("a",), "b"), FULL_HASH) != key_group(("a", ("b",)), FULL_HASH)


def test_equal_integers_share_a_group_whatever_their_type():
    assert key_group(True) == key_group(1)
    assert key_group(np.int64(12345)) == key_group(12345)
    assert key_group(np.uint64(2**64 - 1)) == key_group(2**64 - 1)


def test_integers_beyond_64_bits_hash_by_their_whole_value():
    assert key_group(2**64 + 1, FULL_HASH) != key_group(1, FULL_HASH)
    assert key_group(-(2**100), FULL_HASH) != key_group(2**100, FULL_HASH)


@pytest.mark.parametrize(
    ("key", "type_name"), [(1.5, "float"), ([1], "list"), (("a", 2.0), "float"), ({1}, "set"), ((None, 0.5), "float")]
)
def test_unsupported_key_types_raise_a_type_error_naming_the_type(key, type_name):
    with pytest.raises(TypeError, match=f"key of type {type_name} .* must be str, int, bytes, None or tuples"):
        key_group(key)


def test_none_is_a_key_of_its_own_alone_and_in_tuples():
    """A missing value groups with the other missing ones (SQL's GROUP BY groups NULLs), pinned like the others."""
    assert (key_group(None), key_group((None,)), key_group(("a", None))) == (52, 30, 26)
    digests = {key_group(k, FULL_HASH) for k in (None, "None", b"", "", 0, (None,), ((None,),), ("n",))}
    assert len(digests) == 8


def test_key_groups_must_be_positive():
    with pytest.raises(ValueError, match="key_groups must be >= 1"):
        key_group("a", 0)


def test_key_group_spreads_keys_evenly():
    counts = np.bincount([key_group(f"user-{i}") for i in range(12_800)], minlength=128)
    # 100 expected per group; a binomial standard deviation is ~10.
    assert counts.min() > 50 and counts.max() < 150


_keys = st.recursive(st.one_of(st.text(), st.binary(), st.integers(-(2**70), 2**70), st.booleans(), st.none()),
                     lambda inner: st.tuples(inner, inner), max_leaves=4)


@settings(max_examples=200, deadline=None)
@given(keys=st.lists(_keys, max_size=30), groups=st.sampled_from([1, 2, 7, 128, 2**63 + 1, FULL_HASH, 2**70]))
def test_key_groups_of_a_batch_equal_key_group_of_each_key(keys, groups):
    assert key_groups_of(keys, groups) == [key_group(key, groups) for key in keys]


def test_key_groups_of_refuses_what_key_group_refuses():
    with pytest.raises(TypeError, match="key of type float"):
        key_groups_of(["a", 1.5])
    with pytest.raises(ValueError, match="key_groups must be >= 1"):
        key_groups_of(["a"], 0)


# ---------------------------------------------------------------- assignment basics


def test_contiguous_matches_flink_operator_index_for_key_group():
    a = KeyGroupAssignment.contiguous(3, 10)
    assert a.owners == tuple(g * 3 // 10 for g in range(10))
    assert [a.groups_of(r) for r in range(3)] == [(0, 1, 2, 3), (4, 5, 6), (7, 8, 9)]
    assert a.is_balanced and a.key_groups == 10


def test_owner_and_owner_of_key():
    a = KeyGroupAssignment.contiguous(4)
    assert a.owner(0) == 0 and a.owner(127) == 3
    assert a.owner_of_key("user-42") == a.owner(key_group("user-42"))
    with pytest.raises(IndexError, match="key group 128 is not in"):
        a.owner(128)
    with pytest.raises(IndexError):
        a.owner(-1)


@pytest.mark.parametrize("parallelism", [0, 9])
def test_parallelism_must_be_between_one_and_the_number_of_groups(parallelism):
    with pytest.raises(RescaleError, match="parallelism must be in"):
        KeyGroupAssignment.contiguous(parallelism, 8)
    with pytest.raises(RescaleError, match="parallelism must be in"):
        KeyGroupAssignment.contiguous(2, 8).rescale(parallelism)


def test_owners_outside_the_replicas_are_rejected():
    with pytest.raises(RescaleError, match=r"replicas \[2\] outside \[0, 2\)"):
        KeyGroupAssignment((0, 1, 2), 2)


def test_rescale_to_the_same_parallelism_moves_nothing():
    a = KeyGroupAssignment.contiguous(5)
    assert a.rescale(5) == (a, ())


def test_four_to_five_moves_a_fifth_where_flink_reranging_moves_about_half():
    a = KeyGroupAssignment.contiguous(4)
    b, moves = a.rescale(5)
    reranged = sum(1 for g in range(128) if g * 4 // 128 != g * 5 // 128)
    assert len(moves) == 25 and reranged == 62
    assert all(m.to_replica == 4 for m in moves)


# ---------------------------------------------------------------- properties


@st.composite
def balanced_assignments(draw, max_groups=128):
    """A balanced assignment with its groups shuffled among replicas (as after past rescales)."""
    k = draw(st.integers(1, max_groups))
    p = draw(st.integers(1, min(k, 12)))
    owners = draw(st.permutations(KeyGroupAssignment.contiguous(p, k).owners))
    return KeyGroupAssignment(tuple(owners), p)


def _check_rescale(old: KeyGroupAssignment, q: int) -> tuple[KeyGroupAssignment, tuple[KeyGroupMove, ...]]:
    new, moves = old.rescale(q)
    k = old.key_groups
    # Every key group has exactly one owner: groups_of partitions [0, K).
    assert sorted(g for r in range(q) for g in new.groups_of(r)) == list(range(k))
    # Balanced within one group.
    sizes = [len(new.groups_of(r)) for r in range(q)]
    assert max(sizes) - min(sizes) <= 1 and new.is_balanced
    # The moves are exactly the changes of owner, in group order.
    assert list(moves) == [KeyGroupMove(g, a, b) for g, (a, b) in enumerate(zip(old.owners, new.owners)) if a != b]
    return new, moves


@settings(max_examples=200)
@given(balanced_assignments(), st.lists(st.integers(1, 12), min_size=1, max_size=5))
def test_rescale_keeps_one_owner_per_group_balanced_and_reports_every_move(start, parallelisms):
    current = start
    for q in parallelisms:
        current, _ = _check_rescale(current, min(q, current.key_groups))


@settings(max_examples=200)
@given(balanced_assignments(), st.integers(1, 12))
def test_scaling_up_moves_only_to_new_replicas_and_down_only_from_retiring_ones(start, q):
    p, k = start.parallelism, start.key_groups
    q = min(q, k)
    new, moves = _check_rescale(start, q)
    if q >= p:
        assert all(m.to_replica >= p for m in moves)
        assert (q - p) * (k // q) <= len(moves) <= (q - p) * -(-k // q)
    else:
        assert all(m.from_replica >= q for m in moves)
        assert len(moves) == sum(len(start.groups_of(r)) for r in range(q, p))


@cache
def _all_balanced(k: int, q: int) -> np.ndarray:
    """Every balanced assignment of k groups to q replicas, one per row (the brute-force search space)."""
    rows = [
        owners
        for owners in itertools.product(range(q), repeat=k)
        if max(c := [owners.count(r) for r in range(q)]) - min(c) <= 1
    ]
    return np.array(rows, dtype=np.int64).reshape(len(rows), k)


def _fewest_moves_by_brute_force(old: KeyGroupAssignment, q: int) -> int:
    return int((_all_balanced(old.key_groups, q) != np.array(old.owners)).sum(axis=1).min())


@settings(max_examples=300, deadline=None)  # the first example of a size builds the brute-force table
@given(balanced_assignments(max_groups=8), st.integers(1, 4))
def test_rescale_moves_the_true_minimum_found_by_brute_force(start, q):
    q = min(q, start.key_groups)
    _, moves = start.rescale(q)
    assert len(moves) == _fewest_moves_by_brute_force(start, q)


SMALL_CASES = [(k, p, q) for k in range(1, 8) for p in range(1, 5) for q in range(1, 5) if max(p, q) <= k]


@pytest.mark.parametrize(("k", "p", "q"), SMALL_CASES)
def test_rescale_from_contiguous_is_minimal_for_every_small_case(k, p, q):
    start = KeyGroupAssignment.contiguous(p, k)
    _, moves = _check_rescale(start, q)
    assert len(moves) == _fewest_moves_by_brute_force(start, q)


def test_rescale_never_moves_more_than_flink_reranging():
    for p in range(1, 17):
        start = KeyGroupAssignment.contiguous(p)
        for q in range(1, 17):
            _, moves = start.rescale(q)
            assert len(moves) <= sum(1 for g in range(128) if g * p // 128 != g * q // 128)
