"""The README's data layout against the tables mindflow makes: an operator backing up, moving or
inspecting a home reads it to know what each file holds."""

from __future__ import annotations

import re
from pathlib import Path

from mindflow import graph, journal_index, memories, memory_history, rag, store
from mindflow.config import PRECISION_PIN
from mindflow.reflection import procedures

README = Path(__file__).resolve().parents[1] / "README.md"


def _layout() -> str:
    section = README.read_text().split("## Data layout", 1)[1]
    return section.split("```", 2)[1]


def _entry(name: str) -> str:
    """The layout's lines for one file: its own and the indented ones that continue it."""
    lines = _layout().splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:1] == [name])
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith(" " * 8)), len(lines))
    return "\n".join(lines[start:end])


def test_every_duckdb_table_is_in_the_layout(tmp_path):
    with store.connect(tmp_path / "mindflow.duckdb") as con:
        tables = {
            row[0]
            for row in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
            ).fetchall()
        }
    assert tables, "the schema made no table"
    words = set(re.findall(r"[a-z_]+", _entry("mindflow.duckdb")))
    assert sorted(tables - words) == []


def test_every_lance_table_and_home_file_is_in_the_layout():
    layout = _layout()
    lance_tables = [
        memories.TABLE,
        memory_history.TABLE,
        graph.FACTS,
        graph.RELATIONS,
        graph.ALIASES,
        rag.TABLE,
        journal_index.TABLE,
        procedures.TABLE,
    ]
    assert sorted(t for t in lance_tables if f"lance/{t}.lance" not in layout) == []
    assert PRECISION_PIN in layout and "mindflow.duckdb.lock" in layout
