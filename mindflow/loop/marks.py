"""Marks: the tombstones and pins an agent or a person sets, appended by the API, folded in by runs.

The read API never opens DuckDB, yet a forget or a pin must hold on every server at
once. So each is one line in `loop/<being>/marks.jsonl`: every server re-reads the file
when it changes and applies the marks to what it returns, and the next run that writes
nodes folds them into DuckDB (`mindflow.loop.fold`). The file is never rewritten while
memory may still need it: a run that started before a forget publishes the memory
again, and the tombstone still hides it until a later run archives it.

A mark holds refs and episode ids, never content: after a permanent forget nothing of
the text may remain under MINDFLOW_HOME.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

from mindflow.errors import MindflowError
from mindflow.files import ParsedFiles, append_locked, atomic_write
from mindflow.inbox import validate_being_id
from mindflow.models import utcnow

log = logging.getLogger(__name__)

# forget: soft (archived, restorable); delete: permanent, erased by the `forget` job, final.
FORGETTING = ("forget", "restore", "delete")
PINNING = ("pin", "unpin")
MARK_OPS = FORGETTING + PINNING
MARKS_FILE = "marks.jsonl"


@dataclass(frozen=True)
class Mark:
    """One decision about memories: forget, restore, delete (permanent), pin or unpin."""

    mark_id: str  # uuid4 hex
    being_id: str
    op: str
    refs: tuple[str, ...]  # memory refs (n-...), fact refs (f-...), relation refs (r-...)
    episode_ids: tuple[str, ...]  # the source episodes of the refs (forget, restore, delete)
    ts: datetime  # naive UTC
    actor: str  # user | agent
    proposal_id: str | None = None


def new_mark(
    being_id: str,
    op: str,
    refs: Iterable[str],
    episode_ids: Iterable[str] = (),
    actor: str = "user",
    proposal_id: str | None = None,
    ts: datetime | None = None,
) -> Mark:
    if op not in MARK_OPS:
        raise MindflowError(f"unknown mark {op!r}; use one of {', '.join(MARK_OPS)}")
    return Mark(
        mark_id=uuid.uuid4().hex,
        being_id=validate_being_id(being_id),
        op=op,
        refs=tuple(dict.fromkeys(refs)),
        episode_ids=tuple(dict.fromkeys(episode_ids)),
        ts=ts or utcnow(),
        actor=actor,
        proposal_id=proposal_id,
    )


def marks_path(loop_dir: Path, being_id: str) -> Path:
    return loop_dir / validate_being_id(being_id) / MARKS_FILE


def append_marks(loop_dir: Path, marks: Sequence[Mark]) -> None:
    """Append marks durably (one write, fsync); all of one being's marks share one file."""
    by_being: dict[str, list[Mark]] = {}
    for mark in marks:
        by_being.setdefault(mark.being_id, []).append(mark)
    for being_id, batch in by_being.items():
        data = "".join(_to_line(m) for m in batch).encode("utf-8")
        path = marks_path(loop_dir, being_id)
        if not path.exists():  # the being's first mark: none is folded in yet
            write_folded(loop_dir, being_id, None, utcnow())
        append_locked(path, data)


def _to_line(mark: Mark) -> str:
    record = {**asdict(mark), "ts": mark.ts.isoformat()}
    return json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"


def _from_line(raw: bytes) -> Mark:
    record = json.loads(raw)
    ts = datetime.fromisoformat(record["ts"])
    if ts.tzinfo is not None:
        ts = ts.astimezone(UTC).replace(tzinfo=None)
    op = str(record["op"])
    if op not in MARK_OPS:
        raise ValueError(f"unknown op {op!r}")
    return Mark(
        mark_id=str(record["mark_id"]),
        being_id=str(record["being_id"]),
        op=op,
        refs=tuple(str(r) for r in record.get("refs") or ()),
        episode_ids=tuple(str(e) for e in record.get("episode_ids") or ()),
        ts=ts,
        actor=str(record.get("actor") or "user"),
        proposal_id=record.get("proposal_id"),
    )


def read_marks(loop_dir: Path, being_id: str) -> list[Mark]:
    """The being's marks in the order they were set; a torn line is skipped with a warning."""
    path = marks_path(loop_dir, being_id)
    try:
        data = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        return []
    return _parse(data, path, being_id)


