"""Placing columnar keyed state in a dataflow: :meth:`Stream.keyed_columns` and :meth:`Stream.iterate_columns`.

Both build one :class:`~raytide.core.columnar.KeyedColumns` vertex whose inputs are
exchanged by integer columns. ``iterate_columns`` wraps it in a loop of its own: the
stream enters once per epoch (arranged by a key column, or as the first updates), output
0 of the step goes round to the next iteration (combined before the exchange) and the
other outputs leave the loop. The feedback is fused into the vertex's actor, so the rows a
replica sends to its own keys never leave its process.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from raytide.core.columnar import ColumnsSpec, KeyedColumns, StateColumn
from raytide.core.combine import check_combiners
from raytide.core.gated import TICKS, TOKEN_KEY, TOKENS, Entry, GatedColumns
from raytide.core.step import Step
from raytide.errors import GraphError

#: A :class:`~raytide.core.dataflow.Stream`: these builders are called by its methods, and the
#: dataflow module imports this one, so it is not imported back (not even for type checking).
AnyStream = Any

#: The channel of an input every replica reads whole.
BROADCAST = "broadcast"


def _spec(vertex: str, step: Callable[[Step], Any], key: str, state: Mapping[str, StateColumn],
          combine: Mapping[str, np.ufunc] | None, **more: Any) -> ColumnsSpec:
    """The vertex's spec, its combiners checked (before any data moves)."""
    if not isinstance(key, str):
        raise GraphError(f"vertex {vertex!r}: key must name an integer column, got {key!r}")
    check_combiners(combine or {}, f"vertex {vertex!r}")
    return ColumnsSpec(step, key, dict(state), dict(combine or {}), **more)


def keyed_columns(stream: AnyStream, step: Callable[[Step], Any], key: str, state: Mapping[str, StateColumn],
                  combine: Mapping[str, np.ufunc] | None, arranged: AnyStream | None, arrange_key: str,
                  outputs: int, exchange: bool, name: str | None, parallelism: int | None) -> list[AnyStream]:
    """See :meth:`Stream.keyed_columns`; returns the output streams."""
    inputs = [stream] if arranged is None else [stream, arranged]
    flow = stream.flow
    vname = name or flow._fresh("keyed_columns", inputs, flow._common_scope(inputs, "keyed_columns"))
    spec = _spec(vname, step, key, state, combine, arranged={} if arranged is None else {1: arrange_key},
                 outputs=outputs)
    keys = [key] if arranged is None else [key, arrange_key]
    return flow.vertex(lambda: KeyedColumns(spec), inputs, outputs, exchange=keys if exchange else None, name=vname,
                       parallelism=parallelism)


def iterate_columns(stream: AnyStream, step: Callable[[Step], Any], key: str, state: Mapping[str, StateColumn],
                    combine: Mapping[str, np.ufunc] | None, arrange: str | None, outputs: int,
                    name: str | None, finish: Callable[[Step], Any] | None = None,
                    repeatable_rounds: bool = False, diff: str | None = None) -> list[AnyStream]:
    """See :meth:`Stream.iterate_columns`; returns the streams leaving the loop.

    The state vertex (:class:`~raytide.core.gated.GatedColumns`) reads the entering stream
    (port 0), the next round's updates (1, the feedback), a tick per entering batch (2,
    broadcast) and the replicas' tokens (3, round the loop to every replica): its epoch gate.
    """
    if outputs < 1:
        raise GraphError(f"iterate_columns {name or ''!r}: outputs must be at least 1, got {outputs}")
    flow = stream.flow
    loop = flow._new_loop("iterate_columns", name, stream.scope, [stream])
    back, tokens = loop.feedback(name=f"{loop.name}.next"), loop.feedback(name=f"{loop.name}.tokens")
    vname = loop.name  # the vertex holding the state is named as its loop (loop names are apart)
    spec = _spec(vname, step, key, state, combine, arranged={} if arrange is None else {0: arrange},
                 outputs=1 + outputs, send_combine=frozenset({0}) if combine else frozenset(),
                 ticks=frozenset({TICKS, TOKENS}), finish=finish, repeatable_rounds=repeatable_rounds,
                 netted={} if diff is None or arrange is None else {0: diff})
    entered, ticks = flow.vertex(Entry, [loop.enter(stream)], 2, name=f"{loop.name}.tick")  # fused behind the stream
    made = flow.vertex(lambda: GatedColumns(spec), [entered, back.stream, ticks, tokens.stream],
                       2 + outputs, exchange=[arrange or key, key, BROADCAST, TOKEN_KEY], name=vname)
    back.connect(made[0])
    tokens.connect(made[-1])
    return [loop.leave(out) for out in made[1:-1]]

