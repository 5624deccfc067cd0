"""The inbox: landing files for a being, and ingesting landed files into `episodes`."""

from __future__ import annotations

import bisect
import hashlib
import json
import os
import re
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
from filelock import FileLock

from mindflow import store
from mindflow.config import MAX_EPISODE_CHARS
from mindflow.errors import MindflowError
from mindflow.files import atomic_write
from mindflow.ingest import FORMATS, REUSED_ID, detect_format, parse_bytes
from mindflow.models import Episode, ParseResult, QuarantinedLine, utcnow

BEING_ID_PATTERN = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
DONE = ".done"
QUARANTINE = ".quarantine"
LOCKS = ".locks"
_SUFFIX_FOR_FORMAT = {"jsonl": ".jsonl", "openclaw": ".jsonl", "daily-md": ".md"}


def validate_being_id(being_id: str) -> str:
    """A being id is a lower-case slug: it names folders, partitions and filters."""
    if not isinstance(being_id, str) or not BEING_ID_PATTERN.fullmatch(being_id):
        raise MindflowError(
            f"invalid being id {being_id!r}: use 1-64 lower-case letters, digits, '-' or '_', "
            "starting with a letter or digit"
        )
    return being_id


@dataclass(frozen=True)
class LandedFile:
    """A file waiting in (or done from) a being's inbox."""

    being_id: str
    path: Path
    sha256: str
    fmt: str | None = None  # None when the file's format cannot be told
    error: str | None = None


@dataclass
class LandReport:
    path: Path
    episodes: int
    quarantined: int
    heartbeats: int
    first_day: date | None
    last_day: date | None
    already: bool = False  # identical content was already pending at `path`: nothing was copied


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def text_sha256(text: str) -> str:
    """The sha256 a deleted text is known by, everywhere (the DELETE audit rows, the being's
    `loop/<being>/deleted.jsonl`, ingestion, POST episodes): of the text exactly as the parsers
    give it (stripped of surrounding whitespace, nothing else), UTF-8."""
    return _sha256(text.encode("utf-8"))


@dataclass(frozen=True)
class Deleted:
    """What a being's permanent forgets deleted, as ingestion must refuse it: the episode ids (its
    marks) and the sha256 of each deleted text (its DELETE audit rows), never a text."""

    episode_ids: frozenset[str] = frozenset()
    text_sha256: frozenset[str] = frozenset()

    def refuses(self, episode: Episode, sha256: str | None = None) -> bool:
        """The episode was deleted for good: by its id, or its very text under another id
        (`sha256`: its text's, when the caller holds it already)."""
        if episode.episode_id in self.episode_ids:
            return True
        return bool(self.text_sha256) and (sha256 or text_sha256(episode.text)) in self.text_sha256

    def quotes(self, raw: str) -> bool:
        """A line that is no episode (it would be quarantined) holds a deleted episode: its id, or
        its text as the `text` field."""
        if not (self.episode_ids or self.text_sha256):
            return False
        try:
            record = json.loads(raw)
        except ValueError:
            return False
        if not isinstance(record, dict):
            return False
        text = record.get("text")
        return record.get("id") in self.episode_ids or (
            isinstance(text, str) and text_sha256(text) in self.text_sha256
        )


def inbox_lock(inbox: Path, being_id: str, timeout: float) -> FileLock:
    """The lock held to append to or move one of a being's inbox files: one per being, outside its folder.

    An flock dies with its process, so a writer killed mid-append never blocks the next
    one. The lock file itself stays (removing a lock file another process waits on lets
    two writers in at once), which is why it lives in `inbox/.locks/`, never among the
    being's files, and why there is one per being rather than one per inbox file.
    """
    folder = inbox / LOCKS
    folder.mkdir(parents=True, exist_ok=True)
    return FileLock(str(folder / f"{being_id}.lock"), timeout=timeout)


def _safe_name(name: str) -> str:
    """The name a file lands under, one ingestion reads.

    Ingestion skips hidden files (temporary files of atomic writes start with "."), and
    a name that is not UTF-8 cannot be stored in an episode's source_ref.
    """
    name = name.encode("utf-8", "surrogateescape").decode("utf-8", "replace").lstrip(".")
    return name or "landed"


