"""A physical plan laid out as a picture: vertices in columns by their distance from the inputs,
a chain's fused vertices side by side on one row, loops' back edges apart.

The layout is plain data (``{"nodes": [...], "edges": [...], "chains": [...], "width", "height"}``)
that the page and :mod:`raytide.ui.svg` both read::

    >>> import raytide as rt
    >>> from raytide.physical.plan import compile_plan
    >>> flow = rt.Dataflow("words")
    >>> flow.input("lines").flat_map(str.split, name="split").count_by_key(lambda w: w, name="count").output("counts")
    >>> graph = layout(compile_plan(flow, 2))
    >>> [(n["name"], n["column"], n["row"]) for n in graph["nodes"]]
    [('lines', 0, 0), ('split', 1, 0), ('count.combine', 2, 0), ('count', 3, 0), ('counts', 4, 0)]
    >>> [(e["source"], e["target"], e["kind"]) for e in graph["edges"] if not e["fused"]]
    [('count.combine', 'count', 'exchange')]
"""

from __future__ import annotations

from typing import Any

from raytide.physical.plan import PhysicalPlan

#: Pixels: a vertex box, and the gaps between columns and rows.
NODE_W, NODE_H, GAP_X, GAP_Y, MARGIN = 170, 62, 50, 40, 24


def _edges(plan: PhysicalPlan) -> list[dict[str, Any]]:
    """Every edge between two vertices: its channel's kind, whether it closes a loop (out of a
    feedback vertex) and whether it stays inside one chain (fused: no Ray call)."""
    edges = []
    for name, vertex in plan.vertices.items():
        for port, inputs in enumerate(vertex.inputs):
            for edge in inputs:
                back = plan.vertex(edge.source).role == "feedback"
                fused = plan.vertex(edge.source).chain == vertex.chain
                edges.append({"source": edge.source, "target": name, "port": port, "kind": edge.channel.kind,
                              "back": back, "fused": fused})
    return edges


def _columns(plan: PhysicalPlan, edges: list[dict[str, Any]]) -> dict[str, int]:
    """Each vertex's column: the longest path to it from an input, back edges left out (a DAG)."""
    column: dict[str, int] = {}
    upstream: dict[str, list[str]] = {name: [] for name in plan.vertices}
    for edge in edges:
        if not edge["back"]:
            upstream[edge["target"]].append(edge["source"])

    def of(name: str, seen: frozenset[str]) -> int:
        if name not in column:
            before = [of(source, seen | {name}) for source in upstream[name] if source not in seen]
            column[name] = 1 + max(before, default=-1)
        return column[name]

    for name in plan.vertices:
        of(name, frozenset())
    return column


def _rows(plan: PhysicalPlan, edges: list[dict[str, Any]], column: dict[str, int]) -> dict[str, int]:
    """Each vertex's row: a fused vertex takes its upstream's row if that row is free in its
    column, any other the first free row at or below its upstreams' lowest."""
    row: dict[str, int] = {}
    taken: set[tuple[int, int]] = set()
    upstream: dict[str, list[str]] = {name: [] for name in plan.vertices}
    for edge in edges:
        if not edge["back"]:
            upstream[edge["target"]].append(edge["source"])
    for name in sorted(plan.vertices, key=lambda n: column[n]):
        placed = [row[s] for s in upstream[name] if s in row]
        fused = [row[s] for s in upstream[name] if s in row and plan.vertex(s).chain == plan.vertex(name).chain]
        wanted = fused[0] if fused else min(placed, default=0)
        while (column[name], wanted) in taken:
            wanted += 1
        row[name] = wanted
        taken.add((column[name], wanted))
    return row


def layout(plan: PhysicalPlan) -> dict[str, Any]:
    """``plan`` laid out: nodes with their name, role, chain, parallelism, whether they sit on
    a loop (``cyclic``), their column and row and box (``x``, ``y``, ``w``, ``h``); edges; chains
    with the box around their vertices; the picture's size."""
    edges = _edges(plan)
    column = _columns(plan, edges)
    row = _rows(plan, edges, column)
    nodes: list[dict[str, Any]] = [{"name": name, "role": v.role, "chain": v.chain, "parallelism": v.parallelism, "cyclic": v.cyclic,
              "column": column[name], "row": row[name], "x": MARGIN + column[name] * (NODE_W + GAP_X),
              "y": MARGIN + row[name] * (NODE_H + GAP_Y), "w": NODE_W, "h": NODE_H}
             for name, v in plan.vertices.items()]
    at = {node["name"]: node for node in nodes}
    chains = []
    for chain in plan.chains:
        boxes = [at[name] for name in chain.vertices]
        x0, y0 = min(b["x"] for b in boxes) - 8, min(b["y"] for b in boxes) - 8
        x1, y1 = max(b["x"] + b["w"] for b in boxes) + 8, max(b["y"] + b["h"] for b in boxes) + 8
        chains.append({"name": chain.name, "vertices": list(chain.vertices), "parallelism": chain.parallelism,
                       "x": x0, "y": y0, "w": x1 - x0, "h": y1 - y0})
    loops = any(edge["back"] for edge in edges)
    width = MARGIN * 2 + (max(column.values(), default=0) + 1) * (NODE_W + GAP_X) - GAP_X
    height = MARGIN * 2 + (max(row.values(), default=0) + 1) * (NODE_H + GAP_Y) - GAP_Y + (50 if loops else 0)
    return {"plan": plan.name, "nodes": nodes, "edges": edges, "chains": chains, "width": width, "height": height}
