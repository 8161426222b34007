"""Epoch tokens: an input's chain tells the replicas it feeds that it has closed an epoch.

A vertex is notified at time ``t`` once nothing at or before ``t`` may still arrive at its
inputs, which the progress actor decides from the whole job: the replica declares its wait,
the actor pushes a status when the inputs upstream have moved on (two Ray hops on the
critical path of every epoch). Where everything that can reach a vertex comes straight
from inputs' chains, the replica can see it for itself, as the epoch gate's rounds do for
loops (:mod:`raytide.core.epoch_gate`):

* A **sender** is a chain headed by an input and on no cycle. It receives nothing from
  other actors, so once its input has moved to epoch ``b`` and none of its vertices waits
  for a notification before ``b``, nothing it sends later is at an epoch before ``b``. It
  then sends every replica it has a channel to an :class:`~raytide.physical.protocol.EpochClosed`
  token ``b`` on each channel, after the data (channels are FIFO).
* A **receiver** is a chain head on no cycle all of whose input channels come from
  senders. It holds the latest token of each channel; a time whose epoch is below every
  channel's token is ready there, whatever the progress actor has said yet (the
  notification then retires its pointstamp as a pushed status would).

A sender whose vertices still wait for a notification before ``b`` owes the token, and
sends it (for the epoch its input is at by then) once they no longer do. So after a
receiver has had a token on every channel, each channel sends another whenever its sender
closes an epoch, and the receiver leaves the waits they will answer out of what it
declares to the progress actor: it saves the declaration and the status push. Until then
(a job's first epoch, a restored or adopted replica, whose book starts empty: tokens carry
no pointstamp and the snapshot holds none) it declares them, and the progress actor
answers them as before. Every sender replica sends each receiver replica a token per
epoch, so tokens are used only between vertices whose widths multiply to at most
:data:`MAX_TOKEN_PAIRS`; wider jobs leave it to the progress actor, whose intake grows with
the replicas rather than with their pairs.

**Proxy tokens.** An input replica the driver gave no records since its last token need
not send its own tokens to close the next epoch: the driver moves it quietly (it moves its
capability and ships that to the progress actor, nothing else) and has a replica that got
records send, with its own tokens, a proxy token for it on each of its channels
(:class:`ProxyPlan`, :func:`proxies_allowed`). A proxy names the quiet replica and its own
token ``after`` since which its channel carried nothing; the receiver closes that channel
once the quiet replica's token ``after`` has come on it (FIFO: everything sent before it
came first), and keeps the proxy until then. A small epoch at parallelism ``p`` then costs
the ``p - 1`` replicas without records one call each from the driver and one to the
progress actor, not ``p`` token calls each, and the receivers are notified by the one
replica's call. Only for chains that never owe a token and send on every channel to every
receiver replica (all-to-all), so that a quiet replica can send nothing at an epoch it has
closed (no records, no notification pending) and a replica with records reaches every
receiver the quiet one does.
"""

from __future__ import annotations

from raytide.engine.outbox import Outbox, Transport
from raytide.errors import ProgressError
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ChannelId, EpochClosed, ReplicaKey
from raytide.progress.timestamps import Timestamp

#: The most sender replicas times receiver replicas an edge uses tokens on.
MAX_TOKEN_PAIRS = 64

#: Proxy tokens a replica sends: ``(replica, after)``, the replica it closes an epoch for
#: and that one's own latest token (:class:`ProxyPlan`).
Proxies = tuple[tuple[int, int], ...]

# Found again per replica from its plan, not cached: a cache keyed by plan would keep a
# finished job's plan alive in a warm host that plays another job (tests/ray/test_hosts.py).


def senders(plan: PhysicalPlan) -> frozenset[str]:
    """The chains that send tokens: headed by an input, no vertex of them on a cycle."""
    return frozenset(chain.name for chain in plan.chains
                     if plan.vertex(chain.vertices[0]).role == "input"
                     and not any(plan.vertex(v).cyclic for v in chain.vertices))


def receivers(plan: PhysicalPlan) -> frozenset[str]:
    """The vertices that take tokens: chain heads on no cycle that may ask for notifications
    (a per-batch function never does) and whose every input edge comes from a sender's
    vertex, with at most :data:`MAX_TOKEN_PAIRS` replica pairs."""
    sending = senders(plan)
    found = set()
    for chain in plan.chains:
        head = plan.vertex(chain.vertices[0])
        edges = [edge for port in head.inputs for edge in port]
        if (head.role == "vertex" and head.notifies and not head.cyclic and edges
                and all(plan.chain_of(edge.source).name in sending
                        and plan.width(edge.source) * head.parallelism <= MAX_TOKEN_PAIRS for edge in edges)):
            found.add(head.name)
    return frozenset(found)


