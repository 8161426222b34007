"""The live view's pictures drawn with matplotlib: the laid-out graph (:mod:`raytide.ui.layout`) as
a PNG, the same boxes, texts, chains, edges and loops as its SVG (:mod:`raytide.ui.svg`), for
``job.ui_snapshot("graph.png")``; and the frontier of each output over time, for
``job.plot_frontier()`` in a notebook.

matplotlib is not a dependency of raytide: it is imported when a picture is drawn, and its
absence raises an ImportError that says ``pip install matplotlib``. Nothing here uses
``pyplot`` (no global figure state, no GUI backend): a figure is a ``Figure`` drawn by Agg,
which a notebook shows inline (its ``_repr_png_``).
The graph's pixels are the SVG's (``dpi`` per 100 of them), so text sizes are its pixel
sizes at 100 pixels an inch::

    >>> _points(12)
    8.64
"""

from __future__ import annotations

import colorsys
import functools
import io
from typing import Any

from raytide.ui.svg import busy_hue, labels

#: Matplotlib's line styles of the SVG's edge kinds (width in the SVG's pixels, dash).
_EDGE_STYLE = {"pipeline": (1.5, "solid"), "exchange": (3.0, "solid"), "broadcast": (2.0, "dotted")}
_INK, _LOOP, _RED = "#2c3e50", "#8e44ad", "#c0392b"


def matplotlib_or_raise(what: str) -> Any:
    """The ``matplotlib`` module, or an ImportError saying that ``what`` needs it and how to install it."""
    try:
        import matplotlib
        from matplotlib.backends import backend_agg  # noqa: F401  (Agg draws without a display)
    except ImportError as error:
        raise ImportError(f"{what} draws with matplotlib, which is not installed: pip install matplotlib") from error
    return matplotlib


def _points(pixels: float) -> float:
    """A size in the SVG's pixels as points, at 100 pixels an inch."""
    return round(pixels * 0.72, 2)


def _fill(share: float | None) -> tuple[float, float, float]:
    """The SVG's ``busy_colour`` as RGB: hue from the busy share, 70% saturation, 82% lightness; grey if unknown."""
    if share is None:
        return (0.933, 0.933, 0.933)
    return colorsys.hls_to_rgb(busy_hue(share) / 360, 0.82, 0.7)


def graph_figure(graph: dict[str, Any], vertices: dict[str, dict[str, Any]], dpi: int = 144) -> Any:
    """A matplotlib ``Figure`` of ``graph`` with the figures of ``vertices``, as :func:`raytide.ui.svg.render` draws it."""
    matplotlib_or_raise("saving the graph as PNG")
    from matplotlib.figure import Figure

    width, height = graph["width"], graph["height"]
    figure = Figure(figsize=(width / 100, height / 100), dpi=dpi, facecolor="white")
    axes = figure.add_axes((0, 0, 1, 1))
    axes.set_xlim(0, width)
    axes.set_ylim(height, 0)  # y down, as in the SVG
    axes.axis("off")
    at = {node["name"]: node for node in graph["nodes"]}
    for chain in graph["chains"]:
        if len(chain["vertices"]) > 1:
            _box(axes, chain, "#f4f6fb", "#7f8c8d", 1.0, rounding=10, dashed=True)
    for edge in graph["edges"]:
        if edge["source"] in at and edge["target"] in at:
            _edge(axes, edge, at[edge["source"]], at[edge["target"]], height - 14)
    for node in graph["nodes"]:
        _vertex(axes, node, vertices.get(node["name"], {}))
    return figure


def save_graph_png(graph: dict[str, Any], vertices: dict[str, dict[str, Any]], path: str, dpi: int = 144) -> None:
    """Write :func:`graph_figure` to ``path`` as PNG."""
    graph_figure(graph, vertices, dpi).savefig(path, format="png", facecolor="white")


def _box(axes: Any, box: dict[str, Any], fill: Any, edge: str, line: float, rounding: float, dashed: bool = False) -> None:
    from matplotlib.patches import FancyBboxPatch

    axes.add_patch(FancyBboxPatch((box["x"], box["y"]), box["w"], box["h"], boxstyle=f"round,pad=0,rounding_size={rounding}",
                                  facecolor=fill, edgecolor=edge, linewidth=_points(line),
                                  linestyle=(0, (5, 4)) if dashed else "solid"))


