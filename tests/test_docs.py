"""The Python blocks of README.md and docs/*.md run as written and print what the docs show.

Each block runs in a fresh interpreter (this one's, the project's ``.venv/bin/python``), in an
empty directory, as a user pasting it would. A ```text block right after a Python block (blank
lines between at most) is its output: what the block prints must be exactly that, up to trailing
spaces. A block that cannot run here (it needs Spark, a cluster, paths or objects it does not
define) carries ``<!-- not run: why -->`` on the lines just above its fence, so that leaving it
out is a choice a reader sees; every other Python block runs.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\S*)\s*$")
NOT_RUN = re.compile(r"^<!--\s*not run:\s*(.*?)\s*-->$")
COMMENT = re.compile(r"^<!--.*-->$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int
    """The 1-based line of the opening fence."""
    language: str
    code: str
    not_run: str | None = None
    """Why the block is left out (its ``<!-- not run: ... -->`` marker), or None."""
    output: str | None = None
    """The ```text block right after it: what it prints."""

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The fenced blocks of ``page`` in order, each Python block with its marker and output."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found: list[tuple[int, int, str, str, str | None]] = []  # (open, close, language, code, not run)
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        close = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        assert close is not None, f"{page.relative_to(ROOT)}:{i + 1}: a code block is never closed"
        reason, above = None, i - 1
        while above >= 0 and COMMENT.match(lines[above].strip()):  # the HTML comments just above the fence
            marker = NOT_RUN.match(lines[above].strip())
            reason = marker.group(1) if marker else reason
            above -= 1
        found.append((i, close, opening.group(1), "\n".join(lines[i + 1:close]) + "\n", reason))
        i = close + 1
    out = []
    for n, (start, close, language, code, reason) in enumerate(found):
        if language != "python":
            continue
        after = found[n + 1] if n + 1 < len(found) else None
        printed = None
        if after and after[2] == "text" and all(not line.strip() for line in lines[close + 1:after[0]]):
            printed = after[3]
        out.append(Block(page, start + 1, language, code, reason, printed))
    return out


PYTHON = [block for page in PAGES for block in blocks(page)]
RUN = [block for block in PYTHON if block.not_run is None]


def test_every_python_block_runs_or_says_why_not():
    assert any(b.page.name == "README.md" for b in RUN), "the README's example must run"
    for block in PYTHON:
        assert block.not_run is None or block.not_run.strip(), f"{block}: say why it is not run"
        assert block.not_run is None or block.output is None, \
            f"{block} shows its output, so it must run: drop its not-run marker"


@pytest.mark.parametrize("block", RUN, ids=str)
def test_a_python_block_prints_what_the_docs_show(block, tmp_path):
    done = subprocess.run([sys.executable, "-c", block.code], cwd=tmp_path, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"{block} fails as written:\n{done.stderr[-4000:]}"
    if block.output is not None:
        assert _lines(done.stdout) == _lines(block.output), f"{block} prints\n{done.stdout}"
    else:
        assert not done.stdout.strip(), f"{block} prints output the docs do not show:\n{done.stdout}"


def _lines(text: str) -> list[str]:
    lines = [line.rstrip() for line in text.splitlines()]
    while lines and not lines[-1]:
        lines.pop()
    return lines
