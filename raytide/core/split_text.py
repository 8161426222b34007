"""The words of a text as a batch, split only when someone needs them, and counted in Arrow.

``flat_map(str.split)`` over a batch of strings makes a :class:`SplitText`: the strings
joined by a space, whose records are ``text.split()`` (a space is whitespace, so no word
spans two strings). Per-record consumers get that list, split once on first use. A count
keyed by the word itself (``count_by_key(lambda w: w)``) never asks for it: it hands the
text to a :class:`WordTally`, which splits and counts in Arrow's C++ kernels without a
Python string per word, and makes Python strings only for the distinct words: one
word-count reader's half of the benchmark file (5,000,000 words, 50,000 distinct) takes
0.9 s to split and count with ``str.split`` and ``Counter.update``, and 0.2 s this way.

Arrow's ``utf8_split_whitespace`` splits at exactly the characters ``str.split`` splits at
(checked for every code point), and ``ascii_split_whitespace`` at all of them but
``\\x1c``-``\\x1f`` (which :meth:`SplitText.tokens` therefore keeps away from it). Both
also give empty tokens where whitespace begins or ends the text, or where runs of it
meet; ``str.split`` gives no empty word, so :meth:`WordTally.counts` drops them.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pyarrow as pa

#: Per byte of an ASCII text, 0 where ``str.split`` splits it (``\\t\\n\\v\\f\\r``,
#: ``\\x1c``-``\\x1f`` and the space) and 1 elsewhere.
_WORD_MARKS = bytes(0 if byte in (9, 10, 11, 12, 13, 28, 29, 30, 31, 32) else 1 for byte in range(256))
#: The ASCII whitespace Arrow's ``ascii_split_whitespace`` does not split at.
_SEPARATORS = "\x1c\x1d\x1e\x1f"
#: A tally counts the words it holds once it holds this many, which bounds its memory.
TALLY_WORDS = 1 << 20
#: Shorter texts are counted faster in Python: a call into Arrow costs 10-15 µs, and Arrow
#: overtakes ``str.split`` and ``Counter.update`` at about 2,000 characters (350 words; 50
#: words take 15 µs in Arrow and 4 µs in Python, 5,000 words 170 and 370 µs).
TALLY_MIN_CHARS = 2048


class SplitText:
    """A batch whose records are ``text.split()``, split only when first needed.

    Built-in operators read it through :mod:`raytide.core.batches` like any batch; a
    user's vertex gets the plain list of words. It pickles as its text.
    """

    __slots__ = ("text", "_words", "_length")

    def __init__(self, text: str) -> None:
        self.text = text
        self._words: list[str] | None = None
        self._length: int | None = None

    def records(self) -> list[str]:
        """The words, as ``text.split()`` gives them (the same list on every call)."""
        if self._words is None:
            self._words = self.text.split()
        return self._words

    def __len__(self) -> int:
        """The number of words; an ASCII text's are counted without splitting it."""
        if self._length is None:
            if self._words is None and self.text.isascii():
                self._length = _count_ascii_words(self.text)
            else:
                self._length = len(self.records())
        return self._length

    def tokens(self) -> pa.Array | None:
        """The words as an Arrow array, with empty tokens among them (see the module docstring).

        None when Arrow cannot hold the text: a ``str`` with lone surrogates is no UTF-8.
        """
        import pyarrow as pa
        import pyarrow.compute as pc

        try:
            data = self.text.encode()
        except UnicodeEncodeError:
            return None
        # from buffers rather than pa.array([...]), which would import pandas (0.3 s in a fresh actor)
        offsets = np.array([0, len(data)], dtype=np.int64)
        text = pa.Array.from_buffers(pa.large_string(), 1, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        ascii = self.text.isascii() and not any(separator in self.text for separator in _SEPARATORS)
        split = pc.ascii_split_whitespace if ascii else pc.utf8_split_whitespace
        return split(text).flatten()

    def __reduce__(self) -> tuple:
        return SplitText, (self.text,)


def _count_ascii_words(text: str) -> int:
    """``len(text.split())`` for an ASCII ``text``: the words start after whitespace or at
    the start (two passes in C over the bytes, no list of words)."""
    marks = text.encode("ascii").translate(_WORD_MARKS)
    return marks.count(b"\x00\x01") + marks.startswith(b"\x01")


class WordTally:
    """Words waiting to be counted, kept as Arrow arrays and counted all at once."""

    def __init__(self) -> None:
        self.chunks: list[pa.Array] = []
        self.size = 0

    def add(self, batch: SplitText) -> bool:
        """Keep the words of ``batch``; False (nothing kept: count them yourself) when its text
        is shorter than :data:`TALLY_MIN_CHARS` or Arrow cannot hold it."""
        tokens = batch.tokens() if len(batch.text) >= TALLY_MIN_CHARS else None
        if tokens is None:
            return False
        self.chunks.append(tokens)
        self.size += len(tokens)
        return True

    @property
    def full(self) -> bool:
        """Whether it holds :data:`TALLY_WORDS` words or more: time to count them."""
        return self.size >= TALLY_WORDS

    def count_into(self, counts: Counter) -> None:
        """Add the count of every word held to ``counts``, and hold nothing any more."""
        if not self.size:
            return
        import pyarrow as pa
        import pyarrow.compute as pc

        tally = pc.value_counts(pa.chunked_array(self.chunks))
        self.chunks, self.size = [], 0
        found = dict(zip(tally.field(0).to_pylist(), tally.field(1).to_pylist()))
        found.pop("", None)  # the empty tokens at the edges of whitespace: no words
        counts.update(found)  # into an empty Counter, one dict.update in C
