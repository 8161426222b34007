"""The README's example and the guide's snippets that need Ray (```` ```python ray ```` blocks),
each run as written on the test session's Ray, and their printed output checked against the
output block shown under them (tests/snippets.py).

The ```` ```bash ```` blocks are not run here: the README's two commands are what CI runs
(``.ci/run``) and ``tests/ray/test_demo.py`` runs the demo; the guide's ``ray job submit`` is
``tests/ray/test_job_submit.py``'s."""

from __future__ import annotations

import pytest

from tests import snippets

README = snippets.snippets("README.md")
GUIDE = [snippet for snippet in snippets.snippets("docs/guide.md") if snippet.needs == "ray"]


@pytest.mark.ray
def test_the_readme_example_runs_as_written(ray_session):
    snippets.run(README[0])


@pytest.mark.ray
@pytest.mark.parametrize("snippet", GUIDE, ids=lambda snippet: snippet.id)
def test_guide_snippet_runs_on_ray(ray_session, snippet):
    snippets.run(snippet)
