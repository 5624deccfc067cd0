"""Progress lines of long runs on the terminal: which log records count, and when to show them."""

from __future__ import annotations

import logging
import re
import sys
import time
from typing import TextIO

# `embedded 2048/9000 new node texts`, `[3/12] indexing x.pdf`, `ada: extracted batch 2/5`;
# not a path such as data/2026/10.
PROGRESS = re.compile(r"(?<![\w/])\d+/\d+(?![\w/])")


def _text(record: logging.LogRecord) -> tuple[str, str]:
    """(step, message): Dagster's log records carry the step and the message as logged."""
    meta = getattr(record, "dagster_meta", None) or {}
    return meta.get("step_key") or "", meta.get("orig_message") or record.getMessage()


class LongRunFilter(logging.Filter):
    """Passes progress lines once `after_s` seconds have gone since it was made (a run's start).

    A short run prints nothing but the CLI's summary; a long one shows how far it has come.
    A line saying all is done (`190/190`) with no line shown before it is a summary, not
    progress: the work fitted in one step, however long the run around it took (loading the
    model). A negative `after_s` passes nothing.
    """

    def __init__(self, after_s: float) -> None:
        super().__init__()
        self.after_s = after_s
        self.started = time.monotonic()
        self.shown = False

    def filter(self, record: logging.LogRecord) -> bool:
        if self.after_s < 0 or time.monotonic() - self.started < self.after_s:
            return False
        found = PROGRESS.search(_text(record)[1])
        if found is None:
            return False
        done, total = found.group().split("/")
        if done == total and not self.shown:
            return False
        self.shown = True
        return True


class _Format(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        step, message = _text(record)
        return f"  {step}: {message}" if step else f"  {message}"


def progress_logger(after_s: float, stream: TextIO | None = None) -> logging.Logger:
    """A logger printing the progress lines of a run that has lasted `after_s` seconds to stderr.

    Not registered with `logging` (as Dagster's console logger is not): each run gets its own,
    with its own start time.
    """
    logger = logging.Logger("mindflow.progress", logging.INFO)
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.addFilter(LongRunFilter(after_s))
    handler.setFormatter(_Format())
    logger.addHandler(handler)
    return logger
