"""Byte-range splitting of text files: every line exactly once, epochs as asked."""

from __future__ import annotations

import subprocess
import sys
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from raytide.sources import TextFileSource
from raytide.sources import text as text_module

line = st.text(alphabet=st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)), max_size=12)


def write(tmp_path, name, lines, trailing_newline):
    path = tmp_path / name
    path.write_text("\n".join(lines) + ("\n" if trailing_newline and lines else ""), encoding="utf-8")
    return str(path)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(line, max_size=30), min_size=1, max_size=3), st.integers(1, 5), st.booleans(),
       st.one_of(st.none(), st.integers(1, 7)), st.integers(1, 4), st.sampled_from([1, 2, 3, 7, 64, 4 << 20]))
def test_every_line_once_with_the_right_epoch(tmp_path_factory, files, readers, trailing, per_epoch, batch, chunk):
    """Also with tiny read chunks, which split lines and multi-byte characters between reads."""
    tmp = tmp_path_factory.mktemp("text")
    paths = [write(tmp, f"f{i}.txt", lines, trailing) for i, lines in enumerate(files)]
    source = TextFileSource(paths, lines_per_epoch=per_epoch, batch_lines=batch)
    got = []
    with mock.patch.object(text_module, "CHUNK_BYTES", chunk):
        for reader in source.readers(readers):
            epochs = [epoch for epoch, _ in reader]
            assert epochs == sorted(epochs), "a reader's epochs never decrease"
            got += [(epoch, text) for epoch, lines in reader for text in lines]
    expected = []
    number = 0
    for file_index, path in enumerate(paths):
        pieces = open(path, encoding="utf-8", newline="").read().split("\n")
        if pieces[-1] == "":
            pieces.pop()
        for text in pieces:
            expected.append((file_index if per_epoch is None else number // per_epoch, text))
            number += 1
    assert sorted(got) == sorted(expected)


def test_a_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        TextFileSource(str(tmp_path / "nope.txt")).readers(2)


def test_the_sources_are_reached_from_the_package_without_an_import_of_their_own():
    """``import raytide as rt`` then ``rt.sources.TextFileSource``, as the README writes it,
    in a fresh interpreter (a test run imports the sources anyway)."""
    code = ("import sys, raytide as rt; source = rt.sources.TextFileSource; "
            "assert 'pyarrow.dataset' not in sys.modules and 'ray' not in sys.modules, sorted(sys.modules)")
    subprocess.run([sys.executable, "-c", code], check=True)
