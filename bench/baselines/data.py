"""Deterministic benchmark inputs: Zipf-distributed text and random undirected graphs.

Everything here is a pure function of its arguments (including ``seed``), so that raytide
and every baseline read exactly the same bytes in a benchmark run.

* :func:`write_zipf_text` writes ``lines`` lines of ``words_per_line`` words drawn from a
  Zipf-like distribution (word of rank ``k`` has probability proportional to ``1 / k``).
* :func:`random_graph_edges` draws distinct undirected edges without self-loops.
* :func:`write_edges` / :func:`read_edges` store edges as ``"u v"`` lines.
* :func:`epoch_bounds` / :func:`epoch_of_line` define the epochs of the word-count
  benchmarks: epoch ``e`` is a contiguous range of line indices.
"""

from __future__ import annotations

import bisect
import os
import string
from pathlib import Path

import numpy as np

PathLike = str | os.PathLike[str]

_CHUNK_LINES = 100_000


def vocabulary_words(vocabulary: int) -> list[str]:
    """Deterministic distinct lowercase words, shortest first (``a``, ``b``, ... ``z``, ``aa`` ...).

    Word ``k`` is the bijective base-26 spelling of ``k + 1``, so frequent (low-rank) words
    are short, as in natural language.

    Args:
        vocabulary: Number of words.

    Returns:
        The ``vocabulary`` words, word ``k`` at index ``k``.
    """
    words = []
    for k in range(1, vocabulary + 1):
        letters = []
        while k > 0:
            k, r = divmod(k - 1, 26)
            letters.append(string.ascii_lowercase[r])
        words.append("".join(reversed(letters)))
    return words


def zipf_word_ids(rng: np.random.Generator, n: int, vocabulary: int, exponent: float = 1.0) -> np.ndarray:
    """Draw ``n`` word ids in ``[0, vocabulary)``; id ``k`` has probability ``∝ 1 / (k + 1) ** exponent``.

    Args:
        rng: Source of randomness.
        n: Number of ids to draw.
        vocabulary: Number of distinct ids.
        exponent: Zipf exponent ``s``.

    Returns:
        An ``int64`` array of ``n`` ids.
    """
    weights = 1.0 / np.arange(1, vocabulary + 1, dtype=np.float64) ** exponent
    cdf = np.cumsum(weights)
    cdf /= cdf[-1]
    ids = np.searchsorted(cdf, rng.random(n), side="right")
    return np.minimum(ids, vocabulary - 1)


def _encode_lines(ids: np.ndarray, word_buf: np.ndarray, word_start: np.ndarray, word_len: np.ndarray) -> bytes:
    """Spell a ``(lines, words_per_line)`` id matrix as text, vectorised.

    Every token is copied from ``word_buf`` followed by one separator byte: a space, or a
    newline after the last word of a line.

    Args:
        ids: Word ids, one row per line.
        word_buf: All vocabulary words concatenated, plus one spare byte at the end.
        word_start: Offset of each word in ``word_buf``.
        word_len: Length of each word in bytes.

    Returns:
        The encoded lines, every one terminated by ``"\\n"``.
    """
    flat = ids.ravel()
    token_len = word_len[flat] + 1  # word plus its separator
    token_end = np.cumsum(token_len)
    token_off = token_end - token_len
    # Byte i of the output comes from word_buf[word_start[token] + (i - token_off[token])];
    # the separator slot reads one byte past the word (hence the spare byte) and is overwritten.
    shift = np.repeat(word_start[flat] - token_off, token_len)
    out = word_buf[shift + np.arange(int(token_end[-1]), dtype=np.int64)]
    seps = np.full(flat.shape, ord(" "), dtype=np.uint8)
    seps.reshape(ids.shape)[:, -1] = ord("\n")
    out[token_end - 1] = seps
    return out.tobytes()