def land_file(
    inbox: Path, source: Path, being_id: str, fmt: str | None = None, *, max_chars: int = MAX_EPISODE_CHARS
) -> LandReport:
    """Validate a file and place it in the being's inbox, atomically; the sensor takes it from there.

    A hidden file (".notes.jsonl") lands without its leading dots, so it is ingested.
    """
    validate_being_id(being_id)
    if fmt is not None and fmt not in FORMATS:
        raise MindflowError(f"unknown format {fmt!r}; use one of: {', '.join(FORMATS)}")
    if source.is_dir():
        raise MindflowError(f"{source} is a folder: give one file (mindflow ingest FILE --being ID)")
    if not source.is_file():
        raise MindflowError(f"{source}: no such file")
    data = source.read_bytes()
    name = _safe_name(source.name)
    fmt = fmt or detect_format(source, name)
    result = parse_bytes(data, name, being_id, fmt, max_chars=max_chars)
    if not result.episodes and not result.heartbeats:
        reasons = "; ".join(f"line {q.line}: {q.reason}" for q in result.quarantined[:3])
        raise MindflowError(
            f"{source}: no valid episode found as {fmt}" + (f" ({reasons})" if reasons else "")
        )
    if fmt == "daily-md" and not name.endswith(".md"):
        raise MindflowError(f"{source}: daily markdown logs must be named YYYY-MM-DD.md")
    if fmt != "daily-md" and not name.endswith(".jsonl"):
        name = f"{Path(name).stem}{_SUFFIX_FOR_FORMAT[fmt]}"
    sha = _sha256(data)
    target = _free_name(inbox / being_id, name, sha)
    # A second landing under another name is found at the name carrying its checksum.
    already = target is None or (target.is_file() and _sha256(target.read_bytes()) == sha)
    if not already:
        atomic_write(target, data)
    days = [e.day for e in result.episodes]
    return LandReport(
        already=already,
        path=target or (inbox / being_id / name),
        episodes=len(result.episodes),
        quarantined=len(result.quarantined),
        heartbeats=result.heartbeats,
        first_day=min(days) if days else None,
        last_day=max(days) if days else None,
    )


def _entry_end(lines: list[bytes], start: int) -> int:
    """The line after a daily log entry that starts at index `start` (its body lines follow it)."""
    end = start + 1
    while end < len(lines):
        stripped = lines[end].lstrip()
        if stripped.startswith(b"#") or (stripped[:1] in (b"-", b"*") and b"[" in stripped[:4]):
            break
        end += 1
    return end


def blank_episodes(
    data: bytes,
    path: Path,
    being_id: str,
    episode_ids: set[str],
    *,
    max_chars: int = MAX_EPISODE_CHARS,
    quotes: Callable[[bytes], bool] | None = None,
) -> tuple[bytes, int]:
    """The inbox file `data` with the lines of `episode_ids` blank, and how many lines were blanked.

    Line numbers stay, hence the other episodes' source_ref and a daily log's bullet times. A
    daily-log entry loses its body lines too, a paragraph all its lines, never the next note's.
    `quotes` picks further lines to blank among those of no episode that stays (a quarantined
    copy of a deleted text). What a permanent forget erased leaves no line behind this way, in
    the erase and at ingestion alike.
    """
    from mindflow.ingest import episode_hash_id

    try:
        fmt = detect_format(path)
    except MindflowError:
        return data, 0
    result = parse_bytes(data, path.name, being_id, fmt, max_chars=max_chars)
    lines = data.split(b"\n")
    blank: set[int] = set()
    others: set[int] = set()  # lines of episodes that stay: they must keep matching DuckDB
    starts = sorted(int(e.source_ref.rsplit(":", 1)[1]) - 1 for e in result.episodes if e.source_ref)
    for e in result.episodes:
        if not e.source_ref:
            continue
        start = int(e.source_ref.rsplit(":", 1)[1]) - 1
        ids = {e.episode_id}
        if fmt == "daily-md":
            # Versions before content ids stored a daily-log bullet under the id of its time.
            ids.add(episode_hash_id(e.being_id, e.ts, e.speaker, e.text))
        if not ids.isdisjoint(episode_ids):
            end = start + 1
            if fmt == "daily-md":
                # An entry's body or a paragraph's lines go with it, never the next note's lines.
                following = bisect.bisect_right(starts, start)
                end = min(
                    _entry_end(lines, start), starts[following] if following < len(starts) else len(lines)
                )
            blank.update(range(start, min(end, len(lines))))
        else:
            others.add(start)
    if quotes is not None:
        for i, raw in enumerate(lines):
            if i in blank or i in others or not raw.strip():
                continue
            if quotes(raw):
                blank.add(i)
    if not blank:
        return data, 0
    kept = [b"" if i in blank else raw for i, raw in enumerate(lines)]
    return b"\n".join(kept), len(blank)