def _parse(data: bytes, path: Path, being_id: str) -> list[Mark]:
    out = []
    for number, raw in enumerate(data.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            mark = _from_line(raw)
        except (ValueError, KeyError, TypeError) as exc:
            log.warning("skipped unreadable mark %s:%d (%s)", path, number, exc)
            continue
        if mark.being_id == being_id:
            out.append(mark)
    return out


@dataclass(frozen=True)
class MarkState:
    """What a being's marks say now: which refs are hidden, which are pinned."""

    forgotten: frozenset[str] = frozenset()  # hidden: soft-forgotten or deleted
    forgotten_episodes: frozenset[str] = frozenset()
    deleted: frozenset[str] = frozenset()  # permanently: a restore no longer applies
    deleted_episodes: frozenset[str] = frozenset()
    pinned: frozenset[str] = frozenset()
    unpinned: frozenset[str] = frozenset()  # explicitly unpinned since a pin

    def hides(self, ref: str, episode_ids: Iterable[str] = ()) -> bool:
        if ref in self.forgotten:
            return True
        return bool(self.forgotten_episodes) and any(e in self.forgotten_episodes for e in episode_ids)

    def is_deleted(self, ref: str, episode_ids: Iterable[str] = ()) -> bool:
        if ref in self.deleted:
            return True
        return bool(self.deleted_episodes) and any(e in self.deleted_episodes for e in episode_ids)


def state_of(marks: Iterable[Mark]) -> MarkState:
    """The state after applying the marks in order: the latest decision about a ref wins,
    except that a permanent delete is final."""
    tracker = MarkTracker()
    for mark in marks:
        tracker.apply(mark)
    return tracker.state()


class MarkTracker:
    """The marks applied one at a time, so a fold can tell what each of them changed."""

    def __init__(self) -> None:
        self.forgotten: dict[str, bool] = {}
        self.forgotten_episodes: dict[str, bool] = {}
        self.deleted: set[str] = set()
        self.deleted_episodes: set[str] = set()
        self.pinned: dict[str, bool] = {}

    def apply(self, mark: Mark) -> None:
        if mark.op in FORGETTING:
            hide = mark.op != "restore"
            for ref in mark.refs:
                if ref not in self.deleted:
                    self.forgotten[ref] = hide
            for episode in mark.episode_ids:
                if episode not in self.deleted_episodes:
                    self.forgotten_episodes[episode] = hide
            if mark.op == "delete":
                self.deleted.update(mark.refs)
                self.deleted_episodes.update(mark.episode_ids)
        else:
            for ref in mark.refs:
                self.pinned[ref] = mark.op == "pin"

    def hides(self, ref: str, episode_ids: Iterable[str] = ()) -> bool:
        """As `MarkState.hides`: hidden by its ref, or by any of its episodes."""
        if self.forgotten.get(ref, False):
            return True
        return any(self.forgotten_episodes.get(e, False) for e in episode_ids)

    def is_deleted(self, ref: str, episode_ids: Iterable[str] = ()) -> bool:
        """As `MarkState.is_deleted`: deleted for good by its ref, or by any of its episodes."""
        return ref in self.deleted or any(e in self.deleted_episodes for e in episode_ids)

    def state(self) -> MarkState:
        return MarkState(
            forgotten=frozenset(r for r, hidden in self.forgotten.items() if hidden),
            forgotten_episodes=frozenset(e for e, hidden in self.forgotten_episodes.items() if hidden),
            deleted=frozenset(self.deleted),
            deleted_episodes=frozenset(self.deleted_episodes),
            pinned=frozenset(r for r, p in self.pinned.items() if p),
            unpinned=frozenset(r for r, p in self.pinned.items() if not p),
        )


def targets(mark: Mark, ref: str, episode_ids: Iterable[str] = ()) -> bool:
    """Whether the mark decides about this memory: by its ref, or (forget, restore, delete) by
    one of its episodes."""
    if ref in mark.refs:
        return True
    return mark.op in FORGETTING and bool(mark.episode_ids) and bool(set(episode_ids) & set(mark.episode_ids))


# The last mark a run folded into DuckDB, per being: the read API, which never opens DuckDB,
# shows the marks after it as pending in a memory's history.
FOLDED_FILE = "folded.json"


def folded_path(loop_dir: Path, being_id: str) -> Path:
    return marks_path(loop_dir, being_id).with_name(FOLDED_FILE)


def write_folded(loop_dir: Path, being_id: str, mark: Mark | None, folded_at: datetime) -> None:
    """Record that every mark up to this one is folded in (marks are folded in file order);
    None: none is yet."""
    record = {"mark_id": mark.mark_id if mark else None, "folded_at": folded_at.isoformat()}
    atomic_write(folded_path(loop_dir, being_id), json.dumps(record).encode())


def read_folded(loop_dir: Path, being_id: str) -> tuple[bool, str | None]:
    """Whether a record of the folded marks exists, and the last mark it names (None: none)."""
    path = folded_path(loop_dir, being_id)
    try:
        return True, json.loads(path.read_bytes())["mark_id"]
    except (FileNotFoundError, NotADirectoryError):
        return False, None
    except (ValueError, KeyError, TypeError) as exc:
        log.warning("ignored unreadable %s (%s)", path, exc)
        return False, None


def unfolded(loop_dir: Path, being_id: str, marks: Sequence[Mark]) -> list[Mark]:
    """The marks no run has folded in yet, in the order they were set.

    Without the record nothing is called unfolded: the marks of a home from before it were
    folded by its runs, and would otherwise all show as pending until the next one.
    """
    known, folded = read_folded(loop_dir, being_id)
    if not known:
        return []
    if folded is None:
        return list(marks)
    ids = [m.mark_id for m in marks]
    return list(marks[ids.index(folded) + 1 :]) if folded in ids else []


class MarkCache:
    """Each being's `MarkState` in one server process, read again only when its file changes.

    One `stat` per request: a mark appended by any process is applied by the next request
    of every process.
    """

    def __init__(self, loop_dir: Path):
        self.loop_dir = loop_dir
        self._files = ParsedFiles(
            lambda being_id: marks_path(loop_dir, being_id),
            lambda data, path, being_id: state_of(_parse(data, path, being_id)),
            MarkState(),
        )

    def state(self, being_id: str) -> MarkState:
        return self._files.get(being_id)


def visible(state: MarkState, memories: Sequence) -> list:
    """The memories no tombstone hides (anything with `memory_ref` and `source_episode_ids`)."""
    if not state.forgotten and not state.forgotten_episodes:
        return list(memories)
    return [m for m in memories if not state.hides(m.memory_ref, m.source_episode_ids)]


def with_pins(state: MarkState, memories: Sequence) -> list:
    """The memories with `pinned` as the marks say, before any run folds them in."""
    if not state.pinned and not state.unpinned:
        return list(memories)
    out = []
    for memory in memories:
        if memory.memory_ref in state.pinned and not memory.pinned:
            memory = replace(memory, pinned=True)
        elif memory.memory_ref in state.unpinned and memory.pinned:
            memory = replace(memory, pinned=False)
        out.append(memory)
    return out