def _vertex(axes: Any, node: dict[str, Any], figures: dict[str, Any]) -> None:
    x, y, w = node["x"], node["y"], node["w"]
    bottleneck = bool(figures.get("bottleneck"))
    _box(axes, node, _fill(figures.get("busy")), _RED if bottleneck else "#555", 4 if bottleneck else 1.2, rounding=6)
    text = labels(node, figures, most=17)  # matplotlib's bold sans is wider than a browser's
    axes.text(x + 6, y + 15, text["name"], fontsize=_points(12), fontweight="bold", va="baseline")
    axes.text(x + w - 6, y + 15, text["width"], fontsize=_points(12), ha="right", va="baseline")
    axes.text(x + 6, y + 33, text["rates"], fontsize=_points(11), va="baseline")
    axes.text(x + 6, y + 50, text["queued"], fontsize=_points(11), va="baseline")


def _edge(axes: Any, edge: dict[str, Any], source: dict[str, Any], target: dict[str, Any], bottom: float) -> None:
    """An edge as the SVG draws it: a cubic curve from box to box, or a loop's arc under the picture."""
    from matplotlib.patches import FancyArrowPatch
    from matplotlib.path import Path

    if edge["back"]:
        sx, tx = source["x"] + source["w"] / 2, target["x"] + target["w"] / 2
        points = [(sx, source["y"] + source["h"]), (sx, bottom), (tx, bottom), (tx, target["y"] + target["h"])]
        colour, line, style = _LOOP, 2.0, "solid"
        axes.text((sx + tx) / 2, bottom - 6, "loop", fontsize=_points(11), ha="center", color=_LOOP)
    else:
        x0, y0 = source["x"] + source["w"], source["y"] + source["h"] / 2
        x1, y1 = target["x"], target["y"] + target["h"] / 2
        mid = (x0 + x1) / 2
        points = [(x0, y0), (mid, y0), (mid, y1), (x1, y1)]
        colour, (line, style) = _INK, _EDGE_STYLE.get(edge["kind"], (1.5, "solid"))
        if edge["kind"] != "pipeline":
            axes.text(mid, (y0 + y1) / 2 - 5, edge["kind"], fontsize=_points(10), ha="center", color=_INK)
    path = Path(points, [Path.MOVETO, Path.CURVE4, Path.CURVE4, Path.CURVE4])
    axes.add_patch(FancyArrowPatch(path=path, arrowstyle="-|>", mutation_scale=10, color=colour,
                                   linewidth=_points(line), linestyle=style))


@functools.cache
def _notebook_figure() -> type:
    """A matplotlib ``Figure`` that a notebook shows inline as PNG (``_repr_png_``) without pyplot."""
    from matplotlib.figure import Figure

    class NotebookFigure(Figure):
        def _repr_png_(self) -> bytes:
            buffer = io.BytesIO()
            self.savefig(buffer, format="png")
            return buffer.getvalue()

    return NotebookFigure


def frontier_figure(series: dict[str, list[tuple[float, int]]], title: str, axes: Any = None) -> Any:
    """A step plot of each output's frontier over time: ``series`` is, per output, ``(seconds
    since the job started, its frontier then)`` in time order. Drawn on ``axes`` if given (a
    figure of the caller's), else on a new ``Figure``; returns the figure."""
    matplotlib_or_raise("job.plot_frontier()")
    if axes is None:
        axes = _notebook_figure()(figsize=(7, 3), dpi=100, facecolor="white").add_subplot()
    for output, points in sorted(series.items()):
        if points:
            times, frontiers = zip(*points)
            axes.step([0.0, *times], [0, *frontiers], where="post", label=output, linewidth=2)
    axes.set_xlabel("seconds since the job started")
    axes.set_ylabel("frontier (epochs completed)")
    axes.set_title(title)
    axes.grid(alpha=0.3)
    if any(series.values()):
        axes.legend(loc="upper left")
    axes.figure.tight_layout()
    return axes.figure
