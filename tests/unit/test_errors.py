"""Public errors keep what they say when they cross a process boundary (Ray pickles them)."""

from __future__ import annotations

import pickle

import raytide as rt
from raytide.errors import ReplicaLost, UserCodeError


def test_a_user_code_error_keeps_its_place_and_loop_counters_through_pickling():
    try:
        raise ValueError("bad record")
    except ValueError as error:
        original = UserCodeError("step", 1, rt.Timestamp(3, (2, 5)), error)
    copy = pickle.loads(pickle.dumps(original))
    assert (copy.vertex, copy.replica, copy.time) == ("step", 1, rt.Timestamp(3, (2, 5)))
    assert str(copy) == str(original)
    assert "epoch 3, iteration (2, 5)" in str(copy) and "ValueError('bad record')" in str(copy)


def test_a_lost_replica_keeps_its_names_through_pickling():
    original = ReplicaLost("job/a+b/1", ("a", "b"), "the driver", "ActorDiedError")
    copy = pickle.loads(pickle.dumps(original))
    assert (copy.replica, copy.vertices, str(copy)) == ("job/a+b/1", ("a", "b"), str(original))
    assert isinstance(copy, rt.RaytideError) and not isinstance(copy, rt.UserCodeError)
