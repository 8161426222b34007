"""The code blocks of the README and docs/guide.md, as the tests run them.

A block fenced as ```` ```python ```` runs in-process without Ray (building dataflows, the
in-process runtime ``raytide.testing.LocalJob``); ```` ```python ray ```` needs a Ray (the test
session's), ```` ```python spark ```` Spark on it. A ```` ```text ```` block that follows a python
block, with only blank lines between, is that block's output: what it prints, exactly.
Other blocks (```` ```bash ````, a ```` ```text ```` block after prose) are not run.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^```(\S*)[ \t]*(\S*)[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)

#: A line Ray's driver prints on its own, from another thread, into whatever ``sys.stdout`` is
#: then: the raylet's warnings (``(raylet) WARNING: 8 PYTHON worker processes have been
#: started...``) and forwarded worker logs (``(VertexHost pid=123) ...``), colour codes optional.
#: Not the snippet's output: when and whether one comes depends on the machine's load.
RAY_LINE = re.compile(r"^(?:\x1b\[[0-9;]*m)?\((?:raylet|[^()\n]*\bpid=\d+[^()\n]*)\)(?:\x1b\[[0-9;]*m)? .*\n?", re.MULTILINE)


@dataclass(frozen=True)
class Snippet:
    """One python block: where it is, what it needs (``""``, ``"ray"`` or ``"spark"``), its code and output."""

    path: str
    line: int
    needs: str
    code: str
    output: str | None

    @property
    def id(self) -> str:
        return f"{self.path}:{self.line}"


def snippets(relative: str) -> list[Snippet]:
    """The python blocks of the markdown file ``relative`` (to the repository root), in order."""
    text = (ROOT / relative).read_text()
    blocks = list(FENCE.finditer(text))
    found = []
    for index, block in enumerate(blocks):
        language, needs, code = block.groups()
        if language != "python":
            continue
        output = None
        if index + 1 < len(blocks):
            after = blocks[index + 1]
            if after.group(1) == "text" and not text[block.end():after.start()].strip():
                output = after.group(3)
        line = text.count("\n", 0, block.start()) + 1
        found.append(Snippet(relative, line, needs, code, output))
    return found


def run(snippet: Snippet) -> None:
    """Run ``snippet`` in a namespace of its own and check what it prints against its output block."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(snippet.code, snippet.id, "exec"), {"__name__": "__snippet__"})  # noqa: S102 - the docs' own code
    if snippet.output is not None:
        own = RAY_LINE.sub("", printed.getvalue())
        assert own == snippet.output, f"{snippet.id} printed:\n{printed.getvalue()}"
