"""Reading a being's memories as records: one memory, a page of them, one memory's history.

The read API and `mindflow memories` both read LanceDB (`memories`, `memory_history`)
through these functions, never DuckDB. Marks apply at once, before a run folds them in:
a memory a tombstone hides reads as archived, a pin or unpin shows, and a permanently
deleted memory is not found (its history keeps only content-free rows). A being only
ever reads its own rows: another being's ref is not found, with the same message as an
unknown one.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from mindflow import lance, memory_history
from mindflow.errors import MindflowError, NotFound
from mindflow.inbox import validate_being_id
from mindflow.loop.marks import Mark, MarkState, targets
from mindflow.loop.refs import unknown_memory

STATUSES = ("active", "dying", "dormant", "dead", "archived")
DEFAULT_PAGE = 50
MAX_PAGE = 500
MAX_REF_CHARS = 200
_COLUMNS = [
    "memory_ref", "being_id", "kind", "text", "feeling", "themes", "status", "importance", "ts",
    "cluster_id", "source_episode_ids", "pinned", "trigger", "when_dates", "when_actions", "actors",
    "setting", "dialogue", "sensory", "decay_score", "decay_status", "created_at", "last_activated",
    "reactivation_count",
]  # fmt: skip
# The keys a history row of a permanently deleted memory keeps: none of them is content.
CONTENT_FREE_KEYS = frozenset(
    {"status", "decay_status", "pinned", "cluster_id", "importance", "reactivation_count", "increment",
     "recalls", "into", "absorbed"}
)  # fmt: skip


@dataclass
class Scene:
    action: str | None = None
    actors: list[str] = field(default_factory=list)
    when: list[dict] = field(default_factory=list)  # [{date, action}]
    setting: str | None = None
    dialogue: list[str] = field(default_factory=list)
    sensory: list[str] = field(default_factory=list)


@dataclass
class MemoryRecord:
    """One memory as a reader sees it, marks applied."""

    memory_ref: str
    being_id: str
    text: str
    status: str
    kind: str = "message"
    feeling: str | None = None
    themes: list[str] = field(default_factory=list)
    importance: float = 0.5
    pinned: bool = False
    trigger: str | None = None
    cluster_id: str | None = None
    decay_score: float | None = None
    decay_status: str | None = None
    scene: Scene = field(default_factory=Scene)
    source_episode_ids: list[str] = field(default_factory=list)
    ts: datetime | None = None  # when it happened (its episode)
    created_at: datetime | None = None  # when the patrol formed it
    last_activated: datetime | None = None  # the last recall that reached it (folded by the patrol)
    reactivation_count: int = 0


@dataclass
class MemoryPage:
    being_id: str
    memories: list[MemoryRecord]
    next_cursor: str | None  # None on the last page


@dataclass
class HistoryEntry:
    history_id: str | None
    ts: datetime
    operation: str
    actor: str
    run_id: str | None = None
    before: dict | None = None
    after: dict | None = None
    pending: bool = False  # a mark's decision that no run has folded in yet


@dataclass
class MemoryHistory:
    being_id: str
    memory_ref: str
    deleted: bool
    entries: list[HistoryEntry]


def _not_found(being_id: str, ref: str) -> NotFound:
    return unknown_memory(being_id, ref)


def _check_ref(being_id: str, ref: str) -> str:
    validate_being_id(being_id)
    if not ref or len(ref) > MAX_REF_CHARS or "\x00" in ref:
        raise _not_found(being_id, ref[:MAX_REF_CHARS].replace("\x00", ""))
    return ref


def _record(row: dict, state: MarkState) -> MemoryRecord:
    status, decay_status = row["status"], row.get("decay_status")
    if state.hides(row["memory_ref"], row.get("source_episode_ids") or ()):
        status = decay_status = "archived"  # forgotten: the fold will archive it
    pinned = bool(row.get("pinned"))
    if row["memory_ref"] in state.pinned:
        pinned = True
    elif row["memory_ref"] in state.unpinned:
        pinned = False
    dates, actions = row.get("when_dates") or [], row.get("when_actions") or []
    return MemoryRecord(
        memory_ref=row["memory_ref"],
        being_id=row["being_id"],
        text=row.get("text") or "",
        status=status,
        kind=row.get("kind") or "message",
        feeling=row.get("feeling"),
        themes=list(row.get("themes") or []),
        importance=float(row["importance"]) if row.get("importance") is not None else 0.5,
        pinned=pinned,
        trigger=row.get("trigger"),
        cluster_id=row.get("cluster_id"),
        decay_score=round(float(row["decay_score"]), 3) if row.get("decay_score") is not None else None,
        decay_status=decay_status,
        scene=Scene(
            action=row.get("text"),
            actors=list(row.get("actors") or []),
            when=[
                {"date": d, "action": actions[i] if i < len(actions) else None} for i, d in enumerate(dates)
            ],
            setting=row.get("setting"),
            dialogue=list(row.get("dialogue") or []),
            sensory=list(row.get("sensory") or []),
        ),
        source_episode_ids=list(row.get("source_episode_ids") or []),
        ts=row.get("ts"),
        created_at=row.get("created_at"),
        last_activated=row.get("last_activated"),
        reactivation_count=int(row.get("reactivation_count") or 0),
    )


def _rows(table, where: str, columns: list[str]) -> list[dict]:
    return table.search().where(where).select(columns).limit(None).to_arrow().to_pylist()


def get_memory(table, being_id: str, ref: str, state: MarkState = MarkState()) -> MemoryRecord:
    """The memory `ref` of the being; NotFound for an unknown ref, another being's, or a deleted one."""
    _check_ref(being_id, ref)
    rows = _rows(table, lance.where(being_id=being_id, memory_ref=ref), _COLUMNS) if table is not None else []
    if not rows or state.is_deleted(ref, rows[0].get("source_episode_ids") or ()):
        raise _not_found(being_id, ref)
    return _record(rows[0], state)


