"""What the endpoints do, without HTTP: embed, recall, filter echoes, reinforce."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import os
import random
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Iterator
from datetime import UTC, datetime

import numpy as np

from mindflow import events, fact_activation, graph, lance
from mindflow.api import models, resonance
from mindflow.api.rankers import Rankers
from mindflow.api.subconscious import Fallback, Subconscious
from mindflow.config import ObjectStore, Settings
from mindflow.embeddings import Embedder
from mindflow.errors import MindflowError
from mindflow.inbox import Deleted, validate_being_id
from mindflow.ingest import is_heartbeat
from mindflow.loop import tail as fresh_tail
from mindflow.loop.deleted_texts import DeletedCache
from mindflow.loop.marks import MarkCache, MarkState, visible, with_pins
from mindflow.memories import TABLE
from mindflow.models import utcnow
from mindflow.recall import (
    HotIndexes,
    Memory,
    RecallConfig,
    cluster_memories,
    recall,
    search_memory,
)
from mindflow.recall.hot_files import HotFiles
from mindflow.recall.search import vector_limit

log = logging.getLogger(__name__)
FRAGMENT_SEPARATOR = " / "
FRAGMENTS_OPEN, FRAGMENTS_CLOSE = "<fragments>", "</fragments>"


class QueryVectors:
    """A small LRU of query embeddings: agents repeat their questions."""

    def __init__(self, embedder: Embedder, size: int):
        self.embedder = embedder
        self.size = size
        self._vectors: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, query: str) -> np.ndarray:
        with self._lock:
            vector = self._vectors.get(query)
            if vector is not None:
                self._vectors.move_to_end(query)
                return vector
        vector = self.embedder.encode_query(query)
        with self._lock:
            self._vectors[query] = vector
            while len(self._vectors) > self.size:
                self._vectors.popitem(last=False)
        return vector


class EchoFilter:
    """Per (being, session): the refs of its last `window` recalls, for a bounded LRU of sessions."""

    def __init__(self, window: int, max_sessions: int):
        self.window = window
        self.max_sessions = max_sessions
        self._sessions: OrderedDict[tuple[str, str], deque[tuple[str, ...]]] = OrderedDict()
        self._lock = threading.Lock()

    def shown(self, being_id: str, session: str | None) -> list[str]:
        if session is None:
            return []
        with self._lock:
            recent = self._sessions.get((being_id, session))
            if recent is None:
                return []
            self._sessions.move_to_end((being_id, session))
            return list(dict.fromkeys(ref for refs in recent for ref in refs))

    def record(self, being_id: str, session: str | None, refs: list[str]) -> None:
        if session is None:
            return
        with self._lock:
            key = (being_id, session)
            recent = self._sessions.get(key)
            if recent is None:
                recent = self._sessions[key] = deque(maxlen=self.window)
            self._sessions.move_to_end(key)
            recent.append(tuple(refs))
            while len(self._sessions) > self.max_sessions:
                self._sessions.popitem(last=False)


def _item_ref(item) -> str:
    return item.fact_id if isinstance(item, resonance.GraphFact) else item.memory_ref


def fact_out(fact: resonance.GraphFact) -> models.FactOut:
    return models.FactOut(
        fact_id=fact.fact_id, entity=fact.entity, key=fact.key, value=fact.value, tier=fact.tier,
        activation=fact.activation, importance=fact.importance, valid_at=fact.ts,
        source_episode_ids=list(fact.source_episode_ids),
    )  # fmt: skip


def memory_out(memory: Memory) -> models.MemoryOut:
    # A shallow copy: the model copies the lists itself (`asdict` deep-copied every one first).
    fields = {f.name: getattr(memory, f.name) for f in dataclasses.fields(memory)}
    # JSON has no NaN or infinity; a degenerate score part must not turn into a 500.
    fields["parts"] = {k: v for k, v in fields["parts"].items() if math.isfinite(v)}
    for name in ("importance", "decay_score", "score"):
        if not math.isfinite(fields[name]):
            fields[name] = 0.0
    return models.MemoryOut.model_validate(fields)


def _within(ts: datetime, since: datetime | None, until: datetime | None) -> bool:
    """A fresh memory's time inside a request's horizon (stored times are naive UTC)."""

    def naive(value: datetime) -> datetime:
        return value.astimezone(UTC).replace(tzinfo=None) if value.tzinfo is not None else value

    return (since is None or ts >= naive(since)) and (until is None or ts <= naive(until))


def _without_published_twins(memories: list[Memory]) -> list[Memory]:
    """Fresh memories whose episode a published memory among them already holds left out.

    The tail is checked against the version a request reads; a publish landing during the
    request can bring the memory in both ways, and it must come back once."""
    published = {e for m in memories if not m.fresh for e in m.source_episode_ids}
    if not published:
        return memories
    return [m for m in memories if not (m.fresh and published.intersection(m.source_episode_ids))]


class InFlight:
    """How many recalls this process is answering at once, and when one last came among others."""

    def __init__(self, quiet: float = 1.0) -> None:
        # Seconds since a recall last came while others ran, before one coming alone counts as
        # alone: a second client's recalls come between the first's, and ranking them in the
        # worker then slowed both (2 clients: p95 20 -> 21-27 ms, README).
        self.quiet = quiet
        self._count = 0
        self._crowded = -math.inf
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def one(self) -> Iterator[bool]:
        """Count a recall while it runs; yields whether it came alone: no other running, and none
        came among others in the last `quiet` seconds."""
        now = time.monotonic()
        with self._lock:
            if self._count:
                self._crowded = now
            alone = not self._count and now - self._crowded > self.quiet
            self._count += 1
        try:
            yield alone
        finally:
            with self._lock:
                self._count -= 1


def _marked(marks: MarkState, memories: list[Memory]) -> list[Memory]:
    """What `marks` leave of `memories`: no forgotten one, pins as last set. A recall applies the
    marks it excluded refs by, read once (a stat of the marks file per read)."""
    return with_pins(marks, visible(marks, memories))


class RecallService:
    """The state of one server process: settings, the model, query vectors, echo memory."""

    def __init__(self, settings: Settings, config: RecallConfig | None = None):
        self.settings = settings
        overrides = settings.recall_overrides()
        self.config = config or RecallConfig.for_model(settings.embedding_model, **overrides)
        self.embedder = Embedder.for_settings(settings)
        self.vectors = QueryVectors(self.embedder, settings.api_query_cache)
        self.echo = EchoFilter(settings.api_echo_recalls, settings.api_echo_sessions)
        # Recall events of this process; the appends of concurrent recalls share a write.
        self.events = events.EventWriter(settings.events)
        # Several processes (workers, or a worker and its rankers) map one copy of each index from
        # files; a lone one keeps it in its own memory (no 250 MB written per 100,000 memories at
        # every new table version).
        files = HotFiles(settings.hot_index) if settings.api_workers > 1 or settings.api_rankers else None
        self.hot = HotIndexes(
            settings.lance_path, settings.api_hot_index_rows, files, small=settings.api_hot_index_small
        )
        self.latest = lance.LatestTable(settings.lance_path, TABLE)
        # Tombstones and pins of every process, applied to each answer (one stat per request).
        self.marks = MarkCache(settings.loop)
        self.deleted_texts = DeletedCache(settings.loop)
        # Accepted episodes not yet published, recalled beside the published memories.
        self.tail = fresh_tail.FreshTail(settings, self.embedder)
        # The resonance model, when one is configured (phases 1 and 5).
        self.subconscious = Subconscious(settings)
        self._counts: dict[tuple[str, int | None], int] = {}
        self._served = threading.local()
        # Recalls ranked from a hot index at once in this process (MINDFLOW_API_RECALL_THREADS).
        self._ranking = threading.BoundedSemaphore(settings.api_recall_threads)
        self.in_flight = InFlight()
        self.rankers = (
            Rankers(settings.api_rankers, pin=settings.api_pin_rankers, batch=settings.api_ranker_batch)
            if settings.api_rankers
            else None
        )
        self.model_ready = False

    def load_model(self) -> None:
        self.embedder.encode_query("warm up")
        self.model_ready = True

    def lance_readable(self) -> bool:
        path = self.settings.lance_path
        if isinstance(path, ObjectStore):
            return True  # object storage: a failed read reports itself
        return path.is_dir() and os.access(path, os.R_OK | os.X_OK)

    def check_query(self, query: str) -> str:
        limit = self.settings.api_max_query_chars
        if len(query) > limit:
            raise MindflowError(f"query has {len(query):,} characters; the limit is {limit:,}")
        if not query.strip():
            raise MindflowError("query is empty")
        return query

    def _table(self):
        return self.latest.get()[0]

    def _reinforce(self, being_id: str, tool: str, memories: list[Memory]) -> None:
        if not memories:
            return
        # Written by the event writer's thread: the fsync of the event file is in no request's way.
        refs, statuses = [m.memory_ref for m in memories], [m.status for m in memories]
        self.events.submit([events.recall_event(being_id, tool, refs, statuses)])

    def record_fact_access(self, being_id: str, fact_ids: list[str]) -> None:
        """Facts an answer returned count as accessed: the decay job folds the event into activation."""
        if fact_ids:
            self.events.submit([fact_activation.access_event(being_id, fact_ids)])

    def _recall(
        self, being_id: str, request: models.RecallRequest | models.ResonanceRequest, k: int, now: datetime
    ) -> list[Memory]:
        with self.in_flight.one() as alone:
            return self._recall_alone_or_not(being_id, request, k, now, alone)

    def _recall_alone_or_not(
        self,
        being_id: str,
        request: models.RecallRequest | models.ResonanceRequest,
        k: int,
        now: datetime,
        alone: bool,
    ) -> list[Memory]:
        """`_recall` of a request that came `alone` (`InFlight.one`) or among others."""
        query = self.check_query(request.query)
        marks = self.marks.state(being_id)
        # Forgotten refs are excluded in the query, so k is still filled with what may be shown.
        shown = self.echo.shown(being_id, request.session_id)
        exclude = list(dict.fromkeys([*request.exclude_refs, *shown, *marks.forgotten]))
        table, version = self.latest.get()
        index = self.hot.get(table, being_id, version)
        # Which path answered, for the X-Mindflow-Recall header (the endpoint runs in this thread).
        self._served.source = "hot" if index is not None else "lance"
        view = self.tail.view(being_id, table, version)
        excluded = set(exclude)
        deleted = self.deleted(being_id)
        keep = [
            not marks.hides(f.ref, f.episode_ids)
            and not deleted.refuses(f.episode, f.text_sha256)
            and f.ref not in excluded
            and _within(f.episode.ts, request.since, request.until)
            for f in view.memories
        ]
        fresh, terms = view.where(keep)
        ranking = dict(
            k=k, config=self.config, exclude_refs=exclude, since=request.since, until=request.until,
            now=now, fresh=fresh if fresh.num_rows else None,
            corpus=self._corpus(being_id, table, version, index) if fresh.num_rows else 0,
            fresh_terms=terms,
        )  # fmt: skip
        vector = lambda: self.vectors.get(query)  # noqa: E731 - embedded when recall needs it
        if index is not None and self.rankers is None:
            # Embedded and scanned here, before the ranking turn: onnxruntime runs both off the
            # GIL, and recalls scanning at once share one scan of the index (`Int8Scan.scores`),
            # which costs about the same for 8 queries as for 1. Not with rankers: each embeds
            # and scans its own recall, and the worker's 8 threads doing it for them slowed
            # them down (p95 83-85 ms against 73-75 ms with 8 clients at 100,000 memories).
            vector = self.vectors.get(query)
            keep = index.mask(exclude, request.since, request.until)
            ranking["scanned"] = index.scanned(vector, keep, vector_limit(self.config, k))
        # With ranking processes (MINDFLOW_API_RANKERS), a free one ranks a recall from the hot
        # index; None: none could, this process ranks it. A lone recall (`InFlight.one`;
        # MINDFLOW_API_LONE_RECALLS_HERE) is ranked here: handing it over costs a ranker's wake-up,
        # and buys nothing while no other recall wants this process's CPU. The rankers are still
        # told of its index, to map it before the load that needs them.
        if index is not None and self.rankers is not None:
            if alone and self.settings.api_lone_recalls_here:
                self.rankers.notice(being_id, version)
            else:
                found = self.rankers.rank(being_id, version, query, **ranking)
                if found is not None:
                    return _marked(marks, _without_published_twins(found))
        # From the hot index a recall is CPU work under the GIL: it waits its turn (off the GIL)
        # rather than taking turns at the GIL with others mid-recall. From LanceDB it mostly waits
        # on LanceDB's own threads, and runs beside others.
        with self._ranking if index is not None else contextlib.nullcontext():
            found = recall(table, being_id, query, vector, index=index, **ranking)
        return _marked(marks, _without_published_twins(found))

    def _fresh(self, being_id: str, table, version, forgotten: bool = False) -> list[fresh_tail.FreshMemory]:
        """The being's fresh memories no tombstone hides (`forgotten`: none deleted), checked against
        the version the request reads."""
        marks = self.marks.state(being_id)
        gone = marks.is_deleted if forgotten else marks.hides
        # A deleted text accepted under another id before the erase ran is never served again.
        deleted = self.deleted(being_id)
        return [
            f
            for f in self.tail.memories(being_id, table, version)
            if not gone(f.ref, f.episode_ids) and not deleted.refuses(f.episode, f.text_sha256)
        ]

    def deleted(self, being_id: str) -> Deleted:
        """What the being's permanent forgets deleted, as ingestion refuses it: the episode ids of the
        `delete` marks and the sha256 of each text the `forget` job recorded."""
        return self.deleted_texts.deleted(being_id, self.marks.state(being_id).deleted_episodes)

    def fresh_memories(self, being_id: str, *, forgotten: bool = False) -> list[Memory]:
        """The being's fresh-tail memories (accepted, not yet published), tombstones and pins applied;
        with `forgotten`, the soft-forgotten ones too (a read of one memory shows it archived), never
        a deleted one."""
        validate_being_id(being_id)
        table, version = self.latest.get()
        memories = [f.memory() for f in self._fresh(being_id, table, version, forgotten)]
        if forgotten:
            return with_pins(self.marks.state(being_id), memories)
        return self.apply_marks(being_id, memories)

    def _corpus(self, being_id: str, table, version, index) -> int:
        """How many published memories of the being the full-text statistics of a fresh memory stand for."""
        if index is not None:
            return len(index)
        if table is None:
            return 0
        key = (being_id, version)
        count = self._counts.get(key)
        if count is None:
            count = table.count_rows(lance.where(being_id=being_id))
            if len(self._counts) > 10_000:
                self._counts.clear()
            self._counts[key] = count
        return count

    def apply_marks(self, being_id: str, memories: list[Memory]) -> list[Memory]:
        """What the being's marks leave of `memories`: no forgotten one, pins as last set."""
        return _marked(self.marks.state(being_id), memories)

    def served_from(self) -> str:
        """`hot` or `lance`: where this thread's last recall read its candidates."""
        return getattr(self._served, "source", "lance")

    def recall(self, being_id: str, request: models.RecallRequest) -> models.RecallResponse:
        memories = self._recall(being_id, request, request.k, utcnow())
        self.echo.record(being_id, request.session_id, [m.memory_ref for m in memories])
        self._reinforce(being_id, "recall", memories)
        if request.mode == "fragments":
            # The blur is the point (seed 002): the pieces alone, shuffled, in one tag, and no
            # structured list beside them to read the whole memories from. Nothing found:
            # an empty result, no tag.
            pieces = [m.text for m in memories if m.text] + [m.feeling for m in memories if m.feeling]
            random.shuffle(pieces)
            blur = f"{FRAGMENTS_OPEN}{FRAGMENT_SEPARATOR.join(pieces)}{FRAGMENTS_CLOSE}" if pieces else ""
            return models.RecallResponse(being_id=being_id, mode="fragments", memories=[], fragments=blur)
        return models.RecallResponse(
            being_id=being_id, mode=request.mode, memories=[memory_out(m) for m in memories]
        )

    def resonance(self, being_id: str, request: models.ResonanceRequest) -> models.ResonanceResponse:
        now = request.now or utcnow()
        # A heartbeat or probe turn is no conversation: nothing resonates, nothing is reinforced.
        if is_heartbeat(request.query):
            return models.ResonanceResponse(being_id=being_id, now=now, text="", items=[])
        # Seen from `now`, later memories have not happened yet.
        until = now if request.until is None else min(now, request.until)
        scoped = request.model_copy(update={"until": until})
        self.check_query(request.query)
        deadline = self.subconscious.deadline()
        queries, names, fallback = [request.query], [], None
        if self.subconscious.configured:
            # Phase 1: the model's clean queries are searched beside the message itself.
            try:
                seeds = self.subconscious.seeds(request.query, list(request.recent), deadline)
                limit = self.settings.api_max_query_chars
                queries += [q for q in seeds.queries if q != request.query and len(q) <= limit]
                names = list(seeds.entities)
            except Fallback as exc:
                fallback = str(exc)
        depth = min(models.MAX_K, 3 * request.k)
        found = [self._recall(being_id, scoped.model_copy(update={"query": q}), depth, now) for q in queries]
        candidates = resonance.fuse(found)
        facts = self.named_facts(being_id, request.query, request.session_id, until, names)
        chosen = resonance.arrange(candidates, request.k, facts)
        memories = [m for m in chosen if not isinstance(m, resonance.GraphFact)]
        shown_facts = [f for f in chosen if isinstance(f, resonance.GraphFact)]
        self.echo.record(being_id, request.session_id, [_item_ref(i) for i in chosen])
        self._reinforce(being_id, "resonance", memories)
        self.record_fact_access(being_id, [f.fact_id for f in shown_facts])
        items, lines = [], []
        for item in chosen:
            full, relative, day = resonance.label(item.ts, now)
            text = resonance.line(full, item)
            if isinstance(item, resonance.GraphFact):
                items.append(
                    models.ResonanceItem(
                        kind="fact", label=full, relative=relative, date=day, line=text, fact=fact_out(item)
                    )
                )
            else:
                items.append(
                    models.ResonanceItem(
                        label=full, relative=relative, date=day, line=text, memory=memory_out(item)
                    )
                )
            lines.append((full, item))
        text, rewritten = resonance.render(lines), False
        if self.subconscious.configured and lines and fallback is None:
            # Phase 5: the raw lines in the user's language and the being's voice.
            try:
                fragments = [item.line.removeprefix("- ") for item in items]
                text = resonance.render_lines(
                    self.subconscious.rewrite(being_id, request.query, fragments, deadline)
                )
                rewritten = True
            except Fallback as exc:
                fallback = str(exc)
        if fallback is not None:
            log.info("resonance for %s served mechanically: %s", being_id, fallback)
        return models.ResonanceResponse(
            being_id=being_id, now=now, text=text, items=items, queries=queries, rewritten=rewritten,
            fallback=fallback,
        )  # fmt: skip

    def named_facts(
        self,
        being_id: str,
        query: str,
        session: str | None,
        until: datetime | None,
        names: list[str] | None = None,
    ) -> list[resonance.GraphFact]:
        """Phase 2, the graph side: the facts (depth 2) of the entities the query names, matched
        against the being's entities and aliases with no model, and of the entities a model named
        (`names`, resolved like `GET facts` does); none forgotten or shown in the session."""
        path = self.settings.lance_path
        index = graph.entity_index(path, being_id)
        named = index.mentions(query, resonance.MENTIONED_ENTITIES)
        for name in names or []:
            hit = index.resolve(name)
            if hit is not None and hit[0] not in named:
                named.append(hit[0])
        named = named[: resonance.MENTIONED_ENTITIES]
        if not named:
            return []
        marks = self.marks.state(being_id)
        shown = set(self.echo.shown(being_id, session))
        found: dict[str, resonance.GraphFact] = {}
        for key in named:
            for row in graph.neighbourhood(path, being_id, key, depth=2)["facts"]:
                fact = resonance.GraphFact.from_row(row)
                if (
                    fact.fact_id in shown
                    or marks.hides(fact.fact_id, list(fact.source_episode_ids))
                    or (until is not None and fact.ts is not None and fact.ts > until)
                ):
                    continue
                found.setdefault(fact.fact_id, fact)
        return list(found.values())

    def search(self, being_id: str, request: models.SearchRequest) -> models.SearchResponse:
        query = self.check_query(request.query)
        hidden = len(self.marks.state(being_id).forgotten)
        more = min(hidden, 50)
        table, version = self.latest.get()
        fresh = [f.memory() for f in self._fresh(being_id, table, version)]
        found = search_memory(table, being_id, query, mode=request.mode, k=request.k + more, fresh=fresh)
        found = _without_published_twins(found)
        memories = self.apply_marks(being_id, found)[: request.k]
        self._reinforce(being_id, "search_memory", memories)
        return models.SearchResponse(
            being_id=being_id, mode=request.mode, memories=[memory_out(m) for m in memories]
        )

    def cluster(self, being_id: str, cluster_id: str, k: int) -> models.ClusterResponse:
        hidden = len(self.marks.state(being_id).forgotten)
        found = cluster_memories(self._table(), being_id, cluster_id, k=k + hidden)
        memories = self.apply_marks(being_id, found)[:k]
        self._reinforce(being_id, "recall_memory", memories)
        return models.ClusterResponse(
            being_id=being_id, cluster_id=cluster_id, memories=[memory_out(m) for m in memories]
        )
