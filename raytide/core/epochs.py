"""The order of epochs at keyed state inside a loop: one epoch (or outer round) at a time.

Inside a loop, ``(e, (5,))`` and ``(e + 1, (0,))`` are incomparable timestamps: the
frontier lets epoch ``e + 1`` in while ``e`` still iterates. Keyed state that lives across
epochs would then mix them. A replica whose notifications of each epoch (and, in nested
loops, of each outer round) all come before those of the next evolves exactly as if the
epochs ran one after another, and the records it sends carry their epoch; so the only
thing to catch is a notification of an earlier phase after one of a later phase, which
:func:`check_epoch_order` refuses, loudly, rather than give mixed results (docs/iteration.md).
"""

from __future__ import annotations

from raytide.core.vertex import Vertex
from raytide.errors import ProgressError
from raytide.progress.timestamps import Timestamp

#: An epoch and the loop counters of the enclosing loops: what must not go backwards.
Phase = tuple[int, tuple[int, ...]]


def phase_of(time: Timestamp) -> Phase | None:
    """The phase of a time inside a loop (None at the top level, where times are totally ordered)."""
    return (time.epoch, time.counters[:-1]) if time.counters else None


def check_epoch_order(vertex: Vertex, latest: Phase | None, time: Timestamp) -> Phase | None:
    """The latest phase after a notification at ``time``, having seen ``latest`` before.

    Raises:
        ProgressError: ``time`` belongs to an earlier phase than ``latest``: two epochs
            (or outer rounds) are in the loop at once at this replica.
    """
    phase = phase_of(time)
    if phase is None:
        return latest
    if latest is not None and phase < latest:
        outer = f" (outer loop counters {latest[1]})" if latest[1] else ""
        raise ProgressError(
            f"vertex {vertex.name!r} replica {vertex.replica}: a notification at {time} came after the vertex "
            f"worked on epoch {latest[0]}{outer}: two epochs are in the loop at once, and its keyed state, which "
            "lives across epochs, would mix them; feed the loop one epoch after another (wait for an epoch's "
            "output before pushing the next), see docs/iteration.md")
    return later(latest, phase)


def later(a: Phase | None, b: Phase | None) -> Phase | None:
    """The later of two phases (None: none seen)."""
    if a is None or b is None:
        return a if b is None else b
    return max(a, b)
