"""Which progress batches ride with a replica's data, and which it passes on.

A replica's progress batch of an event may go in the same call as the data that event
sent a peer, instead of in a call of its own to the progress actor; the peer passes it on,
ahead of its own next message, in the call that carries its receipt of that data. Every
frontier the batch can move waits for that receipt anyway, so the batch is no later
(``docs/architecture.md``, under Messages). Two cases:

* **A loop's round** (a chain on a cycle) that sent data to one peer only, a replica of
  the same chain: its batch goes with the rows. A peer that has batches to pass on adds
  its own and sends them all on with its rows while they are fewer than
  :data:`MAX_RIDING` and none asks for an acknowledgement (which would otherwise come only
  once they stop riding); else they go to the progress actor.
* **An input's chain closing an epoch** (``epoch_tokens.rides_with_tokens``): its batch
  goes with its tokens, to the first receiver that got a token and, if the event sent
  data, data. The receiver may keep it for its own next message until the other
  channels' tokens have come (:meth:`Rides.keep`, ``epoch_tokens.riders_may_wait``).

A batch with output records never rides. The same rules run on Ray
(:class:`~raytide.actors.vertex_actor.VertexActor`'s transport) and in the in-process
runtime (:class:`~raytide.testing.mailboxes.LocalTransport`), so the simulator's seeded
trials, crashes included, walk them. Nothing here sends: a transport asks where a batch
goes and sends what it is told.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable

from raytide.physical.protocol import ProgressBatch, ReplicaKey, Sequenced

#: The most batches a replica passes on with its rows before they go to the progress actor.
MAX_RIDING = 8


class Rides:
    """One replica's progress batches riding with its data, and those it passes on.

    ``chain`` is the replica's chain; ``tokens_ride`` whether its batch at an epoch's close
    goes with its tokens (``epoch_tokens.rides_with_tokens``).
    """

    def __init__(self, chain: str, tokens_ride: bool) -> None:
        self.chain, self.tokens_ride = chain, tokens_ride
        #: Per peer, the batches to go with the data this event sends it.
        self.riding: dict[ReplicaKey, list[Sequenced]] = {}
        #: Other replicas' batches that came with their data, for the progress actor.
        self.passing_on: list[Sequenced] = []
        #: Of those, the ones kept for this replica's next message, each with the epoch that
        #: every token channel must have closed before they go on their own (:meth:`keep`).
        self.kept: list[tuple[int | None, Sequenced]] = []
        self.data_peers: set[ReplicaKey] = set()  # the receivers this event sent data to
        self.token_peer: ReplicaKey | None = None  # the first that also got a token

    def sent(self, to: ReplicaKey, token: bool) -> None:
        """This event sent ``to`` a batch: an epoch token if ``token``, else data."""
        if self.tokens_ride and not token:
            self.data_peers.add(to)
        elif self.tokens_ride and self.token_peer is None and (to in self.data_peers or not self.data_peers):
            self.token_peer = to  # the first to get a token, and data if this event sent any

    def carried(self, calls: Iterable[Sequenced]) -> None:
        """Batches that came with data this replica received: it passes them on."""
        self.passing_on.extend(calls)

    def place(self, call: Sequenced, in_event: bool, pending: Collection[ReplicaKey]) -> tuple[Sequenced, ...]:
        """Where ``call`` goes: with data to a peer (kept in :attr:`riding`, with what this
        replica passes on; returns nothing), or to the progress actor now (returns the calls
        to send, what it passes on first). ``in_event``: inside an event, whose data waits
        to be sent; ``pending``: the peers that data is for, in the order first sent to."""
        self.passing_on[:0] = [kept for _, kept in self.kept]  # they wait for a message of this replica's: this one
        self.kept.clear()
        peer = self._peer(call, in_event, pending)
        calls = (*self.passing_on, call)
        self.passing_on.clear()
        if peer is None:
            return calls
        self.riding.setdefault(peer, []).extend(calls)  # after any batch of this event's already going
        return ()

    def _peer(self, call: Sequenced, in_event: bool, pending: Collection[ReplicaKey]) -> ReplicaKey | None:
        """The one peer ``call`` may go with (see the module docstring), or None."""
        if not (in_event and isinstance(call.message, ProgressBatch)) or call.message.outputs:
            return None
        if self.token_peer is not None and not self.passing_on and not call.message.ack:
            return self.token_peer  # an input's chain closing an epoch: with its tokens (and data)
        if len(pending) != 1:
            return None
        peer = next(iter(pending))
        if not self.passing_on:
            return peer if call.message.ack or peer.chain == self.chain else None
        may_ride_again = len(self.passing_on) < MAX_RIDING and not any(
            isinstance(passed.message, ProgressBatch) and passed.message.ack for passed in self.passing_on)
        return peer if peer.chain == self.chain and may_ride_again else None

    def take(self, to: ReplicaKey) -> list[Sequenced]:
        """The batches to go with the data now sent to ``to``."""
        return self.riding.pop(to, [])

    def take_stranded(self) -> list[Sequenced]:
        """At an event's end, once its data is sent: batches placed with a peer whose data
        went before them (a marker to that peer sent it on). They go to the progress actor:
        riding saves a call, and dropping one would leave a frontier waiting forever."""
        stranded = [call for calls in self.riding.values() for call in calls]
        self.riding.clear()
        return stranded

    def keep(self, until: int | None) -> None:
        """Keep what came with data in this event for this replica's next message, until every
        token channel has closed epoch ``until`` (None: every channel closed) at the latest;
        at most :data:`MAX_RIDING` batches are kept (see ``epoch_tokens.riders_may_wait``)."""
        self.kept += [(until, call) for call in self.passing_on]
        self.passing_on.clear()
        if len(self.kept) > MAX_RIDING:
            self.passing_on, self.kept = [kept for _, kept in self.kept], []

    def take_passing_on(self, closed: Callable[[int | None], bool] = lambda until: True) -> list[Sequenced]:
        """What came with data and did not go on with a batch of this replica's, and what was
        kept whose epoch ``closed`` says every token channel has closed (all that was kept, by
        default)."""
        due: list[Sequenced] = []
        still: list[tuple[int | None, Sequenced]] = []
        for until, call in self.kept:  # each asked once
            if closed(until):
                due.append(call)
            else:
                still.append((until, call))
        calls, self.passing_on, self.kept = [*due, *self.passing_on], [], still
        return calls

    def end_event(self) -> None:
        """Forget the event that ended: which receivers it sent data and tokens to, and
        what it placed with its data (sent by now, or dropped with an event that failed:
        the job fails)."""
        self.data_peers.clear()
        self.token_peer = None
        self.riding.clear()

    def reset(self) -> None:
        """A recovery: nothing riding, kept or to pass on is of the new incarnation."""
        self.passing_on.clear()
        self.kept.clear()
        self.end_event()
