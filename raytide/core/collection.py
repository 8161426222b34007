"""Collections: multisets that change by additions and deletions, with operators kept up to date.

Differential dataflow's model on the timely core. A :class:`Collection` is a stream of
updates ``(record, diff)``: at every time, the collection holds each record as many times
as the diffs of its updates so far add up to. Every operator turns changes in into
changes out, with work in proportion to what changed::

    edges = flow.collection("edges")                       # pushed as ((u, v), +1) / ((u, v), -1)
    degree = edges.map(lambda e: e[0]).count(lambda u: u)  # (node, degree), kept up to date
    degree.output("degree")                                # per epoch: the changes ((node, d), diff)

``join`` is incremental across all epochs (a record of epoch 5 meets one of epoch 4);
``reduce``, ``count`` and ``distinct`` re-run only for the keys whose records changed;
``iterate`` runs a body to its fixpoint over collections, retractions included, and
after an epoch's changes redoes only what they reach. Outputs are the consolidated changes
of each epoch; :func:`raytide.accumulate` folds them into the collection's contents.

Records must be hashable (tuples, not lists). Keys of one keyed operator must be of one
type. State is keyed state: it is saved in snapshots, recovered exactly once, restored at
other widths and rescaled live like any other (docs/collections.md).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from raytide.core.collection_ops import Consolidate, JoinUpdates, Reduce, RoutingKey, records_logic
from raytide.core.columnar_flow import AnyStream
from raytide.differential import canonical
from raytide.errors import GraphError

#: Per loop, the streams of enclosing scopes already entered into it (entered once, read by all).
_ENTERED: weakref.WeakKeyDictionary[Any, dict[tuple[str, int], AnyStream]] = weakref.WeakKeyDictionary()


class Collection:
    """A collection of records changing over time: a stream of ``(record, diff)`` updates."""

    def __init__(self, stream: AnyStream, consolidated: bool = False) -> None:
        self.stream = stream
        #: Whether each time's updates come consolidated already (a reduction's output does).
        self.consolidated = consolidated

    def __repr__(self) -> str:
        return f"Collection({self.stream.vertex!r})"

    @property
    def flow(self) -> Any:
        """The dataflow the collection is in."""
        return self.stream.flow

    # -- record by record ------------------------------------------------------------

    def map(self, fn: Callable[[Any], Hashable], *, name: str | None = None) -> Collection:
        """Each record ``r`` becomes ``fn(r)``, with its diff."""
        return Collection(self.stream.map(lambda update: (fn(update[0]), update[1]), name=name))

    def flat_map(self, fn: Callable[[Any], Iterable[Hashable]], *, name: str | None = None) -> Collection:
        """Each record ``r`` becomes the records of ``fn(r)``, each with ``r``'s diff."""
        return Collection(self.stream.flat_map(lambda update: [(out, update[1]) for out in fn(update[0])], name=name))

    def filter(self, predicate: Callable[[Any], bool], *, name: str | None = None) -> Collection:
        """The records for which ``predicate`` is true."""
        return Collection(self.stream.filter(lambda update: predicate(update[0]), name=name))

    def negate(self, *, name: str | None = None) -> Collection:
        """Every copy taken away: the collection whose sum with this one is empty."""
        return Collection(self.stream.map(lambda update: (update[0], -update[1]), name=name))

    def concat(self, *others: Collection, name: str | None = None) -> Collection:
        """The multiset sum of this collection and ``others``."""
        streams = [self._aligned(other, "concat").stream for other in others]
        return Collection(self.stream.concat(*streams, name=name))

    def consolidate(self, *, name: str | None = None) -> Collection:
        """The same collection, each time's updates summed per record and zeros dropped."""
        return Collection(self.stream.unary(Consolidate, exchange=_record_key, name=name))

    # -- keyed ---------------------------------------------------------------------

    def reduce(self, key: Callable[[Any], Hashable], fn: Callable[[Hashable, list], Iterable[Hashable]], *,
               name: str | None = None, parallelism: int | None = None) -> Collection:
        """Per key, the records ``fn(key, records)`` returns, kept up to date as the key's records change.

        ``fn`` gets the key's current records (a record repeated by its count) whenever they
        change, and must depend on them as a multiset only: the first calls on each replica
        are checked by calling it again on the records in reverse order.
        """
        return self._reduce(key, records_logic(fn), "reduce", name, parallelism)

    def count(self, key: Callable[[Any], Hashable], *, name: str | None = None,
              parallelism: int | None = None) -> Collection:
        """``(key, n)``: how many records (copies counted) each key has, kept up to date."""
        return self._reduce(key, _count, "count", name, parallelism)

    def distinct(self, *, name: str | None = None, parallelism: int | None = None) -> Collection:
        """Each record once, whatever its count, as long as it has a copy."""
        return self._reduce(_identity, _present, "distinct", name, parallelism)

    def _reduce(self, key: Callable[[Any], Hashable], logic: Any, label: str, name: str | None,
                parallelism: int | None) -> Collection:
        vname = name or self.flow._fresh(label, [self.stream], self.stream.scope)
        return Collection(self.stream.unary(lambda: Reduce(key, logic), exchange=RoutingKey(key), name=vname,
                                            parallelism=parallelism), consolidated=True)

    def join(self, other: Collection, key: Callable[[Any], Hashable],
             other_key: Callable[[Any], Hashable] | None = None, *, name: str | None = None,
             parallelism: int | None = None) -> Collection:
        """``(k, (left, right))`` for every pair of records with equal keys, across all epochs.

        The pair's diff is the product of theirs; it comes at the later of their times.
        """
        right = self._aligned(other, "join")
        right_key = other_key or key
        streams = [self.stream, right.stream]
        vname = name or self.flow._fresh("join", streams, self.stream.scope)
        routing = RoutingKey(key)
        return Collection(self.flow.vertex(lambda: JoinUpdates(key, right_key), streams, 1,
                                           exchange=[routing, RoutingKey(right_key, agreeing=routing)], name=vname,
                                           parallelism=parallelism)[0])

    # -- iteration -----------------------------------------------------------------

    def iterate(self, body: Callable[[Collection], Collection], *, max_iterations: int | None = None,
                name: str | None = None) -> Collection:
        """The fixpoint of ``body``: starting from this collection, ``body`` applied until nothing changes.

        What goes round is consolidated per iteration (by the body's last ``reduce``,
        ``count`` or ``distinct`` if it ends with one), so updates that cancel stop there.

        ``body`` gets the collection of the current iteration (inside a new loop) and
        returns the next one. Collections of enclosing scopes used in it (``join`` with an
        edge list, say) enter the loop by themselves. After each epoch's changes the
        fixpoint is brought up to date, not recomputed: only what those changes reach is
        redone, iteration by iteration. Loops nest. With ``max_iterations``, the result
        after that many applications (if no fixpoint came sooner).
        """
        loop = self.flow._new_loop("iterate", name, self.stream.scope, [self.stream])
        back = loop.feedback(max_iterations=max_iterations)
        entered = Collection(_enter(self.stream, loop))
        result = body(Collection(entered.stream.concat(back.stream)))
        if not isinstance(result, Collection) or result.stream.scope is not loop:
            raise GraphError(f"iterate {loop.name!r}: the body must return a Collection inside its loop, "
                             f"got {result!r}")
        change = result.concat(entered.negate())  # the next iteration's collection is the result
        back.connect((change if result.consolidated else change.consolidate()).stream)
        return Collection(loop.leave(result.stream))

    # -- leaving -------------------------------------------------------------------

    def output(self, name: str) -> None:
        """Deliver the collection's changes as output ``name``: per epoch, consolidated ``(record, diff)``."""
        self.consolidate(name=f"{name}.consolidate").stream.output(name)

    def _aligned(self, other: Any, operator: str) -> Collection:
        """``other`` in this collection's scope: entered into the loops it is outside of."""
        if not isinstance(other, Collection):
            raise GraphError(f"{operator} on collection {self.stream.vertex!r} takes collections, got {other!r}"
                             " (a stream becomes a collection with stream.as_collection())")
        scope, path = self.stream.scope, []
        while scope is not other.stream.scope:
            if scope is None:
                raise GraphError(f"{operator}: collection {other.stream.vertex!r} is inside a loop that "
                                 f"{self.stream.vertex!r} is not in; leave the loop first")
            path.append(scope)
            scope = scope.parent
        stream = other.stream
        for loop in reversed(path):
            stream = _enter(stream, loop)
        return Collection(stream)


def _enter(stream: AnyStream, loop: Any) -> AnyStream:
    """``stream`` entered into ``loop`` (its parent's stream), once per loop."""
    entered = _ENTERED.setdefault(loop, {})
    place = (stream.vertex, stream.port)
    if place not in entered:
        entered[place] = loop.enter(stream)
    return entered[place]


def _record_key(update: tuple) -> Hashable:
    return canonical(update[0])



def _identity(record: Any) -> Any:
    return record


def _count(key: Hashable, contents: dict[Any, int]) -> dict[Any, int]:
    return {(key, sum(contents.values())): 1}


def _present(key: Hashable, contents: dict[Any, int]) -> dict[Any, int]:
    return {key: 1}
