"""A node relay's merge: each replica's consecutive messages for the progress actor as one.

A relay (:mod:`raytide.actors.progress_relay` on Ray, the in-process runtime's relay
mailboxes) forwards what its node's replicas sent while its previous call was in flight.
At a wide stage most of that is many small batches of few replicas (an output replica
retires each record it is sent with a batch of its own), and the progress actor would
unpickle, order and apply each. Merged, it takes one :class:`ProgressRun` per replica and
call: the net deltas, the acknowledgements asked for, the last interests declared and the
output parts in order. Naiad accumulates progress per process for the same reason.

Why applying the run is applying its messages: the progress actor applies every message of
a call before it propagates once and judges pushes (``FrontierPublisher.apply_all``), and
adds a batch's output parts before any delta of that call; deltas add up, the last
interests declared replace the earlier ones, acknowledgements add up. Only messages whose
numbers follow one another are merged, so a message that travelled another way (a batch
that rode with data to a replica of another node) leaves a gap the run does not cross, and
the progress actor orders runs and messages alike (:class:`~raytide.progress.inorder.InOrder`).

A merge also makes equal pointstamps one object, across the replicas it merges (the
replicas of a node report the same few pointstamps: at 64 nodes x 8 replicas a relay's
call to the progress actor held about 15 changes per message and a few distinct
pointstamps in all). Pickled, each is then written once and referred to after that
(pickle's memo), so the progress actor rebuilds it once per call, and the tracker's
lookups of it compare identities: replayed, the progress actor's calls of that loop took
about half the time to unpickle (24.0 to 12.6 ms) and a fifth less to apply (22.3 to
17.2 ms; ``bench progress_scale``, 2026-11-28).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from raytide.physical.protocol import Declaration, ProgressBatch, ProgressRun, ReplicaKey, Sequenced
from raytide.progress.tracker import Pointstamp


def merge_runs(calls: Iterable[Sequenced]) -> list[Sequenced]:
    """``calls`` with each replica's messages whose numbers follow one another merged into
    one :class:`ProgressRun` (a message with no neighbour stays as it was, its pointstamps
    made the merge's), replicas in the order they first appear, each replica's in number
    order; equal pointstamps are one object throughout (see the module docstring)."""
    by_sender: dict[ReplicaKey, list[Sequenced]] = {}
    for call in calls:
        by_sender.setdefault(call.sender, []).append(call)
    merged: list[Sequenced] = []
    canonical: dict[Any, Any] = {}
    for sent in by_sender.values():
        sent.sort(key=lambda call: call.sequence)
        start = 0
        for end in range(1, len(sent) + 1):
            if end == len(sent) or sent[end].sequence != last_number(sent[end - 1]) + 1:
                merged.append(_lone(sent[start], canonical) if end - start == 1 else _run(sent[start:end], canonical))
                start = end
    return merged


def merge_by_incarnation(sent: Iterable[tuple[int, Sequenced]]) -> dict[int, list[Sequenced]]:
    """A relay's gathered ``(incarnation, message)`` pairs merged (:func:`merge_runs`) within
    each incarnation, never across: a run is one incarnation's, whose messages the progress
    actor takes or drops together."""
    by_incarnation: dict[int, list[Sequenced]] = {}
    for incarnation, call in sent:
        by_incarnation.setdefault(incarnation, []).append(call)
    return {incarnation: merge_runs(calls) for incarnation, calls in by_incarnation.items()}


def last_number(call: Sequenced) -> int:
    """The number of the last message ``call`` stands for (a run stands for several)."""
    return call.message.last if isinstance(call.message, ProgressRun) else call.sequence


def _canonical(pointstamp: Pointstamp, canonical: dict[Any, Any]) -> Pointstamp:
    """The one object of the merge equal to ``pointstamp``, its location and time shared
    too (a location, a time and a pointstamp are never equal to one another: one key space)."""
    location, time = pointstamp
    made = (canonical.setdefault(location, location), canonical.setdefault(time, time))
    return canonical.setdefault(made, made)


def _lone(call: Sequenced, canonical: dict[Any, Any]) -> Sequenced:
    """A message merged with no other, its pointstamps the merge's."""
    message = call.message
    if isinstance(message, Declaration) or not message.changes:
        return call
    changes = [(_canonical(pointstamp, canonical), delta) for pointstamp, delta in message.changes]
    return call._replace(message=dataclasses.replace(message, changes=changes))


def _run(sent: list[Sequenced], canonical: dict[Any, Any]) -> Sequenced:
    """One run for ``sent``, a replica's messages numbered one after another (its pointstamps
    those of ``canonical``, the merge's)."""
    changes: dict[Pointstamp, int] = {}
    outputs: dict[str, dict[int, list]] = {}
    acks = batches = 0
    interests = None
    figures: dict = {}
    for call in sent:
        message = call.message
        if not isinstance(message, Declaration):
            figures.update(message.figures or {})  # totals: the later message's are the latest
            for pointstamp, delta in message.changes:
                pointstamp = _canonical(pointstamp, canonical)
                changes[pointstamp] = changes.get(pointstamp, 0) + delta
            acks += message.ack if isinstance(message, ProgressBatch) else message.acks
            batches += 1 if isinstance(message, ProgressBatch) else message.batches
            for name, epochs in (message.outputs or {}).items():
                into = outputs.setdefault(name, {})
                for epoch, parts in epochs.items():
                    into.setdefault(epoch, []).extend(parts)
        if message.interests is not None:
            interests = message.interests
    run = ProgressRun(last_number(sent[-1]), [(pointstamp, delta) for pointstamp, delta in changes.items() if delta],
                      acks, batches, interests, outputs or None, figures or None)
    return Sequenced(sent[0].sender, sent[0].sequence, run)
