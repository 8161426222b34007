"""Which socket links a replica keeps when it is told its peers again in the same incarnation
(:meth:`RayTransport.connect <raytide.actors.ray_transport.RayTransport.connect>`), with real
sockets and no Ray: the handles are opaque values the transport only compares.

A link kept is the channel kept on its socket: frames written before still wait at the
receiver, and a Ray call sent instead could overtake them (the reorder of issue 76, which
``tests/ray/test_socket_hops.py`` reproduces end to end)."""

from __future__ import annotations

import raytide as rt
from raytide.actors.ray_transport import BY_RAY, RayTransport
from raytide.actors.socket_hops import Inbound, Outbound
from raytide.physical.plan import compile_plan
from raytide.physical.protocol import ProgressRoute, ReplicaKey


def _transport() -> RayTransport:
    flow = rt.Dataflow("links")
    flow.input("numbers").exchange(lambda x: x).map(lambda x: x, name="after").output("out")
    plan = compile_plan(flow, 2)
    return RayTransport(plan.replica_keys()[0], plan, "links", 4, None, sockets=True)


def test_a_peer_told_again_keeps_its_socket_and_a_replaced_or_gone_one_loses_it():
    inbound = Inbound("links/receiver", lambda frame: None)
    transport = _transport()
    same, replaced, gone = ReplicaKey("a", 0), ReplicaKey("a", 1), ReplicaKey("b", 0)
    try:
        links = {key: Outbound(str(key), inbound.path) for key in (same, replaced, gone)}
        transport.peers = {same: "host-1", replaced: "host-2", gone: "host-3", ReplicaKey("c", 0): "host-5"}
        transport.links = {**links, ReplicaKey("c", 0): BY_RAY}
        transport.route = ProgressRoute("progress")
        progress = transport.progress_link = Outbound("progress", inbound.path)
        transport.connect({same: "host-1", replaced: "host-4", ReplicaKey("c", 0): "host-5"}, set(),
                          ProgressRoute("progress"))
        assert transport.links == {same: links[same], ReplicaKey("c", 0): BY_RAY}
        assert links[same].socket.fileno() >= 0 and transport.progress_link is progress
        assert links[replaced].socket.fileno() == -1 and links[gone].socket.fileno() == -1  # closed
        transport.connect(transport.peers, set(), ProgressRoute("another progress actor"))
        assert transport.progress_link is None and progress.socket.fileno() == -1
        assert transport.links[same] is links[same]
    finally:
        transport.close_sockets()
        inbound.close()
