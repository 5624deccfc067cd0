"""The README's data layout against the tables mindflow makes: an operator backing up, moving or
inspecting a home reads it to know what each file holds."""

from __future__ import annotations

import re

from readme import README, entry, fenced

from mindflow import graph, journal_index, memories, memory_history, rag, store
from mindflow.config import PRECISION_PIN
from mindflow.reflection import procedures

ROOT = README.parent


def test_every_duckdb_table_is_in_the_layout(tmp_path):
    with store.connect(tmp_path / "mindflow.duckdb") as con:
        tables = {
            row[0]
            for row in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'"
            ).fetchall()
        }
    assert tables, "the schema made no table"
    words = set(re.findall(r"[a-z_]+", entry(fenced("## Data layout"), "mindflow.duckdb")))
    assert sorted(tables - words) == []


def test_every_lance_table_and_home_file_is_in_the_layout():
    layout = fenced("## Data layout")
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


def test_every_asset_job_and_sensor_module_is_in_the_code_layout():
    missing = []
    for folder in ("assets", "jobs", "sensors"):
        words = set(re.findall(r"[a-z_]+", entry(fenced("## Code layout"), f"{folder}/")))
        modules = {p.stem for p in (ROOT / folder).glob("*.py") if p.stem != "__init__"}
        missing += [f"{folder}/{m}.py" for m in sorted(modules - words)]
    assert missing == []


def test_the_library_modules_that_import_dagster_are_the_ones_the_layout_names():
    importing = sorted(
        path.relative_to(ROOT / "mindflow").as_posix()
        for path in (ROOT / "mindflow").rglob("*.py")
        if re.search(r"^\s*(import dagster|from dagster)", path.read_text(), re.M)
    )
    library = entry(fenced("## Code layout"), "mindflow/").split(");", 1)[0]
    named = sorted(re.findall(r"([a-z_]+\.py)", library))
    assert importing == named