def riders_may_wait(plan: PhysicalPlan, head: str) -> bool:
    """Whether receiver ``head`` may keep a progress batch that rode to it with a token
    closing epoch ``b`` for its own next message to the progress actor, instead of passing
    it on in a call of its own, for as long as another channel has not closed ``b`` (and
    :data:`~raytide.engine.riding.MAX_RIDING` batches at most): every channel into it comes
    from replicas of one sender chain that never owes a token (:func:`never_owes`).

    Why nothing waits longer for it: the batch moves its sender's input past ``b``, and
    every frontier it can move is also held at ``b`` or before by each replica of the same
    chain that has not closed ``b`` (they hold the same locations); a replica that has, and
    whose token is still on its way, sends it without waiting for anything (it never owes),
    so the batch goes on within the event that brings the last token, with the receiver's
    notification that those tokens make due if any. With two chains (a join of two inputs)
    a batch kept for one input's token could hold back what only the other one reaches;
    with a chain that may owe its token until a notification, that notification could wait
    for the kept batch."""
    if head not in receivers(plan):
        return False
    sources = {plan.chain_of(edge.source).name for port in plan.vertex(head).inputs for edge in port}
    return len(sources) == 1 and never_owes(plan, sources.pop())


def never_owes(plan: PhysicalPlan, chain: str) -> bool:
    """Whether sender ``chain`` sends a token each time its input moves: none of its vertices
    may still wait for a notification before the input's new epoch (an input, a per-batch
    function, a vertex whose notifications end as the input moves on: a combiner, whose
    waits before that epoch the replica drops once its ``on_input_epoch`` has run)."""
    return all(vertex.role == "input" or not vertex.notifies or vertex.settles_with_input
               for vertex in map(plan.vertex, plan.chain(chain).vertices))


def rides_with_tokens(plan: PhysicalPlan, chain: str) -> bool:
    """Whether ``chain``'s progress batch at an epoch's close may go with its tokens (and its
    data, if that event sent any) to a receiver, which passes it on at the end of that event
    at the latest (or keeps it a while: :func:`riders_may_wait`): the chain is a sender,
    hosts no output, and every channel out of it goes to a vertex that takes tokens. Every
    frontier that batch can move then waits for a receiver's receipt of what went with it
    anyway: of data (a vertex input counts the messages in flight to all its replicas), or
    of the token (a receiver that got records of that epoch is notified only once a token
    came on every channel). So the sender saves a call each epoch and nothing waits
    longer, but an epoch that carried no record at all: it completes a hop later."""
    vertices = plan.chain(chain).vertices
    consumers = [consumer for vertex in vertices for port in range(plan.vertex(vertex).outputs)
                 for consumer in plan.consumers_of(vertex, port) if not plan.is_fused(consumer)]
    taking = receivers(plan)
    return (chain in senders(plan) and bool(consumers) and all(plan.vertex(v).role != "output" for v in vertices)
            and all(consumer.vertex in taking for consumer in consumers))


def sent_on(plan: PhysicalPlan, outbox: Outbox) -> list[tuple[ReplicaKey, ChannelId, str]]:
    """The channels ``outbox``'s replica sends its tokens on: ``(to, channel, vertex)``, none
    unless its chain is a sender."""
    return outbox.token_channels(receivers(plan)) if outbox.chain.name in senders(plan) else []


def proxies_allowed(plan: PhysicalPlan, chain: str) -> bool:
    """Whether replicas of ``chain`` (an input's) may close epochs for one another with proxy
    tokens: its batches ride with its tokens (:func:`rides_with_tokens`), it never owes a
    token, it has more than one replica, and each of its channels into a receiver is one of
    a full set from every replica of it to that receiver replica."""
    vertices = plan.chain(chain).vertices
    width = plan.width(vertices[0])
    if width < 2 or not (rides_with_tokens(plan, chain) and never_owes(plan, chain)):
        return False
    fed = {consumer.vertex for vertex in vertices for port in range(plan.vertex(vertex).outputs)
           for consumer in plan.consumers_of(vertex, port) if not plan.is_fused(consumer)}
    for receiver in fed:
        for replica in range(plan.width(receiver)):
            senders: dict[tuple[str, int, int], set[int]] = {}
            for channel in plan.input_channels(receiver, replica):
                if channel.source in vertices:
                    senders.setdefault((channel.source, channel.output, channel.port), set()).add(channel.sender)
            if any(len(replicas) != width for replicas in senders.values()):
                return False
    return True


