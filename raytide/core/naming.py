"""Stable default vertex ids: a function of where a vertex sits in the program, not of a counter.

Snapshot state is keyed by vertex id, and a savepoint must restore into the next run of
the same program, so a vertex built without ``name=`` gets an id that the same program
builds again in any process: its label plus a short hash of

* the label (the operator, e.g. ``map``, or ``<loop>.enter``),
* the ids and output ports of its inputs, in order,
* the loop it is in (None at the top level),
* its index among the siblings that share all three (``s.map(f)`` and ``s.map(g)``).

The inputs' ids already stand for everything upstream, so the id changes when the
program upstream of the vertex changes, and only then: adding an operator elsewhere
renames nothing. The hash is SHA-256 over a JSON encoding (never Python's ``hash()``,
which is salted per process, nor ``id()``).

>>> ids = VertexIds()
>>> first = ids.allocate("map", [("lines", 0)], None, taken=set())
>>> second = ids.allocate("map", [("lines", 0)], None, taken={first})
>>> first == VertexIds().allocate("map", [("lines", 0)], None, taken=set()), first != second
(True, True)
>>> first.startswith("map_"), len(first)
(True, 10)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Container, Sequence

#: Hex digits of the hash in a default id. With 16 million values per label a clash is
#: rare (about 3 in 100 among a thousand vertices of one label, 3 in 100,000 among
#: thirty) and harmless: the later vertex takes two more digits, deterministically.
HASH_DIGITS = 6


class VertexIds:
    """Hands out the default ids of one dataflow (it counts siblings, so one per dataflow)."""

    def __init__(self) -> None:
        self._siblings: dict[str, int] = {}

    def allocate(self, label: str, inputs: Sequence[tuple[str, int]], scope: str | None, taken: Container[str]) -> str:
        """The id of the next vertex ``label`` reading ``inputs`` (vertex id, port) inside loop ``scope``.

        Args:
            label: what the vertex is (``map``, ``loop.enter``, a Vertex class name).
            inputs: the (vertex id, output port) of each stream it reads, in order.
            scope: the name of the loop the vertex is in, None at the top level.
            taken: the ids already used in the dataflow; a clash of hash prefixes
                lengthens the hash rather than reuse one of them.
        """
        signature = json.dumps([label, [list(edge) for edge in inputs], scope])
        index = self._siblings.get(signature, 0)
        self._siblings[signature] = index + 1
        digest = hashlib.sha256(f"{signature}#{index}".encode()).hexdigest()
        width = HASH_DIGITS
        while f"{label}_{digest[:width]}" in taken and width < len(digest):
            width += 2
        return f"{label}_{digest[:width]}"
