"""The ebook folder sensor, the `ebook_chunks` asset in Dagster, `mindflow run ebook_reindex` and the CLI."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil

import dagster as dg
from test_rag import KEEPER, gutenberg_text, make_epub, write_library
from typer.testing import CliRunner

from mindflow.cli import app
from mindflow.rag.folder import fingerprints, folder_changes


def _touch(path):
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))


def test_folder_fingerprints_tell_added_changed_removed(tmp_path):
    folder = tmp_path / "ebooks"
    assert fingerprints(folder) == {}  # no folder yet: nothing, no error
    write_library(folder)
    (folder / "notes.docx").write_bytes(b"not a supported format")
    first = fingerprints(folder)
    assert "notes.docx" not in first and len(first) == 8
    assert folder_changes({}, first)["added"] == sorted(first)
    _touch(folder / "keeper.txt")
    touched = fingerprints(folder, first)
    assert not any(folder_changes(first, touched).values())  # same size and content: no change
    keeper = folder / "keeper.txt"
    keeper.write_text(keeper.read_text().replace("tomatoes", "potatoes"))  # same size, new bytes
    edited = fingerprints(folder, touched)
    assert folder_changes(touched, edited) == {"added": [], "changed": ["keeper.txt"], "removed": []}
    (folder / "bees.md").unlink()
    (folder / "bees.md.tmp").write_text("ignored")
    assert folder_changes(edited, fingerprints(folder, edited))["removed"] == ["bees.md"]


def test_sensor_requests_a_run_only_when_documents_change(settings):
    from sensors.ebooks import ebook_folder_sensor

    def tick(cursor):
        with dg.build_sensor_context(cursor=cursor) as context:
            result = ebook_folder_sensor(context)
        return result, result.cursor

    result, cursor = tick(None)
    assert not result.run_requests and result.skip_reason  # no folder, no documents
    write_library(settings.ebooks)
    result, cursor = tick(cursor)
    (request,) = result.run_requests
    assert request.tags["mindflow/added"] == "8" and request.job_name in (None, "ebook_reindex")
    result, cursor = tick(cursor)
    assert not result.run_requests
    _touch(settings.ebooks / "kitchen.html")
    result, cursor = tick(cursor)
    assert not result.run_requests  # touched only
    make_epub(settings.ebooks / "more.epub", "More", "Someone", {"Extra": "<p>Another voyage.</p>"})
    (settings.ebooks / "bees.md").unlink()
    (settings.ebooks / "keeper.txt").write_text(gutenberg_text("Keeper", "Ada", KEEPER) + "\nAppendix.\n")
    result, new_cursor = tick(cursor)
    (request,) = result.run_requests
    assert (
        request.tags["mindflow/added"],
        request.tags["mindflow/changed"],
        request.tags["mindflow/removed"],
    ) == (
        "1",
        "1",
        "1",
    )
    assert set(json.loads(new_cursor)) == set(json.loads(cursor)) - {"bees.md"} | {"more.epub"}
    # The same state never starts a second run.
    again, _ = tick(cursor)
    assert again.run_requests[0].run_key == request.run_key


def test_asset_materializes_with_metadata(settings):
    from assets.ebooks import ebook_chunks
    from mindflow.resources import DuckDBResource, EmbeddingResource, LanceDBResource, MindflowHome

    write_library(settings.ebooks)
    resources = {
        "duckdb": DuckDBResource(),
        "lancedb": LanceDBResource(),
        "embeddings": EmbeddingResource(),
        "mindflow_home": MindflowHome(),
    }
    result = dg.materialize([ebook_chunks], resources=resources)
    assert result.success
    meta = result.asset_materializations_for_node("ebook_chunks")[0].metadata
    assert meta["documents"].value == 5 and meta["new"].value == 8 and meta["failed"].value == 3
    assert meta["chunks"].value == meta["dagster/row_count"].value > 5
    assert "broken.epub" in meta["failures"].value and "corrupt EPUB" in meta["failures"].value
    assert "keeper.txt" in meta["chunks_per_document"].value
    again = dg.materialize([ebook_chunks], resources=resources)
    meta = again.asset_materializations_for_node("ebook_chunks")[0].metadata
    assert (meta["new"].value, meta["changed"].value, meta["removed"].value, meta["unchanged"].value) == (
        0,
        0,
        0,
        8,
    )
    assert meta["seconds"].value < 1.0 and meta["embedded"].value == 0


def test_run_job_and_cli(settings):
    from mindflow.errors import MindflowError
    from mindflow.runner import run_job

    write_library(settings.ebooks)
    (summary,) = run_job(settings, "ebook_reindex")
    assert (
        summary.success and "ebook_chunks: documents=5" in summary.changes and "failed=3" in summary.changes
    )
    try:
        run_job(settings, "ebook_reindex", being="ada")
    except MindflowError as exc:
        assert "whole ebook folder" in str(exc)
    else:
        raise AssertionError("--being accepted for ebook_reindex")

    runner = CliRunner()
    shutil.copy(settings.ebooks / "keeper.txt", settings.ebooks / "keeper-copy.txt")
    out = runner.invoke(app, ["ebooks", "reindex", "--no-progress"])
    assert out.exit_code == 0, out.output
    assert "new=1 changed=0 removed=0 unchanged=8 failed=3" in out.output
    assert "failed broken.epub: corrupt EPUB" in out.output
    out = runner.invoke(app, ["ebooks", "search", "shipwrecked sailors rescued in a gale", "-k", "2"])
    assert out.exit_code == 0, out.output
    assert "1. The Lighthouse Keeper / Chapter 2" in out.output
    out = runner.invoke(app, ["ebooks", "search", "   "])
    assert out.exit_code == 1 and "error: the search query is empty" in out.output


def test_cli_reindex_without_folder_is_one_error_line(settings):
    out = CliRunner().invoke(app, ["ebooks", "reindex"])
    assert out.exit_code == 1
    assert out.output.strip().startswith("error: no ebook folder at ") and "Traceback" not in out.output


def test_weekly_schedule_is_sunday_0330_utc_for_ebook_reindex():
    from jobs.ebooks import weekly_ebook_reindex

    assert weekly_ebook_reindex.job_name == "ebook_reindex"
    assert weekly_ebook_reindex.execution_timezone == "UTC"
    minute, hour, day, month, weekday = weekly_ebook_reindex.cron_schedule.split()
    assert (minute, hour, day, month) == ("30", "3", "*", "*") and weekday in ("0", "7", "SUN", "sun")
    # One run per Sunday: the run key names the day.
    sunday = dt.datetime(2026, 11, 22, 3, 30, tzinfo=dt.UTC)
    assert sunday.weekday() == 6
    with dg.build_schedule_context(scheduled_execution_time=sunday) as context:
        request = weekly_ebook_reindex(context)
    assert request.run_key == "ebook-reindex-2026-11-22"


def test_cli_reindex_progress_lines_when_output_is_captured(settings):
    write_library(settings.ebooks)
    out = CliRunner().invoke(app, ["ebooks", "reindex"])
    assert out.exit_code == 0, out.output
    progress = [line for line in out.stderr.splitlines() if line.startswith("[")]
    assert len(progress) == 8 and progress[0].startswith("[1/8] indexing ")
    assert progress[-1].startswith("[8/8] indexing ")
    assert {line.split()[-1] for line in progress} == {p.name for p in settings.ebooks.iterdir()}
    assert "new=8" in out.stdout  # the summary stays on stdout
    out = CliRunner().invoke(app, ["ebooks", "reindex"])
    assert out.exit_code == 0 and "indexing" not in out.stderr  # nothing to index, nothing shown


def test_cli_reindex_progress_bar_on_a_terminal(settings, monkeypatch):
    monkeypatch.setenv("TTY_COMPATIBLE", "1")  # rich: the output is a terminal
    monkeypatch.setenv("TTY_INTERACTIVE", "1")
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "120")
    write_library(settings.ebooks)
    out = CliRunner().invoke(app, ["ebooks", "reindex"])
    assert out.exit_code == 0, out.output
    drawn = out.stderr
    assert "\x1b[" in drawn  # drawn in place with terminal control codes
    assert "indexing " not in drawn  # a bar, not the lines of a captured run
    for name in ("keeper.txt", "bees.md", "kitchen.html", "voyages.epub", "clocks.pdf", "broken.epub"):
        assert name in drawn, name
    for done in range(8):
        assert f"{done}/8" in drawn  # the bar advances document by document
    assert "optimizing the index" in drawn and "━" in drawn
    off = CliRunner().invoke(app, ["ebooks", "reindex", "--no-progress"])
    assert off.exit_code == 0 and off.stderr == ""


def test_sensor_first_tick_with_a_current_index_requests_no_run(settings, embedder):
    from mindflow import rag
    from sensors.ebooks import ebook_folder_sensor

    def tick(cursor):
        with dg.build_sensor_context(cursor=cursor) as context:
            result = ebook_folder_sensor(context)
        return result, result.cursor

    write_library(settings.ebooks)
    rag.reindex(settings, embedder=embedder)  # indexed before the sensor ever ran (CLI, or a lost cursor)
    result, cursor = tick(None)
    assert not result.run_requests and "no document" in result.skip_reason.skip_message
    assert set(json.loads(cursor)) == {p.name for p in settings.ebooks.iterdir()}
    _touch(settings.ebooks / "bees.md")  # touched since the reindex: still current
    result, _ = tick(None)
    assert not result.run_requests

    # Changed since the reindex: the first tick sees it, the cursor then carries on as usual.
    keeper = settings.ebooks / "keeper.txt"
    keeper.write_text(keeper.read_text().replace("tomatoes", "potatoes"))
    result, cursor = tick(None)
    (request,) = result.run_requests
    assert (request.tags["mindflow/added"], request.tags["mindflow/changed"]) == ("0", "1")
    result, _ = tick(cursor)
    assert not result.run_requests


def test_sensor_first_tick_requests_a_run_when_the_index_is_not_current(settings, embedder, monkeypatch):
    from mindflow import rag
    from sensors.ebooks import ebook_folder_sensor

    def first_tick():
        with dg.build_sensor_context(cursor=None) as context:
            return ebook_folder_sensor(context)

    write_library(settings.ebooks)
    (request,) = first_tick().run_requests  # nothing indexed yet
    assert request.tags["mindflow/added"] == "8"
    rag.reindex(settings, embedder=embedder)
    assert not first_tick().run_requests
    # Indexed under other chunk settings: the next reindex re-chunks everything, so a run is due.
    monkeypatch.setenv("MINDFLOW_EBOOKS_CHUNK_TOKENS", "128")
    (request,) = first_tick().run_requests
    assert request.tags["mindflow/added"] == "8"
    monkeypatch.delenv("MINDFLOW_EBOOKS_CHUNK_TOKENS")
    # The table gone (a wiped LanceDB folder): a run rebuilds it.
    shutil.rmtree(settings.lance_path / "ebook_chunks.lance")
    (request,) = first_tick().run_requests
    assert request.tags["mindflow/added"] == "8"