def proxying_inputs(plan: PhysicalPlan) -> frozenset[str]:
    """The inputs whose replicas may close epochs for one another (:func:`proxies_allowed`)."""
    return frozenset(name for name in plan.inputs if proxies_allowed(plan, plan.chain_of(name).name))


class ProxyPlan:
    """The driver's side of proxy tokens for one input: per replica, the epoch its own latest
    token closed, as long as nothing was pushed to it since (None: unknown, or pushed to)."""

    def __init__(self, width: int, allowed: bool) -> None:
        self.allowed = allowed
        self.own: list[int | None] = [None] * width

    def pushed(self, replica: int) -> None:
        """Records went to ``replica`` in a call of their own: its channel carries data after its last token."""
        self.own[replica] = None

    def reset(self) -> None:
        """Every replica sends its own token next (a stream's batch goes to each): none may be proxied before."""
        self.own = [None] * len(self.own)

    def close(self, below: int | None, carriers: list[int]) -> dict[int, tuple[bool, Proxies]]:
        """The input moves to ``below`` and ``carriers`` get records in the same call: per
        replica, whether it moves quietly, and the proxies ``(replica, after)`` it sends. The
        first carrier sends them for every other replica whose own token is known."""
        known = {replica: after for replica, after in enumerate(self.own) if after is not None and replica not in carriers}
        if not (self.allowed and carriers and below is not None):
            known = {}
        plan: dict[int, tuple[bool, Proxies]] = {replica: (replica in known, ()) for replica in range(len(self.own))}
        if known:
            plan[carriers[0]] = (False, tuple(known.items()))
        for replica in range(len(self.own)):
            if replica not in known:
                self.own[replica] = below
        return plan


def may_close(pending: dict[str, set[Timestamp]], below: int | None) -> bool:
    """Whether a sender whose vertices wait for the notifications ``pending`` may say that
    nothing before epoch ``below`` (None: no epoch) comes from it any more."""
    return not any(below is None or time.epoch < below for times in pending.values() for time in times)


class TokenSender:
    """A sender replica's channels into receivers, and whether it owes them a token."""

    def __init__(self, plan: PhysicalPlan, outbox: Outbox) -> None:
        self.channels = sent_on(plan, outbox)
        #: Its input closed an epoch while one of its vertices still waited for a notification before it.
        self.owed = False

    def close(self, transport: Transport, pending: dict[str, set[Timestamp]], below: int | None,
              proxies: Proxies = (), quiet: bool = False) -> None:
        """Its input is at epoch ``below`` (None: closed): send the token on every channel,
        after the data sent before it (channels are FIFO), or owe it while a vertex of the
        chain waits for a notification before ``below`` (it may still send at that time);
        with it, a proxy token for each ``(replica, after)`` of ``proxies``. ``quiet``: a peer
        sends a proxy token for it instead (:class:`ProxyPlan`).

        Raises:
            ProgressError: proxies to send while the token is owed (the driver asked a chain
                that may owe tokens for them: the quiet replicas' channels would stay open).
        """
        if not self.channels or quiet:
            return
        self.owed = not may_close(pending, below)
        if self.owed and proxies:
            raise ProgressError(f"the input chain of {self.channels[0][1].source!r}: asked for proxy tokens at "
                                f"epoch {below} while it owes its own token")
        if not self.owed:
            for to, channel, consumer in self.channels:
                transport.send(to, channel, consumer, Timestamp(0), EpochClosed(below))
                for replica, after in proxies:
                    transport.send(to, channel, consumer, Timestamp(0), EpochClosed(below, replica, after))


