"""A stepped rescale's message flow in one process, under a seeded scheduler, with crashes.

This is the protocol of docs/rescaling.md ("Stepped migration") run by the pure parts it is
built of (:mod:`raytide.rescale.steps`, :mod:`raytide.rescale.migration`), not the job's
replica cores: ``job.rescale`` does not use them yet. The world:

* senders (input replicas) each feed their own keys, a key's records in sequence, epochs
  never going back; a record goes round a loop 0 to 2 times, each round back through the
  exchange at timestamp ``(epoch, (round,))``;
* one keyed vertex whose state per key is ``[next sequence number, processings]``; a record
  processed out of sequence, or where its group's state is not, is a violation; it counts
  each key's records per epoch and hands the counts of epoch ``x`` out when notified at
  ``x + delay`` (``delay`` 0 or 2: a notification pending past a step travels with the
  state); a count handed out in an epoch the driver had completed is a violation;
* FIFO channels between every pair, data and state apart; the scheduler picks the next
  action at random: a sender's next record, a channel's next message, a replica's look at
  its frontier (``ReplicaSteps.due``);
* frontiers are computed from the outstanding pointstamps, as progress tracking would for
  the loop: a replica hands a group over once no record before the step is left (not sent,
  in flight or kept) and none of its own notifications before it is pending; a
  notification is due, and the driver completes an epoch, once that and the capabilities
  the old owners hold and the state in flight are past it (docs/rescaling.md, "Progress
  stays correct");
* before the rescale, the senders stop at an epoch, the snapshot is taken once nothing
  before it is left, and the plan starts at that epoch or later; a crash at any action after
  that rolls the whole world back to the snapshot and the rescale is made again with a new
  plan (today's recovery, as the design falls back to).
"""

from __future__ import annotations

import copy
import random
from collections import deque
from dataclasses import dataclass, field

from raytide.core.keygroups import KeyGroupAssignment, key_group
from raytide.errors import RescaleError
from raytide.progress.timestamps import Timestamp
from raytide.rescale.migration import ReplicaSteps, TimedRouter, frontier_passes
from raytide.rescale.steps import StepPlan, plan_steps

KEY_GROUPS = 16
KeyState = dict[int, list[int]]  # key -> [next sequence number, processings]


@dataclass
class Group:
    """One key group's state at a replica: its keys', the counts not handed out yet, and the
    epochs of the notifications it asked for."""

    keys: KeyState = field(default_factory=dict)
    counts: dict[tuple[int, int], int] = field(default_factory=dict)  # (key, epoch) -> records
    pending: set[int] = field(default_factory=set)


States = list[dict[int, Group]]


@dataclass(frozen=True)
class Rec:
    """A record: its key, its sequence number within the key, its time, loop rounds to go."""

    key: int
    seq: int
    time: Timestamp
    rounds: int


