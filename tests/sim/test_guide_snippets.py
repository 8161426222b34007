"""The README's shape and the guide's snippets that need no Ray (``docs/guide.md``'s plain ```` ```python ```` blocks: building
dataflows, and running them in one process with ``raytide.testing.LocalJob``), each run as written and
its printed output checked (tests/snippets.py). The blocks that need Ray run in
tests/ray/test_docs_snippets.py, those that need Spark in tests/ray/test_guide_spark.py."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests import snippets

GUIDE = [snippet for snippet in snippets.snippets("docs/guide.md") if snippet.needs == ""]


def test_the_readme_is_short_with_one_example_and_its_output():
    """Under 120 lines; its one python block runs on Ray (tests/ray/test_docs_snippets.py)."""
    assert len((snippets.ROOT / "README.md").read_text().splitlines()) < 120
    readme = snippets.snippets("README.md")
    assert [(snippet.needs, snippet.output is not None) for snippet in readme] == [("ray", True)]


DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")


def test_benchmarks_md_is_one_page_with_its_figures_dated():
    """docs/benchmarks.md is under 300 lines; every row of a table of figures (one with a
    "measured" column) says the day it was measured, every section of figures says it in its
    heading or its text, and the table of the issues' targets names each target's issue."""
    text = (snippets.ROOT / "docs" / "benchmarks.md").read_text()
    assert len(text.splitlines()) < 300
    sections = {section.splitlines()[0]: section for section in text.split("\n## ")[1:]}
    targets = table_rows(sections.pop("The issues' targets at a glance"))
    assert len(targets) >= 10 and [row[:60] for row in targets if not re.search(r"\(\d+\) \|", row)] == []
    dated_rows = [row for section in sections.values() for row in table_rows(section, "| measured |")]
    assert len(dated_rows) > 20 and [row[:60] for row in dated_rows if not DATE.search(row)] == []
    figures = [title for title in sections if title not in ("How to run them", "The machine")]
    assert len(figures) >= 8 and [title for title in figures if not DATE.search(sections[title])] == []


def table_rows(section: str, header_has: str = "| ") -> list[str]:
    """The body rows of the tables in ``section`` whose header line holds ``header_has``."""
    rows, keep, lines = [], False, section.splitlines()
    for previous, line in zip(["", *lines], lines):
        if not line.startswith("|"):
            keep = False
        elif line.startswith("|---"):
            keep = header_has in previous
        elif keep:
            rows.append(line)
    return rows


def test_the_guide_has_snippets_of_every_kind():
    needs = {snippet.needs for snippet in snippets.snippets("docs/guide.md")}
    assert needs == {"", "ray", "spark"}, needs
    assert len(GUIDE) >= 6


@pytest.mark.parametrize("snippet", GUIDE, ids=lambda snippet: snippet.id)
def test_guide_snippet_runs_in_process(snippet):
    snippets.run(snippet)


LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = snippets.FENCE.sub("", path.read_text())
    return {slug(line.lstrip("#")) for line in text.splitlines() if line.startswith("#")}


@pytest.mark.parametrize("page", ["README.md", *sorted(f"docs/{path.name}" for path in (snippets.ROOT / "docs").glob("*.md"))])
def test_links_stay_in_the_repository_and_find_their_target(page):
    """Every relative link of the README and the docs names a file of this repository (and a
    heading of it, if it names one); nothing points outside the checkout."""
    source = snippets.ROOT / page
    broken = []
    for target in LINK.findall(source.read_text()):
        if re.match(r"[a-z]+://", target):
            continue
        file, _, anchor = target.partition("#")
        path = (source.parent / file).resolve() if file else source
        if snippets.ROOT not in path.parents or not path.exists():
            broken.append(target)
        elif anchor and path.suffix == ".md" and anchor not in anchors(path):
            broken.append(target)
    assert broken == []


def test_only_the_lines_ray_prints_on_its_own_are_left_out_of_a_snippets_output():
    """What the raylet and forwarded worker logs print into the driver's stdout (the load decides
    whether they come) is not compared; every other line is, a line in parentheses included."""
    printed = (
        "\x1b[33m(raylet)\x1b[0m WARNING: 8 PYTHON worker processes have been started on node: 6045\n"
        "(0, [3, 5])\n(VertexHost pid=123) a worker's print\n(pid=77, ip=192.0.2.2) another\n"
        "(1, [5])\n(raylet) but in the middle (of a line)\n(not ray) 1\n"
    )
    assert snippets.RAY_LINE.sub("", printed) == "(0, [3, 5])\n(1, [5])\n(not ray) 1\n"
