"""The being's memory files: MEMORY.md, STORY.md, think.md, diary/*.md and the memory/*.md daily logs.

`journal_memory_search` searches their chunks and `journal_memory_get` reads them; both go
through `resolve`, which keeps every read inside the being's workspace folder: `..`,
absolute paths, backslashes and symlinks that lead out are refused, not followed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from mindflow.errors import MindflowError, NotFound, OutsideWorkspace
from mindflow.inbox import validate_being_id

# The files at the top of the being's folder, and the folders whose *.md files count.
TOP_FILES = ("MEMORY.md", "STORY.md", "think.md")
FOLDERS = {"diary": "diary", "memory": "daily_log"}
KINDS = {"MEMORY.md": "memory", "STORY.md": "story", "think.md": "think"}
MAX_PATH_CHARS = 300
MAX_FILE_BYTES = 8 * 1024 * 1024  # a memory file past this is not read whole (a diary entry is ~1 KB)
_NAME = re.compile(r"^[\w.\- ]+\.md$")


@dataclass(frozen=True)
class MemoryFile:
    path: str  # relative to the being's folder, with "/"
    kind: str  # memory, story, think, diary or daily_log
    file: Path


@dataclass(frozen=True)
class FileLines:
    path: str
    kind: str
    text: str
    line_start: int  # 1-based, inclusive
    line_end: int  # inclusive; line_start - 1 for an empty file or range
    total_lines: int


def being_folder(workspace: Path, being_id: str) -> Path:
    return workspace / validate_being_id(being_id)


def kind_of(path: str) -> str | None:
    """The kind of a relative path that names a memory file, else None."""
    parts = PurePosixPath(path).parts
    if len(parts) == 1:
        return KINDS.get(parts[0])
    if len(parts) == 2 and parts[0] in FOLDERS and _NAME.match(parts[1]):
        return FOLDERS[parts[0]]
    return None


def inside(folder: Path, file: Path) -> bool:
    """Does `file`, links followed, stay inside `folder`? A link loop does not."""
    try:
        file.resolve(strict=False).relative_to(folder.resolve(strict=False))
    except (ValueError, OSError, RuntimeError):
        return False
    return True


def resolve(workspace: Path, being_id: str, path: str) -> MemoryFile:
    """The memory file `path` of the being; OutsideWorkspace for a path that leaves its folder or
    names no memory file, NotFound for a memory file that does not exist."""
    folder = being_folder(workspace, being_id)
    if not path or len(path) > MAX_PATH_CHARS or "\x00" in path or "\\" in path:
        raise OutsideWorkspace(f"invalid path {path[:80]!r}: give a path inside the being's folder")
    pure = PurePosixPath(path)
    if pure.is_absolute() or path.startswith("~") or ".." in pure.parts or ":" in pure.parts[0]:
        raise OutsideWorkspace(f"path {path[:80]!r} leaves the being's folder; give one such as 'MEMORY.md'")
    rel = "/".join(p for p in pure.parts if p != ".")
    kind = kind_of(rel)
    if kind is None:
        raise OutsideWorkspace(
            f"{rel[:80]!r} is not a memory file: use MEMORY.md, STORY.md, think.md, diary/<date>.md "
            "or memory/<date>.md"
        )
    file = folder / rel
    if not inside(folder, file):
        raise OutsideWorkspace(f"{rel!r} is a link that leads out of the being's folder")
    if not file.is_file():
        raise NotFound(f"{being_id} has no {rel} yet")
    return MemoryFile(rel, kind, file)


def memory_files(workspace: Path, being_id: str) -> dict[str, MemoryFile]:
    """Every memory file of the being, by relative path (links that lead out left out)."""
    folder = being_folder(workspace, being_id)
    found: dict[str, MemoryFile] = {}
    if not folder.is_dir():
        return found
    candidates = [folder / name for name in TOP_FILES]
    for sub in FOLDERS:
        if (folder / sub).is_dir() and inside(folder, folder / sub):
            candidates += sorted((folder / sub).glob("*.md"))
    for file in candidates:
        rel = file.relative_to(folder).as_posix()
        kind = kind_of(rel)
        if kind is not None and file.is_file() and inside(folder, file):
            found[rel] = MemoryFile(rel, kind, file)
    return found


def read_text(file: Path) -> str:
    with file.open("rb") as handle:
        data = handle.read(MAX_FILE_BYTES + 1)
    text = data[:MAX_FILE_BYTES].decode("utf-8", errors="replace")
    return text


def read_lines(found: MemoryFile, start: int | None = None, end: int | None = None) -> FileLines:
    """Lines `start`..`end` (1-based, inclusive) of a memory file; the whole file by default."""
    lines = read_text(found.file).splitlines()
    total = len(lines)
    first = max(1, start or 1)
    last = total if end is None else min(end, total)
    if start is not None and end is not None and end < start:
        raise MindflowError(f"line range {start}-{end} ends before it starts")
    chosen = lines[first - 1 : last] if first <= last else []
    return FileLines(found.path, found.kind, "\n".join(chosen), first, max(first - 1, last), total)