def has_memories(table, being_id: str) -> bool:
    """Whether the table holds any memory of the being, whatever its status."""
    validate_being_id(being_id)
    return table is not None and table.count_rows(lance.where(being_id=being_id)) > 0


def _statuses(status: str | Sequence[str] | None) -> tuple[str, ...] | None:
    if status is None:
        return None
    wanted = (status,) if isinstance(status, str) else tuple(status)
    wrong = [s for s in wanted if s not in STATUSES]
    if wrong or not wanted:
        raise MindflowError(
            f"unknown status {', '.join(map(repr, wrong)) or '(none)'}; use {', '.join(STATUSES)}"
        )
    return wanted


def _key(row: dict) -> tuple:
    """The order of a being's memories: by when they happened, then by ref (memories without a
    time first)."""
    ts = row.get("ts")
    return (0, datetime.min, row["memory_ref"]) if ts is None else (1, ts, row["memory_ref"])


def encode_cursor(key: tuple) -> str:
    has_ts, ts, ref = key
    raw = json.dumps({"ts": ts.isoformat() if has_ts else None, "ref": ref}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode("utf-8")).decode("ascii").rstrip("=")


def decode_cursor(cursor: str) -> tuple:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        data = json.loads(raw)
        ref = data["ref"]
        ts = None if data["ts"] is None else datetime.fromisoformat(data["ts"])
        if not isinstance(ref, str) or (ts is not None and ts.tzinfo is not None):
            raise ValueError("bad cursor fields")
    except (ValueError, KeyError, TypeError, binascii.Error, UnicodeDecodeError) as exc:
        raise MindflowError(
            "invalid cursor: pass the next_cursor of the previous page unchanged, or none for the first page"
        ) from exc
    return (0, datetime.min, ref) if ts is None else (1, ts, ref)


