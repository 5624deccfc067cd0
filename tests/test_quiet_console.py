"""Quiet consoles: no model-loading bar, no library warnings; a long run's progress on stderr."""

from __future__ import annotations

import io
import logging
import os
import shutil
import subprocess
import sys
import time

from mindflow.progress import progress_logger
from tests.conftest import REPO, SAMPLES
from tests.test_cli import env_for, mindflow

NOISE = ("Loading weights", "Warning", "it/s]")


def test_loading_definitions_prints_no_lifecycle_warning():
    # -W default shows every warning once per place, as `dagster dev`'s processes did (35 lines).
    proc = subprocess.run(
        [sys.executable, "-W", "default", "-c", "import definitions"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "BetaWarning" not in proc.stderr and "PreviewWarning" not in proc.stderr
    assert "DeprecationWarning" not in proc.stderr  # jobs/audit.py named its partitions twice
    assert proc.stderr == ""


def test_commands_that_load_the_model_print_only_their_results(home):
    shutil.copytree(SAMPLES / "inbox", home / "inbox")
    ingest = mindflow(home, "run", "ingest")
    assert ingest.returncode == 0, ingest.stderr
    assert ingest.stderr == ""

    # The patrol loads all-MiniLM-L6-v2 and embeds ~190 texts: one step, not long work.
    patrol = mindflow(home, "run", "patrol", "--being", "ada")
    assert patrol.returncode == 0, patrol.stderr
    assert "patrol [ada]" in patrol.stdout
    assert not [n for n in NOISE if n in patrol.stderr], patrol.stderr
    assert "embedded" not in patrol.stderr

    # A forget finds its candidates by recall, embedding the query in the command's own process.
    forget = subprocess.run(
        [str(REPO / ".venv" / "bin" / "mindflow"), "forget", "the flaky payout rounding test", "--being", "ada"],
        env=env_for(home), cwd=home, input="n\n", capture_output=True, text=True, timeout=240,
    )  # fmt: skip
    assert "rejected: nothing changed" in forget.stdout, forget.stderr
    assert forget.stderr == ""

    status = mindflow(home, "status")
    assert status.returncode == 0 and status.stderr == ""


def _record(message: str, step: str = "nodes") -> logging.LogRecord:
    """A log record as Dagster hands it to a run's loggers."""
    record = logging.LogRecord(
        "dagster", logging.INFO, __file__, 0, f"patrol - r1 - {step} - {message}", (), None
    )
    record.dagster_meta = {"step_key": step, "orig_message": message}
    return record


def test_a_long_runs_progress_lines_reach_stderr():
    out = io.StringIO()
    logger = progress_logger(after_s=0.2, stream=out)
    logger.handle(_record("embedded 1024/9000 new node texts"))  # the run is young: not yet
    logger.handle(_record("[graph] BYOK key not set: skipping ❹❻ diary/think_md"))
    time.sleep(0.25)
    logger.handle(_record("embedded 2048/9000 new node texts"))
    logger.handle(_record("ada: ⓪ recall events {'events': 0}"))  # not progress
    logger.handle(_record("embedded 9000/9000 new node texts"))
    assert out.getvalue().splitlines() == [
        "  nodes: embedded 2048/9000 new node texts",
        "  nodes: embedded 9000/9000 new node texts",
    ]

    # All done in one step, however long the run took around it: a summary, not progress.
    quiet = io.StringIO()
    logger = progress_logger(after_s=0, stream=quiet)
    logger.handle(_record("embedded 190/190 new node texts"))
    logger.handle(_record("published 188 rows, data/2026/10 kept", step="memories"))
    assert quiet.getvalue() == ""
    # The UI's runs (the logger's default) never print here: their console logger has it all.
    logger = progress_logger(after_s=-1, stream=quiet)
    logger.handle(_record("embedded 1024/9000 new node texts"))
    assert quiet.getvalue() == ""
