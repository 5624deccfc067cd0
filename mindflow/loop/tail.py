"""The fresh tail: a being's accepted episodes not yet published, embedded once, recalled beside memories.

An episode accepted by `POST episodes` (or dropped into the inbox as a file) becomes a
memory only when a form run has formed its node and published it to LanceDB. Until
then the server keeps it here: parsed with the inbox parser (heartbeats and
quarantined lines never count), embedded once as the patrol embeds its node
(`patrol.node_text`), under the ref the mechanical form run will give its node
(`loop.refs.episode_memory_ref`), so a pin or a forget set now still names it later.

Other processes' writes are found by listing the being's inbox folders (a stat per
file) at most every `tail_scan_interval_s`; a server's own POSTs count at once. A file
in `inbox/.done/<being>/` is read only while it was moved or changed within
`tail_done_window_hours`: the form run publishes what ingestion moved there within a
minute, the nightly patrol within a day, so older files hold only published episodes
and listing the whole ingested history on every scan would cost for nothing.

An episode leaves the tail once a memory with it is published: its ref is in the
`memories` table, or it is one of a row's `source_episode_ids` (an extraction model
forms scenes of several episodes under other refs), checked at the version the request
reads.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from mindflow import lance
from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.inbox import DONE, text_sha256, validate_being_id
from mindflow.ingest import detect_format, parse_bytes
from mindflow.loop.refs import episode_memory_ref
from mindflow.models import Episode, utcnow
from mindflow.patrol import node_text
from mindflow.recall.models import Memory
from mindflow.recall.primitives import term_counts
from mindflow.vectors import to_column

log = logging.getLogger(__name__)
SUFFIXES = (".jsonl", ".md")
# Refs and episode ids per LanceDB filter: a filter's text grows with each.
CHECK_CHUNK = 500
# Vectors kept per server for episodes no listed file holds any more (moved, re-read): the
# next scan finds most of them again under their new path without embedding them twice.
VECTOR_CACHE = 20_000


@dataclass(frozen=True)
class FreshMemory:
    """One unpublished episode as a memory: its future ref, the episode, its unit vector."""

    ref: str
    episode: Episode
    vector: np.ndarray

    @property
    def episode_ids(self) -> tuple[str, ...]:
        return (self.episode.episode_id,)

    @functools.cached_property
    def text_sha256(self) -> str:
        """Once per fresh memory, not per recall: every recall checks it against deleted texts."""
        return text_sha256(self.episode.text)

    def memory(self) -> Memory:
        e = self.episode
        return Memory(
            memory_ref=self.ref,
            being_id=e.being_id,
            text=e.text,
            kind=e.kind or "message",
            themes=list(e.tags),
            when_dates=[e.day.isoformat()],
            ts=e.ts,
            status="active",
            importance=_importance(e.importance),
            trigger=e.trigger,
            source_episode_ids=[e.episode_id],
            decay_score=1.0,
            fresh=True,
        )


def _importance(value: float | None) -> float:
    # As the mechanical scene sets it (patrol.step_scenes).
    return min(1.0, max(0.0, 0.5 if value is None else float(value)))


def rows(fresh: Iterable[FreshMemory], dim: int) -> pa.Table:
    """Fresh memories as rows of the LanceDB `memories` table (the columns recall reads, same types)."""
    fresh = list(fresh)
    strings = pa.list_(pa.string())
    memories = [f.memory() for f in fresh]
    vectors = np.stack([f.vector for f in fresh]) if fresh else np.zeros((0, dim), np.float32)
    return pa.table(
        {
            "memory_ref": pa.array([m.memory_ref for m in memories], pa.string()),
            "being_id": pa.array([m.being_id for m in memories], pa.string()),
            "kind": pa.array([m.kind for m in memories], pa.string()),
            "text": pa.array([m.text for m in memories], pa.string()),
            "feeling": pa.array([None] * len(memories), pa.string()),
            "themes": pa.array([m.themes for m in memories], strings),
            "when_dates": pa.array([m.when_dates for m in memories], strings),
            "status": pa.array([m.status for m in memories], pa.string()),
            "importance": pa.array([m.importance for m in memories], pa.float32()),
            "ts": pa.array([m.ts for m in memories], pa.timestamp("us")),
            "cluster_id": pa.array([None] * len(memories), pa.string()),
            "source_episode_ids": pa.array([m.source_episode_ids for m in memories], strings),
            # As patrol's scene has them: the speaker, else the role.
            "actors": pa.array([[f.episode.speaker or f.episode.role or "unknown"] for f in fresh], strings),
            "pinned": pa.array([False] * len(memories), pa.bool_()),
            "trigger": pa.array([m.trigger for m in memories], pa.string()),
            "decay_score": pa.array([1.0] * len(memories), pa.float32()),
            "vector": to_column(vectors.reshape(len(memories), dim)),
        }
    )


@dataclass
class FreshView:
    """A being's fresh memories as recall reads them, kept while the tail does not change."""

    memories: list[FreshMemory]
    table: pa.Table  # `rows(memories)`
    terms: list  # their words as the full-text index counts them (primitives.term_counts)

    def where(self, keep: list[bool]) -> tuple[pa.Table, list]:
        """The rows and term counts of the memories `keep` marks."""
        if all(keep):
            return self.table, self.terms
        terms = [t for t, k in zip(self.terms, keep, strict=True) if k]
        return self.table.filter(pa.array(keep, pa.bool_())), terms


