"""The ebook folder: which documents it holds and a cheap fingerprint of each (light imports only)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from mindflow.rag.parsers import FORMATS, PARSER_VERSION


@dataclass(frozen=True)
class FileStat:
    doc_id: str  # the path relative to the folder, with '/' separators
    path: Path
    size: int
    mtime_ns: int


def scan(folder: Path) -> dict[str, FileStat]:
    """Every document of a supported format under `folder`, by doc_id; hidden files and folders skipped."""
    found: dict[str, FileStat] = {}
    if not folder.is_dir():
        return found
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part.startswith((".", "~")) for part in relative.parts):
            continue
        if path.suffix.lower() not in FORMATS or not path.is_file():
            continue
        try:
            st = path.stat()
        except OSError:  # removed while scanning
            continue
        doc_id = relative.as_posix()
        found[doc_id] = FileStat(doc_id, path, st.st_size, st.st_mtime_ns)
    return found


def index_key(model: str, chunk_tokens: int, overlap: int) -> str:
    """What a document's chunks depend on besides its bytes: a change re-chunks every document.

    The requested chunk length stands for the effective one (capped by the model's window),
    so an unchanged folder is recognised without loading the model.
    """
    return f"{model}|{chunk_tokens}|{overlap}|parser-{PARSER_VERSION}"


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fingerprints(folder: Path, previous: dict[str, list] | None = None) -> dict[str, list]:
    """doc_id -> [size, mtime_ns, sha256]; only files whose size or time moved are read again.

    A file merely touched keeps its hash, so `folder_changes` does not count it as changed.
    """
    previous = previous or {}
    out: dict[str, list] = {}
    for doc_id, st in scan(folder).items():
        before = previous.get(doc_id)
        if before and before[0] == st.size and before[1] == st.mtime_ns:
            out[doc_id] = [st.size, st.mtime_ns, before[2]]
            continue
        try:
            out[doc_id] = [st.size, st.mtime_ns, file_sha256(st.path)]
        except OSError:  # removed or unreadable right now: seen on the next tick
            continue
    return out


def _chunks_published(lance_path) -> bool:
    """Whether the chunk table may exist: its folder, or anywhere on object storage."""
    return not isinstance(lance_path, Path) or (lance_path / "ebook_chunks.lance").exists()


def indexed_fingerprints(settings) -> dict[str, list] | None:
    """The fingerprints the ebook index was last built from (`ebook_documents`), as `fingerprints`
    gives them; only documents indexed (or failed) under the current model and chunking count.

    {} when nothing is indexed yet; None when DuckDB is held by a running job (ask again later).
    """
    import duckdb

    from mindflow import store
    from mindflow.errors import MindflowError

    if not settings.duckdb_path.exists() or not _chunks_published(settings.lance_path):
        return {}
    key = index_key(settings.embedding_model, settings.ebooks_chunk_tokens, settings.ebooks_chunk_overlap)
    try:
        with store.connect(settings.duckdb_path, read_only=True) as con:
            rows = con.execute(
                "SELECT doc_id, size, mtime_ns, sha256 FROM ebook_documents WHERE index_key = ?", [key]
            ).fetchall()
    except MindflowError:  # a job writes DuckDB right now
        return None
    except duckdb.Error:  # the ebook table not migrated yet, or unreadable: a run will tell
        return {}
    return {doc_id: [size, mtime_ns, sha] for doc_id, size, mtime_ns, sha in rows}


def folder_changes(previous: dict[str, list], current: dict[str, list]) -> dict[str, list[str]]:
    """Added, changed and removed doc_ids between two fingerprints."""
    changed = []
    for doc_id in current.keys() & previous.keys():
        old, new = previous[doc_id], current[doc_id]
        if old[0] != new[0] or old[2] != new[2]:
            changed.append(doc_id)
    return {
        "added": sorted(current.keys() - previous.keys()),
        "changed": sorted(changed),
        "removed": sorted(previous.keys() - current.keys()),
    }
