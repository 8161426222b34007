"""Keys that are easy to get wrong, through an exchange, keyed state, a snapshot and a
rescale: ``None`` (alone and in tuples), bytes (empty, invalid UTF-8), non-ASCII text
(accents, CJK, an emoji, a lone surrogate), the empty string, big and negative integers;
with a plain-Python reference of what the job must output. Shared by
tests/sim/test_odd_keys_sim.py and tests/ray/test_odd_keys.py."""

from __future__ import annotations

import random
from collections import Counter, defaultdict
from typing import Any

import raytide as rt

KEYS: list[Any] = [None, b"", b"\x00\xff", "", "\u00e9", "\u65e5\u672c\u8a9e", "\U0001f642", "a\udcff",
                   ("user", None), (None, b"\xfe", "\u00e9"), 0, -7, 2**70]


def odd_keys_flow(name: str = "odd keys") -> rt.Dataflow:
    """Per epoch, each key's sum of values (``reduce_by_key``: a combiner, an exchange); and
    across epochs, ``(key, n)`` for a key's n-th record (``stateful_map``: keyed state that
    snapshots hold and rescales move by key group)."""
    flow = rt.Dataflow(name)
    pairs = flow.input("pairs")
    pairs.reduce_by_key(lambda r: r[0], lambda a, b: a + b, value=lambda r: r[1], name="sums").output("per_epoch")
    pairs.stateful_map(lambda r: r[0], lambda seen, r: ((seen or 0) + 1, (seen or 0) + 1), name="seen").output("running")
    return flow


def odd_pairs(rng: random.Random, epochs: int, most: int = 8) -> list[list[tuple[Any, int]]]:
    """``(key, value)`` records per epoch, keys drawn from :data:`KEYS`."""
    return [[(rng.choice(KEYS), rng.randrange(100)) for _ in range(rng.randint(1, most))] for _ in range(epochs)]


def reference(epochs: list[list[tuple[Any, int]]]) -> dict[str, dict[int, Counter]]:
    """What :func:`odd_keys_flow` outputs, per output and epoch, computed in plain Python."""
    per_epoch: dict[int, Counter] = {}
    running: dict[int, Counter] = {}
    seen: Counter = Counter()
    for epoch, records in enumerate(epochs):
        sums: dict[Any, int] = defaultdict(int)
        numbered = []
        for key, value in records:
            sums[key] += value
            seen[key] += 1
            numbered.append((key, seen[key]))
        per_epoch[epoch], running[epoch] = Counter(sums.items()), Counter(numbered)
    return {"per_epoch": per_epoch, "running": running}
