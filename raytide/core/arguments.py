"""Checks of the numeric arguments users give (parallelism, batch sizes, windows, CPUs).

Each returns the value as the type raytide uses, or raises an
:class:`~raytide.errors.ArgumentError` naming the argument and what it must be; a
``bool`` is refused where a count is meant (``True`` would pass as 1).
"""

from __future__ import annotations

import numbers
import operator
from typing import Any

from raytide.errors import ArgumentError


def positive_int(value: Any, what: str) -> int:
    """``value`` as an int if it is an integer (NumPy integers too) of at least 1."""
    return _int_from(value, 1, what, "a positive integer")


def non_negative_int(value: Any, what: str) -> int:
    """``value`` as an int if it is an integer (NumPy integers too) of at least 0."""
    return _int_from(value, 0, what, "an integer of at least 0")


def _int_from(value: Any, low: int, what: str, wanted: str) -> int:
    if not isinstance(value, bool):
        try:
            number = operator.index(value)
        except TypeError:
            pass
        else:
            if number >= low:
                return number
    raise ArgumentError(f"{what} must be {wanted}, not {value!r} ({type(value).__name__})")


def non_negative(value: Any, what: str) -> float:
    """``value`` as a float if it is a real number of at least 0."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool) and float(value) >= 0:
        return float(value)
    raise ArgumentError(f"{what} must be a number of at least 0, not {value!r} ({type(value).__name__})")
