"""Control markers: messages injected at the inputs that travel in band on every channel.

A marker reaches a vertex after every record sent to it before the marker, on every
channel (the vertex aligns its input channels on the marker as on a snapshot barrier,
see :mod:`raytide.snapshots.barriers`). When the chain hosting a vertex has aligned on
a marker it carries out the marker's actions and forwards it, so everything upstream
of the marker happened before and everything downstream after: this is what snapshot
barriers use, and what rescaling uses to switch an exchange's routing table at one
consistent point.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Hashable

from raytide.core.keygroups import KeyGroupAssignment

#: A channel into a vertex input: (source vertex, source output, sender replica, target port).
ChannelId = tuple[str, int, int, int]


@dataclass(frozen=True)
class Marker:
    """A control marker.

    Attributes:
        marker_id: increasing id (markers share the id space of snapshot barriers).
        reroute: routing tables to switch to, per ``(vertex, output port, target vertex)``
            exchange edge; the sender switches when it passes the marker.
    """

    marker_id: int
    reroute: dict[tuple[str, int, str], KeyGroupAssignment] = field(default_factory=dict)

    def __hash__(self) -> int:
        return hash(self.marker_id)


@dataclass
class MarkerRecord:
    """What a replica saw when a marker passed: records received per hosted vertex by then."""

    marker_id: int
    records_in: dict[Hashable, int]
