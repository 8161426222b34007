"""Connected components of a collection of edges, inserted and deleted: vectorised label propagation that forgets.

Every node's label is the smallest node id of its component. As in the insert-only
:mod:`raytide.graph.components`, a node whose label drops offers it to its neighbours,
in a columnar loop whose state is a row per node and whose edges (both directions) are
arranged by source, here with their diffs (:class:`~raytide.core.arrangement.Arrangement`
nets them, so a deleted edge leaves it).

A deleted edge may take away the only path a label came by, so each node also keeps the
neighbour its label came from (``parent``; a node whose label is its own id is its own
parent) and when it took it (``stamp``). The parents form a forest: stamps rise strictly
down every parent link within one label. When the edge to a node's parent goes (or its
parent forgets), the node first tries to *reattach*: a neighbour held at its replica with
the same label and an earlier ``(stamp, id)`` becomes its parent, and nothing else changes (most
lost parent edges end there). Failing that it *resets*: its label becomes its own id
again and it tells its neighbours. A neighbour whose parent it is reattaches or resets
too (the local part of the wave in one round, then one level a round across replicas).
A reset node takes no label while the wave runs, but its notice is also a question: every
neighbour it does not reach as a parent answers with its label, and the reset node *holds*
the smallest label offered to it, with its sender. Once the wave is over everywhere
(``Step.quiet``) no chain is cut any more: the reset nodes take what they hold and offer
it to their neighbours, with no ask and answer then (a held label whose sender forgot
since is dropped, and that node asks its neighbours at the barrier instead). So a deleted
edge redoes only the part of the forest below it that finds no other way up, labels come
back by other paths where there are any, and a component cut in two gets the smallest id
of each part. At the fixpoint every parent chain ends at its component's smallest node,
whose label all its nodes carry.

Each round runs to a local fixpoint (:func:`settle`): a label a node takes is offered on
at once to its neighbours held at the same replica, and asks to them are answered from
their state, so only rows to other replicas wait for the next round.

Messages are rows ``(node, label, sender, kind)``: an offer of ``label`` from ``sender``
to ``node``, a notice (the sender forgot its label) or an ask. Each epoch
ends by sending, for the nodes it touched, the changes of their ``(node, label)`` records:
the old record taken back, the new one added (a node without edges has none).
"""

from __future__ import annotations

import numpy as np

from raytide.core.collection import Collection
from raytide.core.combine import combine_by_key
from raytide.core.keyindex import concat
from raytide.core.step import Step
from raytide.differential import DIFF
from raytide.graph.edges import CHANGED, EMPTY, epoch_mark, mark_changed, narrow

#: The columns of the rows that go round the loop.
MESSAGE = ("node", "label", "sender", "kind")
#: The kinds of message: an offer of the sender's label; a notice that the sender forgot
#: its label (its children forget theirs); an ask, an offer that asks the target to offer
#: back its label if smaller.
OFFER, NOTICE, ASK = 0, 1, 2


def own_id(keys: np.ndarray) -> np.ndarray:
    """A new node's label, and its parent: its own id."""
    return keys.astype(np.int64)


