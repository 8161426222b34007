"""The tree of progress relays (:mod:`raytide.physical.relay_tree`): which nodes' relays
forward to a group's relay, and how the pushes go down the same tree, against brute force."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from raytide.physical.protocol import ReplicaKey, StatusPush
from raytide.physical.relay_tree import RELAY_FANIN, PushBundle, bundled, delivers_to, push_paths, relay_groups


@given(nodes=st.integers(0, 300), fanin=st.integers(2, 12))
def test_the_progress_actor_has_one_caller_per_group_each_of_at_most_fanin_nodes(nodes, fanin):
    relays = [f"node {n}" for n in range(nodes)]
    groups = relay_groups(relays, fanin)
    callers = [relay for relay in relays if relay not in groups]  # those that call the progress actor
    assert len(callers) == (nodes if nodes <= fanin else math.ceil(nodes / fanin))
    assert set(groups.values()) <= set(callers)  # one level: a group's relay forwards to nobody else
    for head in callers:
        members = [relay for relay, to in groups.items() if to == head]
        assert len(members) < fanin
        # a group is a run of neighbouring nodes starting at its relay
        assert [relays.index(member) for member in members] == list(range(relays.index(head) + 1,
                                                                           relays.index(head) + 1 + len(members)))


def test_up_to_fanin_nodes_have_no_groups_and_64_nodes_give_the_progress_actor_8_callers():
    relays = list(range(64))
    assert relay_groups(relays[:RELAY_FANIN]) == {}
    assert RELAY_FANIN == 8 and len(set(relay_groups(relays).values())) == 8


def delivered(direct: list, bundles: dict[ReplicaKey, PushBundle], paths: dict) -> list[tuple[ReplicaKey, StatusPush]]:
    """What the replicas get, walking the bundles as the relays do, checking that each push
    reaches its replica by its path (or directly, without one)."""
    got = [(key, push) for key, push in direct if not paths.get(key)]
    assert len(got) == len(direct)

    def walk(bundle: PushBundle, path: tuple) -> None:
        for key, push in bundle.pushes:
            assert paths[key] == path
            got.append((key, push))
        for relay, below in bundle.via.items():
            walk(below, (*path, relay))

    for relay, bundle in bundles.items():
        walk(bundle, (relay,))
    return got


@given(replicas=st.integers(1, 40), nodes=st.integers(1, 12), fanin=st.integers(2, 4),
       pushed=st.lists(st.integers(0, 39), max_size=60), relayed=st.booleans())
def test_each_push_reaches_its_replica_once_down_its_path_in_the_order_made(replicas, nodes, fanin, pushed, relayed):
    keys = [ReplicaKey("c", r) for r in range(replicas)]
    relay_of = {key: keys[index % nodes] for index, key in enumerate(keys)} if relayed else {}
    paths = push_paths(relay_of, relay_groups(keys[:nodes], fanin))
    pushes = [(keys[n % replicas], StatusPush({}, number)) for number, n in enumerate(pushed)]
    direct, bundles = bundled(pushes, paths)
    got = delivered(direct, bundles, paths)
    assert sorted(got, key=lambda kv: kv[1].acked) == pushes  # each once
    for key in keys:  # each replica's in the order they were made
        assert [push for to, push in got if to == key] == [push for to, push in pushes if to == key]
    assert len(bundles) <= len(set(relay_groups(keys[:nodes], fanin).values()) | set(keys[:nodes]))


def test_a_bundle_per_group_and_none_without_relays():
    keys = [ReplicaKey("c", r) for r in range(8)]
    relay_of = {key: keys[index % 4] for index, key in enumerate(keys)}  # 4 nodes, a group per two
    paths = push_paths(relay_of, relay_groups(keys[:4], 2))
    assert paths[keys[5]] == (keys[0], keys[1]) and paths[keys[4]] == (keys[0],)
    direct, bundles = bundled([(key, StatusPush({}, 0)) for key in keys], paths)
    assert direct == [] and set(bundles) == {keys[0], keys[2]}
    assert bundled([(keys[0], StatusPush({}, 0))], {}) == ([(keys[0], StatusPush({}, 0))], {})


def addressed(relay: ReplicaKey, bundles: dict[ReplicaKey, PushBundle]) -> set[ReplicaKey]:
    """Whom ``relay`` calls delivering ``bundles`` (its ``fan_out``): brute force, walking the tree."""
    found: set[ReplicaKey] = set()

    def walk(at: ReplicaKey, bundle: PushBundle) -> None:
        if at == relay:
            found.update(key for key, _ in bundle.pushes)
            found.update(bundle.via)
        for below, inner in bundle.via.items():
            walk(below, inner)

    for top, bundle in bundles.items():
        walk(top, bundle)
    return found


@given(replicas=st.integers(1, 40), nodes=st.integers(1, 12), fanin=st.integers(2, 4), relayed=st.booleans())
def test_a_relay_is_given_the_handles_of_exactly_those_it_delivers_to(replicas, nodes, fanin, relayed):
    keys = [ReplicaKey("c", r) for r in range(replicas)]
    relay_of = {key: keys[index % nodes] for index, key in enumerate(keys)} if relayed else {}
    upstreams = relay_groups(keys[:nodes], fanin) if relayed else {}
    _, bundles = bundled([(key, StatusPush({}, 0)) for key in keys], push_paths(relay_of, upstreams))
    for key in keys:  # a push to every replica: each relay calls everyone it may ever call
        assert delivers_to(key, relay_of, upstreams) == addressed(key, bundles)
