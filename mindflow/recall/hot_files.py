"""A being's hot index as read-only files under the home, which every server worker maps.

Several worker processes serve recall (`mindflow serve --workers N`). Each holding its own
copy of a being's index would cost ~2 KB per memory per worker, so the index of one table
version is written once, as numpy `.npy` files (the int8 scan's codes among them) and an
Arrow IPC file, and every worker maps them read-only: the page cache holds one copy, whatever
the number of workers.

Crash-only: a folder is written under a `.partial-` name and renamed into place only when
every file is in it, so a writer killed at any instant leaves no folder a reader would
take. The manifest, written last, records each file's size; a folder whose files do not
match it (a disk that lost the tail of a file) is moved away and built again. Writers of
one being take a file lock, so the index is built once however many workers want it; the
lock dies with its process. Old versions are removed once a newer one is in place: a
worker that still maps one keeps its pages (Linux frees them at the last unmap).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
from filelock import FileLock

from mindflow.inbox import validate_being_id

log = logging.getLogger(__name__)

# Bumped when the files' layout or the index's columns change: older folders are then rebuilt.
FORMAT = 5
ARRAYS = (
    "vectors", "codes", "ts", "refs", "by_ref", "sorted_refs",
    "text_vocabulary", "text_starts", "text_positions", "text_counts", "text_lengths",
    "text_word_starts", "text_words", "text_word_counts",
)  # fmt: skip
ROWS = "rows.arrow"
MANIFEST = "manifest.json"
PARTIAL = ".partial-"
STALE = ".stale-"
# Versions of a being kept on disk: the newest, and the one before it for a worker still
# answering from it while it maps the new one.
KEEP_VERSIONS = 2


@dataclass
class IndexArrays:
    """What a `BeingIndex` holds, in time order: unit vectors, times, refs and their sort, the
    texts' postings, rows."""

    vectors: np.ndarray
    # The int8 scan's codes (`hot.scan_codes`): a row per dimension, no columns in a small index.
    codes: np.ndarray
    ts: np.ndarray
    refs: np.ndarray
    by_ref: np.ndarray
    sorted_refs: np.ndarray
    # The postings of the texts (`mindflow.recall.fulltext.TextArrays`, field by field).
    text_vocabulary: np.ndarray
    text_starts: np.ndarray
    text_positions: np.ndarray
    text_counts: np.ndarray
    text_lengths: np.ndarray
    text_word_starts: np.ndarray
    text_words: np.ndarray
    text_word_counts: np.ndarray
    rows: pa.Table


class HotFiles:
    """The folder of the hot index files: `<root>/<being>/v<version>-<stamp>/`."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def folder(self, being_id: str, version: int, stamp: int) -> Path:
        validate_being_id(being_id)
        return self.root / being_id / f"v{version}-{stamp}"

    def lock(self, being_id: str) -> FileLock:
        """Held while a being's folders are read, written or pruned (one builder per being)."""
        validate_being_id(being_id)
        self.root.mkdir(parents=True, exist_ok=True)
        return FileLock(self.root / f"{being_id}.lock")

    def open(self, being_id: str, version: int, stamp: int) -> IndexArrays | None:
        """The index of this version mapped read-only; None when there is none or it is damaged
        (then it is moved away, so the caller builds it again). Call with the lock held."""
        folder = self.folder(being_id, version, stamp)
        if not folder.is_dir():
            return None
        try:
            manifest = json.loads((folder / MANIFEST).read_text())
            if manifest.get("format") != FORMAT or manifest.get("version") != version:
                raise ValueError(f"manifest of another format or version: {manifest}")
            for name, size in manifest["files"].items():
                if (folder / name).stat().st_size != size:
                    raise ValueError(f"{name} holds {(folder / name).stat().st_size} bytes, not {size}")
            arrays = {name: np.load(folder / f"{name}.npy", mmap_mode="r") for name in ARRAYS}
            with pa.memory_map(str(folder / ROWS), "r") as source:
                rows = pa.ipc.open_file(source).read_all()
            lengths = {len(arrays[a]) for a in ("vectors", "ts", "refs", "text_lengths")} | {rows.num_rows}
            if lengths != {manifest["rows"]} or arrays["codes"].shape[1] not in (0, manifest["rows"]):
                raise ValueError("files of different lengths")
        except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as exc:
            log.warning("hot index files in %s are damaged (%s): building them again", folder, exc)
            self._discard(folder)
            return None
        return IndexArrays(rows=rows, **arrays)

    def write(self, being_id: str, version: int, stamp: int, arrays: IndexArrays) -> Path:
        """Write the index of this version and rename it into place. Call with the lock held."""
        final = self.folder(being_id, version, stamp)
        partial = final.parent / f"{PARTIAL}{os.getpid()}-{uuid.uuid4().hex}"
        partial.mkdir(parents=True)
        try:
            for name in ARRAYS:
                values = np.ascontiguousarray(getattr(arrays, name))
                np.save(partial / f"{name}.npy", values, allow_pickle=False)
            with pa.OSFile(str(partial / ROWS), "wb") as sink:
                with pa.ipc.new_file(sink, arrays.rows.schema) as out:
                    out.write_table(arrays.rows)
            files = {p.name: p.stat().st_size for p in partial.iterdir()}
            manifest = {
                "format": FORMAT, "version": version, "stamp": stamp,
                "rows": len(arrays.refs), "files": files,
            }  # fmt: skip
            (partial / MANIFEST).write_text(json.dumps(manifest))
            if final.exists():  # damaged and not yet moved away, or left by an older format
                self._discard(final)
            partial.rename(final)
        except BaseException:
            shutil.rmtree(partial, ignore_errors=True)
            raise
        return final

    def prune(self, being_id: str, keep: Path | None = None) -> None:
        """Remove what killed writers left behind, and versions older than the `KEEP_VERSIONS`
        newest (`keep` always stays). Call with the lock held: no writer of the being is alive."""
        folder = self.root / validate_being_id(being_id)
        if not folder.is_dir():
            return
        versions = []
        for path in folder.iterdir():
            if path.name.startswith((PARTIAL, STALE)):
                shutil.rmtree(path, ignore_errors=True)
            elif path.is_dir() and path.name.startswith("v"):
                try:
                    versions.append((int(path.name[1:].split("-")[0]), path))
                except ValueError:
                    continue
        versions.sort(reverse=True)
        for _, path in versions[KEEP_VERSIONS:]:
            if path != keep:
                shutil.rmtree(path, ignore_errors=True)

    def remove_before(self, being_id: str, version: int) -> int:
        """Remove the being's versions older than `version` (a permanent forget rewrote the table
        at it: the older ones hold what it deleted); how many went. Call with the lock held. A
        worker that maps one keeps its pages and builds the current version on its next recall."""
        folder = self.root / validate_being_id(being_id)
        if not folder.is_dir():
            return 0
        removed = 0
        for path in folder.iterdir():
            if path.is_dir() and path.name.startswith("v"):
                try:
                    older = int(path.name[1:].split("-")[0]) < version
                except ValueError:
                    continue
                if older:
                    self._discard(path)
                    removed += 1
        return removed

    def _discard(self, folder: Path) -> None:
        # Renamed first: the version's name is free at once, even if removing the files fails.
        away = folder.with_name(f"{STALE}{uuid.uuid4().hex}")
        try:
            folder.rename(away)
        except OSError:
            return
        shutil.rmtree(away, ignore_errors=True)