def _free_name(folder: Path, name: str, sha: str) -> Path | None:
    """Where to put a file named `name`; None when identical content already sits there."""
    target = folder / name
    if not target.exists():
        return target
    if _sha256(target.read_bytes()) == sha:
        return None
    stem, suffix = os.path.splitext(name)
    if name.endswith(".md") and re.fullmatch(r"\d{4}-\d{2}-\d{2}", stem):
        # The date in a daily log's name is its data; keep it in a sub-folder instead.
        return folder / sha[:8] / name
    return folder / f"{stem}-{sha[:8]}{suffix}"


def has_folder(inbox: Path, being_id: str) -> bool:
    """Whether the being has a folder in the inbox, pending or done: every episode comes through one
    (`mindflow ingest` and the API's POST episodes alike), and ingested files move to `.done/`."""
    validate_being_id(being_id)
    return (inbox / being_id).is_dir() or (inbox / DONE / being_id).is_dir()


def pending_files(inbox: Path) -> list[LandedFile]:
    """Files waiting in `inbox/<being_id>/`, in a stable order."""
    found: list[LandedFile] = []
    if not inbox.is_dir():
        return found
    for being_dir in sorted(p for p in inbox.iterdir() if p.is_dir() and not p.name.startswith(".")):
        if not BEING_ID_PATTERN.fullmatch(being_dir.name):
            continue
        for path in sorted(being_dir.rglob("*")):
            if path.is_file() and path.suffix in (".jsonl", ".md") and not path.name.startswith("."):
                found.append(_landed(being_dir.name, path, _sha256(path.read_bytes())))
    return found


def _landed(being_id: str, path: Path, sha: str) -> LandedFile:
    if (safe := _safe_name(path.name)) != path.name:
        # Dropped in by hand, not landed: a name that is not UTF-8 cannot go into source_ref.
        return LandedFile(being_id, path, sha, None, f"file name {safe!r} is not valid UTF-8; rename it")
    try:
        return LandedFile(being_id, path, sha, detect_format(path))
    except MindflowError as exc:
        return LandedFile(being_id, path, sha, None, str(exc))


# Parse results by content. `mindflow run ingest` parses the pending files to plan its
# runs, then the ingest asset parses them again in the same process: the second time
# comes from here. Bounded by the bytes of the files it holds; their parses take ~2.8x
# that in memory (measured on the LoCoMo inbox files), so ~90 MB at most.
_PARSED: OrderedDict[tuple[str, str, str, str, int], tuple[ParseResult, int]] = OrderedDict()
_PARSED_LOCK = threading.Lock()
PARSED_CACHE_BYTES = 32 * 1024 * 1024


def parse_landed(landed: LandedFile, *, max_chars: int = MAX_EPISODE_CHARS) -> ParseResult:
    """The parse of a landed file (its format known), from the cache when its content was parsed before."""
    key = (landed.sha256, landed.path.name, landed.being_id, landed.fmt, max_chars)
    with _PARSED_LOCK:
        cached = _PARSED.get(key)
        if cached is not None:
            _PARSED.move_to_end(key)
            return cached[0]
    data = landed.path.read_bytes()
    result = parse_bytes(data, landed.path.name, landed.being_id, landed.fmt, max_chars=max_chars)
    # Kept only when the bytes parsed are the ones the key names (the file may have grown).
    if len(data) <= PARSED_CACHE_BYTES and _sha256(data) == landed.sha256:
        with _PARSED_LOCK:
            _PARSED[key] = (result, len(data))
            held = sum(size for _, size in _PARSED.values())
            while held > PARSED_CACHE_BYTES:
                held -= _PARSED.popitem(last=False)[1][1]
    return result


def pending_days(inbox: Path, *, max_chars: int = MAX_EPISODE_CHARS) -> dict[str, list[date]]:
    """The days covered by pending files, per being (what an ingest run must cover)."""
    days: dict[str, set[date]] = {}
    for landed in pending_files(inbox):
        if landed.fmt is None:
            continue
        result = parse_landed(landed, max_chars=max_chars)
        days.setdefault(landed.being_id, set()).update(e.day for e in result.episodes)
    return {b: sorted(d) for b, d in days.items()}