class TokenBook:
    """A receiver replica's latest token per input channel (empty for a vertex that takes none)."""

    def __init__(self, plan: PhysicalPlan, head: str, replica: int) -> None:
        self.head = head
        #: The channels it takes tokens on (none for a vertex that takes none).
        self.channels = frozenset(plan.input_channels(head, replica) if head in receivers(plan) else ())
        self.riders_wait = riders_may_wait(plan, head)
        #: The epoch the latest token closed (the batches that rode with it wait for every channel to close it).
        self.latest: int | None = None
        #: channel -> every epoch below this one is closed there (None: all are); only the
        #: channels a token has come on (in this incarnation).
        self.closed: dict[ChannelId, int | None] = {}
        #: channel -> the epoch its sender's own latest token closed (proxies wait for it).
        self.own: dict[ChannelId, int | None] = {}
        #: channel -> a proxy token for it that waits for its sender's own token ``after``.
        self.proxied: dict[ChannelId, EpochClosed] = {}

    def record(self, channel: ChannelId, token: EpochClosed) -> None:
        """Token ``token`` came on ``channel`` (after all the data sent before it); a proxy
        token closes its replica's channel once that one's own token ``after`` has come.

        Raises:
            ProgressError: ``channel`` (or the proxied one) is not one this replica takes
                tokens on (the sender's plan and this one disagree).
        """
        if token.for_sender is not None:
            channel = channel._replace(sender=token.for_sender)
        if channel not in self.channels:
            raise ProgressError(f"vertex {self.head!r} got an epoch token (epoch {token.below}) on {channel}, "
                                f"which is not one of its token channels")
        if token.for_sender is None:
            self.own[channel] = self.latest = token.below
            self._close(channel, token.below)
            kept = self.proxied.pop(channel, None)
            if kept is not None and kept.after == token.below:  # the own token it waited for
                self._close(channel, kept.below)
            elif kept is not None and _epoch_key(kept.after) > _epoch_key(token.below):
                self.proxied[channel] = kept  # it waits for a later one
        elif channel in self.own and self.own[channel] == token.after:
            self._close(channel, token.below)
        elif channel not in self.own or _epoch_key(self.own[channel]) < _epoch_key(token.after):
            self.proxied[channel] = max(token, self.proxied.get(channel, token), key=_proxy_key)
        # else its own token went past the one the proxy was for: a later own token closed more

    def hold(self, channel: ChannelId, epoch: int) -> None:
        """Count ``channel`` (a stepped rescale's hand-over to this replica at ``epoch``) as
        one more channel whose token is ``epoch`` until :meth:`release`: the tokens answer no
        notification at or after ``epoch`` before the state has come (docs/rescaling.md)."""
        if self.channels:
            self.channels |= {channel}
            self.closed[channel] = epoch

    def release(self, channel: ChannelId) -> None:
        """The hand-over on ``channel`` came: it holds nothing back any more."""
        if channel in self.channels:
            self.closed[channel] = None

    def _close(self, channel: ChannelId, below: int | None) -> None:
        """Every epoch before ``below`` is closed on ``channel`` (tokens only ever close more)."""
        if channel not in self.closed or _epoch_key(below) > _epoch_key(self.closed[channel]):
            self.closed[channel] = below

    def answers_alone(self, vertex: str, time: Timestamp) -> bool:
        """Whether tokens will make a notification of ``vertex`` at ``time`` due with no word
        from the progress actor: a token has come on every channel, so each sends the next
        as its sender closes an epoch (or owes it, :class:`TokenSender`)."""
        return vertex == self.head and self._heard_on_every_channel() and not time.counters

    def keeps_riders(self) -> bool:
        """Whether the progress batches that came with tokens may wait (:func:`riders_may_wait`):
        once a token has come on every channel, so each sends the next."""
        return self.riders_wait and self._heard_on_every_channel()

    def closed_by_all(self, until: int | None) -> bool:
        """Whether every channel has closed epoch ``until`` (None: every channel is closed)."""
        return self._heard_on_every_channel() and all(below is None or (until is not None and below >= until)
                                                      for below in self.closed.values())

    def ready(self, vertex: str, time: Timestamp) -> bool:
        """Whether the tokens say nothing at or before ``time`` may still reach ``vertex``."""
        return (vertex == self.head and self._heard_on_every_channel() and not time.counters
                and all(below is None or time.epoch < below for below in self.closed.values()))

    def _heard_on_every_channel(self) -> bool:
        return bool(self.channels) and len(self.closed) == len(self.channels)


def _epoch_key(epoch: int | None) -> float:
    """An epoch bound to compare: None (closed) after every epoch."""
    return float("inf") if epoch is None else epoch


def _proxy_key(token: EpochClosed) -> tuple[float, float]:
    """The later of two proxies for one channel: the one after the later own token, then the one closing more."""
    return _epoch_key(token.after), _epoch_key(token.below)
