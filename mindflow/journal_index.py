"""The memory file index: chunks of each being's MEMORY.md, STORY.md, think.md, diary and daily logs.

The LanceDB table `journal_chunks` holds one row per chunk (being, path, heading, line range,
text, vector); `journal_memory_search` fuses its vector and full-text candidates by reciprocal
rank. What each file was indexed from is kept in DuckDB (`journal_files`): an unchanged file is
skipped without being read, a changed one re-chunked and its rows replaced (new rows first, so
a reader never finds it missing), a removed one's rows deleted. Chunk vectors go through the
embedding cache, so an edit embeds only the chunks whose text changed.
"""

from __future__ import annotations

import hashlib
import re
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from mindflow import journal_files, lance
from mindflow.embeddings import Embedder
from mindflow.models import utcnow
from mindflow.vectors import to_column

TABLE = "journal_chunks"
CHUNKER_VERSION = 1
MAX_CHUNK_WORDS = 150  # about 200 model tokens: under MiniLM's 256-token window with the heading
KEEP_VERSIONS = timedelta(days=7)
COLUMNS = ["being_id", "path", "kind", "heading", "line_start", "line_end", "text"]
_HEADING = re.compile(r"^#{1,6}[ \t]+(.+?)[ \t#]*$")
_WORD = re.compile(r"\w+")

# Called as progress(done, total, "being/path") before each file that is (re)indexed.
Progress = Callable[[int, int, str], None]


@dataclass(frozen=True)
class Chunk:
    heading: str  # the nearest heading above the chunk ("" before the first)
    line_start: int  # 1-based, inclusive
    line_end: int
    text: str

    def embedded_text(self) -> str:
        """The heading gives a chunk its context ("## 2026-05-01" above a diary paragraph)."""
        first = self.text.split("\n", 1)[0]
        return self.text if not self.heading or _HEADING.match(first) else f"{self.heading}\n{self.text}"


@dataclass
class BeingCounts:
    files: int = 0
    chunks: int = 0
    new: int = 0
    changed: int = 0
    removed: int = 0
    unchanged: int = 0


@dataclass
class JournalIndexReport:
    beings: dict[str, BeingCounts] = field(default_factory=dict)
    embedded: int = 0  # chunk texts embedded by the model in this run
    cached: int = 0  # chunk texts whose vector came from the embedding cache
    rows: int = 0  # rows of `journal_chunks`, all beings
    version: int | None = None
    rebuilt: bool = False  # the table held vectors of another model and was written again
    seconds: float = 0.0

    def total(self, name: str) -> int:
        return sum(getattr(c, name) for c in self.beings.values())


def index_key(model: str) -> str:
    """What a file's chunks depend on besides its bytes: a change re-chunks every file."""
    return f"{model}|{MAX_CHUNK_WORDS}|chunker-{CHUNKER_VERSION}"


def _words(line: str) -> int:
    return len(_WORD.findall(line))


def chunk_markdown(text: str, max_words: int = MAX_CHUNK_WORDS) -> list[Chunk]:
    """Chunks of a Markdown file: a heading starts one, paragraphs are packed up to `max_words`,
    a longer paragraph is cut between lines. Line numbers let `journal_memory_get` read it back."""
    all_lines = text.splitlines()
    sections: list[tuple[str, list[tuple[int, str]]]] = [("", [])]
    for number, line in enumerate(all_lines, start=1):
        found = _HEADING.match(line)
        if found:
            sections.append((found.group(1).strip(), []))
        sections[-1][1].append((number, line))
    chunks: list[Chunk] = []
    for heading, lines in sections:
        paragraphs: list[list[tuple[int, str]]] = [[]]
        for number, line in lines:
            if line.strip():
                paragraphs[-1].append((number, line))
            elif paragraphs[-1]:
                paragraphs.append([])
        current: list[tuple[int, str]] = []
        words = 0

        def flush(heading: str = heading) -> None:
            nonlocal current, words
            if current and any(_words(line) for _, line in current):
                # The file's own lines, blank ones between paragraphs included: what
                # journal_memory_get returns for the chunk's range.
                first, last = current[0][0], current[-1][0]
                chunks.append(Chunk(heading, first, last, "\n".join(all_lines[first - 1 : last])))
            current, words = [], 0

        for paragraph in (p for p in paragraphs if p):
            size = sum(_words(line) for _, line in paragraph)
            if current and words + size > max_words:
                flush()
            if size <= max_words:
                current += paragraph
                words += size
                continue
            for number, line in paragraph:  # a paragraph longer than a chunk: cut between lines
                if current and words + _words(line) > max_words:
                    flush()
                current.append((number, line))
                words += _words(line)
        flush()
    return chunks


