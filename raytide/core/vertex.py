"""The vertex API: Naiad's OnRecv / OnNotify callbacks and SendBy / NotifyAt calls.

Subclass :class:`Vertex` and override :meth:`Vertex.on_recv` and, when the vertex needs to
know that a timestamp is complete, :meth:`Vertex.on_notify`::

    class DistinctPerEpoch(rt.Vertex):
        def __init__(self):
            self.seen = {}

        def on_recv(self, edge, message, time):
            if time not in self.seen:
                self.seen[time] = set()
                self.notify_at(time)
            self.seen[time].update(message)

        def on_notify(self, time):
            self.send_by(0, sorted(self.seen.pop(time)), time)

``edge`` and ``output`` are port indices, ``message`` is a batch of records (a list, or a
columnar batch for vectorised operators) and ``time`` a :class:`~raytide.Timestamp`.
A vertex may send only at times not earlier than the time it was called with; breaking
that rule raises :class:`~raytide.errors.ProgressError` naming the vertex. ``snapshot``
returns the state to save and ``restore`` puts it back (default: no state); a vertex whose
state is keyed also splits it by key with ``take_keys`` and ``put_keys``, so that it can
change parallelism.
:meth:`Vertex.on_input_epoch` is a hint for vertices fused behind an input.

One object runs per replica, single-threaded: callbacks never run concurrently.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Any, ClassVar, Protocol

from raytide.errors import RescaleError
from raytide.progress.timestamps import Timestamp


class VertexContext(Protocol):
    """What the runtime gives a vertex: how to send and to ask for notifications."""

    vertex: str
    replica: int
    parallelism: int

    def send_by(self, output: int, message: Any, time: Timestamp) -> None: ...  # noqa: D102

    def notify_at(self, time: Timestamp) -> None: ...  # noqa: D102

    def cancel_notify(self, time: Timestamp) -> None: ...  # noqa: D102


class Vertex:
    """Base class of every dataflow vertex (built-in operators included)."""

    _context: VertexContext | None = None
    #: Whether ``on_recv`` may get a lazy batch (:mod:`raytide.core.batches`) rather than
    #: its list of records. Built-in operators that read batches only through that module
    #: say yes; every other vertex gets what the docstring above promises.
    takes_lazy_batches: ClassVar[bool] = False
    #: Input ports whose batches are the vertex's own bookkeeping (a loop's tokens and
    #: ticks), not data: ``records_in`` in ``job.stats()`` and the autoscaler's rates leave them out.
    control_ports: frozenset[int] = frozenset()

    def bind(self, context: VertexContext) -> None:
        """Called by the runtime before any callback; gives the vertex its context."""
        self._context = context

    @property
    def context(self) -> VertexContext:
        """The runtime context; only available once the vertex runs."""
        if self._context is None:
            raise RuntimeError(f"{type(self).__name__} is not running inside a dataflow yet")
        return self._context

    @property
    def name(self) -> str:
        """The vertex's name in the dataflow."""
        return self.context.vertex

    @property
    def replica(self) -> int:
        """Which replica of the vertex this object is (0-based)."""
        return self.context.replica

    @property
    def parallelism(self) -> int:
        """How many replicas the vertex has."""
        return self.context.parallelism

    def on_recv(self, edge: int, message: Any, time: Timestamp) -> None:
        """A batch of records arrived on input ``edge`` at ``time``."""

    def on_notify(self, time: Timestamp) -> None:
        """Every record at ``time`` or earlier has been delivered (requested with ``notify_at``)."""

    def on_input_epoch(self, epoch: int | None) -> None:
        """A hint: the input this vertex is fused behind moved to ``epoch`` (None: closed).

        Called only on vertices in the same actor as an input replica (behind a source's
        reader, say), which then receive nothing more from it at earlier epochs. Other
        replicas may still send there, so nothing is complete yet: a vertex that
        pre-aggregates can ship what it holds for those epochs now rather than at
        ``on_notify``. It may send only at times it awaits a notification for; once it has
        shipped everything of a time, :meth:`cancel_notify` spares the round through the
        progress tracker that delivering that notification would take.
        """

    def send_by(self, output: int, message: Any, time: Timestamp) -> None:
        """Send a batch of records on output port ``output`` at ``time``.

        The batch is handed over: a consumer in the same actor (a fused operator, or this
        replica itself through a loop's feedback) gets the very object, not a copy, so
        do not modify it after sending.
        """
        self.context.send_by(output, message, time)

    def notify_at(self, time: Timestamp) -> None:
        """Ask for ``on_notify(time)`` once ``time`` is complete at this vertex's inputs."""
        self.context.notify_at(time)

    def cancel_notify(self, time: Timestamp) -> None:
        """Withdraw a pending ``notify_at(time)``: ``on_notify(time)`` will not be called, and
        the vertex may no longer send at ``time`` on its strength. Downstream vertices stop
        waiting for it at once, as they would after its delivery. Does nothing if no
        notification at ``time`` is pending."""
        self.context.cancel_notify(time)

    def statistics(self) -> dict[str, int]:
        """Counters of this replica's state for ``job.stats()`` (summed over the vertex's replicas).

        Called from another thread while the vertex may be running a callback: return
        counters the vertex keeps up to date as it works, not something computed by walking
        its state. Default: none.
        """
        return {}

    def snapshot(self) -> Any:
        """The state to save in a snapshot (default: none)."""
        return None

    def restore(self, state: Any) -> None:
        """Put back the state returned by :meth:`snapshot`."""

    def take_keys(self, moving: Callable[[Hashable], bool]) -> Any:
        """Remove from this replica's state, and return, the state of every key for which
        ``moving(key)`` is true.

        Called when the vertex's parallelism changes (a snapshot restored at another
        parallelism, a live rescale): the keys are those its exchange inputs route by, and
        ``moving`` says which key groups go to another replica. The returned value is
        handed to another replica's :meth:`put_keys` (possibly after pickling), so it must
        hold everything this replica kept for those keys, at every time, and nothing else.
        A time for which the replica no longer holds anything should lose its notification
        (:meth:`cancel_notify`), as the built-in operators do.

        Default: a vertex that does not override :meth:`snapshot` keeps no state and
        returns None; one that does must override this too.

        Raises:
            RescaleError: The vertex overrides :meth:`snapshot` but not this method.
        """
        self._refuse_keyed_state()
        return None

    def put_keys(self, state: Any) -> None:
        """Add state that :meth:`take_keys` of another replica of this vertex returned.

        Several may arrive, in any order; a key may be held by both (a combiner's partial
        results), in which case the two are merged as the operator merges partial results.
        It asks for the notifications the added state needs (:meth:`notify_at` at each
        time it holds state for, as :meth:`on_recv` would have) and takes ``state`` over:
        the caller does not use it afterwards. It must not send.

        Default: does nothing for a vertex that keeps no state (``state`` is None).

        Raises:
            RescaleError: The vertex overrides :meth:`snapshot` but not this method.
        """
        self._refuse_keyed_state()

    def _refuse_keyed_state(self) -> None:
        """The default split of state by key works only for a vertex without state; a vertex
        that keeps some (it overrides ``snapshot``) must say how its state splits."""
        if type(self).snapshot is not Vertex.snapshot:
            raise RescaleError(
                f"vertex {self._label()!r} keeps state (it overrides snapshot()) but does not implement "
                "take_keys/put_keys, so its state cannot be split when its parallelism changes")

    def _label(self) -> str:
        """The vertex's name when it runs in a dataflow, else its class name (for messages)."""
        return self.name if self._context is not None else type(self).__name__
