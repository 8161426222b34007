"""The oracle for reader positions: resuming anywhere reads exactly what reading straight through reads."""

from __future__ import annotations

import itertools
import pickle
from collections.abc import Callable
from typing import Any

from raytide.sources.base import Reader

#: What a test compares of one item: ``(epoch, batch) -> [(epoch, record key), ...]``.
Flatten = Callable[[int, Any], list]


def records(items: list[tuple[int, Any]], flatten: Flatten) -> list:
    """The records of ``items`` in order, each with its epoch (batch boundaries do not matter)."""
    return [pair for epoch, batch in items for pair in flatten(epoch, batch)]


def resume(make_reader: Callable[[], Reader], position: Any) -> Reader:
    """A fresh reader sought to ``position``, which crosses a pickle as it will on its way to a snapshot."""
    reader = make_reader()
    reader.seek(pickle.loads(pickle.dumps(position)))
    return reader


def check_resume_everywhere(make_reader: Callable[[], Reader], flatten: Flatten) -> list:
    """Read straight through, then, for every k, read k items, take the position, resume a fresh reader.

    Every resumed read must give the same records with the same epochs as the straight
    one, in the same order: none twice, none lost. A resumed reader's own positions must
    be as good: after its first item it is resumed once more. Returns the records read
    straight through.
    """
    straight = list(make_reader())
    expected = records(straight, flatten)
    epochs = [epoch for epoch, _ in straight]
    assert epochs == sorted(epochs), "a reader's epochs never decrease"
    for k in range(len(straight) + 1):
        first = make_reader()
        iterator = iter(first)
        head = [next(iterator) for _ in range(k)]
        resumed = resume(make_reader, first.position())
        assert records(head + list(resumed), flatten) == expected, f"resumed after {k} of {len(straight)} items"
        middle = list(itertools.islice(resumed, 1))
        tail = list(resume(make_reader, resumed.position()))
        assert records(head + middle + tail, flatten) == expected, f"resumed after {k} items, then after one more"
    return expected
