"""An input replica's calls (:class:`InputCalls`, a part of
:class:`~raytide.actors.vertex_actor.VertexActor`): records the driver pushes (by value, as
object refs or remote batches, a stream's share with event time), the moves of an input's
epoch, and a source read in the replica itself (``start_reader``, then ``pump`` calls to
itself that read for a slice of time each and yield to the other calls between). Kept apart
from the data path's and the recovery's calls; the same thin shell over the
:class:`~raytide.engine.replica.ReplicaCore`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from raytide.actors.pushed import heard, read_pushed, take_share
from raytide.actors.ray_transport import RayTransport
from raytide.core.batches import batch_length
from raytide.engine import epoch_tokens
from raytide.engine.replica import ReplicaCore
from raytide.errors import RaytideError, SourceError
from raytide.physical.protocol import ReplicaKey
from raytide.physical.wire import unpack_for
from raytide.sources.base import Reader

if TYPE_CHECKING:  # not imported by a host: a job without streams never loads them
    from raytide.sources.clocked_stream import Heard, Share


class InputCalls:
    """The input calls of a vertex replica (what :class:`VertexActor` keeps that they use is declared here)."""

    myself: Any
    key: ReplicaKey
    core: ReplicaCore
    transport: RayTransport
    failed: RaytideError | None
    readers: dict[str, tuple[Reader[Any], Iterator[tuple[int, Any]]]]
    started: dict[str, Reader[Any]]  # every reader started, reading or done
    _current: Callable[[int], bool]
    _guard: Callable[..., None]
    _fail: Callable[[RaytideError], None]

    def push(self, incarnation: int, vertex: str, payload: Any, packed: bool, epoch: int,
             proxies: epoch_tokens.Proxies = (), then: int | None = None) -> None:
        """Records of ``epoch`` for input ``vertex`` from the driver (:mod:`raytide.physical.wire`); then, if ``then`` is
        given, move the input to ``then`` in the same call, with the proxy tokens ``proxies`` (:mod:`raytide.driver.inputs`)."""
        if self._current(incarnation):
            self._guard(self._push_then, vertex, payload, packed, epoch, proxies, then)

    def _push_then(self, vertex: str, payload: Any, packed: bool, epoch: int, proxies: epoch_tokens.Proxies,
                   then: int | None) -> None:
        """One event of :meth:`push`: what both moves send goes out in one flush."""
        self.core.push_input(vertex, unpack_for(payload, packed, lambda: f"input {vertex!r} epoch {epoch}"), epoch)
        if then is not None:
            self.core.advance_input(vertex, then, False, proxies)

    def push_refs(self, incarnation: int, vertex: str, refs: list, epoch: int, then: int | None = None) -> None:
        """Records of ``epoch`` for input ``vertex`` as object refs or :class:`RemoteBatch` handles (read here, not on the
        driver); then, if ``then`` is given, move the input to ``then`` in the same call (a stream's batch: no snapshot in it)."""
        if not self._current(incarnation):
            return
        for batch in self._read_pushed(vertex, refs, f"epoch {epoch}"):
            self._guard(self.core.push_input, vertex, batch, epoch)
        if then is not None:
            self._guard(self.core.advance_input, vertex, then)

    def push_stream(self, incarnation: int, vertex: str, share: Share) -> Heard | None:
        """This replica's share of a batch of a stream with event time, or its end: read here, put to epochs by this
        replica's clock in one event (:mod:`raytide.sources.clocked_stream`); returns what tells the driver it is idle."""
        if self._current(incarnation):
            batches = list(self._read_pushed(vertex, share.refs, f"batch {share.upto - 1}"))
            self._guard(take_share, self.core, self.started, vertex, share, batches)
        return heard(self.started, vertex, self.key.replica) if self.failed is None else None

    def _read_pushed(self, vertex: str, refs: Sequence[Any], where: str) -> Iterator[Any]:
        """The batches of ``refs``, read here in order; one that cannot be read fails the job (and ends them):
        objects whose owner died or that were freed, or a batch kept where it cannot be read any more (its
        Spark executor is gone). No epoch completes without them."""
        try:
            yield from read_pushed(refs)
        except Exception as error:
            self._fail(SourceError(f"input {vertex!r} replica {self.transport.key[1]} {where}: {error}"))

    def start_reader(self, incarnation: int, vertex: str, reader: Reader[Any]) -> None:
        """Read input ``vertex`` here from ``reader``, this replica's share of a source read in the replicas.

        ``reader`` yields ``(epoch, batch)`` pairs, epochs never decreasing, from its start
        or from the position it was sought to (see :mod:`raytide.sources.base`). A replica
        restored from a snapshot resumes it where the snapshot says it was (nothing, if
        the input was closed by then).
        """
        if not self._current(incarnation):
            return
        if vertex in self.core.restored_sources:
            self._guard(reader.seek, self.core.restored_sources[vertex])
        self.started[vertex] = reader
        if self.core.input_epochs[vertex] is None:
            return
        self.readers[vertex] = (reader, iter(reader))
        self.myself.pump.remote(incarnation, vertex)

    def pump(self, incarnation: int, vertex: str, budget: float = 0.05) -> None:
        """Read and send batches for about ``budget`` seconds, then yield to other calls and continue.

        Sends wait when downstream is full, so reading is paced by the slowest consumer.
        """
        entry = self.readers.get(vertex)
        if entry is None or self.failed is not None or not self._current(incarnation):
            return
        reader = entry[1]
        deadline = time.monotonic() + budget
        try:
            while time.monotonic() < deadline:
                item = next(reader, None)
                if item is None:
                    del self.readers[vertex]
                    self._guard(self.core.advance_input, vertex, None)
                    return
                epoch, batch = item
                self._guard(self._read_one, vertex, epoch, batch)
                if self.failed is not None:
                    return
        except Exception as error:  # the reader itself failed (a missing file, a corrupt block)
            self._fail(SourceError(f"input {vertex!r} replica {self.transport.key[1]}: reading failed: {error!r}"))
            return
        self.myself.pump.remote(incarnation, vertex)

    def _read_one(self, vertex: str, epoch: int, batch: Any) -> None:
        if epoch != self.core.input_epochs[vertex]:
            self.core.advance_input(vertex, epoch)
        if batch_length(batch):
            self.core.push_input(vertex, batch, epoch)

    def advance(self, incarnation: int, vertex: str, epoch: int | None) -> None:
        """Move input ``vertex`` to ``epoch``; None closes it."""
        if self._current(incarnation):
            self._guard(self.core.advance_input, vertex, epoch)

    def advance_quietly(self, incarnation: int, vertex: str, epoch: int) -> None:
        """Move input ``vertex`` to ``epoch`` while a peer sends its epoch tokens (``epoch_tokens.ProxyPlan``)."""
        if self._current(incarnation):
            self._guard(self.core.advance_input, vertex, epoch, True)
