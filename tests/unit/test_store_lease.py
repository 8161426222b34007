"""The store lease and fencing (raytide.snapshots.lease, lease_store, the fenced SnapshotStore).

Three parts: the pure rules as properties (who may take a store; which fence is current);
the commit/takeover protocol checked over every interleaving of a zombie's commits with a
takeover (and two takers racing on an object store), with two planted protocol bugs the
checker must catch; and the file I/O against a local directory and the S3-compatible server
(moto) the S3 store tests use. No sleeps: clocks are passed in.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

import raytide as rt
from raytide.driver.store_lease import LeaseKeeper
from raytide.errors import ArgumentError, StoreFencedError, StoreLeaseError
from raytide.snapshots import lease_store
from raytide.snapshots.lease import (
    FAR_AHEAD,
    Fence,
    Holder,
    LeaseRecord,
    Refuse,
    Take,
    Wait,
    fence_of,
    fenced_by,
    judge,
    newer,
)
from raytide.snapshots.lease_store import acquire, process_gone, this_holder
from raytide.snapshots.store import SnapshotStore
from tests.unit.test_snapshot_store_s3 import bucket, s3  # noqa: F401 (fixtures)

# -- the pure rules ------------------------------------------------------------------------

fences = st.builds(Fence, st.integers(1, 6), st.sampled_from(["", "0" * 32, "a" * 32, "f" * 32]))
holders = st.builds(Holder, st.just("h"), st.integers(1, 3), st.just("job"), st.sampled_from(["", "space"]))
records = st.builds(LeaseRecord, fences, holders, st.floats(0, 50), st.floats(0, 100), st.floats(0.1, 20),
                    st.one_of(st.none(), st.integers(-1, 50)), st.booleans())


@given(st.one_of(st.none(), records), st.one_of(st.none(), records), st.floats(0, 100), holders, st.booleans())
def test_a_store_is_taken_only_from_no_holder_or_a_lapsed_released_or_gone_one(current, first_seen, now, here, gone):
    verdict = judge(current, first_seen, now, here, gone)
    if isinstance(verdict, Take):
        assert current is None or current.released or current.expires <= now or (gone and current.holder.pid != here.pid)
        assert verdict.generation == (1 if current is None else current.fence.generation + 1)
    elif isinstance(verdict, Wait):
        assert current is not None and now < verdict.until == current.expires <= now + FAR_AHEAD * current.duration
        assert first_seen is None or (first_seen.fence, first_seen.expires) == (current.fence, current.expires)
    else:
        assert isinstance(verdict, Refuse) and current is not None and verdict.holder == current
        assert not current.released and current.expires > now


@given(records, st.floats(0, 100), holders)
def test_a_waiting_driver_takes_a_lease_that_was_not_renewed_once_it_lapses(record, start, here):
    """Seen first at ``start``, unchanged when it expires: taken, by whoever waits."""
    record = replace(record, released=False, holder=replace(record.holder, pid=9))
    assert isinstance(judge(record, record, max(start, record.expires), here, False), Take)


@given(records, holders)
def test_a_driver_never_takes_a_live_lease_of_its_own_process(record, here):
    mine = replace(record, released=False, holder=replace(here, space="space"), expires=record.since + 1)
    verdict = judge(mine, None, record.since, replace(here, space="space"), True)
    assert isinstance(verdict, Refuse) and "this very process" in verdict.why


@given(fences, st.lists(fences))
def test_a_holder_is_fenced_exactly_when_a_greater_claim_is_present(own, present):
    greater = newer(own, present)
    assert (greater is None) == all(fence <= own for fence in present)
    assert greater is None or greater == max(present)


@given(fences, fences)
def test_claim_file_names_hold_their_fences_and_sort_by_generation(one, other):
    assert fence_of(one.file_name) == one
    assert fence_of("gen-1.json") is None and fence_of(".claim-0123") is None
    assert one.generation == other.generation or (one.file_name < other.file_name) == (one < other)


@given(records)
def test_a_record_survives_json(record):
    assert LeaseRecord.from_json(record.to_json()) == record


# -- the protocol, over every interleaving --------------------------------------------------


@dataclass
class Model:
    """A store as the protocol sees it: the claims (fence -> fenced_after) and the manifests
    (snapshot id -> the fence that wrote it). Snapshots 1-3 were committed by generation 1."""

    claims: dict[Fence, int | None] = field(default_factory=lambda: {Fence(1): -1})
    manifests: dict[int, Fence] = field(default_factory=lambda: dict.fromkeys((1, 2, 3), Fence(1)))

    def later(self, fence: Fence) -> Iterator[LeaseRecord]:
        holder = Holder("h", 1, "job")
        for claim in sorted(self.claims):
            if claim > fence:
                yield LeaseRecord(claim, holder, 0.0, 1.0, 1.0, self.claims[claim])

    def valid(self, snapshot_id: int) -> bool:
        fence = self.manifests[snapshot_id]
        return fenced_by(fence, snapshot_id, self.later(fence)) is None

    def newest(self) -> int:
        return max((k for k in self.manifests if self.valid(k)), default=-1)


def zombie(model: Model, ids: list[int], outcome: dict[int, str], check_after: bool = True) -> Iterator[None]:
    """Generation 1 committing ``ids`` in turn: check, write the manifest, check again."""
    own = Fence(1)
    for snapshot_id in ids:
        if newer(own, model.claims):
            outcome[snapshot_id] = "refused"
            return
        yield
        model.manifests[snapshot_id] = own
        yield
        if check_after and newer(own, model.claims):
            outcome[snapshot_id] = "failed"
            return
        outcome[snapshot_id] = "ok"
        yield


def taker(model: Model, fence: Fence, won: dict[Fence, bool], claim_first: bool = True) -> Iterator[None]:
    """A driver taking the store: claim, (on an object store) look for a greater claim,
    list what is committed, write it into the claim."""
    if not claim_first:  # planted: lists before it claims
        newest = model.newest()
        yield
    model.claims[fence] = None
    yield
    if newer(fence, model.claims):
        won[fence] = False
        return
    yield
    if claim_first:
        newest = model.newest()
        yield
    model.claims[fence] = newest
    won[fence] = True


def run_all(steps: list[Iterator[None]], order: tuple[int, ...]) -> None:
    """Step the actors in ``order`` (an actor that has finished skips its turns), then finish them all."""
    for actor in order:
        next(steps[actor], None)
    for actor in steps:
        for _ in actor:
            pass


def schedules(lengths: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
    """Every interleaving of actors with these numbers of turns."""
    if not any(lengths):
        yield ()
    for actor, length in enumerate(lengths):
        if length:
            for rest in schedules(lengths[:actor] + (length - 1,) + lengths[actor + 1:]):
                yield (actor, *rest)


def protocol_violations(check_after: bool = True, claim_first: bool = True, takers: int = 1) -> list[str]:
    """Every interleaving of a zombie's two commits (4 and 5) with ``takers`` takeovers of
    generation 2: a commit reported committed must stay readable; nothing the zombie writes
    after a takeover's claim is readable; two takers of one generation leave one holder."""
    found = []
    tokens = ["", ""] if takers == 1 else ["1" * 32, "2" * 32]
    for order in schedules((6, *[3 + (not claim_first)] * takers)):
        model, outcome, won = Model(), {}, {}
        claims = [Fence(2, tokens[i]) for i in range(takers)]
        run_all([zombie(model, [4, 5], outcome, check_after),
                 *(taker(model, fence, won, claim_first) for fence in claims)], order)
        lost = [k for k, how in outcome.items() if how == "ok" and not model.valid(k)]
        if lost:
            found.append(f"{order}: commits {lost} reported committed, then ignored by readers")
        if sum(won.values()) > 1 and not any(newer(fence, model.claims) for fence in claims):
            found.append(f"{order}: two holders")
    return found


