"""Whether a growing stepped rescale can add its replicas without a new incarnation (pure;
docs/rescaling.md, "A growing switch without a new incarnation").

The joined replicas own no key group until the plan's steps, so the job can go on at the old
width while they join; but every replica's core was built from the old width's plan, and what
reads that width must take the new one in place (:meth:`ReplicaCore.widen
<raytide.engine.replica.ReplicaCore.widen>`). That is simple only where the change reaches no
replica's *inputs*: the senders into the vertex send their markers and epoch tokens to the
joined replicas too, and the vertex's old replicas see a wider context; nothing else moves.
:func:`join_refusal` says where that does not hold, and the driver then switches with a new
incarnation (its record says why). A shrink's retiring switch is the mirror
(:func:`retire_refusal`): once the plan's steps have emptied the retiring replicas, they leave
the running job where the same holds.
"""

from __future__ import annotations

from raytide.engine import epoch_tokens
from raytide.physical.plan import PhysicalPlan

__all__ = ["join_refusal", "retire_refusal"]


def join_refusal(old: PhysicalPlan, new: PhysicalPlan, vertex: str) -> str | None:
    """Why ``vertex`` (keyed, the only chain whose width changes from ``old`` to ``new``) cannot
    join its new replicas in place; None: it can.

    Refused: a narrowing; a chain that sends to another actor (its receivers' input channels,
    barrier alignment and epoch tokens would change); a width that changes which edges use epoch
    tokens, which chains ride with them or which inputs send proxy tokens (both sides of an edge
    must switch those at one epoch)."""
    if new.width(vertex) <= old.width(vertex):
        return f"vertex {vertex!r} does not grow ({old.width(vertex)} -> {new.width(vertex)} replicas)"
    return _in_place_refusal(old, new, vertex)


def retire_refusal(old: PhysicalPlan, new: PhysicalPlan, vertex: str) -> str | None:
    """Why ``vertex``'s retiring replicas (those of ``old`` beyond ``new``'s width, emptied by the
    plan's steps) cannot leave the running job in place; None: they can. The mirror of
    :func:`join_refusal`: a growth, or what that refuses (a change the receivers would see)."""
    if new.width(vertex) >= old.width(vertex):
        return f"vertex {vertex!r} does not shrink ({old.width(vertex)} -> {new.width(vertex)} replicas)"
    return _in_place_refusal(old, new, vertex)


def _in_place_refusal(old: PhysicalPlan, new: PhysicalPlan, vertex: str) -> str | None:
    """What both switches in place refuse: a chain of ``vertex`` that sends to other actors, and a
    width that changes the job's epoch tokens."""
    chain = new.chain_of(vertex)
    sends = sorted({consumer.vertex for name in chain.vertices for port in range(new.vertex(name).outputs)
                    for consumer in new.consumers_of(name, port) if not new.is_fused(consumer)})
    if sends:
        return (f"the chain of {vertex!r} sends to {sends} in other replicas, whose input channels would change with "
                f"its width")
    if epoch_tokens.receivers(old) != epoch_tokens.receivers(new) or epoch_tokens.senders(old) != epoch_tokens.senders(new):
        return f"the width of {vertex!r} changes which vertices take epoch tokens"
    if epoch_tokens.proxying_inputs(old) != epoch_tokens.proxying_inputs(new) or any(
            epoch_tokens.rides_with_tokens(old, c.name) != epoch_tokens.rides_with_tokens(new, c.name) for c in new.chains):
        return f"the width of {vertex!r} changes which inputs send proxy tokens or ride with their tokens"
    return None