def plan_key_ranges(wanted: list[date], keys: list[str], max_gap: int) -> list[tuple[str, str]]:
    """Ranges of partition keys (first, last) covering the `wanted` days, split where more than
    `max_gap` other keys lie between two of them.

    `keys` are the `days` partitions in Dagster's order (the order they were added: an old
    conversation imported late comes after newer days), every wanted day among them. A run
    over a range ingests the days it names; the other days inside it are ingested again,
    which adds nothing and records their row counts anew.
    """
    position = {key: i for i, key in enumerate(keys)}
    ranges: list[tuple[int, int]] = []
    for i in sorted({position[d.isoformat()] for d in wanted}):
        if ranges and i - ranges[-1][1] - 1 <= max_gap:
            ranges[-1] = (ranges[-1][0], i)
        else:
            ranges.append((i, i))
    return [(keys[first], keys[last]) for first, last in ranges]


@dataclass
class IngestReport:
    """What one ingest run did."""

    files: int = 0
    parsed: int = 0
    new: int = 0
    duplicates: int = 0
    out_of_range: int = 0
    quarantined: int = 0
    heartbeats: int = 0
    deleted: int = 0  # lines refused: a permanent forget deleted their episode
    moved_to_done: int = 0
    beings: set[str] = field(default_factory=set)
    new_per_being: dict[str, int] = field(default_factory=dict)
    quarantine_files: list[str] = field(default_factory=list)


EPISODE_SCHEMA = pa.schema(
    [
        ("being_id", pa.string()),
        ("episode_id", pa.string()),
        ("session_id", pa.string()),
        ("ts", pa.timestamp("us")),
        ("day", pa.date32()),
        ("speaker", pa.string()),
        ("role", pa.string()),
        ("text", pa.string()),
        ("kind", pa.string()),
        ("confidence", pa.float64()),
        ("tags", pa.list_(pa.string())),
        ("importance", pa.float64()),
        ("source", pa.string()),
        ("source_ref", pa.string()),
        ("format", pa.string()),
        ("trigger", pa.string()),
    ]
)


def episodes_table(episodes: list[Episode]) -> pa.Table:
    columns = {name: [] for name in EPISODE_SCHEMA.names}
    for e in episodes:
        for name in EPISODE_SCHEMA.names:
            value = e.day if name == "day" else getattr(e, name)
            columns[name].append(list(value) if name == "tags" else value)
    return pa.table(columns, schema=EPISODE_SCHEMA)


def _write_quarantine(inbox: Path, landed: LandedFile, result: ParseResult) -> str | None:
    if not result.quarantined:
        return None
    target = inbox / QUARANTINE / landed.being_id / f"{landed.path.stem}-{landed.sha256[:8]}.jsonl"
    lines = [
        json.dumps(
            {
                "being_id": landed.being_id,
                "file": str(landed.path.name),
                "line": q.line,
                "reason": q.reason,
                "raw": q.raw,
            },
            ensure_ascii=False,
        )
        for q in result.quarantined
    ]
    # Same content, same file name: re-parsing a file rewrites its quarantine, never appends twice.
    # A file name that is not UTF-8 is written as escapes, still valid JSON.
    atomic_write(target, ("\n".join(lines) + "\n").encode("utf-8", "backslashreplace"))
    return str(target)


def _done_files(con: duckdb.DuckDBPyConnection, inbox: Path, start: date, end: date) -> list[LandedFile]:
    """Files already ingested whose days overlap [start, end]: backfills re-derive from them."""
    rows = con.execute(
        "SELECT being_id, file_name, sha256 FROM inbox_files "
        "WHERE first_day <= ? AND last_day >= ? ORDER BY being_id, file_name",
        [end, start],
    ).fetchall()
    files = []
    for being_id, file_name, sha in rows:
        path = inbox / DONE / being_id / file_name
        if path.is_file():
            files.append(_landed(being_id, path, sha))
    return files