EMPTY = FreshView([], rows([], 1), [])


@dataclass
class _Being:
    """One being's tail in this process."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    scanned_at: float = float("-inf")  # monotonic time of the last listing
    files: dict[Path, tuple[int, int]] = field(default_factory=dict)  # path -> (size, mtime_ns)
    parsed: dict[Path, list[Episode]] = field(default_factory=dict)
    # Accepted by this process since the last listing (the file may not show them yet).
    posted: dict[str, tuple[float, Episode]] = field(default_factory=dict)
    episodes: dict[str, Episode] = field(default_factory=dict)  # what the files and posts hold
    # When each was accepted, as near as this process can tell (`FreshTail.accepted_at`).
    accepted: dict[str, datetime] = field(default_factory=dict)
    # per table version read: (episode ids checked, those a memory of that version holds)
    checks: OrderedDict = field(default_factory=OrderedDict)
    capped_logged: bool = False
    view: FreshView = field(default_factory=lambda: EMPTY)
    view_ids: tuple[str, ...] = ()


class FreshTail:
    """The fresh tails of the beings one server process serves."""

    def __init__(self, settings: Settings, embedder):
        self.settings = settings
        self.embedder = embedder
        self.max_episodes = settings.tail_max_episodes
        self.window_s = settings.tail_done_window_hours * 3600.0
        self.interval_s = settings.tail_scan_interval_s
        self._beings: dict[str, _Being] = {}
        self._lock = threading.Lock()
        self._vectors: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._vectors_lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.max_episodes > 0

    def _state(self, being_id: str) -> _Being:
        validate_being_id(being_id)
        with self._lock:
            state = self._beings.get(being_id)
            if state is None:
                state = self._beings[being_id] = _Being()
            return state

    # ------------------------------------------------------------------ writes

    def add(self, being_id: str, episodes: Iterable[Episode]) -> None:
        """Episodes this process just appended to the being's inbox: in the tail from the next request."""
        if not self.enabled:
            return
        episodes = [e for e in episodes if e.being_id == being_id]
        if not episodes:
            return
        self._embed(episodes)  # in the POST, so the next recall does not wait for the model
        state = self._state(being_id)
        now, accepted = time.monotonic(), utcnow()
        with state.lock:
            for e in episodes:
                state.posted[e.episode_id] = (now, e)
                state.episodes.setdefault(e.episode_id, e)
                state.accepted.setdefault(e.episode_id, accepted)

    def known(self, being_id: str, ids: Iterable[str]) -> dict[str, Episode]:
        """The episodes with these ids in the being's inbox files (pending, and done within
        `tail_done_window_hours`) and this process's posts, listed now.

        Listed now, not at the last scan: another process may have appended within the
        interval. Episodes ingested before the window are in DuckDB only, which the API never opens.
        """
        state = self._state(being_id)
        with state.lock:
            state.scanned_at = float("-inf")
            self._scan(being_id, state)
            return {i: state.episodes[i] for i in ids if i in state.episodes}

    def accepted_at(self, being_id: str, episode_id: str) -> datetime | None:
        """When the episode was accepted (naive UTC), None when the tail does not hold it.

        No line records it, so: the moment this process's POST took it, else the write time of
        the inbox file this process first found it in (its mtime or, for a file moved into the
        folder, its ctime). A server that starts after later lines were appended to the same file
        sees their write time: a bound seconds late at worst, never the episode's own `ts`,
        which tells when it happened, not when the memory came to be.
        """
        state = self._state(being_id)
        with state.lock:
            return state.accepted.get(episode_id)

    # ------------------------------------------------------------------ reads

    def memories(self, being_id: str, table=None, version=None) -> list[FreshMemory]:
        """The being's unpublished episodes as fresh memories, oldest first, at most `tail_max_episodes`.

        `table` and `version` are what the request reads (None before the first publish).
        """
        return self.view(being_id, table, version).memories

    def view(self, being_id: str, table=None, version=None) -> FreshView:
        """`memories` with their rows and term counts, built again only when they change."""
        if not self.enabled:
            return EMPTY
        state = self._state(being_id)
        with state.lock:
            self._scan(being_id, state)
            published = self._published(being_id, state, table, version)
            waiting = [e for i, e in state.episodes.items() if i not in published]
            waiting.sort(key=lambda e: (e.ts, e.episode_id))
            if len(waiting) > self.max_episodes:
                if not state.capped_logged:
                    log.warning(
                        "being %s has %d unpublished episodes, more than MINDFLOW_TAIL_MAX_EPISODES=%d: "
                        "the oldest are recalled once the form run has published them",
                        being_id,
                        len(waiting),
                        self.max_episodes,
                    )
                    state.capped_logged = True
                waiting = waiting[-self.max_episodes :]
            elif state.capped_logged and len(waiting) < self.max_episodes:
                state.capped_logged = False
            ids = tuple(e.episode_id + "\x1f" + e.text for e in waiting)
            if ids == state.view_ids:
                return state.view
        if not waiting:
            with state.lock:
                state.view, state.view_ids = EMPTY, ids
            return EMPTY
        vectors = self._embed(waiting)
        memories = [
            FreshMemory(episode_memory_ref(being_id, e.episode_id), e, v)
            for e, v in zip(waiting, vectors, strict=True)
        ]
        view = FreshView(memories, rows(memories, len(vectors[0])), term_counts([e.text for e in waiting]))
        with state.lock:
            state.view, state.view_ids = view, ids
        return view

    # ------------------------------------------------------------------ scanning

    def _scan(self, being_id: str, state: _Being) -> None:
        started = time.monotonic()
        if started - state.scanned_at < self.interval_s:
            return
        listed = self._list(being_id)
        if listed != state.files:
            parsed: dict[Path, list[Episode]] = {}
            for path, signature in listed.items():
                if state.files.get(path) == signature and path in state.parsed:
                    parsed[path] = state.parsed[path]
                else:
                    parsed[path] = self._parse(being_id, path)
                    written = _written_at(path)
                    for e in parsed[path]:
                        state.accepted.setdefault(e.episode_id, written)
            state.files, state.parsed = listed, parsed
        # Posts older than this listing are in the files it read (appended before `add`).
        state.posted = {i: (at, e) for i, (at, e) in state.posted.items() if at >= started}
        episodes: dict[str, Episode] = {}
        for found in state.parsed.values():
            for e in found:
                episodes.setdefault(e.episode_id, e)
        for _, e in state.posted.values():
            episodes.setdefault(e.episode_id, e)
        state.episodes = episodes
        state.accepted = {i: at for i, at in state.accepted.items() if i in episodes}
        state.scanned_at = started

    def _list(self, being_id: str) -> dict[Path, tuple[int, int]]:
        """The being's pending inbox files, and its done files moved or changed within the window."""
        inbox = self.settings.inbox
        found: dict[Path, tuple[int, int]] = {}
        _walk(inbox / being_id, found, None)
        # A rename into .done keeps the file's mtime but sets its ctime: the ctime says when it moved.
        _walk(inbox / DONE / being_id, found, time.time() - self.window_s)
        return found

    def _parse(self, being_id: str, path: Path) -> list[Episode]:
        try:
            data = path.read_bytes()
            fmt = detect_format(path)
            result = parse_bytes(data, path.name, being_id, fmt, max_chars=self.settings.max_episode_chars)
        except (OSError, MindflowError):
            # Gone (moved by ingestion) or unreadable: the next listing sees what became of it.
            return []
        return [e for e in result.episodes if e.being_id == being_id]

    # ------------------------------------------------------------------ published?

    def _published(self, being_id: str, state: _Being, table, version) -> set[str]:
        """The tail's episodes that a memory of the table at `version` holds, whatever its status.

        Every status counts: a memory archived (forgotten, or by decay) or dormant is published
        too, and the hot index holds only the recallable ones. Each episode is looked up once
        per version.
        """
        checked, published = state.checks.pop(version, (set(), set()))
        state.checks[version] = (checked, published)
        while len(state.checks) > 4:
            state.checks.popitem(last=False)
        ids = sorted(state.episodes.keys() - checked)
        if ids and table is not None:
            published |= _published_in_table(table, being_id, ids)
        checked.update(ids)
        return published

    # ------------------------------------------------------------------ embedding

    def _embed(self, episodes: list[Episode]) -> list[np.ndarray]:
        """Each episode's unit vector, embedded once per (being, episode id, text)."""
        keys = [(e.being_id + "\x1f" + e.episode_id, e.text) for e in episodes]
        with self._vectors_lock:
            found = {k: self._vectors.get(k) for k in keys}
        missing = list(dict.fromkeys(k for k, v in found.items() if v is None))
        if missing:
            by_key = {k: e for k, e in zip(keys, episodes, strict=True)}
            texts = [node_text([{"date": by_key[k].day.isoformat()}], by_key[k].text, None) for k in missing]
            # The server's query encoder (onnxruntime, loaded at start) gives the vectors `encode`
            # gives, one text at a time as fast as the batch model here (~5.4 against ~6.2 ms a
            # text on 2 cores), without loading that model (~4.6 s and its memory) into the server.
            vectors = np.stack([self.embedder.encode_query(t) for t in texts])
            vectors = np.asarray(vectors, dtype=np.float32)
            vectors = vectors / np.clip(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12, None)
            with self._vectors_lock:
                for k, v in zip(missing, vectors, strict=True):
                    self._vectors[k] = v
                    found[k] = v
                while len(self._vectors) > max(VECTOR_CACHE, 2 * self.max_episodes):
                    self._vectors.popitem(last=False)
        return [found[k] for k in keys]


