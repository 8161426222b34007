"""The laid-out graph (:mod:`raytide.ui.layout`) drawn as SVG, with each vertex's figures from the
page's document (:mod:`raytide.ui.document`): the page shows it, ``job.ui_snapshot(path)`` saves it.

A vertex is a box with its name (as in the program), ``×n`` its parallelism, its records in
and out per second (in all, from a single reading: a notebook's ``job``), queued work and
frontier lag; its fill goes from green to red with the
busy share of its chain's busiest replica, and the bottleneck has a thick red border. A
chain (fused vertices, one actor per replica) is a dashed box around its vertices; a
pipeline edge is a thin arrow, an exchange a thick one labelled ``exchange``, a broadcast a
dotted one; a loop's back edge (out of its feedback vertex) is an arc under the picture,
labelled ``loop``::

    >>> svg = render({"plan": "p", "nodes": [], "edges": [], "chains": [], "width": 10, "height": 10}, {})
    >>> svg.startswith("<svg") and svg.endswith("</svg>")
    True
"""

from __future__ import annotations

import html
from typing import Any

#: Edge styles by channel kind: stroke width and dash pattern.
_EDGE_STYLE = {"pipeline": ("1.5", ""), "exchange": ("3", ""), "broadcast": ("2", "2 3")}


def _count(value: float | None) -> str:
    """A number for a label: ``1.2k``; ``–`` when unknown."""
    if value is None:
        return "–"
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.1f}{unit}"
    return f"{value:.0f}"


def _rate(value: float | None) -> str:
    """A rate for a label: ``1.2k/s``; ``–`` when unknown."""
    return "–" if value is None else _count(value) + "/s"


def _flow(figures: dict[str, Any]) -> str:
    """A vertex's records in and out: per second, or, with one reading only (no rates), in all."""
    if figures.get("in_per_s") is None and figures.get("records_in") is not None:
        return f"{_count(figures['records_in'])} in · {_count(figures.get('records_out'))} out"
    return f"in {_rate(figures.get('in_per_s'))} · out {_rate(figures.get('out_per_s'))}"


def _short(name: str, most: int = 21) -> str:
    """``name`` cut to fit a box (the whole name is the box's tooltip and its ``data-vertex``)."""
    return name if len(name) <= most else name[:most - 1] + "…"


def busy_hue(share: float) -> float:
    """The hue (degrees) of a vertex whose busiest replica is busy ``share`` of the time: 120 (green, idle) to 0 (red)."""
    return 120 * (1 - min(1.0, max(0.0, share)))


def busy_colour(share: float | None) -> str:
    """Fill of a vertex whose busiest replica is busy ``share`` of the time: green (idle) to red (always busy)."""
    if share is None:
        return "#eeeeee"
    return f"hsl({busy_hue(share):.0f}, 70%, 82%)"


def labels(node: dict[str, Any], figures: dict[str, Any], most: int = 21) -> dict[str, str]:
    """The texts of a vertex's box (the SVG's and the PNG's, :mod:`raytide.ui.figures`): its name (cut
    to ``most`` characters, ``↻`` inside a loop), ``×n`` its width now, its rates (its records, with no
    rates yet), its queued work and frontier lag."""
    lag, queued = figures.get("frontier_lag"), figures.get("queued")
    return {"name": _short(node["name"], most) + (" ↻" if node["cyclic"] else ""),
            "width": f"×{figures.get('parallelism', node['parallelism'])}",
            "rates": _flow(figures),
            "queued": f"queued {'–' if queued is None else queued}" + (f" · lag {lag}" if lag is not None else "")}


#: A bottleneck's tooltip.
BOTTLENECK_TIP = "bottleneck: its chain's replicas are the busiest"


def box(node: dict[str, Any], figures: dict[str, Any]) -> dict[str, str]:
    """What a vertex's box shows that changes as the job runs: its texts (:func:`labels` but the name),
    its records in and out per second as numbers (``in``, ``out``: the ``data-in`` and ``data-out`` of its
    rates), its fill, its border and tooltip (the bottleneck's). The SVG draws it; the page updates a box
    it drew with what changed, without drawing the graph again::

        >>> node = {"name": "count", "role": "vertex", "parallelism": 2, "cyclic": False}
        >>> box(node, {"in_per_s": 1500.0, "out_per_s": 30.0, "busy": 1.0, "bottleneck": True})["stroke_width"]
        '4'
        >>> box(node, {})["rates"], box(node, {})["fill"], box(node, {})["tip"]
        ('in – · out –', '#eeeeee', '')
    """
    bottleneck = bool(figures.get("bottleneck"))
    text = labels(node, figures)
    return {"width": text["width"], "rates": text["rates"], "queued": text["queued"],
            "in": f"{figures.get('in_per_s') or 0:.1f}", "out": f"{figures.get('out_per_s') or 0:.1f}",
            "fill": busy_colour(figures.get("busy")), "stroke": "#c0392b" if bottleneck else "#555",
            "stroke_width": "4" if bottleneck else "1.2", "tip": BOTTLENECK_TIP if bottleneck else ""}