@dataclass
class Trial:
    """One seeded trial's shape, drawn from its seed."""

    feeds: list[list[Rec]]
    old: KeyGroupAssignment
    width: int
    snapshot_at: int
    groups_per_step: int
    epochs_per_step: int
    delay: int
    crashes: list[int] = field(default_factory=list)  # actions after the snapshot at which to crash

    @classmethod
    def draw(cls, seed: int, crashes: bool) -> Trial:
        rng = random.Random(seed)
        senders, epochs = rng.randint(1, 3), rng.randint(4, 10)
        keys = list(range(rng.randint(6, 30)))
        feeds: list[list[Rec]] = [[] for _ in range(senders)]
        seqs = dict.fromkeys(keys, 0)
        for epoch in range(epochs):
            for _ in range(rng.randint(0, 3 * senders)):
                key = rng.choice(keys)
                feeds[key % senders].append(Rec(key, seqs[key], Timestamp(epoch, (0,)), rng.choice((0, 0, 1, 2))))
                seqs[key] += 1
        old = KeyGroupAssignment.contiguous(rng.randint(1, 4), KEY_GROUPS)
        width = rng.choice([w for w in range(1, 6) if w != old.parallelism])
        hits = sorted(rng.sample(range(100), rng.randint(1, 2))) if crashes else []
        return cls(feeds, old, width, rng.randint(0, epochs // 2), rng.randint(1, 4), rng.randint(1, 2),
                   rng.choice((0, 2)), hits)

    @property
    def end(self) -> int:
        """An epoch after every epoch a count is handed out in."""
        return max((rec.time.epoch for feed in self.feeds for rec in feed), default=0) + self.delay + 1

    def reference(self) -> tuple[KeyState, dict[tuple[int, int], int]]:
        """Per key, what a failure-free run without a rescale ends with, and the count of
        each key's records per epoch (plain Python)."""
        final: KeyState = {}
        counts: dict[tuple[int, int], int] = {}
        for rec in (rec for feed in self.feeds for rec in feed):
            state = final.setdefault(rec.key, [0, 0])
            state[0], state[1] = max(state[0], rec.seq + 1), state[1] + rec.rounds + 1
            counts[rec.key, rec.time.epoch] = counts.get((rec.key, rec.time.epoch), 0) + 1
        return final, counts


class SteppedWorld:
    """The senders, the replicas of the keyed vertex and what is in flight between them."""

    def __init__(self, trial: Trial, seed: int) -> None:
        self.trial, self.rng = trial, random.Random(seed)
        self.violations: list[str] = []
        self.crashed = self.crashed_mid_plan = 0
        self.actions_since_snapshot: int | None = None
        self.snapshot: tuple[States, list[int], int, int] | None = None
        self.outputs: list[tuple[int, int, int]] = []  # (key, epoch, count) handed out, in order
        self.complete = 0  # the epochs before it are complete: the driver has handed them out
        owned: States = [{g: Group() for g in trial.old.groups_of(r)} for r in range(trial.old.parallelism)]
        self._start(StepPlan(trial.old, (), trial.old), owned, [0] * len(trial.feeds))

    def _start(self, plan: StepPlan, states: States, positions: list[int]) -> None:
        """The world from ``states`` and the senders' ``positions``, routing by ``plan``."""
        self.plan, self.router = plan, TimedRouter(lambda rec: rec.key, plan)
        self.states = states + [{} for _ in range(plan.width - len(states))]
        self.steps = [ReplicaSteps("count", r, plan) for r in range(plan.width)]
        self.positions = positions
        self.data: dict[tuple[str, int], deque[Rec]] = {}
        self.handed: dict[tuple[int, int], deque[tuple[int, dict[int, Group]]]] = {}
        self.kept: list[Rec] = []
        self.gate = self.trial.snapshot_at if self.snapshot is None else None

    def _data_frontier(self) -> list[Timestamp]:
        """The records' pointstamps: not sent yet, in flight, or kept until their group's state comes."""
        times = [feed[at].time for feed, at in zip(self.trial.feeds, self.positions) if at < len(feed)]
        return times + [rec.time for queue in self.data.values() for rec in queue] + [rec.time for rec in self.kept]

    def _frontier(self) -> list[Timestamp]:
        """What holds a notification back: the records, the old owners' capabilities and the
        state in flight."""
        times = [Timestamp(epoch, (0,)) for steps in self.steps for epoch in steps.capabilities()]
        times += [Timestamp(epoch, (0,)) for queue in self.handed.values() for epoch, _ in queue]
        return self._data_frontier() + times

    def _pending(self, replicas: range | list[int]) -> list[Timestamp]:
        """The notifications ``replicas`` asked for, as pointstamps."""
        return [Timestamp(epoch, (0,)) for r in replicas for group in self.states[r].values() for epoch in group.pending]

    def _linked(self, origin: str, replica: int) -> bool:
        """Whether ``origin`` has a link to ``replica`` (every pair here; a join makes them:
        tests/sim/joining_world.py). A message over no link is lost, as it would be."""
        return True

    def _counted(self) -> range | list[int]:
        """The replicas whose pointstamps the progress actor counts (all of them here)."""
        return range(self.plan.width)

    def _send(self, origin: str, rec: Rec) -> None:
        for replica, part in self.router.route([rec], rec.time):
            if self._linked(origin, replica):
                self.data.setdefault((origin, replica), deque()).extend(part)

    def _process(self, replica: int, rec: Rec) -> None:
        group = key_group(rec.key, KEY_GROUPS)
        if group not in self.states[replica]:
            self.violations.append(f"replica {replica} processed key {rec.key} (group {group}) at {rec.time} "
                                   f"without the group's state")
            self.states[replica][group] = Group()
        held = self.states[replica][group]
        state = held.keys.setdefault(rec.key, [0, 0])
        if rec.time.counters == (0,):
            if state[0] != rec.seq:
                self.violations.append(f"key {rec.key}: record {rec.seq} processed when {state[0]} was next")
            state[0] = rec.seq + 1
            epoch = rec.time.epoch
            held.counts[rec.key, epoch] = held.counts.get((rec.key, epoch), 0) + 1
            held.pending.add(epoch + self.trial.delay)
        state[1] += 1
        if rec.rounds:
            self._send(f"r{replica}", Rec(rec.key, rec.seq, Timestamp(rec.time.epoch, (rec.time.counters[0] + 1,)),
                                          rec.rounds - 1))

    def _actions(self) -> list[tuple]:
        acts: list[tuple] = [("send", s) for s, (feed, at) in enumerate(zip(self.trial.feeds, self.positions))
                             if at < len(feed) and (self.gate is None or feed[at].time.epoch < self.gate)]
        acts += [("data", channel) for channel, queue in self.data.items() if queue]
        acts += [("state", channel) for channel, queue in self.handed.items() if queue]
        acts += [("notify", r) for r in range(self.plan.width) if self._pending([r])]
        return acts + [("look", r) for r, steps in enumerate(self.steps) if steps.capabilities()]

    def _act(self, action: tuple) -> None:
        kind, where = action
        if kind == "send":
            rec = self.trial.feeds[where][self.positions[where]]
            self.positions[where] += 1
            self._send(f"s{where}", rec)
        elif kind == "data":
            self._deliver(where[1], self.data[where].popleft())
        elif kind == "state":
            self._adopt(where[1], *self.handed[where].popleft())
        elif kind == "notify":
            self._notify(where)
        else:
            self._hand_over(where)

    def _notify(self, replica: int) -> None:
        """Every due notification of ``replica``: the counts it closes handed out."""
        frontier = self._frontier()
        for held in self.states[replica].values():
            for at in sorted(at for at in held.pending if frontier_passes(frontier, at + 1)):
                held.pending.remove(at)
                for (key, epoch), count in sorted(held.counts.items()):
                    if epoch <= at - self.trial.delay:
                        del held.counts[key, epoch]
                        self._hand_out(key, epoch, count)

    def _hand_out(self, key: int, epoch: int, count: int) -> None:
        at = epoch + self.trial.delay
        if at < self.complete:
            self.violations.append(f"key {key}: its count of epoch {epoch} came at {at}, after the driver had "
                                   f"completed epochs up to {self.complete - 1}")
        self.outputs.append((key, epoch, count))

    def _complete_epochs(self) -> None:
        """The driver completes the epochs no pointstamp (pending notifications too) holds back."""
        frontier = self._frontier() + self._pending(self._counted())
        self.complete = max(self.complete, min((time.epoch for time in frontier), default=self.trial.end))

    def _deliver(self, replica: int, rec: Rec) -> None:
        try:
            now = self.steps[replica].receive(key_group(rec.key, KEY_GROUPS), rec.time, rec)
        except RescaleError as error:
            self.violations.append(str(error))
            return
        if now:
            self._process(replica, rec)
        else:
            self.kept.append(rec)

    def _hand_over(self, replica: int) -> None:
        for handoff in self.steps[replica].due(self._data_frontier() + self._pending([replica])):
            payload = {group: self.states[replica].pop(group) for group in handoff.groups}
            early = sorted(at for group in payload.values() for at in group.pending if at < handoff.epoch)
            if early:
                self.violations.append(f"replica {replica} handed a group over at {handoff.epoch} with "
                                       f"notifications at {early} not delivered")
            if self._linked(f"r{replica}", handoff.to_replica):  # pickled on the way, as the object store does
                self.handed.setdefault((replica, handoff.to_replica), deque()).append(
                    (handoff.epoch, copy.deepcopy(payload)))

    def _adopt(self, replica: int, epoch: int, payload: dict[int, Group]) -> None:
        self.states[replica].update(payload)
        for _, _, rec in self.steps[replica].arrived(payload):
            self.kept.remove(rec)
            self._process(replica, rec)

    def _take_snapshot_if_due(self) -> None:
        """At the gate, once nothing before it is left: the snapshot, then the plan from there."""
        if self.gate is None or any(time.epoch < self.gate for time in self._frontier()):
            return
        self.snapshot = (copy.deepcopy(self.states), list(self.positions), len(self.outputs), self.complete)
        self.actions_since_snapshot = 0
        self._restart()

    def _rollback(self) -> tuple[States, list[int]]:
        """The snapshot's states and senders' positions; what was handed out since taken back."""
        assert self.snapshot is not None
        states, positions = copy.deepcopy(self.snapshot[0]), list(self.snapshot[1])
        del self.outputs[self.snapshot[2]:]
        self.complete = self.snapshot[3]
        return states, positions

    def _restart(self) -> None:
        """The rescale made (again) from the snapshot, with a plan at its epoch or later."""
        states, positions = self._rollback()
        first = self.trial.snapshot_at + self.rng.randint(0, 2)
        plan = plan_steps(self.trial.old, self.trial.width, first, self.trial.groups_per_step,
                          self.trial.epochs_per_step)
        self._start(plan, states, positions)

    def run(self, limit: int = 200_000) -> tuple[KeyState, dict[tuple[int, int], int]]:
        """Run to the end; what every key's state is then, and every count handed out
        (violations in ``self.violations``)."""
        for _ in range(limit):
            self._take_snapshot_if_due()
            self._complete_epochs()
            actions = self._actions()
            if not actions:
                return self._final()
            if self.actions_since_snapshot is not None:
                if self.actions_since_snapshot in self.trial.crashes[self.crashed:self.crashed + 1]:
                    self.crashed += 1
                    self.crashed_mid_plan += not all(steps.done for steps in self.steps)
                    self._restart()  # the whole job back to the snapshot, the rescale made again
                    continue
                self.actions_since_snapshot += 1
            self._act(self.rng.choice(actions))
        raise AssertionError(f"the world did not end within {limit} actions")

    def _final(self) -> tuple[KeyState, dict[tuple[int, int], int]]:
        if self.snapshot is None or not all(steps.done for steps in self.steps) or self.kept:
            self.violations.append(f"stuck: snapshot {self.snapshot is not None}, {len(self.kept)} records kept, "
                                   f"steps done {[steps.done for steps in self.steps]}")
        for replica in range(self.plan.width):
            wrong = sorted(g for g in self.states[replica] if self.plan.after.owners[g] != replica)
            if wrong:
                self.violations.append(f"replica {replica} ends with groups {wrong} it does not own")
        counts: dict[tuple[int, int], int] = {}
        for key, epoch, count in self.outputs:
            if (key, epoch) in counts:
                self.violations.append(f"key {key}: its count of epoch {epoch} handed out twice")
            counts[key, epoch] = count
        final = {key: state for groups in self.states for group in groups.values() for key, state in group.keys.items()}
        return final, counts


def checked_run(world: SteppedWorld, seed: int) -> tuple[KeyState, dict[tuple[int, int], int]]:
    """Run ``world`` to its end and check it against its trial's plain-Python reference (no
    violation, every key's state, every count); returns the states and counts."""
    final, counts = world.run()
    assert world.violations == [], f"seed {seed}: {world.violations[:5]}"
    reference, reference_counts = world.trial.reference()
    assert final == reference, f"seed {seed}: the keys' states differ from the reference"
    assert counts == reference_counts, f"seed {seed}: the counts handed out differ from the reference"
    return final, counts