@dataclass
class _Known:
    size: int
    mtime_ns: int
    sha256: str
    index_key: str
    chunks: int


def _known(con: duckdb.DuckDBPyConnection, being_id: str) -> dict[str, _Known]:
    rows = con.execute(
        "SELECT path, size, mtime_ns, sha256, index_key, chunks FROM journal_files WHERE being_id = ?",
        [being_id],
    ).fetchall()
    return {r[0]: _Known(*r[1:]) for r in rows}


def indexed_fingerprints(con: duckdb.DuckDBPyConnection) -> dict[str, dict[str, list[int]]]:
    """being -> path -> [size, mtime_ns] of what the index was built from (for the sensor)."""
    found: dict[str, dict[str, list[int]]] = {}
    for being, path, size, mtime in con.execute(
        "SELECT being_id, path, size, mtime_ns FROM journal_files"
    ).fetchall():
        found.setdefault(being, {})[path] = [size, mtime]
    return found


def file_fingerprints(workspace: Path, being_id: str) -> dict[str, list[int]]:
    """path -> [size, mtime_ns] of the being's memory files now."""
    found = {}
    for rel, memory_file in journal_files.memory_files(workspace, being_id).items():
        try:
            st = memory_file.file.stat()
        except OSError:
            continue
        found[rel] = [st.st_size, st.st_mtime_ns]
    return found


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _rows(being_id: str, found: journal_files.MemoryFile, chunks: list[Chunk], sha: str, write_id: str,
          vectors: np.ndarray) -> pa.Table:  # fmt: skip
    n = len(chunks)
    return pa.table(
        {
            "being_id": pa.array([being_id] * n, pa.string()),
            "path": pa.array([found.path] * n, pa.string()),
            "kind": pa.array([found.kind] * n, pa.string()),
            "heading": pa.array([c.heading for c in chunks], pa.string()),
            "line_start": pa.array([c.line_start for c in chunks], pa.int32()),
            "line_end": pa.array([c.line_end for c in chunks], pa.int32()),
            "text": pa.array([c.text for c in chunks], pa.string()),
            "file_sha256": pa.array([sha] * n, pa.string()),
            # Which reindex wrote the row: the file's rows of earlier writes are deleted after it.
            "write_id": pa.array([write_id] * n, pa.string()),
            "vector": to_column(np.asarray(vectors, dtype=np.float32)),
        }
    )


def _save(con, being_id: str, path: str, size: int, mtime_ns: int, sha: str, key: str, chunks: int) -> None:
    con.execute(
        "INSERT OR REPLACE INTO journal_files "
        "(being_id, path, size, mtime_ns, sha256, index_key, chunks, indexed_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [being_id, path, size, mtime_ns, sha, key, chunks, utcnow()],
    )


def _ensure_indexes(table) -> None:
    lance.ensure_scalar_indexes(table, {"text": "FTS", "being_id": "BTREE"})