def _node(node: dict[str, Any], figures: dict[str, Any]) -> str:
    x, y, w, h = node["x"], node["y"], node["w"], node["h"]
    name = html.escape(node["name"])
    shown = {key: html.escape(value) for key, value in box(node, figures).items()}
    title = html.escape(labels(node, figures)["name"])
    return (f'<g class="vertex" data-vertex="{name}" data-role="{node["role"]}">'
            f'<rect x="{x}" y="{y}" width="{w}" height="{h}" rx="6" fill="{shown["fill"]}" stroke="{shown["stroke"]}" '
            f'stroke-width="{shown["stroke_width"]}"><title>{shown["tip"]}</title></rect>'
            f'<text class="vname" x="{x + 6}" y="{y + 15}" font-size="12" font-weight="bold">{title}<title>{name}</title></text>'
            f'<text class="width" x="{x + w - 6}" y="{y + 15}" font-size="12" text-anchor="end">{shown["width"]}</text>'
            f'<text class="rates" x="{x + 6}" y="{y + 33}" font-size="11" data-in="{shown["in"]}" '
            f'data-out="{shown["out"]}">{shown["rates"]}</text>'
            f'<text class="queued" x="{x + 6}" y="{y + 50}" font-size="11">{shown["queued"]}</text></g>')


def boxes(graph: dict[str, Any], vertices: dict[str, dict[str, Any]]) -> dict[str, dict[str, str]]:
    """:func:`box` of every vertex of ``graph`` with its figures in ``vertices``, by name."""
    return {node["name"]: box(node, vertices.get(node["name"], {})) for node in graph["nodes"]}


def _edge(edge: dict[str, Any], at: dict[str, dict[str, Any]], bottom: float) -> str:
    source, target = at[edge["source"]], at[edge["target"]]
    width, dash = _EDGE_STYLE.get(edge["kind"], ("1.5", ""))
    dashed = f' stroke-dasharray="{dash}"' if dash else ""
    x0, y0 = source["x"] + source["w"], source["y"] + source["h"] / 2
    x1, y1 = target["x"], target["y"] + target["h"] / 2
    if edge["back"]:  # a loop: from under the feedback vertex round to under the loop's entry
        sx, tx = source["x"] + source["w"] / 2, target["x"] + target["w"] / 2
        path = f'M {sx} {source["y"] + source["h"]} C {sx} {bottom}, {tx} {bottom}, {tx} {target["y"] + target["h"]}'
        return (f'<g class="edge loop"><path d="{path}" fill="none" stroke="#8e44ad" stroke-width="2" '
                f'marker-end="url(#arrow-loop)"/><text x="{(sx + tx) / 2}" y="{bottom - 6}" font-size="11" '
                f'text-anchor="middle" fill="#8e44ad">loop</text></g>')
    mid = (x0 + x1) / 2
    path = f"M {x0} {y0} C {mid} {y0}, {mid} {y1}, {x1} {y1}"
    label = (f'<text x="{mid}" y="{(y0 + y1) / 2 - 5}" font-size="10" text-anchor="middle" fill="#2c3e50">'
             f'{edge["kind"]}</text>') if edge["kind"] != "pipeline" else ""
    return (f'<g class="edge {edge["kind"]}"><path d="{path}" fill="none" stroke="#2c3e50" stroke-width="{width}"'
            f'{dashed} marker-end="url(#arrow)"/>{label}</g>')


def render(graph: dict[str, Any], vertices: dict[str, dict[str, Any]]) -> str:
    """SVG text of ``graph`` (a :func:`~raytide.ui.layout.layout`) with the figures of
    ``vertices`` (per vertex name, as in the page's document; missing figures show as ``–``)."""
    at = {node["name"]: node for node in graph["nodes"]}
    bottom = graph["height"] - 14
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" class="dataflow" width="{graph["width"]}" '
             f'height="{graph["height"]}" viewBox="0 0 {graph["width"]} {graph["height"]}" font-family="sans-serif">',
             '<defs><marker id="arrow" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#2c3e50"/></marker>'
             '<marker id="arrow-loop" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
             'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z" fill="#8e44ad"/></marker></defs>',
             f'<rect width="{graph["width"]}" height="{graph["height"]}" fill="white"/>']
    for chain in graph["chains"]:
        if len(chain["vertices"]) > 1:
            parts.append(f'<rect class="chain" data-chain="{html.escape(chain["name"])}" x="{chain["x"]}" '
                         f'y="{chain["y"]}" width="{chain["w"]}" height="{chain["h"]}" rx="10" fill="#f4f6fb" '
                         f'stroke="#7f8c8d" stroke-dasharray="5 4"><title>chain (one actor per replica): '
                         f'{html.escape(chain["name"])}</title></rect>')
    parts += [_edge(edge, at, bottom) for edge in graph["edges"] if edge["source"] in at and edge["target"] in at]
    parts += [_node(node, vertices.get(node["name"], {})) for node in graph["nodes"]]
    parts.append("</svg>")
    return "".join(parts)
