"""Durable file writes shared by the inbox, the read API and the recall events."""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Generic, TypeVar

T = TypeVar("T")

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None


def append_lines(path: Path, data: bytes) -> None:
    """Append whole lines with one write on an O_APPEND descriptor, then fsync.

    Concurrent appenders never interleave within a write. A writer that died
    mid-line left no newline: start a fresh line rather than glue onto it.
    """
    created = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        view = memoryview(data)
        while view:  # one write; the loop only matters on a short write (disk full, signal)
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    if created:
        fsync_dir(path.parent)


def append_locked(path: Path, data: bytes) -> None:
    """`append_lines` under `<path>.lock`, creating the folder (durably) first: for files that
    several threads of a process, and the runs that rewrite them, share.

    The lock is an exclusive `flock` of the lock file, the lock `filelock.FileLock` takes on
    Unix (the runs that rewrite these files hold it that way), taken directly: a recall appends
    an event every time, and FileLock's own bookkeeping cost ~0.3 ms of CPU a call.
    """
    if not path.parent.is_dir():
        path.parent.mkdir(parents=True, exist_ok=True)
        fsync_dir(path.parent.parent)
    if fcntl is None:  # no flock (Windows): FileLock's own locking
        from filelock import FileLock

        with FileLock(str(path) + ".lock"):
            append_lines(path, data)
        return
    # Each call opens its own descriptor: flocks of separate opens exclude each other, threads
    # of this process included; closing it releases the lock, also when the process dies.
    fd = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        append_lines(path, data)
    finally:
        os.close(fd)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace a file's content all at once: readers see the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=path.suffix)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def fsync_dir(folder: Path) -> None:
    """Make a new directory entry durable, not only the file's content."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ParsedFiles(Generic[T]):
    """A file per key (a being's marks, its deleted texts), parsed again only when it changes.

    One `stat` per read: a line any process appends is read by the next request of every
    process. `parse(data, path, key)`; `missing` stands for a file never written."""

    def __init__(self, path_of: Callable[[str], Path], parse: Callable[[bytes, Path, str], T], missing: T):
        self._path_of, self._parse, self._missing = path_of, parse, missing
        self._parsed: dict[str, tuple[tuple[int, int], T]] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> T:
        path = self._path_of(key)
        try:
            stat = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return self._missing
        changed = (stat.st_size, stat.st_mtime_ns)
        with self._lock:
            cached = self._parsed.get(key)
            if cached is not None and cached[0] == changed:
                return cached[1]
        parsed = self._parse(path.read_bytes(), path, key)
        with self._lock:
            self._parsed[key] = (changed, parsed)
        return parsed