def both_directions(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every update of an undirected edge ``{u, v}`` as updates of ``u -> v`` and ``v -> u``."""
    src, dst, diff = batch["src"].astype(np.int64), batch["dst"].astype(np.int64), batch[DIFF].astype(np.int64)
    return {"src": np.concatenate([src, dst]), "dst": np.concatenate([dst, src]), DIFF: np.concatenate([diff, diff])}


def neighbours(s: Step, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(which, dst)``: every neighbour of the nodes at ``slots`` by an edge present now (net
    copies above zero), ``which`` indexing ``slots``.

    Rows are read as they are (:meth:`~raytide.core.arrangement.Arrangement.expand` with
    ``net=False``): an edge whose rows are all single copies is present (a repeat of one
    is harmless); only edges with another row (taken back, or more copies) are summed.
    """
    which, rows = s.arrangement().expand(slots, net=False)
    dst, diff = rows.get("dst", EMPTY), rows.get(DIFF, EMPTY)
    special = diff != 1
    if not special.any():
        return which, dst
    value_of, rank = dense_ranks(dst, len(slots))
    code = which * len(value_of) + rank
    summed = member(code, code[special])
    codes, at = np.unique(code[summed], return_inverse=True)
    present = codes[np.bincount(at, weights=diff[summed], minlength=len(codes)) > 0]
    return (concat([which[~summed], present // len(value_of)]),
            concat([dst[~summed], value_of[present % len(value_of)]]))


def member(values: np.ndarray, few: np.ndarray) -> np.ndarray:
    """A mask of ``values`` found in ``few`` (``np.isin`` for a second array much smaller than
    the first: a binary search of each value in it, not a sort of both)."""
    few = np.unique(few)
    if not len(few):
        return np.zeros(len(values), dtype=bool)
    found = np.minimum(np.searchsorted(few, values), len(few) - 1)
    return few[found] == values


def held_neighbours(s: Step, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(which, at)``: the neighbours held at this replica of the nodes at ``slots`` (by an edge
    present now), as slots ``at``, ``which`` indexing ``slots``."""
    which, dst = neighbours(s, slots)
    at = s.lookup(dst)
    here = at >= 0
    return which[here], at[here]


def edge_changes(s: Step) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This round's new edge updates (round 0 of an epoch): ``(lost_parent, gained_from, gained_to)``.

    The slots whose edge to their parent is gone, and the directed edges ``u -> v`` (a
    slot, a node id) present now and absent before. The copies of each edge now are read
    from the arrangement, which holds this round's rows already (summed: an arrangement
    without retractions is not netted); the nodes' ``present`` is set from it too.
    """
    slots, rows = s.added.get(0, (EMPTY, {}))
    if not len(slots):
        return EMPTY, EMPTY, EMPTY
    if not s.arrangement().retracts and not (rows[DIFF] < 0).any():  # only insertions ever: every copy counts
        s.state["present"][slots] = True
        return EMPTY, slots, rows["dst"]  # an edge present before offers again: harmless, and no sort
    touched, inverse = np.unique(slots, return_inverse=True)
    which, held = s.arrangement().expand(touched, net=False)
    others, rank = dense_ranks(concat([held["dst"], rows["dst"]]), len(touched))
    width = len(others)  # an edge (touched[i], others[j]) is coded i * width + j
    codes, at = np.unique(which * width + rank[: len(which)], return_inverse=True)
    copies = np.bincount(at, weights=held[DIFF], minlength=len(codes)).astype(np.int64)
    s.state["present"][touched] = np.bincount(codes[copies > 0] // width, minlength=len(touched)) > 0
    pairs, first = np.unique(inverse * width + rank[len(which):], return_inverse=True)
    added = np.bincount(first, weights=rows[DIFF], minlength=len(pairs)).astype(np.int64)
    now = np.zeros(len(pairs), dtype=np.int64)
    if len(codes):
        found = np.minimum(np.searchsorted(codes, pairs), len(codes) - 1)
        now = np.where(codes[found] == pairs, copies[found], 0)
    before = now - added
    lost, gained = (before > 0) & (now <= 0), (before <= 0) & (now > 0)
    owner, other = touched[pairs // width], others[pairs % width]
    orphaned = lost & (s.state["parent"][owner] == other) & (other != s.ids[owner])
    return owner[orphaned], owner[gained], other[gained]


def dense_ranks(values: np.ndarray, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """``(value_of, rank)``: ``value_of[rank] == values``, with ``rows`` times ``len(value_of)``
    within an int64. Ids in a range not much wider than their count (a graph's, mostly) rank
    as themselves less their least, with no sort (``value_of`` that range); others by their
    place among the distinct values (``np.unique``)."""
    low, high = int(values.min()), int(values.max())
    if (high - low + 1) * max(rows, 1) < 2**62 and high - low < 8 * len(values) + 1024:
        return np.arange(low, high + 1, dtype=np.int64), values - low
    return np.unique(values, return_inverse=True)


def forget(s: Step, slots: np.ndarray) -> np.ndarray:
    """The nodes at ``slots`` not waiting yet forget their labels: each its own id and its
    own parent again, waiting for the barrier and holding meanwhile the smallest label
    offered to them (``held``, from ``held_from``: none yet, their own id); returns those
    slots. A node without edges left has nothing to wait for."""
    state = s.state
    slots = slots[~state["waiting"][slots]]
    state["label"][slots] = state["parent"][slots] = state["held"][slots] = state["held_from"][slots] = s.ids[slots]
    state["stamp"][slots] = s.time.counters[-1] * STEPS_PER_ROUND
    state["waiting"][slots] = state["present"][slots]
    return slots


def reattach(s: Step, slots: np.ndarray, which: np.ndarray, at: np.ndarray) -> np.ndarray:
    """Of the nodes at ``slots`` (their parent lost, none waiting), those that take a new
    parent here: a neighbour held at this replica (``at``, of ``slots[which]``), not
    waiting, with the same label and an earlier stamp, or the same stamp and a smaller id.
    Returns a mask of ``slots``.

    Stamps (when a node last took its label: :data:`STEPS_PER_ROUND`) rise strictly along
    every parent link between nodes of one label (an offer is taken after it was made), so
    ``(stamp, id)`` does too, reattachments included, and a node keeps its stamp when it
    reattaches: the forest stays a forest, a node never becomes its own ancestor. (Ties
    broken by id about double the nodes that reattach: neighbours that took their label at
    the same step of a local fixpoint are common.) If the new parent's own chain is cut too, it forgets or
    reattaches in turn, and its notice reaches this node as a child of it."""
    state = s.state
    ok = ~state["waiting"][at] & (state["label"][at] == state["label"][slots[which]])
    mine, theirs = state["stamp"][slots[which]], state["stamp"][at]
    ok &= (theirs < mine) | ((theirs == mine) & (s.ids[at] < s.ids[slots[which]]))
    which, at = which[ok], at[ok]
    found = np.zeros(len(slots), dtype=bool)
    found[which] = True
    state["parent"][slots[which]] = s.ids[at]  # any candidate will do: the last written wins
    return found


def forget_below(s: Step, lost: np.ndarray) -> np.ndarray:
    """The nodes at ``lost`` (their parent link gone) reattach where they can; the rest forget,
    and so, transitively, do their children held at this replica that cannot reattach: the
    part of the notices' wave that would stay here, done in this round rather than one level
    a round. Returns the slots that forgot; their notices still go to every neighbour (those
    held elsewhere are judged next round)."""
    waves = []
    frontier = lost[~s.state["waiting"][lost]]
    while len(frontier):
        which, at = held_neighbours(s, frontier)
        forgetting = ~reattach(s, frontier, which, at)
        waves.append(forget(s, frontier[forgetting]))
        senders = s.ids[frontier][which]
        child = at[forgetting[which] & (s.state["parent"][at] == senders) & (s.ids[at] != senders)]
        child = np.unique(child)
        frontier = child[~s.state["waiting"][child]]
    return concat(waves)


def incoming(s: Step) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """This round's messages: ``(label, sender, kind)``, row for row with ``s.slots``."""
    if not len(s.slots):
        return EMPTY, EMPTY, EMPTY
    return s.values["label"], s.values["sender"], s.values["kind"]


def smallest_offers(targets: np.ndarray, label: np.ndarray, sender: np.ndarray) -> tuple[np.ndarray, ...]:
    """Per distinct target its smallest offered label and a sender of it: ``(targets, label, sender)``.

    Labels and senders that fit 31 bits each (node ids, mostly) are packed into one int64
    and folded with ``np.minimum`` (:func:`~raytide.core.combine.combine_by_key`, no sort for
    dense targets); others are sorted (``np.lexsort``).
    """
    if not len(targets):
        return targets, label, sender
    if min(int(label.min()), int(sender.min())) >= 0 and max(int(label.max()), int(sender.max())) < 2**31:
        keys, folded = combine_by_key(targets, {"packed": (label << 31) | sender}, {"packed": np.minimum})
        return keys, folded["packed"] >> 31, folded["packed"] & (2**31 - 1)
    order = np.lexsort((label, targets))
    first = np.ones(len(order), dtype=bool)
    first[1:] = targets[order][1:] != targets[order][:-1]
    best = order[first]
    return targets[best], label[best], sender[best]


#: A node's stamp is its loop round times this, plus the step of the round's local
#: fixpoint it took its label at (:func:`settle`): later takes, larger stamps.
STEPS_PER_ROUND = 1 << 20


def take(s: Step, targets: np.ndarray, label: np.ndarray, sender: np.ndarray, stamp: int) -> np.ndarray:
    """Each target takes its smallest offer if below its label; the slots that did. A waiting
    target holds it instead, if below what it holds (:func:`release` takes it at the
    barrier), unless its sender is held here and waiting too: it forgot since it offered
    (a sender held elsewhere that forgot since sends its notice after the offer: :func:`heard`)."""
    state = s.state
    to_waiting = state["waiting"][targets]
    if to_waiting.any():
        sent_from = s.lookup(sender[to_waiting])
        stale = np.zeros(len(targets), dtype=bool)
        stale[to_waiting] = (sent_from >= 0) & state["waiting"][np.maximum(sent_from, 0)]
        targets, label, sender = targets[~stale], label[~stale], sender[~stale]
    targets, label, sender = smallest_offers(targets, label, sender)
    waiting = state["waiting"][targets]
    hold = waiting & (label < state["held"][targets])
    state["held"][targets[hold]], state["held_from"][targets[hold]] = label[hold], sender[hold]
    lower = ~waiting & (label < state["label"][targets])
    taking = targets[lower]
    state["label"][taking] = label[lower]
    state["parent"][taking] = sender[lower]
    state["stamp"][taking] = stamp
    return taking


def heard(s: Step, forgot: np.ndarray, sender: np.ndarray, kind: np.ndarray) -> None:
    """What the round's forgetting tells the waiting nodes. The nodes that forgot hold their
    neighbours' labels held here (the answers :func:`replies` gives by message, given at
    once). A waiting node whose held label came from a node that has forgotten since (its
    notice came, or it forgot here) holds nothing again: the label may be one cut off, and
    the others offered to it were folded away, so it asks its neighbours at the barrier
    (``reask``, :func:`release`)."""
    state, waiting = s.state, s.state["waiting"]
    if not len(forgot) and not (kind == NOTICE).any():
        return
    which, at = held_neighbours(s, forgot)
    answering = ~waiting[at]
    take(s, forgot[which][answering], state["label"][at[answering]], s.ids[at[answering]],
         s.time.counters[-1] * STEPS_PER_ROUND)
    told = at[waiting[at] & (state["held_from"][at] == s.ids[forgot][which])]
    targets = s.slots
    told = np.unique(concat([told, targets[(kind == NOTICE) & waiting[targets] & (state["held_from"][targets] == sender)]]))
    state["held"][told] = state["held_from"][told] = s.ids[told]
    state["reask"][told] = True


def release(s: Step) -> tuple[np.ndarray, np.ndarray]:
    """``(released, asking)``: at the barrier (every notice taken everywhere: ``Step.quiet``)
    the waiting nodes stop waiting and take what they hold, the smallest label offered to
    them since they forgot, from a node that has not forgotten since: a label with a parent
    chain to its root, now that no chain is cut any more. Each offers its label (its own id
    if it held none) to its neighbours; those whose held label was taken back (:func:`heard`)
    ask them too."""
    state = s.state
    released = np.flatnonzero(state["waiting"])
    state["waiting"][released] = False
    held = released[state["held"][released] < s.ids[released]]
    state["label"][held], state["parent"][held] = state["held"][held], state["held_from"][held]
    state["stamp"][held] = s.time.counters[-1] * STEPS_PER_ROUND
    asking = released[state["reask"][released]]
    state["reask"][asking] = False
    return released, asking


def local_offers(s: Step, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The labels of the nodes at ``slots`` offered to their neighbours held here: ``(target
    slots, label, sender)``."""
    which, at = held_neighbours(s, slots)
    return at, s.state["label"][slots][which], s.ids[slots][which]


def settle(s: Step, offers: tuple[np.ndarray, np.ndarray, np.ndarray]) -> np.ndarray:
    """The round's offers to nodes held here taken, and what they lower offered on to the
    neighbours held here, to a local fixpoint: only offers to other replicas wait for the
    next round (a wide wave goes on as messages: :func:`~raytide.graph.edges.narrow`).
    Returns the slots that took."""
    took: list[np.ndarray] = []
    step = 1
    while True:
        offering = take(s, *offers, s.time.counters[-1] * STEPS_PER_ROUND + step)
        if not len(offering):
            return distinct(took)
        took.append(offering)
        if not narrow(offering, len(s.ids)):  # a wide wave: its offers go as messages (to_neighbours)
            return distinct(took)
        offers, step = local_offers(s, offering), step + 1


def distinct(steps: list[np.ndarray]) -> np.ndarray:
    """The slots that took at any of a local fixpoint's ``steps`` (each step's are distinct
    already: one sort fewer for a round of one step, a first epoch's wide waves)."""
    return concat(steps) if len(steps) < 2 else np.unique(concat(steps))


def messages(node: np.ndarray, label: np.ndarray, sender: np.ndarray, kind: int) -> dict[str, np.ndarray]:
    """Rows of the next round, all of one kind."""
    return {"node": node, "label": label, "sender": sender, "kind": np.full(len(node), kind, dtype=np.int8)}


def to_neighbours(s: Step, slots: np.ndarray, kinds: np.ndarray) -> dict[str, np.ndarray]:
    """A message of ``kinds[k]`` from the node at ``slots[k]``, with its label, to each of its
    neighbours: one read of the arrangement for every kind of message of the round."""
    which, dst = neighbours(s, slots)
    return {"node": dst, "label": s.state["label"][slots][which], "sender": s.ids[slots][which], "kind": kinds[which]}


def replies(s: Step, label: np.ndarray, sender: np.ndarray, kind: np.ndarray) -> dict[str, np.ndarray]:
    """An ask above the label of a target not waiting is answered with an offer of that label;
    so is a notice from a node not the target's parent (its label is the sender's own id,
    the sender forgot): the sender holds the answer while it waits (:func:`take`), so the
    barrier finds it there and no ask is needed then (:func:`release`)."""
    targets, state = s.slots, s.state
    mine, open_ = state["label"][targets], ~state["waiting"][targets]
    asked = (kind == ASK) | ((kind == NOTICE) & (state["parent"][targets] != sender))
    answer = asked & open_ & (label > mine)
    return messages(sender[answer], mine[answer], s.ids[targets[answer]], OFFER)


def asks(s: Step, asking: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], dict[str, np.ndarray]]:
    """The asking nodes' neighbours held here offer them their labels and they offer theirs
    back (an ask answered at once, without a message: ``(target slots, label, sender)``, taken
    in this round's :func:`settle`); their neighbours held elsewhere are asked by message."""
    which, dst = neighbours(s, asking)
    at = s.lookup(dst)
    here = at >= 0
    label, ids = s.state["label"][asking][which], s.ids[asking][which]
    near, held = which[here], at[here]
    offers = (concat([asking[near], held]), concat([s.state["label"][held], label[here]]),
              concat([s.ids[held], ids[here]]))
    return offers, messages(dst[~here], label[~here], ids[~here], ASK)


def new_edge_offers(s: Step, gained_from: np.ndarray,
                    gained_to: np.ndarray) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], dict[str, np.ndarray]]:
    """The labels offered along the edges new this round by their ends not waiting: to the
    ends held here as ``(target slots, label, sender)``, taken in this round's :func:`settle`
    (never sent: a target there takes it or is waiting), to the others as messages."""
    if s.state["waiting"].any():
        offering = ~s.state["waiting"][gained_from]
        gained_from, gained_to = gained_from[offering], gained_to[offering]
    label, sender, at = s.state["label"][gained_from], s.ids[gained_from], s.lookup(gained_to)
    held = at >= 0
    return (at[held], label[held], sender[held]), messages(gained_to[~held], label[~held], sender[~held], OFFER)


def relabel(s: Step) -> tuple[dict[str, np.ndarray], None]:
    """One round at one replica (see the module docstring): the messages of the next round."""
    lost_parent, gained_from, gained_to = edge_changes(s)
    label, sender, kind = incoming(s)
    targets, parent, ids, waiting = s.slots, s.state["parent"], s.ids, s.state["waiting"]
    notified = targets[(kind == NOTICE) & (parent[targets] == sender) & (sender != ids[targets])]
    forgot = forget_below(s, np.unique(concat([lost_parent, notified])))
    heard(s, forgot, sender, kind)
    released, asking = release(s) if s.quiet else (EMPTY, EMPTY)
    open_ = kind != NOTICE
    asked, asks_sent = asks(s, asking)
    held_gained, remote_gained = new_edge_offers(s, gained_from, gained_to)
    sources = [(targets[open_], label[open_], sender[open_]), held_gained, asked, local_offers(s, released)]
    offers = (concat([o[0] for o in sources]), concat([o[1] for o in sources]), concat([o[2] for o in sources]))
    took = settle(s, offers)
    took = np.union1d(took, released) if len(released) else took
    kinds = np.repeat(np.array([NOTICE, OFFER], dtype=np.int8), [len(forgot), len(took)])
    parts = [to_neighbours(s, concat([forgot, took]), kinds), asks_sent, replies(s, label, sender, kind), remote_gained]
    if waiting.any():
        s.again()
    mark_changed(s, concat([forgot, took, s.added.get(0, (EMPTY, {}))[0]]))
    return useful({name: concat([part[name] for part in parts]) for name in MESSAGE}, s), None


def useful(rows: dict[str, np.ndarray], s: Step) -> dict[str, np.ndarray]:
    """The messages that may still do something, offers folded to the smallest per target.

    Offers are folded first (one row per target, :func:`smallest_offers`), so what follows
    looks up one row per target, not every edge's. Dropped: an offer to a node held here that
    is waiting or has a label no larger (it would not take it; a waiting node asks later),
    and a notice to a node held here whose parent is not the sender (the state they are
    judged by is final for this round here). Asks go only to nodes held elsewhere
    (:func:`asks` answers the others at once).
    """
    offers = rows["kind"] == OFFER
    node, label, sender = smallest_offers(rows["node"][offers], rows["label"][offers], rows["sender"][offers])
    folded = messages(node, label, sender, OFFER)
    rows = {name: concat([values[~offers], folded[name]]) for name, values in rows.items()}
    slots = s.lookup(rows["node"])
    here = slots >= 0
    at, kind, label = slots[here], rows["kind"][here], rows["label"][here]
    taken = s.state["label"][at]
    if s.state["waiting"].any():  # a waiting node takes nothing yet: what it holds is what an offer must beat
        taken = np.where(s.state["waiting"][at], s.state["held"][at], taken)
    idle = (kind == OFFER) & (label >= taken)
    idle |= (kind == NOTICE) & (s.state["parent"][at] != rows["sender"][here])
    keep = np.ones(len(slots), dtype=bool)
    keep[here] = ~idle
    return {name: values[keep] for name, values in rows.items()}


def label_changes(s: Step) -> dict[str, np.ndarray]:
    """The loop's ``finish``: for the nodes the epoch touched, their old ``(node, label)`` record
    taken back and their new one added (none for a node without edges), changes only."""
    slots = np.flatnonzero(s.state["changed"] == epoch_mark(s))
    s.state["changed"][slots] = CHANGED[1]
    label, shown, present, was = (s.state[c][slots] for c in ("label", "shown", "present", "was_shown"))
    differs = (present != was) | (present & (label != shown))
    slots, label, shown, present, was = slots[differs], label[differs], shown[differs], present[differs], was[differs]
    ids = s.ids[slots]
    s.state["shown"][slots] = label
    s.state["was_shown"][slots] = present
    return {"node": concat([ids[was], ids[present]]), "label": concat([shown[was], label[present]]),
            DIFF: concat([np.full(int(was.sum()), -1, dtype=np.int64), np.ones(int(present.sum()), dtype=np.int64)])}


def changing_components(edges: Collection, name: str) -> Collection:
    """``(node, label)`` kept up to date as ``edges`` (``(u, v)`` records of integer node ids,
    direction ignored) are inserted and deleted: the smallest node id of each node's component."""
    columns = edges.update_columns(("src", "dst"), name=f"{name}.columns")
    state = {"label": (np.int64, own_id), "parent": (np.int64, own_id), "waiting": (np.bool_, False), "changed": CHANGED,
             "held": (np.int64, own_id), "held_from": (np.int64, own_id), "reask": (np.bool_, False),
             "stamp": (np.int64, -1),
             "present": (np.bool_, False), "shown": (np.int64, 0), "was_shown": (np.bool_, False)}
    changes = columns.map_batches(both_directions, name=f"{name}.both-directions").iterate_columns(
        relabel, key="node", state=state, arrange="src", diff=DIFF, name=name, finish=label_changes,
        repeatable_rounds=True)
    return Collection(columns=changes, consolidated=True)