def reindex(
    con: duckdb.DuckDBPyConnection,
    db,
    workspace: Path,
    being_ids: Iterable[str],
    embedder: Embedder,
    progress: Progress | None = None,
    log: Callable[[str], None] | None = None,
) -> JournalIndexReport:
    """Bring `journal_chunks` in line with the memory files of these beings."""
    started = time.perf_counter()
    report = JournalIndexReport()
    key = index_key(embedder.model)
    table = lance.open_table(db, TABLE)
    if table is not None and table.schema.field("vector").type.list_size != embedder.dimension:
        # Another model's vectors: written again, every being's files (their state is cleared).
        if log:
            log(f"{TABLE}: vectors of another dimension (model changed); rebuilding the table")
        db.drop_table(TABLE)
        con.execute("DELETE FROM journal_files")
        table, report.rebuilt = None, True
    plans = []
    for being_id in being_ids:
        counts = report.beings[being_id] = BeingCounts()
        files = journal_files.memory_files(workspace, being_id)
        known = _known(con, being_id) if table is not None else {}
        todo = []
        for rel, found in files.items():
            st = found.file.stat()
            before = known.get(rel)
            usable = before is not None and before.index_key == key
            if usable and (before.size, before.mtime_ns) == (st.st_size, st.st_mtime_ns):
                counts.unchanged += 1
                counts.chunks += before.chunks
                continue
            todo.append((found, st, before))
        plans.append((being_id, counts, todo, sorted(known.keys() - files.keys())))
        counts.files = len(files)
    total = sum(len(todo) for _, _, todo, _ in plans)
    done = 0
    for being_id, counts, todo, removed in plans:
        for found, st, before in todo:
            if progress:
                progress(done, total, f"{being_id}/{found.path}")
            done += 1
            data = found.file.read_bytes()[: journal_files.MAX_FILE_BYTES]
            sha = _sha256(data)
            if before is not None and before.index_key == key and before.sha256 == sha:
                _save(con, being_id, found.path, st.st_size, st.st_mtime_ns, sha, key, before.chunks)
                counts.unchanged += 1  # touched, same content
                counts.chunks += before.chunks
                continue
            chunks = chunk_markdown(data.decode("utf-8", errors="replace"))
            stats = dict(embedder.stats)
            vectors = embedder.encode_cached(con, [c.embedded_text() for c in chunks])
            report.embedded += embedder.stats["embedded"] - stats["embedded"]
            report.cached += embedder.stats["cached"] - stats["cached"]
            write_id = uuid.uuid4().hex
            if chunks:
                rows = _rows(being_id, found, chunks, sha, write_id, vectors)
                if table is None:
                    table = db.create_table(TABLE, data=rows)
                else:
                    table.add(rows)
            if table is not None:
                table.delete(
                    lance.all_of(
                        lance.where(being_id=being_id, path=found.path),
                        lance.compare("write_id", "<>", write_id),
                    )
                )
            _save(con, being_id, found.path, st.st_size, st.st_mtime_ns, sha, key, len(chunks))
            if before is None:
                counts.new += 1
            else:
                counts.changed += 1
            counts.chunks += len(chunks)
            if log:
                log(f"{being_id}/{found.path}: {len(chunks)} chunks")
        if removed:
            if table is not None:
                table.delete(lance.all_of(lance.where(being_id=being_id), lance.where(path=removed)))
            con.execute(
                "DELETE FROM journal_files WHERE being_id = ? AND list_contains(?, path)", [being_id, removed]
            )
            counts.removed = len(removed)
    if table is not None:
        _ensure_indexes(table)
        if any(c.new or c.changed or c.removed for c in report.beings.values()):
            table.optimize(cleanup_older_than=KEEP_VERSIONS)
        report.rows = table.count_rows()
        report.version = table.version
    report.seconds = time.perf_counter() - started
    return report


@dataclass
class JournalHit:
    path: str
    kind: str
    heading: str
    line_start: int
    line_end: int
    text: str
    score: float
    parts: dict[str, float] = field(default_factory=dict)


def open_chunks(lance_path: Path):
    """`journal_chunks`, or None before the first index; each read sees the latest committed version."""
    return lance.open_table(lance.reader(lance_path), TABLE)


def search(table, being_id: str, query: str, query_vector: np.ndarray, k: int = 5,
           candidates: int = 50, rrf_k: int = 60) -> list[JournalHit]:  # fmt: skip
    """The being's k best chunks: vector and full-text candidates fused by reciprocal rank."""
    from mindflow.recall import primitives, rerank

    if table is None or k <= 0:
        return []
    where = lance.where(being_id=being_id)
    limit = max(candidates, k)
    by_vector = (
        table.search(np.asarray(query_vector, dtype=np.float32), vector_column_name="vector")
        .distance_type("cosine")
        .where(where, prefilter=True)
        .select([*COLUMNS, "_distance"])
        .limit(limit)
        .to_arrow()
        .to_pylist()
    )
    text = primitives.text_candidates(table, query, where, limit, COLUMNS)
    by_text = text.to_pylist() if text is not None else []

    def key(row: dict) -> tuple[str, int]:
        return row["path"], row["line_start"]

    rows: dict[tuple[str, int], dict] = {}
    for row in by_vector + by_text:
        rows.setdefault(key(row), row)
    cosine = {key(row): 1.0 - float(row["_distance"]) for row in by_vector}
    bm25 = {key(row): float(row["_score"]) for row in by_text}
    fused = rerank.fuse_ranked([[key(r) for r in by_vector], [key(r) for r in by_text]], [1.0, 1.0], rrf_k)
    hits = []
    for found in fused[:k]:
        row = rows[found.key]
        hits.append(
            JournalHit(
                path=row["path"],
                kind=row["kind"],
                heading=row["heading"] or "",
                line_start=int(row["line_start"]),
                line_end=int(row["line_end"]),
                text=row["text"],
                score=found.score,
                parts={
                    "cosine": cosine.get(found.key, 0.0),
                    "bm25": bm25.get(found.key, 0.0),
                    "vector_rank": float(found.ranks[0]),
                    "text_rank": float(found.ranks[1]),
                },
            )
        )
    return hits
