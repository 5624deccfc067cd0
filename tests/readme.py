"""Reading the README's reference sections, for the tests that hold them to the code."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def text() -> str:
    return README.read_text()


def between(start: str, end: str) -> str:
    """The README from just after the first `start` up to the next `end` (or its end)."""
    whole = text()
    assert start in whole, f"the README has no {start!r}"
    return whole.split(start, 1)[1].split(end, 1)[0]


def table(header: str) -> list[str]:
    """The row lines of the table whose header line is `header`, below its |---| line."""
    rows = between(header, "\n\n").strip().splitlines()[1:]
    assert rows, f"the README's table {header!r} has no rows"
    return rows


def fenced(heading: str) -> str:
    """The first fenced block under a heading."""
    return between(heading, "\n## ").split("```", 2)[1]


def entry(block: str, name: str) -> str:
    """A layout block's lines for one file or folder: its own and the indented ones that continue it."""
    lines = block.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [name])
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" " * 8)), len(lines))
    return "\n".join(lines[start:end])
