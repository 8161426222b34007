"""Path summaries: what a path through the dataflow graph does to a timestamp.

Every path is a sequence of three primitive steps (Naiad section 2.1):

* ingress appends a loop counter 0 (entering a loop context),
* egress drops the last counter (leaving it),
* feedback adds 1 to the last counter (the next iteration), optionally dropping
  the record once the counter would exceed an iteration bound.

Any such sequence has a canonical form, which is what :class:`PathSummary` stores:
drop ``pops`` counters, add ``increment`` to the counter that is then last, then append
the constant counters ``pushes``; and, if ``bound`` is set, drop the timestamp when the
incremented counter ends above ``bound``.

>>> s = PathSummary.ingress().followed_by(PathSummary.feedback()).followed_by(PathSummary.feedback())
>>> s.results_in(Timestamp(3, (1,)))
Timestamp(3, (1, 2))
>>> PathSummary.egress().followed_by(PathSummary.feedback()).results_in(Timestamp(0, (4, 7)))
Timestamp(0, (5,))

Laws (tested as properties in tests/unit/test_order_laws.py):

* ``identity`` is neutral and ``followed_by`` is associative;
* for unbounded summaries ``results_in`` is monotone: ``t1 <= t2`` implies
  ``s(t1) <= s(t2)``, and ``s1 <= s2`` implies ``s1(t) <= s2(t)``;
* ``s1.followed_by(s2)`` applied to ``t`` equals ``s2(s1(t))`` whenever the latter is
  defined. The one approximation: a bound on a counter that a later egress removes is
  forgotten, so the composition may let through a timestamp the two steps in sequence
  would drop. That only ever over-approximates could-result-in, which is safe.
"""

from __future__ import annotations

from typing import NamedTuple

from raytide.progress.timestamps import Timestamp


