"""A stepped rescale's message flow in one process, under a seeded scheduler, with crashes.

This is the protocol of docs/rescaling.md ("Stepped migration") run by the pure parts it is
built of (:mod:`raytide.rescale.steps`, :mod:`raytide.rescale.migration`), not the job's
replica cores: ``job.rescale`` does not use them yet. The world:

* senders (input replicas) each feed their own keys, a key's records in sequence, epochs
  never going back; a record goes round a loop 0 to 2 times, each round back through the
  exchange at timestamp ``(epoch, (round,))``;
* one keyed vertex whose state per key is ``[next sequence number, processings]``; a record
  processed out of sequence, or where its group's state is not, is a violation;
* FIFO channels between every pair, data and state apart; the scheduler picks the next
  action at random: a sender's next record, a channel's next message, a replica's look at
  its frontier (``ReplicaSteps.due``);
* the frontier is computed from every outstanding pointstamp (records not yet sent, in
  flight or kept, capabilities held, state in flight), as progress tracking would for the
  loop: a conservative stand-in for it, which its own tests check;
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
from raytide.rescale.migration import ReplicaSteps, TimedRouter
from raytide.rescale.steps import StepPlan, plan_steps

KEY_GROUPS = 16
KeyState = dict[int, list[int]]  # key -> [next sequence number, processings]


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
        return cls(feeds, old, width, rng.randint(0, epochs // 2), rng.randint(1, 4), rng.randint(1, 2), hits)

    def reference(self) -> KeyState:
        """Per key, what a failure-free run without a rescale ends with (plain Python)."""
        final: KeyState = {}
        for rec in (rec for feed in self.feeds for rec in feed):
            state = final.setdefault(rec.key, [0, 0])
            state[0], state[1] = max(state[0], rec.seq + 1), state[1] + rec.rounds + 1
        return final


class SteppedWorld:
    """The senders, the replicas of the keyed vertex and what is in flight between them."""

    def __init__(self, trial: Trial, seed: int) -> None:
        self.trial, self.rng = trial, random.Random(seed)
        self.violations: list[str] = []
        self.crashed = self.crashed_mid_plan = 0
        self.actions_since_snapshot: int | None = None
        self.snapshot: tuple[list[dict[int, KeyState]], list[int]] | None = None
        owned: list[dict[int, KeyState]] = [{g: {} for g in trial.old.groups_of(r)} for r in range(trial.old.parallelism)]
        self._start(StepPlan(trial.old, (), trial.old), owned, [0] * len(trial.feeds))

    def _start(self, plan: StepPlan, states: list[dict[int, KeyState]], positions: list[int]) -> None:
        """The world from ``states`` and the senders' ``positions``, routing by ``plan``."""
        self.plan, self.router = plan, TimedRouter(lambda rec: rec.key, plan)
        self.states = states + [{} for _ in range(plan.width - len(states))]
        self.steps = [ReplicaSteps("count", r, plan) for r in range(plan.width)]
        self.positions = positions
        self.data: dict[tuple[str, int], deque[Rec]] = {}
        self.handed: dict[tuple[int, int], deque[tuple[int, dict[int, KeyState]]]] = {}
        self.kept: list[Rec] = []
        self.gate = self.trial.snapshot_at if self.snapshot is None else None

    def _frontier(self) -> list[Timestamp]:
        """Every outstanding pointstamp (a conservative frontier for every replica)."""
        times = [feed[at].time for feed, at in zip(self.trial.feeds, self.positions) if at < len(feed)]
        times += [rec.time for queue in self.data.values() for rec in queue] + [rec.time for rec in self.kept]
        times += [Timestamp(epoch, (0,)) for steps in self.steps for epoch in steps.capabilities()]
        return times + [Timestamp(epoch, (0,)) for queue in self.handed.values() for epoch, _ in queue]

    def _send(self, origin: str, rec: Rec) -> None:
        for replica, part in self.router.route([rec], rec.time):
            self.data.setdefault((origin, replica), deque()).extend(part)

    def _process(self, replica: int, rec: Rec) -> None:
        group = key_group(rec.key, KEY_GROUPS)
        if group not in self.states[replica]:
            self.violations.append(f"replica {replica} processed key {rec.key} (group {group}) at {rec.time} "
                                   f"without the group's state")
            self.states[replica][group] = {}
        state = self.states[replica][group].setdefault(rec.key, [0, 0])
        if rec.time.counters == (0,):
            if state[0] != rec.seq:
                self.violations.append(f"key {rec.key}: record {rec.seq} processed when {state[0]} was next")
            state[0] = rec.seq + 1
        state[1] += 1
        if rec.rounds:
            self._send(f"r{replica}", Rec(rec.key, rec.seq, Timestamp(rec.time.epoch, (rec.time.counters[0] + 1,)),
                                          rec.rounds - 1))

    def _actions(self) -> list[tuple]:
        acts: list[tuple] = [("send", s) for s, (feed, at) in enumerate(zip(self.trial.feeds, self.positions))
                             if at < len(feed) and (self.gate is None or feed[at].time.epoch < self.gate)]
        acts += [("data", channel) for channel, queue in self.data.items() if queue]
        acts += [("state", channel) for channel, queue in self.handed.items() if queue]
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
        else:
            self._hand_over(where)

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
        for handoff in self.steps[replica].due(self._frontier()):
            payload = {group: self.states[replica].pop(group) for group in handoff.groups}
            self.handed.setdefault((replica, handoff.to_replica), deque()).append(
                (handoff.epoch, copy.deepcopy(payload)))  # pickled on the way, as the object store does

    def _adopt(self, replica: int, epoch: int, payload: dict[int, KeyState]) -> None:
        self.states[replica].update(payload)
        for _, _, rec in self.steps[replica].arrived(payload):
            self.kept.remove(rec)
            self._process(replica, rec)

    def _take_snapshot_if_due(self) -> None:
        """At the gate, once nothing before it is left: the snapshot, then the plan from there."""
        if self.gate is None or any(time.epoch < self.gate for time in self._frontier()):
            return
        self.snapshot = (copy.deepcopy(self.states), list(self.positions))
        self.actions_since_snapshot = 0
        self._restart()

    def _restart(self) -> None:
        """The rescale made (again) from the snapshot, with a plan at its epoch or later."""
        assert self.snapshot is not None
        states, positions = copy.deepcopy(self.snapshot[0]), list(self.snapshot[1])
        first = self.trial.snapshot_at + self.rng.randint(0, 2)
        plan = plan_steps(self.trial.old, self.trial.width, first, self.trial.groups_per_step,
                          self.trial.epochs_per_step)
        self._start(plan, states, positions)

    def run(self, limit: int = 200_000) -> dict[int, KeyState]:
        """Run to the end; what every key's state is then (violations in ``self.violations``)."""
        for _ in range(limit):
            self._take_snapshot_if_due()
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

    def _final(self) -> dict[int, KeyState]:
        if self.snapshot is None or not all(steps.done for steps in self.steps) or self.kept:
            self.violations.append(f"stuck: snapshot {self.snapshot is not None}, {len(self.kept)} records kept, "
                                   f"steps done {[steps.done for steps in self.steps]}")
        for replica in range(self.plan.width):
            wrong = sorted(g for g in self.states[replica] if self.plan.after.owners[g] != replica)
            if wrong:
                self.violations.append(f"replica {replica} ends with groups {wrong} it does not own")
        return {key: state for groups in self.states for keys in groups.values() for key, state in keys.items()}