def _written_at(path: Path) -> datetime:
    """When the file was last written, or moved into its folder (a rename sets only the ctime)."""
    try:
        stat = path.stat()
    except OSError:  # gone since the listing: its episodes go with the next one
        return utcnow()
    return datetime.fromtimestamp(max(stat.st_mtime, stat.st_ctime), UTC).replace(tzinfo=None)


def _walk(folder: Path, found: dict[Path, tuple[int, int]], changed_since: float | None) -> None:
    """Inbox files under `folder` (hidden ones are temporary files of atomic writes), with their stat."""
    try:
        entries = list(os.scandir(folder))
    except (FileNotFoundError, NotADirectoryError):
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                _walk(Path(entry.path), found, changed_since)
                continue
            if not entry.name.endswith(SUFFIXES):
                continue
            stat = entry.stat()
        except OSError:
            continue
        if changed_since is not None and max(stat.st_mtime, stat.st_ctime) < changed_since:
            continue
        found[Path(entry.path)] = (stat.st_size, stat.st_mtime_ns)


def _published_in_table(table, being_id: str, ids: list[str]) -> set[str]:
    """Which of the episodes a memory of the LanceDB table holds, whatever its status."""
    out: set[str] = set()
    wanted = set(ids)
    for start in range(0, len(ids), CHECK_CHUNK):
        chunk = ids[start : start + CHECK_CHUNK]
        refs = {episode_memory_ref(being_id, i): i for i in chunk}
        where = lance.all_of(
            lance.where(being_id=being_id),
            f"{lance.where(memory_ref=list(refs))} OR {lance.has_any('source_episode_ids', chunk)}",
        )
        columns = ["memory_ref", "source_episode_ids"]
        found = table.search().where(where).select(columns).limit(None).to_arrow()
        for row in found.to_pylist():
            if row["memory_ref"] in refs:
                out.add(refs[row["memory_ref"]])
            out |= wanted.intersection(row["source_episode_ids"] or ())
    return out