def list_memories(
    table,
    being_id: str,
    state: MarkState = MarkState(),
    *,
    status: str | Sequence[str] | None = None,
    cluster_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int = DEFAULT_PAGE,
    cursor: str | None = None,
) -> MemoryPage:
    """One page of the being's memories in a stable order (when they happened, then ref).

    `next_cursor` continues after the last memory of the page: paging through with it
    returns every memory once, without gaps, while the table does not change. LanceDB has
    no ORDER BY: the candidates' keys (ref and time) are read in one query and ordered here
    with Arrow, then the page's rows are read by ref (~25-60 ms a page for a being of
    50,000 memories).
    """
    validate_being_id(being_id)
    if not 1 <= limit <= MAX_PAGE:
        raise MindflowError(f"limit {limit} is out of range; use 1 to {MAX_PAGE}")
    wanted = _statuses(status)
    after = decode_cursor(cursor) if cursor else None
    if table is None:
        return MemoryPage(being_id, [], None)
    conditions = [lance.where(being_id=being_id)]
    if cluster_id is not None:
        conditions.append(lance.where(cluster_id=cluster_id))
    if since is not None:
        conditions.append(lance.compare("ts", ">=", since))
    if until is not None:
        conditions.append(lance.compare("ts", "<=", until))
    if after is not None and after[0] == 1:
        conditions.append(lance.compare("ts", ">=", after[1]))
    marked = bool(state.forgotten or state.forgotten_episodes or state.deleted or state.deleted_episodes)
    if wanted is not None and not marked:
        # With tombstones a published status may not be the one read: filtered below instead.
        conditions.append(lance.where(status=wanted))
    columns = ["memory_ref", "ts", *(["status", "source_episode_ids"] if marked else [])]
    keys = table.search().where(lance.all_of(*conditions)).select(columns).limit(None).to_arrow()
    keys = keys.filter(_visible(keys, after, state, wanted, marked))
    # Memories without a time first.
    order = pc.sort_indices(
        keys, sort_keys=[("ts", "ascending", "at_start"), ("memory_ref", "ascending", "at_start")]
    )
    chosen = keys.take(order[: limit + 1]).to_pylist()
    page = [_key(row) for row in chosen[:limit]]
    refs = [key[2] for key in page]
    by_ref = {}
    if refs:
        where = lance.all_of(lance.where(being_id=being_id), lance.where(memory_ref=refs))
        by_ref = {row["memory_ref"]: row for row in _rows(table, where, _COLUMNS)}
    memories = [_record(by_ref[ref], state) for ref in refs if ref in by_ref]
    more = len(chosen) > limit
    return MemoryPage(being_id, memories, encode_cursor(page[-1]) if more else None)


def _visible(keys: pa.Table, after: tuple | None, state: MarkState, wanted, marked: bool) -> pa.Array:
    """Which candidate rows belong on this page or a later one: after the cursor, not deleted,
    and of a wanted status as the marks show it. Vectorised: a being may have 100,000 memories."""
    refs, ts = keys.column("memory_ref"), keys.column("ts")
    keep = pa.array(np.ones(keys.num_rows, dtype=bool))
    if after is not None:
        has_ts, at, ref = after
        later_ref = pc.greater(refs, pa.scalar(ref))
        if has_ts:
            at = pa.scalar(at, pa.timestamp("us"))
            keep = pc.or_(pc.greater(ts, at), pc.and_(pc.equal(ts, at), later_ref))
        else:  # within the memories without a time, or past them
            keep = pc.or_(pc.is_valid(ts), pc.and_(pc.is_null(ts), later_ref))
        keep = pc.fill_null(keep, False)
    if marked:
        episodes = keys.column("source_episode_ids")
        deleted = pc.or_(_among(refs, state.deleted), _any_among(episodes, state.deleted_episodes))
        keep = pc.and_(keep, pc.invert(deleted))
        if wanted is not None:
            hidden = pc.or_(_among(refs, state.forgotten), _any_among(episodes, state.forgotten_episodes))
            shown = pc.if_else(hidden, pa.scalar("archived"), keys.column("status"))
            keep = pc.and_(keep, _among(shown, wanted))
    return keep


