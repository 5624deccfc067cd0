"""The sha256 of every text a being's permanent forgets deleted, in a file the read API can read.

Ingestion refuses a deleted text under any id by the hashes of the DELETE audit rows, but those
are in DuckDB, which the read API never opens. So the `forget` job also appends them to
`loop/<being>/deleted.jsonl` (hashes only, never a text), before it erases anything: a run killed
before the line is whole writes it again when run again, from DuckDB, which still holds the texts
until the erase's DuckDB step. Lines are appended whole, with one write and an fsync, under the
lock the marks use; a torn last line is skipped by readers and never blocks the next append.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable
from pathlib import Path

from mindflow.files import ParsedFiles, append_locked
from mindflow.inbox import Deleted, validate_being_id

log = logging.getLogger(__name__)

DELETED_FILE = "deleted.jsonl"
# How a scrubbed text reads where it stood (a proposal's candidates, query, ...): its sha256.
HASHED = "sha256:"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def deleted_path(loop_dir: Path, being_id: str) -> Path:
    return loop_dir / validate_being_id(being_id) / DELETED_FILE


def read_hashes(loop_dir: Path, being_id: str) -> frozenset[str]:
    """Every text sha256 recorded for the being; an unreadable (torn) line is skipped."""
    path = deleted_path(loop_dir, being_id)
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return frozenset()
    return _parse(data, path)


def _parse(data: bytes, path: Path) -> frozenset[str]:
    out: set[str] = set()
    for number, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            listed = json.loads(raw)["text_sha256"]
            hashes = [h for h in listed if isinstance(h, str) and _SHA256.match(h)]
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("skipped unreadable line %s:%d (%s)", path, number, exc)
            continue
        out.update(hashes)
    return frozenset(out)


def record_hashes(loop_dir: Path, being_id: str, hashes: Iterable[str], proposal_ids: Iterable[str]) -> int:
    """Append the hashes not recorded yet (one line); how many were new. Run again, it adds nothing."""
    new = sorted(set(hashes) - read_hashes(loop_dir, being_id))
    if not new:
        return 0
    line = {"proposal_ids": sorted(set(proposal_ids)), "text_sha256": new}
    append_locked(deleted_path(loop_dir, being_id), (json.dumps(line, separators=(",", ":")) + "\n").encode())
    return len(new)


class DeletedCache:
    """Each being's recorded hashes in one server process, read again only when the file changes
    (one `stat` per request, as `MarkCache` does)."""

    def __init__(self, loop_dir: Path):
        self.loop_dir = loop_dir
        self._files = ParsedFiles(
            lambda being_id: deleted_path(loop_dir, being_id),
            lambda data, path, _: _parse(data, path),
            frozenset(),
        )

    def hashes(self, being_id: str) -> frozenset[str]:
        return self._files.get(being_id)

    def deleted(self, being_id: str, episode_ids: frozenset[str]) -> Deleted:
        """What POST episodes and the fresh tail refuse: the deleted episode ids (the marks) and texts."""
        return Deleted(episode_ids, self.hashes(being_id))
