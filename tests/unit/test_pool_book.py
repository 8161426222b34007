"""The host pool's bookkeeping, pure: random sequences of leases, give-backs, reset answers,
deaths and clock ticks, checked after every step against what the pool promises."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.driver.pool_book import PoolBook


def test_a_second_job_reuses_the_hosts_the_first_gave_back_once_they_are_reset():
    book = PoolBook(idle_timeout=60, spares=0)
    reused, new = book.lease("vertex", 3, now=0)
    assert reused == [] and len(new) == 3
    book.give_back(new, now=1)
    assert book.lease("vertex", 3, now=1) == ([], [3, 4, 5]), "hosts not yet reset are not leased"
    for number in new:
        book.reset_done(number, clean=number != 1, now=2)
    reused, fresh = book.lease("vertex", 3, now=2)
    assert sorted(reused) == [0, 2] and fresh == [6], "the host whose reset failed is gone"
    assert 1 not in book.hosts


def test_idle_hosts_go_after_the_pool_was_unused_for_the_timeout_spares_included():
    book = PoolBook(idle_timeout=10, spares=2)
    _, new = book.lease("progress", 1, now=0)
    spares = book.spares_to_start(now=0)
    assert len(spares) == 2 and book.spares_to_start(now=0) == [], "spares are started once"
    book.give_back(new, now=5)
    book.reset_done(new[0], True, now=5)
    assert book.to_release(now=14) == []
    assert sorted(book.to_release(now=15)) == sorted(new + spares)
    assert book.spares_to_start(now=16) == [], "an unused pool starts no spares"


def test_hosts_stuck_in_a_reset_are_dropped_after_the_timeout():
    book = PoolBook(idle_timeout=100, spares=0)
    _, new = book.lease("vertex", 2, now=0)
    book.give_back(new, now=1)
    book.reset_done(new[0], True, now=2)
    assert book.stuck(now=20, timeout=30) == []
    assert book.stuck(now=32, timeout=30) == [new[1]]


operations = st.lists(st.tuples(st.sampled_from(["lease", "give_back", "answer", "die", "tick", "spares", "stuck"]),
                                st.integers(0, 5), st.booleans()), max_size=60)


@settings(max_examples=300, deadline=None)
@given(operations, st.integers(0, 3), st.sampled_from([5.0, 50.0]))
def test_random_histories_keep_the_pools_promises(ops, spares, idle_timeout):
    book = PoolBook(idle_timeout=idle_timeout, spares=spares)
    now = 0.0
    jobs: list[list[int]] = []  # the hosts each running job holds
    killed: set[int] = set()
    for op, n, flag in ops:
        before = {number: record.state for number, record in book.hosts.items()}
        if op == "lease":
            reused, new = book.lease("vertex" if flag else "progress", n, now)
            assert all(before[number] == "idle" for number in reused), "only idle hosts are leased again"
            assert not set(new) & (set(before) | killed), "new hosts have new numbers"
            assert len(reused) + len(new) == n
            jobs.append(reused + new)
        elif op == "give_back" and jobs:
            book.give_back(jobs.pop(n % len(jobs)), now)
        elif op == "answer":
            for number, state in before.items():
                if state == "resetting":
                    book.reset_done(number, flag, now)
                elif state == "starting":
                    book.started(number, now)
        elif op == "die" and before:
            victim = sorted(before)[n % len(before)]
            book.drop(victim)
            killed.add(victim)
        elif op == "tick":
            now += n * 3
            released = book.to_release(now)
            assert all(before[number] in ("idle", "starting") for number in released), "leased hosts are never released"
            assert not released or now - book.last_used >= idle_timeout
            killed.update(released)
        elif op == "spares":
            book.spares_to_start(now)
        elif op == "stuck":
            killed.update(book.stuck(now, timeout=4))
        held = [number for job in jobs for number in job if number in book.hosts]
        assert len(held) == len(set(held)), "no host is held by two jobs"
        assert all(book.hosts[number].state == "leased" for number in held)
        assert not killed & set(book.hosts), "a dropped host never comes back"
        if op == "spares" and now - book.last_used < idle_timeout:
            ready = [r for r in book.hosts.values() if r.kind == "vertex" and r.state in ("idle", "starting")]
            assert len(ready) >= spares