def ingest(
    con: duckdb.DuckDBPyConnection,
    inbox: Path,
    start: date,
    end: date,
    *,
    now: datetime | None = None,
    max_chars: int = MAX_EPISODE_CHARS,
    days: set[date] | None = None,
    before_storing: Callable[[set[str]], None] | None = None,
    deleted: Callable[[str], Deleted] | None = None,
) -> IngestReport:
    """Upsert the episodes of days [start, end] (only `days` of them, when given) from pending and done
    inbox files. `before_storing` is called with the beings of the episodes about to be stored,
    before they are: what must know a being before any of its episodes exist (Dagster's `beings`
    partitions) is told first, so a process killed between the two leaves no stored being unknown.

    A pending file moves to `inbox/.done/` once all its episodes are stored, by
    this run or earlier ones; until then it waits for runs covering its other days. Episodes are keyed
    by (being_id, episode_id), so the same content ingested twice adds nothing; an id
    sent again with other text is quarantined.

    `deleted` tells what a being's permanent forgets deleted: such an episode (its id, or its
    text under another id) is never stored again nor quarantined, and a pending file moves to
    `.done` without its lines, so the text is kept nowhere (`report.deleted` counts them).
    """
    now = now or utcnow()
    report = IngestReport()

    def covered(day: date) -> bool:
        return start <= day <= end and (days is None or day in days)

    pending = pending_files(inbox)
    done = _done_files(con, inbox, start, end)
    pending_shas = {(p.being_id, p.sha256) for p in pending}
    parsed: list[tuple[LandedFile, ParseResult, bool]] = []
    for landed in pending + [d for d in done if (d.being_id, d.sha256) not in pending_shas]:
        is_pending = DONE not in landed.path.relative_to(inbox).parts
        if landed.fmt is None:
            if is_pending:
                # A file that cannot be read at all moves to quarantine whole, with its reason.
                report.quarantined += 1
                report.quarantine_files.append(_quarantine_whole_file(inbox, landed, landed.error))
            continue
        parsed.append((landed, parse_landed(landed, max_chars=max_chars), is_pending))

    refused: dict[Path, tuple[set[str], Deleted]] = {}
    if deleted is not None:
        parsed, report.deleted = _without_deleted(parsed, deleted, refused)
    selected: list[Episode] = []
    finished: list[tuple[LandedFile, ParseResult]] = []
    waiting: list[tuple[LandedFile, ParseResult, list[Episode]]] = []
    for landed, result, is_pending in _without_reused_ids(con, parsed):
        report.files += 1
        report.parsed += len(result.episodes)
        in_range = [e for e in result.episodes if covered(e.day)]
        report.out_of_range += len(result.episodes) - len(in_range)
        selected.extend(in_range)
        if is_pending:
            report.quarantined += len(result.quarantined)
            report.heartbeats += result.heartbeats
            written = _write_quarantine(inbox, landed, result)
            if written:
                report.quarantine_files.append(written)
            if len(in_range) == len(result.episodes):
                finished.append((landed, result))
            else:
                outside = [e for e in result.episodes if not covered(e.day)]
                waiting.append((landed, result, outside))

    report.beings = {e.being_id for e in selected}
    if selected:
        if before_storing is not None:
            before_storing(report.beings)
        table = _without_stored_daily_notes(con, episodes_table(_dedupe(selected)))
        before = _counts_per_being(con, report.beings)
        with store.registered(con, "incoming_episodes", table):
            con.execute(
                "INSERT INTO episodes SELECT *, ?::TIMESTAMP AS ingested_at FROM incoming_episodes "
                "ON CONFLICT (being_id, episode_id) DO NOTHING",
                [now],
            )
        after = _counts_per_being(con, report.beings)
        report.new_per_being = {b: after.get(b, 0) - before.get(b, 0) for b in sorted(report.beings)}
        report.new = sum(report.new_per_being.values())
        report.duplicates = len(selected) - report.new

    # A file whose other days earlier runs already ingested is done as well.
    finished += [(landed, result) for landed, result, rest in waiting if _all_stored(con, rest)]
    for landed, result in finished:
        report.moved_to_done += _record_and_move(
            con, inbox, landed, result, now, refused.get(landed.path), max_chars
        )
    return report


