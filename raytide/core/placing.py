"""A stream's place in a dataflow (its vertex, output port and loop) and how an operator
places the next vertex after it: :class:`PlacedStream`, the base of
:class:`~raytide.core.dataflow.Stream`.

Here, below the builder (:mod:`raytide.core.dataflow` imports this module, never the other
way), ``flow`` is typed loosely: :class:`~raytide.core.dataflow.Stream` types it as the
:class:`~raytide.core.dataflow.Dataflow` it is.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Self

from raytide.core.logical import Channel, ExchangeKey, InputEdge, LogicalVertex, VertexFactory
from raytide.core.operators import BatchFunction
from raytide.core.vertex import Vertex

#: The channel of an edge that names none: replica ``i`` to replica ``i``.
PIPELINE = Channel()


@dataclass(frozen=True)
class PlacedStream:
    """Output port ``port`` of vertex ``vertex`` of dataflow ``flow``, inside loop ``scope`` (None: outside any)."""

    flow: Any
    vertex: str
    port: int
    scope: Any = None

    @property
    def depth(self) -> int:
        """How many loop contexts the stream is inside."""
        return self.scope.depth if self.scope else 0

    # -- placing vertices ------------------------------------------------------------

    def unary(
        self,
        factory: type[Vertex] | VertexFactory,
        *,
        exchange: ExchangeKey | None = None,
        name: str | None = None,
        parallelism: int | None = None,
    ) -> Self:
        """Place a one-input, one-output vertex; ``exchange`` partitions its input by key."""
        return self.flow.vertex(factory, [self], 1, exchange=[exchange], name=name, parallelism=parallelism)[0]

    def _then(self, label: str, factory: VertexFactory, channel: Channel = PIPELINE, name: str | None = None,
              parallelism: int | None = None, terminal: bool = False, notifies: bool = True,
              settles_with_input: bool = False) -> Self:
        vname = name or self.flow._fresh(label, [self], self.scope)
        vertex = LogicalVertex(vname, factory, ((InputEdge(self.vertex, self.port, channel),),), 1, self.depth,
                               parallelism=parallelism, terminal=terminal, notifies=notifies,
                               settles_with_input=settles_with_input)
        self.flow._add(vertex)
        return type(self)(self.flow, vname, 0, self.scope)

    def _per_batch(self, label: str, fn: Callable[[Any], Any], channel: Channel = PIPELINE, name: str | None = None,
                   parallelism: int | None = None, terminal: bool = False) -> Self:
        """A :class:`BatchFunction` vertex running ``fn`` on each batch (it never asks for a notification)."""
        return self._then(label, lambda: BatchFunction(fn), channel, name, parallelism, terminal, notifies=False)

