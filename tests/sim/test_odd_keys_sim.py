"""``None``, bytes and non-ASCII keys (tests/odd_keys.py) through an exchange, keyed state,
snapshots, recoveries and rescales, in the in-process runtime: seeded trials that rescale
the keyed vertices at random steps and crash something at random moments (before, during
and after a rescale's cut, hand-over and adoption: tests/sim/test_rescale_sim.py's crashes),
each ending with exactly the plain-Python reference's output."""

from __future__ import annotations

import collections
import random
import warnings

from raytide.core import keygroups
from raytide.rescale.widths import width_groups
from raytide.snapshots.store import SnapshotStore
from raytide.testing.local import LocalJob, LocalRecovery
from tests.odd_keys import odd_keys_flow, odd_pairs, reference
from tests.sim.scenarios import as_counters, with_input_width
from tests.sim.seeds import seeds
from tests.sim.test_rescale_sim import _Crashes, rescaled_wrongly

TRIALS = 40


def trial(seed: int, store_dir: str, seen: collections.Counter) -> str | None:
    """What went wrong in trial ``seed`` (None: nothing)."""
    rng = random.Random(seed)
    inputs = odd_pairs(rng, epochs=5)
    flow = with_input_width(odd_keys_flow(), rng.randint(1, 2))
    job = LocalJob(flow, {"pairs": inputs}, rng.randint(1, 3), seed,
                   recovery=LocalRecovery(SnapshotStore(store_dir), interval=rng.choice([5, 20]), max_restarts=6))
    groups = width_groups(job.plan)
    asked = [{min(groups[vertex]): rng.randint(1, 4) for vertex in rng.sample(["sums", "seen"], rng.randint(1, 2))}
             for _ in range(rng.randint(1, 2))]
    for widths in asked:
        job.rescale(widths, at_step=rng.randrange(1, 150))
    crashes = _Crashes(job, rng, seen, seed) if seed % 2 else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a snapshot skipped after a crash
        run = job.run(max_steps=200_000, after_step=crashes.after_step if crashes else None)
    seen["trials that rescaled"] += bool(run.rescales)
    seen["trials that recovered"] += bool(run.recoveries)
    if run.failure is not None or not run.finished:
        return f"failure={run.failure!r} finished={run.finished}"
    expected = reference(inputs)
    if as_counters(run.outputs) != {name: {e: c for e, c in epochs.items() if c} for name, epochs in expected.items()}:
        return f"rescales {run.rescales} (asked {asked}):\n got {as_counters(run.outputs)}\n expected {expected}"
    return rescaled_wrongly(job, asked)


def test_odd_keys_through_exchanges_snapshots_rescales_and_crashes_give_the_plain_reference(store_root):
    seen: collections.Counter = collections.Counter()
    for seed in seeds(TRIALS, "odd keys"):
        wrong = trial(seed, str(store_root / str(seed)), seen)
        assert wrong is None, f"seed {seed}: {wrong}"
    assert seen["trials that rescaled"] >= TRIALS * 0.6 and seen["trials that recovered"] >= TRIALS * 0.3, seen


def test_the_keys_spread_over_the_key_groups_of_two_replicas():
    """The trials' keys land on both replicas of a width 2 and move when it changes (else
    they would test one replica's state only)."""
    from tests.odd_keys import KEYS

    owners = keygroups.KeyGroupAssignment.contiguous(2).owners
    assert {owners[keygroups.key_group(key)] for key in KEYS} == {0, 1}
