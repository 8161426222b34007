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

A token only ever makes a notification earlier: a replica that never gets one (a restored
sender that closed the epoch before the snapshot, a sender whose vertex still waited for a
notification, a rescaled job's first epochs) is notified by the progress actor as before.
Tokens carry no pointstamp, and the snapshot holds none: a restored or adopted replica
starts with an empty book. Every sender replica sends each receiver replica a token per
epoch, so tokens are used only between vertices whose widths multiply to at most
:data:`MAX_TOKEN_PAIRS`; wider jobs leave it to the progress actor, whose intake grows with
the replicas rather than with their pairs.
"""

from __future__ import annotations

from raytide.engine.outbox import Outbox
from raytide.physical.plan import PhysicalPlan
from raytide.physical.protocol import ChannelId, EpochClosed, ReplicaKey
from raytide.progress.timestamps import Timestamp

#: The most sender replicas times receiver replicas an edge uses tokens on.
MAX_TOKEN_PAIRS = 64

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


def rides_with_tokens(plan: PhysicalPlan, chain: str) -> bool:
    """Whether ``chain``'s progress batch at an epoch's close may go with its data and tokens
    to a receiver, which passes it on: the chain is a sender, hosts no output, and every
    channel out of it goes to a vertex that takes tokens. Every frontier that batch can move
    then waits for a receiver's receipt of that data anyway (a vertex input counts the
    messages in flight to all its replicas), so it reaches the progress actor no later than
    needed, and the sender saves a call each epoch."""
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


def may_close(pending: dict[str, set[Timestamp]], below: int | None) -> bool:
    """Whether a sender whose vertices wait for the notifications ``pending`` may say that
    nothing before epoch ``below`` (None: no epoch) comes from it any more."""
    return not any(below is None or time.epoch < below for times in pending.values() for time in times)


class TokenBook:
    """A receiver replica's latest token per input channel (empty for a vertex that takes none)."""

    def __init__(self, plan: PhysicalPlan, head: str, replica: int) -> None:
        self.head = head
        channels = plan.input_channels(head, replica) if head in receivers(plan) else []
        #: channel -> every epoch below this one is closed there (None: all are).
        self.closed: dict[ChannelId, int | None] = dict.fromkeys(channels, 0)

    def record(self, channel: ChannelId, token: EpochClosed) -> None:
        """Token ``token`` came on ``channel`` (after all the data sent before it)."""
        self.closed[channel] = token.below

    def ready(self, vertex: str, time: Timestamp) -> bool:
        """Whether the tokens say nothing at or before ``time`` may still reach ``vertex``."""
        return (vertex == self.head and bool(self.closed) and not time.counters
                and all(below is None or time.epoch < below for below in self.closed.values()))
