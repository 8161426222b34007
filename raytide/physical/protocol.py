"""Every message raytide's actors exchange, in one place.

Message flow (arrows are fire-and-forget Ray calls unless marked *waits*)::

    driver ──push / advance / push_refs──▶ input replica          (per input replica, FIFO)
    replica ──data batch on ChannelId────▶ replica                (FIFO per channel; bounded window)
    replica ──Marker on ChannelId────────▶ replica                (in band, behind earlier batches)
    input's replica ──EpochClosed────────▶ replica                (a data batch that is a token, behind
                                                                    the epoch's data; see engine/epoch_tokens)
    replica ──Sequenced(ProgressBatch)───▶ progress actor         (numbered per replica, applied
    replica ──Sequenced(Declaration)─────▶ progress actor          in number order; a batch's output
                                                                    records before its deltas)
    progress actor ──StatusPush──────────▶ replica                (FIFO per replica; with relays, down
                                                                    them in a PushBundle: see relay_tree)
    replica ──JobFailed──────────────────▶ progress actor
    driver ──StepPlanMessage─────────────▶ every sender of a keyed vertex and every replica of it
                                                                   (a stepped rescale's plan, before its
                                                                    first epoch closes: docs/rescaling.md)
    old owner ──GroupState───────────────▶ new owner              (a step's key groups, as a data batch)
    driver ──next_events(cursor)─────────▶ progress actor         (*waits*, a long poll in its own
                                                                    concurrency group; returns JobEvents)
    progress actor ──JobEvents (socket)──▶ driver                 (once the driver subscribed, on its node:
                                                                    no poll; raytide/actors/event_feed.py)

No actor waits on a call to an actor that may wait for it: replicas wait only for the
oldest call of a full window to a downstream replica (never out of a feedback vertex,
so cycles drain), and the progress actor waits for nobody.

Output records travel in the progress batch that retires them (``ProgressBatch.outputs``),
added to the output log before its deltas are applied, so the progress actor holds every
record of an epoch before it applies the batch that can complete that epoch. One message
for both: at a wide output stage most batches carry records, and a message costs the
progress actor its unpickling and ordering whatever it holds.

On Ray, a cyclic round's ``Sequenced(ProgressBatch)`` (it asks for an acknowledgement)
may instead go with the round's data to the one peer the round sent to, which passes it
on ahead of its own next message (see ``raytide/actors/vertex_actor.py``): numbered, it is
applied in order however it travels. So may an input replica's batch at an epoch's close,
with the :class:`EpochClosed` token (and the data, if that event sent any) it sent a vertex
that takes tokens (``epoch_tokens.rides_with_tokens``). A :class:`StatusPush` answers any acknowledgements
owed (``acked`` counts them) and is sent only when it may let the replica run something;
a vertex whose every input channel has sent it a token leaves the waits the tokens answer
undeclared, so it gets none for them.

On a Ray cluster, the replicas of one node send their messages for the progress actor to
that node's *relay* instead (one of the node's replica hosts: :class:`ProgressRoute`),
which forwards everything that arrived while its previous call was in flight in one call
(``ProgressActor.receive_relayed``), each replica's consecutive messages merged into one
:class:`ProgressRun`: the progress actor's calls then grow with the nodes, not the
replicas, and the messages it unpickles and applies with the replicas that sent since its
last call, not with their events. Numbered, the messages are applied in order however they
travel; a relay that dies is a replica that dies, and the recovery rolls every message back.
On a cluster of more than eight nodes, the nodes' relays forward to a relay per group of
nodes instead (``relay_gathered``), which forwards what its group gathered the same way,
runs of runs merged again; and a job with relays gets its status pushes down the same tree
(``fan_out``), so that the progress actor makes a call per relay it pushes through, not
per replica (:mod:`~raytide.physical.relay_tree`).

On Ray, the calls to the progress actor and its status pushes travel as :func:`encode`
makes them, the sender's incarnation included: one plain pickle, one argument per call.
A data call's headers (incarnation, channel, vertex, time, its number on the channel or None), batches and riding progress
batches travel as :func:`~raytide.physical.pickled.frame` makes them, one argument too.
"""

from __future__ import annotations

import enum
import pickle
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from raytide.core.keygroups import KeyGroupAssignment, KeyGroupMove
from raytide.progress.publisher import Interests, Status
from raytide.progress.reachability import Location
from raytide.progress.timestamps import Timestamp
from raytide.progress.tracker import Pointstamp