def _without_deleted(
    parsed: list[tuple[LandedFile, ParseResult, bool]],
    deleted: Callable[[str], Deleted],
    refused: dict[Path, tuple[set[str], Deleted]],
) -> tuple[list[tuple[LandedFile, ParseResult, bool]], int]:
    """The parses without the episodes a permanent forget deleted, and without malformed lines
    holding one (quarantine would keep the text); `refused` gets, per file, the ids to blank and
    what the being's forgets deleted. Returns the parses and how many lines were refused."""
    known: dict[str, Deleted] = {}
    out, count = [], 0
    for landed, result, is_pending in parsed:
        gone = known.get(landed.being_id)
        if gone is None:
            gone = known[landed.being_id] = deleted(landed.being_id)
        dropped = {id(e) for e in result.episodes if gone.refuses(e)}
        quoted = {id(q) for q in result.quarantined if gone.quotes(q.raw)}
        if not dropped and not quoted:
            out.append((landed, result, is_pending))
            continue
        count += len(dropped) + len(quoted)
        ids = {e.episode_id for e in result.episodes if id(e) in dropped}
        refused[landed.path] = (ids, gone)
        # A new ParseResult: the one from parse_landed is shared through its cache.
        kept = [e for e in result.episodes if id(e) not in dropped]
        quarantined = [q for q in result.quarantined if id(q) not in quoted]
        out.append((landed, ParseResult(kept, quarantined, result.heartbeats), is_pending))
    return out, count


def _without_reused_ids(
    con: duckdb.DuckDBPyConnection, parsed: list[tuple[LandedFile, ParseResult, bool]]
) -> list[tuple[LandedFile, ParseResult, bool]]:
    """The parses with every episode whose id already came with other text moved to quarantine.

    The first text keeps the id: a stored episode's, then one from a file already done
    (a backfill reads those again), then pending files in order. Whole files are checked,
    not only the run's days, so which line is quarantined never depends on the runs.
    The parser has already done this within each file.
    """
    episodes = [e for _, result, _ in parsed for e in result.episodes]
    if not episodes:
        return parsed
    with store.registered(con, "file_keys", _keys(episodes)):
        stored = con.execute(
            "SELECT being_id, episode_id, text, source_ref FROM episodes "
            "SEMI JOIN file_keys USING (being_id, episode_id)"
        ).fetchall()
    firsts = {(b, i): (text, f"stored from {ref}") for b, i, text, ref in stored}
    reused: dict[int, list[tuple[Episode, str]]] = {}
    # sorted() is stable: done files (False) first, each group in its own order.
    for index in sorted(range(len(parsed)), key=lambda i: parsed[i][2]):
        for e in parsed[index][1].episodes:
            text, where = firsts.setdefault((e.being_id, e.episode_id), (e.text, f"at {e.source_ref}"))
            if text != e.text:
                reused.setdefault(index, []).append((e, where))
    if not reused:
        return parsed
    checked = list(parsed)
    for index, pairs in reused.items():
        landed, result, is_pending = parsed[index]
        dropped = {id(e) for e, _ in pairs}
        quarantined = list(result.quarantined)
        # A done file's reused ids were quarantined when it was pending.
        if is_pending:
            raw_lines = landed.path.read_bytes().split(b"\n")
            for e, where in pairs:
                line_no = int(e.source_ref.rsplit(":", 1)[1])
                raw = raw_lines[line_no - 1] if line_no <= len(raw_lines) else b""
                reason = f"{REUSED_ID}: {e.episode_id!r} is {where}"
                quarantined.append(
                    QuarantinedLine(
                        landed.path.name, line_no, reason, raw.rstrip(b"\r").decode("utf-8", "replace")
                    )
                )
            quarantined.sort(key=lambda q: q.line)
        # A new ParseResult: the one from parse_landed is shared through its cache.
        kept = [e for e in result.episodes if id(e) not in dropped]
        checked[index] = (landed, ParseResult(kept, quarantined, result.heartbeats), is_pending)
    return checked


def _quarantine_whole_file(inbox: Path, landed: LandedFile, reason: str) -> str:
    result = ParseResult(quarantined=[QuarantinedLine(landed.path.name, 0, reason, "")])
    written = _write_quarantine(inbox, landed, result)
    keep = inbox / QUARANTINE / landed.being_id / f"{landed.path.name}-{landed.sha256[:8]}"
    shutil.move(str(landed.path), keep)
    return written


def _keys(episodes: list[Episode]) -> pa.Table:
    """The episodes' (being_id, episode_id) keys, to join against `episodes`."""
    return pa.table(
        {"being_id": [e.being_id for e in episodes], "episode_id": [e.episode_id for e in episodes]}
    )