def _among(values, allowed) -> pa.Array:
    return pc.fill_null(pc.is_in(values, value_set=pa.array(sorted(allowed), pa.string())), False)


def _any_among(lists, allowed) -> pa.Array:
    """Per row: does its list hold any of `allowed`?"""
    lists = lists.combine_chunks() if isinstance(lists, pa.ChunkedArray) else lists
    out = np.zeros(len(lists), dtype=bool)
    if allowed and len(lists):
        hits = np.asarray(_among(pc.list_flatten(lists), allowed), dtype=bool)
        out[np.asarray(pc.list_parent_indices(lists))[hits]] = True
    return pa.array(out)


def iter_memories(
    table, being_id: str, state: MarkState = MarkState(), page_size: int = DEFAULT_PAGE, **filters
) -> Iterator[MemoryRecord]:
    """Every memory of the being matching the filters, page after page."""
    cursor = None
    while True:
        page = list_memories(table, being_id, state, limit=page_size, cursor=cursor, **filters)
        yield from page.memories
        if page.next_cursor is None:
            return
        cursor = page.next_cursor


def _json(value: str | None) -> dict | None:
    if value is None:
        return None
    loaded = json.loads(value)
    return loaded if isinstance(loaded, dict) else {"value": loaded}


def _content_free(values: dict | None) -> dict | None:
    if values is None:
        return None
    return {k: v for k, v in values.items() if k in CONTENT_FREE_KEYS}


def get_history(
    history_table,
    memories_table,
    being_id: str,
    ref: str,
    state: MarkState = MarkState(),
    marks: Iterable[Mark] = (),
    unfolded: Iterable[Mark] = (),
) -> MemoryHistory:
    """Every change of the memory in the order it happened, with time, actor, run id and the fields
    before/after.

    The decisions of `unfolded` marks (forget, restore, delete, pin, unpin set since the last
    run folded the being's marks) follow, pending, every one of them in the order set: a
    restore and then a permanent forget are both told. A permanently deleted memory keeps its
    history without content, ending with `deleted` (pending until a run has written its row).
    NotFound when the being has no such memory and no history of it.
    """
    _check_ref(being_id, ref)
    rows = memory_history.rows_of(history_table, being_id, ref)
    memory = (
        _rows(memories_table, lance.where(being_id=being_id, memory_ref=ref), ["source_episode_ids"])
        if memories_table is not None
        else []
    )
    episodes = memory[0].get("source_episode_ids") or () if memory else ()
    deleted = state.is_deleted(ref, episodes) or any(r["operation"] == "deleted" for r in rows)
    if not rows and not memory and not deleted:
        raise _not_found(being_id, ref)
    entries = [
        HistoryEntry(
            history_id=r["history_id"],
            ts=r["ts"],
            operation=r["operation"],
            actor=r["actor"],
            run_id=r["run_id"],
            before=_content_free(_json(r["before"])) if deleted else _json(r["before"]),
            after=_content_free(_json(r["after"])) if deleted else _json(r["after"]),
        )
        for r in rows
    ]
    pending = [
        HistoryEntry(None, m.ts, _MARK_OPERATIONS[m.op], m.actor, pending=True)
        for m in unfolded
        if targets(m, ref, episodes)
    ]
    if any(e.operation == "deleted" for e in entries):
        # The delete is on record (the fold or the erase wrote its row): not twice.
        pending = [e for e in pending if e.operation != "deleted"]
    elif deleted and not any(e.operation == "deleted" for e in pending):
        # Folded into a memory a soft forget had archived already (no row changed), and not
        # erased yet: the delete stays pending until the erase writes its row.
        deletes = [m for m in marks if m.op == "delete" and targets(m, ref, episodes)]
        if deletes:
            pending.append(HistoryEntry(None, deletes[-1].ts, "deleted", deletes[-1].actor, pending=True))
    # By their moment; on a tie the rows first (a run folds the marks after them), in the order
    # written, then the marks in the order set (the order a fold will write them in): a stable sort.
    entries = sorted(entries + pending, key=lambda e: e.ts)
    return MemoryHistory(being_id, ref, deleted, entries)