class ChannelId(NamedTuple):
    """A channel into a vertex input: ``source``'s output ``output`` at replica ``sender``, into input ``port``."""

    source: str
    output: int
    sender: int
    port: int


class ReplicaKey(NamedTuple):
    """One replica of one chain: what actor names (``job/chain/replica``) and the progress actor use."""

    chain: str
    replica: int

    def __str__(self) -> str:
        return f"{self.chain}/{self.replica}"


class Cause(enum.Enum):
    """Why a replica holds progress deltas back: what must stay covered at the frontier."""

    #: A message was consumed at an input location (its -1 and what it caused are held).
    MESSAGE = "message"
    #: Records were pushed at an input's current epoch (the input's capability covers them).
    CAPABILITY = "capability"


class HeldCause(NamedTuple):
    """One event whose deltas are held back: its kind, where it happened, at what time."""

    kind: Cause
    location: Location
    time: Timestamp


@dataclass(frozen=True)
class EpochClosed:
    """An epoch token on a data channel: the sender's input is past every epoch below
    ``below`` (None: closed) and nothing it sends later is before it (:mod:`raytide.engine.epoch_tokens`).

    With ``for_sender`` set, a replica of the same chain sends it for replica ``for_sender``'s
    channel to the same receiver, which sent nothing since its own token ``after`` (the
    driver gave it no records): a proxy token, so that an input replica without records
    need not send its own."""

    below: int | None
    for_sender: int | None = None
    after: int | None = None


@dataclass(frozen=True)
class StepPlanMessage:
    """A stepped rescale's plan of ``vertex`` (``raytide.rescale.steps.StepPlan``), as the
    driver sends it to every replica that sends to the vertex and every replica of it, before
    any input reaches the first step's epoch: from then on a sender routes a record by the
    owners in force at its timestamp's epoch, and a replica of the vertex refuses a record
    whose owner at that epoch is another (docs/rescaling.md, "Stepped migration").

    Attributes:
        vertex: the keyed vertex whose key groups move.
        before: the routing table before the first step (``max(p, q)`` wide).
        steps: ``(epoch, moves)`` per step, at increasing epochs.
        after: the table once every step is done (``q`` wide).
    """

    vertex: str
    before: KeyGroupAssignment
    steps: tuple[tuple[int, tuple[KeyGroupMove, ...]], ...]
    after: KeyGroupAssignment


@dataclass(frozen=True)
class GroupState:
    """A stepped rescale's hand-over: the state of key groups ``groups`` (what
    ``Vertex.take_keys`` returned) that the old owner sends the new one at step epoch
    ``epoch``, as a data batch at ``epoch`` on the channel ``ChannelId(vertex, -1, old
    owner, port)``: the message in flight is the hold the driver made at the vertex's input
    at ``epoch``, which the new owner retires when it puts the keys."""

    epoch: int
    groups: tuple[int, ...]
    state: Any


class MarkerKind(enum.Enum):
    """What every replica does when it is aligned on a marker (it forwards it in any case)."""

    SNAPSHOT = "take its local snapshot"
    HOLD = "hold its state there for a rescale and run nothing more until the rescaled job takes over"
    PROBE = "nothing but note what it had received by then (the simulator's tests of channel order)"


@dataclass(frozen=True)
class Marker:
    """A control marker that travels in band on every channel.

    Attributes:
        marker_id: increasing id (markers share the id space of snapshot barriers).
        kind: what a replica does at it.
        delivered: per output, the last epoch the driver had been handed when the
            marker was triggered: output replicas stop keeping records of those epochs.
        committed: the last snapshot committed when it was triggered (None: none yet):
            replicas that number their sends trim their upstream logs to its marks.
    """

    marker_id: int
    kind: MarkerKind = MarkerKind.PROBE
    delivered: dict[str, int] = field(default_factory=dict)
    committed: int | None = None

    def __hash__(self) -> int:
        return hash(self.marker_id)


@dataclass(frozen=True)
class MarkerRecord:
    """What a replica saw when a marker passed: records received per hosted vertex by then."""

    marker_id: int
    records_in: dict[Hashable, int]


#: A replica's progress figures (:mod:`raytide.engine.numbered_channels`): per ``(sent, location,
#: time, receiver, channel)`` how many messages it has sent (``sent`` True) or taken (False) in
#: all on a numbered channel into ``receiver``'s ``location`` at ``time``, since the job's
#: incarnation began.
Figures = dict[tuple[bool, Location, Timestamp, ReplicaKey, ChannelId], int]