def _all_stored(con: duckdb.DuckDBPyConnection, episodes: list[Episode]) -> bool:
    with store.registered(con, "file_keys", _keys(episodes)):
        missing = con.execute(
            "SELECT count(*) FROM file_keys k ANTI JOIN episodes e USING (being_id, episode_id)"
        ).fetchall()[0][0]
    return missing == 0


def _without_stored_daily_notes(con: duckdb.DuckDBPyConnection, table: pa.Table) -> pa.Table:
    """The incoming episodes less the daily-log notes already stored under another id.

    A daily note is its day, its text and which repeat of that text on the day it is. Its
    id says as much today, but versions before numbered bullets by line, and ingestion
    reads done files again (backfills, runs whose days they cover): without this, each
    bullet stored by such a version would come back once under its new id.
    """
    if not pc.any(pc.equal(table.column("format"), "daily-md")).as_py():
        return table
    with store.registered(con, "incoming_notes", table):
        stored = con.execute(
            """
            WITH incoming AS (
                SELECT being_id, episode_id, day, text,
                       row_number() OVER (PARTITION BY being_id, day, text ORDER BY ts, episode_id) AS n
                FROM incoming_notes WHERE format = 'daily-md'),
            kept AS (
                SELECT being_id, episode_id, day, text,
                       row_number() OVER (PARTITION BY being_id, day, text ORDER BY ts, episode_id) AS n
                FROM episodes SEMI JOIN (SELECT DISTINCT being_id, day FROM incoming) USING (being_id, day)
                WHERE format = 'daily-md')
            SELECT i.episode_id FROM incoming i JOIN kept k USING (being_id, day, text, n)
            WHERE k.episode_id <> i.episode_id
            """
        ).fetchall()
    if not stored:
        return table
    drop = pa.array([r[0] for r in stored], pa.string())
    return table.filter(pc.invert(pc.is_in(table.column("episode_id"), drop)))


def _dedupe(episodes: list[Episode]) -> list[Episode]:
    seen: dict[tuple[str, str], Episode] = {}
    for e in episodes:
        seen.setdefault((e.being_id, e.episode_id), e)
    return list(seen.values())


def _counts_per_being(con: duckdb.DuckDBPyConnection, beings: set[str]) -> dict[str, int]:
    if not beings:
        return {}
    rows = con.execute(
        "SELECT being_id, count(*) FROM episodes WHERE list_contains(?, being_id) GROUP BY 1",
        [sorted(beings)],
    ).fetchall()
    return dict(rows)


def _record_and_move(
    con: duckdb.DuckDBPyConnection,
    inbox: Path,
    landed: LandedFile,
    result: ParseResult,
    now: datetime,
    refused: tuple[set[str], Deleted] | None = None,
    max_chars: int = MAX_EPISODE_CHARS,
) -> bool:
    """Move an ingested file to `.done` and record it; False when it changed since it was read.

    With `refused` (episodes a permanent forget deleted) the file goes without their lines.
    """
    days = [e.day for e in result.episodes]
    sha = landed.sha256
    # Writers (the read API's POST episodes) append under this lock: hold it, and leave a
    # file that grew since it was read for the next run, so no appended line is lost.
    with inbox_lock(inbox, landed.being_id, timeout=60):
        data = landed.path.read_bytes()
        if _sha256(data) != landed.sha256:
            return False
        if refused:
            ids, gone = refused
            data, _ = blank_episodes(
                data,
                landed.path,
                landed.being_id,
                ids,
                max_chars=max_chars,
                quotes=lambda raw: gone.quotes(raw.decode("utf-8", "replace")),
            )
            sha = _sha256(data)
        target = _free_name(inbox / DONE / landed.being_id, landed.path.name, sha)
        file_name = landed.path.name
        if target is not None:
            target.parent.mkdir(parents=True, exist_ok=True)
            if refused:
                # Written whole, then the landed file goes: a kill in between lands it again.
                atomic_write(target, data)
                landed.path.unlink()
            else:
                shutil.move(str(landed.path), target)
            file_name = str(target.relative_to(inbox / DONE / landed.being_id))
        else:
            landed.path.unlink()
    con.execute(
        "INSERT INTO inbox_files VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
        "ON CONFLICT (being_id, file_name) DO NOTHING",
        [
            landed.being_id,
            file_name,
            sha,
            landed.fmt,
            min(days) if days else None,
            max(days) if days else None,
            len(result.episodes),
            len(result.quarantined),
            result.heartbeats,
            now,
        ],
    )
    return True
