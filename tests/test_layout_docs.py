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


def _entry(name: str, block: str | None = None) -> str:
    """A layout block's lines for one file or folder: its own and the indented ones that continue
    it (the data layout's block unless another is given)."""
    lines = (block if block is not None else _layout()).splitlines()
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


ROOT = README.parent


def _code_layout() -> str:
    return README.read_text().split("## Code layout", 1)[1].split("```", 2)[1]


def test_every_asset_job_and_sensor_module_is_in_the_code_layout():
    missing = []
    for folder in ("assets", "jobs", "sensors"):
        words = set(re.findall(r"[a-z_]+", _entry(f"{folder}/", _code_layout())))
        modules = {p.stem for p in (ROOT / folder).glob("*.py") if p.stem != "__init__"}
        missing += [f"{folder}/{m}.py" for m in sorted(modules - words)]
    assert missing == []


def test_the_library_modules_that_import_dagster_are_the_ones_the_layout_names():
    importing = sorted(
        path.relative_to(ROOT / "mindflow").as_posix()
        for path in (ROOT / "mindflow").rglob("*.py")
        if re.search(r"^\s*(import dagster|from dagster)", path.read_text(), re.M)
    )
    entry = _entry("mindflow/", _code_layout()).split(");", 1)[0]
    named = sorted(re.findall(r"([a-z_]+\.py)", entry))
    assert importing == named