@dataclass(frozen=True)
class ProgressBatch:
    """Pointstamp deltas of a replica's events, shipped together (Naiad's rule).

    Attributes:
        changes: ``((location, time), delta)`` pairs.
        ack: the replica wants every status it has not seen once this batch is applied
            (a vertex on a cycle waits for it between rounds of notifications).
        interests: what the replica now waits on, if that changed.
        outputs: records that reached the replica's outputs since its last batch, per
            output and epoch, as parts (on Ray packed: inline blobs or object refs, see
            :mod:`raytide.physical.wire`); the deltas retire them.
        figures: the replica's progress figures that changed since its last batch (their
            totals: they count exactly what its batches' deltas counted on numbered channels),
            by which a replica recovered alone is accounted again.
    """

    changes: list[tuple[Pointstamp, int]]
    ack: bool = False
    interests: Interests | None = None
    outputs: dict[str, dict[int, list]] | None = None
    figures: Figures | None = None


@dataclass(frozen=True)
class Declaration:
    """A replica now waits on ``interests`` (pending notifications, held-back progress)."""

    interests: Interests


@dataclass(frozen=True)
class ProgressRun:
    """A replica's consecutive messages, from its :class:`Sequenced` number to ``last``,
    merged into one by its node's relay (:func:`~raytide.engine.progress_runs.merge_runs`):
    the progress actor applies it as it would apply them in one call.

    Attributes:
        last: the number of the run's last message.
        changes: the net pointstamp deltas of its batches (none that sum to zero).
        acks: how many of its batches asked for an acknowledgement.
        batches: how many of its messages were progress batches (the others were declarations).
        interests: what the replica waits on after the run (the last it declared), if it declared.
        outputs: its batches' output parts, per output and epoch, in their order.
        figures: its batches' figures, the latest of each.
    """

    last: int
    changes: list[tuple[Pointstamp, int]]
    acks: int
    batches: int
    interests: Interests | None = None
    outputs: dict[str, dict[int, list]] | None = None
    figures: Figures | None = None


ProgressMessage = ProgressBatch | Declaration | ProgressRun


class Sequenced(NamedTuple):
    """A message to the progress actor with its sender and its number in the sender's sequence."""

    sender: ReplicaKey
    sequence: int
    message: ProgressMessage


class ProgressRoute(NamedTuple):
    """Where one replica sends its messages for the progress actor: to ``relay``, its node's
    relay (a replica host's handle, bound to its lease), or straight to ``progress`` when
    ``relay`` is None; its failures always go straight to ``progress``. If the replica's host
    is its node's relay, ``upstream`` is where the relay forwards: its group's relay (another
    host's handle: :mod:`~raytide.physical.relay_tree`), or the progress actor when None."""

    progress: Any
    relay: Any = None
    upstream: Any = None


class StatusPush(NamedTuple):
    """Progress actor -> replica: new statuses of locations it reads, and how many more of
    its batches that asked for an acknowledgement have been absorbed."""

    statuses: dict[Location, Status]
    acked: int


@dataclass(frozen=True)
class EpochComplete:
    """Output ``output`` has every record of ``epoch``: its packed ``parts``."""

    output: str
    epoch: int
    parts: list


@dataclass(frozen=True)
class OutputFrontier:
    """Every epoch of output ``output`` before ``before`` is complete (``inf``: all are).

    Sent each time that epoch moves, after the :class:`EpochComplete` of the epochs it
    passed: the epochs it passed without records are complete too, which the driver needs
    to hand out an epoch that completed empty.
    """

    output: str
    before: float


@dataclass(frozen=True)
class JobFailed:
    """The job failed; the driver tears it down and raises ``error``."""

    error: Any


@dataclass(frozen=True)
class JobFinished:
    """No pointstamp is active and every output is complete."""


JobEvent = EpochComplete | OutputFrontier | JobFailed | JobFinished


def encode(message: Any) -> bytes:
    """A message of this module (or a tuple of them) as one plain pickle, for a Ray call.

    Ray pickles each argument of a call with cloudpickle, whose pickler runs Python code
    for every object: inside an actor, a call carrying a progress
    batch took ~60 us longer to submit than one carrying its plain pickle (10-20 us to
    make), every hop of an epoch pays that, and encoding took the median epoch latency of
    ``bench latency``'s keyed pipeline from 14.8 to 12.9 ms. These messages hold only
    importable classes, so the C pickler takes them. Object refs must travel as Ray
    arguments (Ray counts who borrows them), so a message holding one is not encoded.
    """
    return pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)


def decode(blob: bytes) -> Any:
    """What :func:`encode` was given."""
    return pickle.loads(blob)