@pytest.mark.parametrize("takers", [1, 2])
def test_no_interleaving_loses_a_reported_commit_or_leaves_two_holders(takers):
    assert protocol_violations(takers=takers) == []


def test_the_checker_catches_a_commit_without_its_second_check():
    assert protocol_violations(check_after=False)


def test_the_checker_catches_a_taker_that_lists_before_it_claims():
    assert protocol_violations(claim_first=False)


# -- the files, on a local directory and on S3 ---------------------------------------------


class Clock:
    """Time that passes only when a waiting driver sleeps; ``on_sleep`` plays the holder meanwhile."""

    def __init__(self) -> None:
        self.now, self.slept = 1_000.0, 0.0
        self.on_sleep: Callable[[], None] = lambda: None

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        self.slept += seconds
        self.on_sleep()


@pytest.fixture(params=["local", "s3"])
def opened(request, tmp_path) -> Callable[..., SnapshotStore]:
    """Opens the one store of the test (a local directory, or a bucket on the moto server), with a fence or without."""
    if request.param == "local":
        return lambda fence=None: SnapshotStore(str(tmp_path / "store"), fence=fence)
    server, name = request.getfixturevalue("s3"), request.getfixturevalue("bucket")
    return lambda fence=None: SnapshotStore(f"{name}/store", filesystem=server, fence=fence)