def write_zipf_text(
    path: PathLike,
    lines: int = 1_000_000,
    words_per_line: int = 10,
    vocabulary: int = 50_000,
    seed: int = 0,
) -> Path:
    """Write a text file of Zipf-distributed words (``s = 1``), one ``"\\n"``-terminated line each.

    Deterministic for given arguments; 1M lines x 10 words (about 45 MB) take a second or two.

    Args:
        path: File to create (overwritten).
        lines: Number of lines.
        words_per_line: Words on every line, separated by single spaces.
        vocabulary: Number of distinct words that may occur (see :func:`vocabulary_words`).
        seed: Seed of the random generator.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    if words_per_line < 1:
        raise ValueError("words_per_line must be at least 1")
    rng = np.random.default_rng(seed)
    encoded = [w.encode() for w in vocabulary_words(vocabulary)]
    word_len = np.fromiter(map(len, encoded), dtype=np.int64, count=vocabulary)
    word_start = np.cumsum(word_len) - word_len
    word_buf = np.frombuffer(b"".join(encoded) + b" ", dtype=np.uint8)
    path = Path(path)
    with open(path, "wb") as f:
        for first in range(0, lines, _CHUNK_LINES):
            n = min(_CHUNK_LINES, lines - first)
            ids = zipf_word_ids(rng, n * words_per_line, vocabulary).reshape(n, words_per_line)
            f.write(_encode_lines(ids, word_buf, word_start, word_len))
    return path


def random_graph_edges(nodes: int = 200_000, edges: int = 600_000, seed: int = 0) -> np.ndarray:
    """Draw ``edges`` distinct undirected edges over ``nodes`` nodes, without self-loops.

    Endpoints are uniform (an Erdős–Rényi-like ``G(n, m)`` graph). Each edge appears once,
    as ``(u, v)`` with ``u < v``; rows are in random order.

    Args:
        nodes: Number of nodes; ids are ``0 .. nodes - 1``.
        edges: Number of distinct edges; at most ``nodes * (nodes - 1) / 2``.
        seed: Seed of the random generator.

    Returns:
        An ``int64`` array of shape ``(edges, 2)``.
    """
    if edges > nodes * (nodes - 1) // 2:
        raise ValueError(f"a simple graph on {nodes} nodes has at most {nodes * (nodes - 1) // 2} edges")
    rng = np.random.default_rng(seed)
    keys = np.empty(0, dtype=np.int64)  # edge (u, v), u < v, encoded as u * nodes + v
    while keys.size < edges:
        draw = rng.integers(0, nodes, size=(2 * (edges - keys.size) + 16, 2), dtype=np.int64)
        draw = draw[draw[:, 0] != draw[:, 1]]
        new = draw.min(axis=1) * nodes + draw.max(axis=1)
        keys = np.unique(np.concatenate([keys, new]))
    keys = rng.permutation(keys)[:edges]
    return np.stack([keys // nodes, keys % nodes], axis=1)


def write_edges(path: PathLike, edges: np.ndarray) -> Path:
    """Write one ``"u v"`` line per edge.

    Args:
        path: File to create (overwritten).
        edges: Integer array of shape ``(E, 2)``.

    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    """
    path = Path(path)
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    with open(path, "w") as f:
        if len(edges):
            f.write("\n".join(f"{u} {v}" for u, v in edges.tolist()))
            f.write("\n")
    return path


def read_edges(path: PathLike) -> np.ndarray:
    """Read edges written by :func:`write_edges`.

    Args:
        path: File of ``"u v"`` lines.

    Returns:
        An ``int64`` array of shape ``(E, 2)``.
    """
    with open(path, "rb") as f:
        values = np.array(f.read().split(), dtype=np.int64)
    return values.reshape(-1, 2)


def epoch_bounds(total_lines: int, n_epochs: int) -> list[int]:
    """Line-index boundaries of ``n_epochs`` near-equal contiguous epochs.

    Epoch ``e`` holds lines ``bounds[e] <= i < bounds[e + 1]``, with
    ``bounds[e] = e * total_lines // n_epochs``. Epochs may be empty when there are fewer
    lines than epochs.

    Args:
        total_lines: Number of lines in the input.
        n_epochs: Number of epochs, at least 1.

    Returns:
        ``n_epochs + 1`` non-decreasing integers from ``0`` to ``total_lines``.
    """
    if n_epochs < 1:
        raise ValueError("n_epochs must be at least 1")
    return [e * total_lines // n_epochs for e in range(n_epochs + 1)]


def epoch_of_line(bounds: list[int], line: int) -> int:
    """The epoch that holds line index ``line`` (see :func:`epoch_bounds`).

    Args:
        bounds: Output of :func:`epoch_bounds`.
        line: A line index in ``[0, bounds[-1])``.

    Returns:
        The epoch number.
    """
    return bisect.bisect_right(bounds, line) - 1
