"""The store fenced by the job's incarnation (raytide.snapshots.incarnations, the marks of
raytide.snapshots.lease): the protocol over every interleaving of a zombie coordinator's commit
with a recovery's mark, the new coordinator's commit and another driver's takeover, with three
planted bugs the checker catches; and the files, on a local directory and on the S3-compatible
server, with a real zombie's commit, retention and late manifest."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from hypothesis import given
from hypothesis import strategies as st

from raytide.errors import StoreFencedError
from raytide.snapshots.incarnations import enter_incarnation
from raytide.snapshots.lease import Fence, Holder, LeaseRecord, fence_of, fenced_by, newer
from raytide.snapshots.store import SnapshotStore
from tests.unit.test_snapshot_store_s3 import bucket, s3  # noqa: F401 (fixtures)
from tests.unit.test_store_lease import ELSEWHERE, Clock, commit, opened, run_all, schedules, take  # noqa: F401

fences = st.builds(Fence, st.integers(1, 4), st.sampled_from(["", "a" * 32, "f" * 32]), st.integers(0, 3))


@given(fences, st.lists(fences))
def test_a_writer_per_driver_is_fenced_by_other_claims_and_never_by_its_own_incarnations(own, present):
    claim = own.claim
    greater = newer(claim, present, incarnations=False)
    assert (greater is not None) == any(fence.claim > claim for fence in present)
    followed = newer(own, present)
    assert (followed is not None) == any(fence > own for fence in present)
    assert all(fence.claim < fence.claim.at(n) < Fence(fence.generation + 1) for fence in present for n in (1, 9))


@given(fences)
def test_marks_are_named_and_read_back(fence):
    assert fence_of(fence.file_name) == fence and Fence.from_json(fence.to_json()) == fence
    assert len(fence.to_json()) == (3 if fence.incarnation else 2), "a claim is written as before incarnations"


# -- the protocol, over every interleaving --------------------------------------------------


@dataclass
class Model:
    """The claims and marks (fence -> fenced_after), the manifests (id -> fence) and when each
    manifest was written and each claim or mark listed (a step count). Snapshots 1-3 were
    committed by generation 1 in incarnation 0."""

    first_rule: bool = False  # planted: the first settled later claim decides, as before marks
    claims: dict[Fence, int | None] = field(default_factory=lambda: {Fence(1): -1})
    manifests: dict[int, Fence] = field(default_factory=lambda: dict.fromkeys((1, 2, 3), Fence(1)))
    written: dict[int, int] = field(default_factory=dict)
    listed: dict[Fence, int] = field(default_factory=dict)
    clock: int = 0

    def tick(self) -> int:
        self.clock += 1
        return self.clock

    def valid(self, snapshot_id: int) -> bool:
        fence = self.manifests[snapshot_id]
        holder = Holder("h", 1, "job")
        later = [LeaseRecord(claim, holder, 0.0, 1.0, 1.0, after) for claim, after in sorted(self.claims.items())
                 if claim > fence]
        if self.first_rule:
            first = next((record for record in later if record.fenced_after is not None), None)
            return first is None or snapshot_id <= first.fenced_after  # type: ignore[operator]
        return fenced_by(fence, snapshot_id, iter(later)) is None

    def newest(self) -> int:
        return max((k for k in self.manifests if self.valid(k)), default=-1)


def committer(model: Model, own: Fence, snapshot_id: int, outcome: dict[int, str],
              incarnations: bool = True) -> Iterator[None]:
    """A coordinator writing as ``own`` commits ``snapshot_id``: check, write the manifest, check again."""
    if newer(own, model.claims, incarnations):
        outcome[snapshot_id] = "refused"
        return
    yield
    model.manifests[snapshot_id], model.written[snapshot_id] = own, model.tick()
    yield
    outcome[snapshot_id] = "failed" if newer(own, model.claims, incarnations) else "ok"
    yield


def marker(model: Model, mark: Fence, outcome: dict[int, str], list_first: bool = False) -> Iterator[None]:
    """A recovery starting ``mark``'s incarnation: create the mark, check for a greater claim, list
    what is committed, write it into the mark; then its coordinator commits snapshot 6."""
    if list_first:  # planted: lists before it marks
        newest, model.listed[mark] = model.newest(), model.tick()
        yield
    model.claims[mark] = None
    yield
    if newer(mark, model.claims):
        return
    yield
    if not list_first:
        newest, model.listed[mark] = model.newest(), model.tick()
        yield
    model.claims[mark] = newest
    yield from committer(model, mark, 6, outcome)


def taker(model: Model, fence: Fence) -> Iterator[None]:
    """Another driver taking the store: claim, list, write it into the claim."""
    model.claims[fence] = None
    yield
    newest, model.listed[fence] = model.newest(), model.tick()
    yield
    model.claims[fence] = newest


def violations(first_rule: bool = False, zombie_incarnations: bool = True, list_first: bool = False) -> Iterator[str]:
    """Every interleaving of a zombie coordinator's commit of snapshot 4 (incarnation 0), the mark
    of incarnation 1 and its coordinator's commit of 6, and a takeover by generation 2: a commit
    reported committed stays readable; a manifest written after a later claim or mark listed the
    snapshots without it is never readable."""
    mark, other = Fence(1).at(1), Fence(2)
    for order in schedules((3, 7 + list_first, 3)):
        model, outcome = Model(first_rule), {}
        run_all([committer(model, Fence(1), 4, outcome, zombie_incarnations),
                 marker(model, mark, outcome, list_first), taker(model, other)], order)
        lost = [k for k, how in outcome.items() if how == "ok" and not model.valid(k)]
        late = [k for k, at in model.written.items() if model.valid(k) and any(
            fence > model.manifests[k] and listed < at for fence, listed in model.listed.items())]
        if lost or late:
            yield f"{order}: reported committed, then ignored: {lost}; written after a listing, read: {late}"


def test_no_interleaving_loses_a_reported_commit_or_reads_a_late_one():
    assert list(violations()) == []


@pytest.mark.parametrize("plant", ["first_rule", "zombie_incarnations", "list_first"])
def test_the_checker_catches(plant):
    """Planted: readers judging by the first later claim that knows its listing (the rule before
    marks); a coordinator's check blind to its own job's marks; a mark listed before it is made."""
    assert next(violations(**{plant: plant != "zombie_incarnations"}), None)


# -- the files, on a local directory and on S3 ---------------------------------------------


def test_a_replaced_coordinators_commit_and_retention_are_refused_and_its_late_manifest_ignored(opened):  # noqa: F811
    claim = take(opened(), ELSEWHERE, Clock())
    driver, zombie = opened(claim.fence), opened(claim.fence).at(0)
    commit(zombie, 1)
    checks = zombie.leases.check

    def recovery_after_the_first_check(own: Fence, what: str, incarnations: bool = False) -> None:
        checks(own, what, incarnations)
        if what.startswith("committing snapshot 2"):  # its first check passed: a recovery marks incarnation 1
            assert enter_incarnation(driver, 1, "job").fence == claim.fence.at(1)

    zombie.leases.check = recovery_after_the_first_check  # type: ignore[method-assign]
    part = zombie.write_part(2, "p", b"2")
    with pytest.raises(StoreFencedError, match="snapshot 2: its manifest was written, but may be ignored.*a recovery "
                                               "of this job started incarnation 1 after this writer's incarnation 0"):
        zombie.commit(2, [part], {})
    reader = opened()
    with pytest.warns(RuntimeWarning, match=r"skipping snapshot 2 .*fenced: committed by incarnation 0 after a "
                                            r"recovery of its job started incarnation 1, having seen snapshots up to 1"):
        assert reader.latest().snapshot_id == 1  # type: ignore[union-attr]
    for write in (lambda: zombie.commit(3, [], {}), lambda: zombie.retain(1)):
        with pytest.raises(StoreFencedError, match="a recovery of this job started incarnation 1 after this writer's "
                                                   "incarnation 0"):
            write()
    opened(claim.fence).write_part(9, "q", b"a replica's writer is fenced per driver only")
    new = opened(claim.fence).at(1)
    commit(new, 3)
    assert [m.snapshot_id for m in reader.committed()] == [1, 3]
    assert new.retain(1) == [1, 2], "the current incarnation's retention; the fenced manifest goes with it"


def test_a_store_without_a_lease_writes_no_mark(tmp_path):
    store = SnapshotStore(str(tmp_path))
    assert enter_incarnation(store, 3, "job").fence is None and not (tmp_path / "_lease").exists()