ELSEWHERE = Holder("other-host", 4242, "first-job", "elsewhere")


def take(store: SnapshotStore, holder: Holder, clock: Clock, duration: float = 10.0) -> LeaseRecord:
    return acquire(store.leases, holder, duration,
                   lambda: max((m.snapshot_id for m in store.committed()), default=-1),
                   clock=clock, sleep=clock.sleep, gone=lambda _holder, _here: False)


def commit(store: SnapshotStore, snapshot_id: int) -> None:
    store.commit(snapshot_id, [store.write_part(snapshot_id, "p", str(snapshot_id).encode())], {})


def test_a_live_holder_is_named_and_its_store_refused(opened):
    clock, store = Clock(), opened()
    first = take(store, ELSEWHERE, clock)
    assert first.fence.generation == 1 and first.fenced_after == -1
    renewed: list[LeaseRecord] = []

    def holder_renews() -> None:  # the first driver's renewal thread, while the second waits
        renewed.append(first.renewed(clock()))
        store.leases.write(renewed[-1])

    clock.on_sleep = holder_renews
    with pytest.raises(StoreLeaseError) as refused:
        take(store, this_holder("second-job"), clock)
    message = str(refused.value)
    for named in ("'first-job'", "process 4242", "'other-host'", "generation 1", "holding since", "expires at",
                  "renewed the lease", "Stop that driver"):
        assert named in message, named
    assert renewed and clock.slept <= first.duration, "refused once it saw a renewal, within one lease term"


def test_a_lapsed_lease_is_taken_over_and_every_later_write_of_the_old_holder_refused(opened):
    clock = Clock()
    first = take(opened(), ELSEWHERE, clock)
    old = opened(first.fence)
    commit(old, 1)
    second = take(opened(), this_holder("second-job"), clock)  # the first never renews: it lapses
    assert second.fence.generation == 2 and second.fenced_after == 1 and clock.slept >= first.duration
    for write in (lambda: old.write_part(2, "p", b"x"), lambda: old.commit(1, [], {}),
                  lambda: old.write_record("consumed", {}), lambda: old.retain(1)):
        with pytest.raises(StoreFencedError, match=r"refused, another driver took the snapshot store .* over from this job "
                                                   r"\(generation 1.*: job 'second-job' \(process"):
            write()
    new = opened(second.fence)
    assert [m.snapshot_id for m in new.committed()] == [1] and new.next_id() == 2, "the old holder wrote nothing"
    commit(new, 2)
    assert new.latest().fence == second.fence


