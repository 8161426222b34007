"""The guide's Spark snippets (```` ```python spark ```` blocks), run as written on the test
session's Spark on Ray, and their printed output checked (tests/snippets.py).

The Structured Streaming snippet of the guide is shown as a ```` ```text ```` block and not
run here: a streaming query takes tens of seconds to start. The same program is
``examples/spark_streaming.py``, which ``tests/ray/test_examples_spark.py`` runs."""

from __future__ import annotations

import pytest

from tests import snippets

pytestmark = [pytest.mark.ray, pytest.mark.spark]

GUIDE = [snippet for snippet in snippets.snippets("docs/guide.md") if snippet.needs == "spark"]


@pytest.mark.parametrize("snippet", GUIDE, ids=lambda snippet: snippet.id)
def test_guide_snippet_runs_on_spark(spark, snippet):
    snippets.run(snippet)
