"""Built-in operator helpers that change how user functions are called: they must never change what they compute."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raytide.operators import is_identity

Y = "a global"
SAMPLES = ["w", 0, (1, 2), None, ["list"]]


def expressions() -> st.SearchStrategy[str]:
    """Small Python expressions over the parameter ``x``, a default ``d`` and the global ``Y``."""
    atoms = st.sampled_from(["x", "d", "Y", "0", "(x)", "x[0]", "None"])
    return st.recursive(atoms, lambda inner: st.one_of(
        st.builds("({} if {} else {})".format, inner, inner, inner),
        st.builds("[{}][0]".format, inner),
        st.builds("({}, {})[0]".format, inner, inner),
    ), max_leaves=4)


@given(body=expressions(), params=st.sampled_from(["x", "x, d=1", "x, *rest", "x, **kw", "x, *, d=1", "*x"]))
def test_a_function_taken_for_the_identity_returns_its_argument_itself(body, params):
    fn = eval(f"lambda {params}: {body}", {"Y": Y})
    if is_identity(fn):
        for value in SAMPLES:
            assert fn(value) is value


@pytest.mark.parametrize("source", ["lambda w: w", "lambda record: (record)", "def f(x):\n    return x"])
def test_plain_identity_functions_are_recognised(source):
    namespace: dict = {}
    exec(source if source.startswith("def") else f"f = {source}", namespace)
    assert is_identity(namespace["f"])


@pytest.mark.parametrize("fn", [str, str.lower, lambda w: w.lower(), lambda w, d=0: w, lambda *a: a[0], print])
def test_anything_else_is_not(fn):
    assert not is_identity(fn)
