"""A lazily split text and its Arrow word count must give exactly what ``str.split`` gives."""

from __future__ import annotations

import pickle
from collections import Counter
from unittest import mock

from hypothesis import given
from hypothesis import strategies as st

from raytide.core import split_text
from raytide.core.batches import batch_length, eager, split_batch, to_format, to_records
from raytide.core.split_text import TALLY_MIN_CHARS, SplitText, WordTally

#: Every character str.split() splits at, some of which Arrow's ASCII kernel does not (\x1c-\x1f).
WHITESPACE = [chr(c) for c in range(0x110000) if chr(c).isspace()]
LETTERS = "ab\u00e9\u4e2d"
#: Texts of words and whitespace of every kind, ASCII only or not, lone surrogates included.
texts = st.one_of(
    st.text(alphabet=st.sampled_from([" ", "\t", "\n", "\x0b", "\x1c", "\x1f", "a", "b", "c"]), max_size=30),
    st.text(alphabet=st.one_of(st.sampled_from(WHITESPACE), st.sampled_from(LETTERS), st.characters()), max_size=30),
)


@given(texts)
def test_the_records_and_the_length_are_those_of_str_split(text):
    batch = SplitText(text)
    assert batch_length(batch) == len(text.split())
    assert to_records(batch) == text.split()
    assert eager(batch) == text.split()


@given(texts)
def test_the_length_counted_first_agrees_with_the_words_split_later(text):
    batch = SplitText(text)
    length = len(batch)
    assert batch.records() == text.split() and len(batch) == length


@given(st.lists(texts, max_size=6))
def test_a_tally_counts_exactly_the_words_str_split_finds(batch_texts):
    tally, counts, unheld = WordTally(), Counter({"already": 2}), Counter()
    with mock.patch.object(split_text, "TALLY_MIN_CHARS", 0):  # the short texts of the test go to Arrow too
        for text in batch_texts:
            if not tally.add(SplitText(text)):
                unheld.update(text.split())  # Arrow cannot hold it: the caller counts it itself
        tally.count_into(counts)
    expected = Counter({"already": 2})
    for text in batch_texts:
        expected.update(text.split())
    assert counts + unheld == expected
    assert tally.size == 0 and tally.chunks == [], "a tally holds nothing once counted"


def test_a_tally_refuses_a_text_arrow_cannot_hold_and_a_short_one():
    long = "a \u2028 b " * TALLY_MIN_CHARS
    assert SplitText("a \ud800 b").tokens() is None, "a lone surrogate is no UTF-8"
    assert not WordTally().add(SplitText(long + "\ud800"))
    assert not WordTally().add(SplitText(long[: TALLY_MIN_CHARS - 1])), "counted faster in Python"
    tally, counts = WordTally(), Counter()
    assert tally.add(SplitText(long[:TALLY_MIN_CHARS]))
    tally.count_into(counts)
    assert counts == Counter(long[:TALLY_MIN_CHARS].split())


@given(texts)
def test_it_pickles_as_its_text_and_converts_like_a_list(text):
    batch = pickle.loads(pickle.dumps(SplitText(text)))
    assert isinstance(batch, SplitText) and batch.records() == text.split()
    assert to_format(batch, "list") == text.split()
    assert [to_records(piece) for piece in split_batch(batch, 2)] == [text.split()[i:i + 2] for i in range(0, len(text.split()), 2)]