class PathSummary(NamedTuple):
    """A path summary in canonical form (see the module docstring).

    Attributes:
        pops: how many trailing loop counters the path drops.
        increment: what it adds to the counter that is last after the pops.
        pushes: the counters it appends afterwards, outermost first.
        bound: if set, the timestamp is dropped when the incremented counter ends above it.
    """

    pops: int = 0
    increment: int = 0
    pushes: tuple[int, ...] = ()
    bound: int | None = None

    @staticmethod
    def identity() -> PathSummary:
        """The summary of the empty path (and of every ordinary vertex)."""
        return _IDENTITY

    @staticmethod
    def ingress() -> PathSummary:
        """Entering a loop context: append a counter 0."""
        return _INGRESS

    @staticmethod
    def egress() -> PathSummary:
        """Leaving a loop context: drop the last counter."""
        return _EGRESS

    @staticmethod
    def feedback(bound: int | None = None) -> PathSummary:
        """The next iteration: add 1 to the last counter.

        Args:
            bound: if set, a record whose counter would exceed ``bound`` is dropped, so a
                loop body sees iterations ``0 .. bound`` at most; 0 drops every record (a
                loop body that runs once). Must not be negative.
        """
        if bound is not None and bound < 0:
            raise ValueError(f"a feedback bound must not be negative, got {bound}")
        return PathSummary(0, 1, (), bound) if bound is not None else _FEEDBACK

    @property
    def depth_change(self) -> int:
        """How many counters the path adds (negative when it leaves loops)."""
        return len(self.pushes) - self.pops

    def unbounded(self) -> PathSummary:
        """The same summary without its iteration bound (an over-approximation)."""
        return self if self.bound is None else self._replace(bound=None)

    def results_in(self, time: Timestamp) -> Timestamp | None:
        """Apply the summary to ``time``; None when an iteration bound drops it.

        Raises:
            ValueError: if ``time`` has too few counters for this path.
        """
        counters = time.counters
        keep = len(counters) - self.pops
        if keep < 0 or (keep == 0 and (self.increment or self.bound is not None)):
            raise ValueError(f"{self!r} cannot apply to {time!r}: too few loop counters")
        if keep == 0:
            return Timestamp(time.epoch, self.pushes)
        last = counters[keep - 1] + self.increment
        if self.bound is not None and last > self.bound:
            return None
        return Timestamp(time.epoch, counters[: keep - 1] + (last,) + self.pushes)

    def followed_by(self, other: PathSummary) -> PathSummary | None:
        """The summary of this path followed by ``other``; None if no timestamp survives it."""
        mine = len(self.pushes)
        if other.pops < mine:
            return self._then_inside_pushes(other)
        if other.pops == mine:
            bound = _tighter(None if self.bound is None else self.bound + other.increment, other.bound)
            increment = self.increment + other.increment
            if bound is not None and bound - increment < 0:
                return None
            return PathSummary(self.pops, increment, other.pushes, bound)
        extra = other.pops - mine
        return PathSummary(self.pops + extra, other.increment, other.pushes, other.bound)

    def _then_inside_pushes(self, other: PathSummary) -> PathSummary | None:
        """``other`` only touches counters that this path pushed as constants."""
        kept = self.pushes[: len(self.pushes) - other.pops]
        last = kept[-1] + other.increment
        if other.bound is not None and last > other.bound:
            return None
        return PathSummary(self.pops, self.increment, kept[:-1] + (last,) + other.pushes, self.bound)

    def less_equal(self, other: PathSummary) -> bool:
        """``self <= other`` iff ``self(t) <= other(t)`` for every ``t`` where ``other(t)`` is defined.

        Only summaries with the same depth change are comparable (those connecting the
        same pair of scopes). With equal pops the increments and pushes decide
        lexicographically, and the one letting fewer counters through cannot be smaller.
        A summary that keeps more counters (fewer pops) is below one that increments a
        counter further out, because that counter decides the lexicographic comparison;
        one that pops more is below another only if its constants are below what the
        other leaves there for the smallest possible counters.
        """
        if self.depth_change != other.depth_change:
            return False
        if self.pops < other.pops:
            return other.increment > 0 and self.bound is None
        if self.pops > other.pops:
            if self.increment or self.bound is not None:
                return False
            smallest_other = (0,) * (self.pops - other.pops - 1) + (other.increment,) + other.pushes
            return self.pushes <= smallest_other
        if (self.increment, self.pushes) > (other.increment, other.pushes):
            return False
        return _domain_top(self) >= _domain_top(other)

    def less_than(self, other: PathSummary) -> bool:
        """Strictly less in the partial order of summaries."""
        return self != other and self.less_equal(other)

    def __le__(self, other: object) -> bool:
        """``<=`` is :meth:`less_equal`, the partial order, never tuple order."""
        return self.less_equal(_as_summary(other, "<="))

    def __lt__(self, other: object) -> bool:
        """``<`` is :meth:`less_than`, the strict partial order, never tuple order."""
        return self.less_than(_as_summary(other, "<"))

    def __ge__(self, other: object) -> bool:
        return isinstance(other, PathSummary) and other.less_equal(self)

    def __gt__(self, other: object) -> bool:
        return isinstance(other, PathSummary) and other.less_than(self)

    def strictly_advances(self) -> bool:
        """Whether ``t < self(t)`` for every timestamp: what every cycle's summary must do."""
        return self.depth_change == 0 and self.increment > 0

    def __repr__(self) -> str:
        bound = "" if self.bound is None else f", bound={self.bound}"
        return f"PathSummary(pops={self.pops}, increment={self.increment}, pushes={self.pushes}{bound})"


def _as_summary(other: object, operator: str) -> PathSummary:
    """``other`` if it is a summary; a TypeError otherwise, so tuple order never decides a comparison."""
    if not isinstance(other, PathSummary):
        raise TypeError(f"'{operator}' compares a PathSummary only with another PathSummary, not {type(other).__name__}")
    return other


def _tighter(a: int | None, b: int | None) -> int | None:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)


def _domain_top(summary: PathSummary) -> float:
    """The largest counter value (before the increment) the summary lets through."""
    if summary.bound is None:
        return float("inf")
    return summary.bound - summary.increment


_IDENTITY = PathSummary()
_INGRESS = PathSummary(0, 0, (0,))
_EGRESS = PathSummary(1, 0, ())
_FEEDBACK = PathSummary(0, 1, ())