_MARK_OPERATIONS = {
    "forget": "forgotten",
    "restore": "restored",
    "delete": "deleted",
    "pin": "pinned",
    "unpin": "unpinned",
}


def fresh_record(memory, state: MarkState = MarkState()) -> MemoryRecord:
    """A memory of the server's fresh tail (accepted, not formed yet) as a record: status active
    (archived once forgotten), no decay, no cluster yet."""
    row = {
        "memory_ref": memory.memory_ref,
        "being_id": memory.being_id,
        "text": memory.text,
        "status": "active",
        "kind": memory.kind,
        "importance": memory.importance,
        "trigger": memory.trigger,
        "when_dates": list(memory.when_dates),
        "source_episode_ids": list(memory.source_episode_ids),
        "ts": memory.ts,
    }
    return _record(row, state)


def fresh_history(memory, marks: Iterable[Mark], accepted_at: datetime | None = None) -> MemoryHistory:
    """The history of a fresh memory: accepted (at `accepted_at`, when the API took it), then the
    marks set on it, all pending until a run forms the memory and folds them in."""
    # The episode's `ts` says when it happened, not when the memory came to be: only a fallback.
    accepted = accepted_at or memory.ts or datetime.min
    entries = [HistoryEntry(None, accepted, "accepted", "agent", pending=True)]
    for mark in marks:
        if mark.op in _MARK_OPERATIONS and targets(mark, memory.memory_ref, memory.source_episode_ids):
            entries.append(HistoryEntry(None, mark.ts, _MARK_OPERATIONS[mark.op], mark.actor, pending=True))
    return MemoryHistory(memory.being_id, memory.memory_ref, False, entries)


def recently_activated(
    table, being_id: str, state: MarkState = MarkState(), k: int = 5, statuses: Sequence[str] = ("active",)
) -> list[MemoryRecord]:
    """The k memories a recall reached last (else formed last) with an action, newest first.

    Forgotten and deleted memories are left out. As in `list_memories`, the keys are read in
    one query and ordered here: LanceDB has no ORDER BY.
    """
    validate_being_id(being_id)
    if table is None or k <= 0:
        return []
    where = lance.all_of(
        lance.where(being_id=being_id, status=list(statuses)), "text IS NOT NULL AND text <> ''"
    )
    keys = (
        table.search()
        .where(where)
        .select(["memory_ref", "last_activated", "created_at", "source_episode_ids"])
        .limit(None)
        .to_arrow()
    )
    if not keys.num_rows:
        return []
    refs = keys.column("memory_ref").to_pylist()
    episodes = keys.column("source_episode_ids").to_pylist()
    when = pc.coalesce(keys.column("last_activated"), keys.column("created_at"))
    order = pc.sort_indices(pa.table({"when": when}), sort_keys=[("when", "descending", "at_end")])
    chosen = []
    for i in order.to_pylist():
        if not state.hides(refs[i], episodes[i] or ()):  # hidden: forgotten or deleted
            chosen.append(refs[i])
            if len(chosen) == k:
                break
    if not chosen:
        return []
    where = lance.all_of(lance.where(being_id=being_id), lance.where(memory_ref=chosen))
    found = {row["memory_ref"]: row for row in _rows(table, where, _COLUMNS)}
    return [_record(found[ref], state) for ref in chosen if ref in found]
