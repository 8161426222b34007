"""Compute-bound baseline: a Mandelbrot image, one row per record, on a pool of Ray actors.

:func:`mandelbrot_row` is the per-record kernel (NumPy, vectorised over the pixels of
one row); raytide's benchmark calls exactly this function through its ``map`` operator,
so both sides do identical work per row. Rows differ a lot in cost (rows that cross the
set iterate ``max_iter`` times), which rewards dynamic load balancing.

:func:`mandelbrot_ray` farms rows out to ``n_actors`` actors in chunks of
``rows_per_call`` rows, dispatching the next chunk to whichever actor finishes first
(``calls_per_actor`` calls queued per actor so that no actor idles between calls). It
returns the full ``(height, width)`` array of iteration counts; the caller times it
(actor start-up included). :func:`mandelbrot_reference` is the plain-Python reference.
"""

from __future__ import annotations

import numpy as np
import ray

DEFAULT_MAX_ITER = 1000  # ~3-4 s of CPU for the 1000x1000 image on this machine
X_RANGE = (-2.0, 1.0)
Y_RANGE = (-1.5, 1.5)


def mandelbrot_row(y: int, width: int = 1000, height: int = 1000, max_iter: int = DEFAULT_MAX_ITER) -> np.ndarray:
    """Escape-time iteration counts of row ``y`` of the image of ``[-2, 1] x [-1.5, 1.5]``.

    Pixel ``(x, y)`` samples ``c`` at the centre of its cell. Its count is the number of
    iterations ``z <- z**2 + c`` (from ``z = 0``) after which ``|z| > 2`` first holds, or
    ``max_iter`` if it never does within ``max_iter`` iterations.

    Args:
        y: Row index, ``0 <= y < height`` (row 0 is ``Im c`` near -1.5).
        width: Pixels per row.
        height: Rows in the image.
        max_iter: Iteration cap.

    Returns:
        An ``int32`` array of ``width`` counts.
    """
    (x0, x1), (y0, y1) = X_RANGE, Y_RANGE
    ci = y0 + (y + 0.5) * (y1 - y0) / height
    cr = x0 + (np.arange(width) + 0.5) * ((x1 - x0) / width)
    counts = np.full(width, max_iter, dtype=np.int32)
    alive = np.arange(width)  # pixels that have not escaped yet
    zr = np.zeros(width)
    zi = np.zeros(width)
    for i in range(max_iter):
        zr2 = zr * zr
        zi2 = zi * zi
        escaped = zr2 + zi2 > 4.0
        if escaped.any():
            counts[alive[escaped]] = i
            keep = ~escaped
            alive, zr, zi, zr2, zi2, cr = alive[keep], zr[keep], zi[keep], zr2[keep], zi2[keep], cr[keep]
            if alive.size == 0:
                break
        zi = 2.0 * zr * zi + ci
        zr = zr2 - zi2 + cr
    return counts


def mandelbrot_rows(ys: range, width: int, height: int, max_iter: int) -> np.ndarray:
    """Stack :func:`mandelbrot_row` for every row in ``ys`` into a ``(len(ys), width)`` array."""
    out = np.empty((len(ys), width), dtype=np.int32)
    for k, y in enumerate(ys):
        out[k] = mandelbrot_row(y, width, height, max_iter)
    return out


def mandelbrot_reference(width: int = 1000, height: int = 1000, max_iter: int = DEFAULT_MAX_ITER) -> np.ndarray:
    """The whole image computed in this process, row by row.

    Returns:
        An ``int32`` array of shape ``(height, width)``.
    """
    return mandelbrot_rows(range(height), width, height, max_iter)


@ray.remote
class MandelbrotWorker:
    """Computes chunks of rows."""

    def rows(self, start: int, stop: int, width: int, height: int, max_iter: int) -> np.ndarray:
        """Rows ``start .. stop - 1`` as an ``int32`` array of shape ``(stop - start, width)``."""
        return mandelbrot_rows(range(start, stop), width, height, max_iter)


def row_chunks(height: int, rows_per_call: int) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` chunks of at most ``rows_per_call`` consecutive rows."""
    return [(s, min(s + rows_per_call, height)) for s in range(0, height, rows_per_call)]


def mandelbrot_ray(
    width: int = 1000,
    height: int = 1000,
    max_iter: int = DEFAULT_MAX_ITER,
    n_actors: int = 2,
    rows_per_call: int = 10,
    calls_per_actor: int = 2,
) -> np.ndarray:
    """The image computed by a pool of Ray actors with dynamic dispatch; the caller times it.

    Expects Ray to be initialised. Actors are started and killed inside the call.

    Args:
        width: Pixels per row.
        height: Rows in the image.
        max_iter: Iteration cap of :func:`mandelbrot_row`.
        n_actors: Actors in the pool.
        rows_per_call: Rows computed per remote call.
        calls_per_actor: Calls kept queued at each actor.

    Returns:
        An ``int32`` array of shape ``(height, width)``, equal to :func:`mandelbrot_reference`.
    """
    image = np.empty((height, width), dtype=np.int32)
    todo = row_chunks(height, rows_per_call)[::-1]  # popped from the end, i.e. top row first
    actors = [MandelbrotWorker.remote() for _ in range(n_actors)]
    pending: dict[ray.ObjectRef, tuple[ray.actor.ActorHandle, int]] = {}

    def submit(actor: ray.actor.ActorHandle) -> None:
        start, stop = todo.pop()
        pending[actor.rows.remote(start, stop, width, height, max_iter)] = (actor, start)

    try:
        for _ in range(calls_per_actor):
            for actor in actors:
                if todo:
                    submit(actor)
        while pending:
            [done], _ = ray.wait(list(pending), num_returns=1)
            actor, start = pending.pop(done)
            if todo:
                submit(actor)
            rows = ray.get(done)
            image[start : start + len(rows)] = rows
        return image
    finally:
        for actor in actors:
            ray.kill(actor)