def test_a_commit_taken_over_between_its_checks_is_reported_failed_and_ignored_by_readers(opened):
    clock = Clock()
    first = take(opened(), ELSEWHERE, clock)
    zombie = opened(first.fence)
    commit(zombie, 1)
    checks = zombie.leases.check

    def takeover_after_the_first_check(own: Fence, what: str, incarnations: bool = False) -> None:
        checks(own, what, incarnations)
        if what.startswith("committing snapshot 2"):  # paused here, the zombie's lease lapses and is taken
            take(opened(), this_holder("second-job"), clock)

    zombie.leases.check = takeover_after_the_first_check  # type: ignore[method-assign]
    part = zombie.write_part(2, "p", b"2")
    with pytest.raises(StoreFencedError, match="snapshot 2: its manifest was written, but may be ignored"):
        zombie.commit(2, [part], {})
    reader = opened()
    assert [m.snapshot_id for m in reader.committed()] == [1]
    with pytest.warns(RuntimeWarning, match=r"skipping snapshot 2 .*fenced: committed by generation 1.* after job "
                                            r"'second-job' .* took the store over in generation 2.*, having seen "
                                            r"snapshots up to 1"):
        assert reader.latest().snapshot_id == 1
    holder = opened(reader.leases.fences()[-1])
    commit(holder, 3)
    assert holder.retain(3) == [2], "the fenced manifest goes with retention"


def test_a_commit_finished_before_the_takeover_stands(opened):
    clock = Clock()
    first = take(opened(), ELSEWHERE, clock)
    commit(opened(first.fence), 1)
    commit(opened(first.fence), 2)
    second = take(opened(), this_holder("second-job"), clock)
    assert second.fenced_after == 2 and opened().latest().snapshot_id == 2


def test_a_released_lease_is_taken_at_once_and_a_manifest_without_a_fence_is_never_ignored(opened):
    clock = Clock()
    first = take(opened(), ELSEWHERE, clock)
    keeper = LeaseKeeper(opened().leases, first, clock)
    clock.now += 1
    keeper.renew()
    assert opened().leases.current().expires == clock.now + first.duration
    commit(opened(), 7)  # a writer that holds no lease (a tool, the in-process runtime)
    keeper.release()
    second = take(opened(), this_holder("second-job"), clock)
    assert clock.slept == 0 and second.fence.generation == 2
    assert [m.snapshot_id for m in opened().committed()] == [7]


def test_a_renewal_that_finds_the_store_taken_over_marks_the_job_fenced(opened):
    clock = Clock()
    first = take(opened(), ELSEWHERE, clock)
    keeper = LeaseKeeper(opened().leases, first, clock)
    take(opened(), this_holder("second-job"), clock)
    keeper.renew()
    assert isinstance(keeper.fenced, StoreFencedError) and "'second-job'" in str(keeper.fenced)
    keeper.release()  # fenced: it writes nothing
    assert opened().leases.current().holder.job == "second-job"


def test_claims_of_one_generation(opened, tmp_path):
    """A local directory creates each generation's claim once; on S3 two takers of one
    generation both write theirs, and the lesser is fenced at its first write."""
    store, clock = opened(), Clock()
    one = LeaseRecord(Fence(1, "" if store.leases.exclusive else "1" * 32), ELSEWHERE, 0.0, 1.0, 1.0)
    other = replace(one, fence=Fence(1, "" if store.leases.exclusive else "2" * 32))
    assert store.leases.create(one)
    assert store.leases.create(other) == (not store.leases.exclusive)
    if not store.leases.exclusive:
        with pytest.raises(StoreFencedError):
            opened(one.fence).write_record("consumed", {})
        opened(other.fence).write_record("consumed", {})
    assert take(store, this_holder("next"), clock).fence.generation == 2


def test_a_takeover_that_fails_lets_its_claim_go(opened):
    clock = Clock()

    def unreadable() -> int:
        raise OSError("the bucket went away")

    with pytest.raises(OSError, match="went away"):
        acquire(opened().leases, this_holder("first"), 10.0, unreadable, clock=clock, sleep=clock.sleep)
    assert take(opened(), this_holder("second"), clock).fence.generation == 2 and clock.slept == 0


def test_an_unreadable_claim_is_named(opened, monkeypatch):
    monkeypatch.setattr(lease_store, "TORN_READ_PAUSES", (0.0, 0.0))  # read again at once, then named
    store = opened()
    store.filesystem.create_dir(store.leases.dir, recursive=True)
    with store.filesystem.open_output_stream(f"{store.leases.dir}/{Fence(3).file_name}") as out:
        out.write(b"{torn")
    with pytest.raises(StoreLeaseError, match=r"gen-00000000000000000003.json' of snapshot store .* cannot be read "
                                              r".* if no driver uses the store, delete it"):
        take(store, this_holder("next"), Clock())


def test_a_holder_of_this_process_space_whose_process_is_gone_is_known_gone():
    here = this_holder("job")
    if not here.space:
        pytest.skip("no /proc: a holder's process is never known gone here")
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    assert process_gone(replace(here, pid=int(done.stdout)), here)
    assert not process_gone(replace(here, pid=1), here) and not process_gone(here, here)
    assert not process_gone(replace(here, pid=int(done.stdout), space="elsewhere"), here)


def test_the_lease_setting_is_checked():
    with pytest.raises(ArgumentError, match="lease must be seconds above 0"):
        rt.Recovery("store", lease=0)
    with pytest.raises(ArgumentError, match="fence is set by rt.run"):
        rt.Recovery("store", fence=3)  # type: ignore[arg-type]
    assert rt.Recovery("store").lease == 10.0


def renewing_while_read(store: SnapshotStore, seconds: float) -> int:
    """Reads of a claim while its holder renews it every 2 ms (each renewal a claim of another
    length, as an ``expires`` in seconds is); the reads that succeeded."""
    clock = Clock()
    record = take(store, ELSEWHERE, clock)
    done = threading.Event()

    def renew() -> None:
        for n in itertools.count(1):
            if done.is_set():
                return
            store.leases.write(record.renewed(clock() + 10.0 ** -(n % 7)))
            time.sleep(0.002)  # this thread may sleep (the unit tier refuses the test's own)

    renewer = threading.Thread(target=renew, daemon=True)
    renewer.start()
    reads, deadline = 0, time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            assert store.leases.read(record.fence).fence == record.fence
            reads += 1
    finally:
        done.set()
        renewer.join(timeout=10)
    return reads


def test_a_claim_renewed_while_it_is_read_on_s3_is_read_whole(request, monkeypatch):
    """pyarrow reads an S3 object's size, then its bytes: a renewal between the two tears the
    read (before: a StoreLeaseError 'cannot be read (JSONDecodeError ...)' now and then). The
    renewals here come every 2 ms, not once a third of a term: reads are tried more often."""
    monkeypatch.setattr(lease_store, "TORN_READ_PAUSES", (0.0,) * 10)
    server, name = request.getfixturevalue("s3"), request.getfixturevalue("bucket")
    assert renewing_while_read(SnapshotStore(f"{name}/store", filesystem=server), 3.0) > 10


def test_a_driver_starved_before_its_first_look_still_takes_a_free_store(opened):
    """Its clock jumps past the wait's limit between starting and its first look (a process
    at low priority on busy cores: 37 s once in a full run): it still judges the store once,
    and a free one is taken, not refused with 'waited ... in vain; last seen: no claim'."""
    clock, reads = Clock(), itertools.count()

    def starved() -> float:
        return clock.now + (0.0 if next(reads) == 0 else 60.0)

    record = acquire(opened().leases, this_holder("starved"), 1e-6, lambda: -1, clock=starved, sleep=clock.sleep)
    assert record.fence.generation == 1
