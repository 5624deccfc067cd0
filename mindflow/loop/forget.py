"""Forget as the Moltbot design has it: find every candidate, show them, apply only on confirm.

Finding changes nothing: it searches the published memories (dormant and dead ones
included), the fresh tail the caller passes, the facts and relations, and the MEMORY.md
lines and STORY.md chapters that cite what was found, and keeps the candidates in a
pending `forget` proposal. A confirm of some or all of them appends one mark: a
tombstone every server applies at once (soft: archived, restorable) or, with
`permanent`, a delete that the `forget` job carries out everywhere.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from mindflow import lance
from mindflow.config import Settings
from mindflow.errors import Conflict, MindflowError, NotFound
from mindflow.inbox import text_sha256
from mindflow.loop.deleted_texts import HASHED, record_hashes
from mindflow.loop.marks import Mark, MarkState, append_marks, new_mark, read_marks, state_of
from mindflow.loop.proposals import Proposal, ProposalStore
from mindflow.loop.refs import unknown_memory
from mindflow.recall import Memory, search_memory
from mindflow.recall.models import COLUMNS
from mindflow.recall.primitives import FORGETTABLE, filtered_rows, keywords, memory_filter, words_of

MAX_CANDIDATES = 50
MIN_SHARE = 0.5  # of the query's words a candidate holds
# Words that say nothing about which memory is meant.
_STOPWORDS = frozenset(
    "a an and about any are as at be but by for from had has have he her him his i i'm if in into is it "
    "its me my of on or our she so that the their them then there they this to was we were what when "
    "where which who will with you your".split()
)
# What follows one of the seed's forget phrases is what to forget ("forget about my old
# address" -> "my old address"); "scratch that" and "never mind" name the turn before.
_FORGET_PHRASE = re.compile(
    r"(?:please\s+)?(?:"
    r"forget\s+(?:about\s+|that\s+|this\s+|what\s+i\s+(?:said|told\s+you|wrote|mentioned)\s+(?:about\s+)?)?"
    r"|don['’]?t\s+remember\s+|do\s+not\s+remember\s+"
    r"|ignore\s+what\s+i\s+said\s+(?:about\s+)?|disregard\s+(?:what\s+i\s+said\s+(?:about\s+)?)?"
    r"|remove\s+(?:this\s+|that\s+)?from\s+(?:your\s+)?memory\s*:?\s*|delete\s+the\s+memory\s+(?:of\s+|about\s+)?"
    r"|scratch\s+that|never\s*mind|no\s+longer\s+relevant\s*:?)",
    re.IGNORECASE,
)


@dataclass
class Candidate:
    """Something a forget would remove, as the person is shown it."""

    ref: str
    store: str  # memory | fresh | fact | relation | memory_md | story
    text: str
    status: str | None = None
    source_episode_ids: list[str] = field(default_factory=list)
    score: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def forget_query(text: str) -> str:
    """The object of a forget instruction: the text after the phrase, or '' when it names none."""
    m = _FORGET_PHRASE.search(text)
    if m is None:
        return ""
    rest = text[m.end() :].strip(" \t\n.,;:!?\"'“”")
    return rest


def _terms(query: str) -> list[str]:
    """The words that pick memories out: no stopwords, possessives as their noun ("Maja's" -> "maja")."""
    words = (re.sub(r"['’]s$", "", w) for w in keywords(query))
    return list(dict.fromkeys(w for w in words if w not in _STOPWORDS and len(w) > 1))


def memories_table(settings: Settings):
    """The LanceDB `memories` table, or None before the first publish."""
    from mindflow.memories import TABLE

    return lance.open_table(lance.connect(settings.lance_path), TABLE)


def _graph_table(settings: Settings, name: str):
    return lance.open_table(lance.connect(settings.lance_path), name)


def _memory_rows(table, being_id: str, refs: Sequence[str]) -> list[dict]:
    if table is None or not refs:
        return []
    where = lance.all_of(lance.where(being_id=being_id), lance.where(memory_ref=list(refs)))
    return table.search().where(where).select(COLUMNS).limit(len(refs) * 2).to_arrow().to_pylist()


def memory_row(settings: Settings, being_id: str, ref: str, table=None) -> dict | None:
    """One published memory of the being (any status), or None."""
    table = table if table is not None else memories_table(settings)
    rows = _memory_rows(table, being_id, [ref])
    return rows[0] if rows else None


def _fact_rows(settings: Settings, being_id: str) -> list[tuple[str, dict]]:
    out = []
    for name, store in (("facts", "fact"), ("relations", "relation")):
        table = _graph_table(settings, name)
        if table is None:
            continue
        rows = table.search().where(lance.where(being_id=being_id)).limit(None).to_arrow().to_pylist()
        out += [(store, r) for r in rows]
    return out


def _fact_ref(store: str, row: dict) -> str:
    return row["fact_id"] if store == "fact" else row["relation_id"]


def _fact_text(store: str, row: dict) -> str:
    if store == "fact":
        return f"{row['entity']} {row['key']}: {row['value']}"
    return f"{row['subject']} {row['predicate']} {row['object']}"


@dataclass(frozen=True)
class _Words:
    """The query's words, each weighted by how rare it is among the being's memories.

    A candidate holds at least half of the weight. Counted plainly, a two-word query offered every
    memory holding either word: "passport number" offered "the same-day numbers" and "the line
    number", and a confirm of all candidates forgets (or deletes for good) each of them. Weighted,
    the rare word says which memory is meant and the common one alone is not enough; two words as
    rare as each other still count half each. A word no memory holds carries no weight: it says
    nothing about which memory is meant ("forget the cello plan" finds "learn the cello")."""

    terms: list[str]
    weights: dict[str, float] = field(default_factory=dict)  # empty: every word counts the same

    def share(self, text: str) -> float:
        """The share of the words' weight the text holds, as whole words: "pin" is not in
        "flipping" nor "bank" in "Nordbank", and what a forget offers may be deleted for good."""
        if not self.terms:
            return 0.0
        words = {re.sub(r"['’]s$", "", w) for w in words_of(text)}
        # A plural holds its noun and the other way round ("codes" / "code").
        held = words | {w[:-1] for w in words if w.endswith("s")} | {w + "s" for w in words}
        weights = self.weights or dict.fromkeys(self.terms, 1.0)
        return sum(w for t, w in weights.items() if t in held) / sum(weights.values())

    def matches(self, text: str) -> bool:
        return self.share(text) >= MIN_SHARE


def _forms(term: str) -> str:
    """A pattern of the term as a whole word, its plural or singular too (as `_Words.share` holds it)."""
    forms = {term, term + "s"} | ({term[:-1]} if term.endswith("s") and len(term) > 2 else set())
    return r"\b(?:" + "|".join(re.escape(f) for f in sorted(forms)) + r")\b"


def _weigh(terms: list[str], table, being_id: str, fresh: list[Memory]) -> _Words:
    """The words weighted by their inverse document frequency over the being's memories (the ones a
    forget can find, fresh ones too). One read of the texts and one count per word: ~45 ms and ~15 ms
    a word at 100,000 memories, on a request a person makes rarely."""
    if len(terms) < 2:
        return _Words(terms)
    texts = [m.text for m in fresh]
    column = pa.array(texts, pa.string())
    if table is not None:
        where = memory_filter(being_id, statuses=FORGETTABLE)
        stored = filtered_rows(table, where, None, ["text"]).column("text")
        column = pa.chunked_array([*stored.chunks, column], pa.string())
    n = len(column)
    weights = {}
    for term in terms:
        df = pc.sum(pc.match_substring_regex(column, _forms(term), ignore_case=True)).as_py() or 0
        if df:
            weights[term] = math.log((n + 1) / (df + 0.5))
    return _Words(terms, weights)


def _cites(text: str, memories: list[Candidate]) -> bool:
    """Does a line of MEMORY.md or a chapter of STORY.md quote one of the memories?"""
    lowered = " ".join(text.lower().split())
    for memory in memories:
        quote = " ".join(memory.text.lower().split())[:60]
        if len(quote) >= 12 and quote in lowered:
            return True
    return False


def find_candidates(
    settings: Settings,
    being_id: str,
    query: str | None = None,
    refs: Sequence[str] = (),
    *,
    table=None,
    fresh: Iterable[Memory] = (),
    state: MarkState | None = None,
) -> list[Candidate]:
    """Everything a forget of `query` and/or `refs` would reach; NotFound for an unknown ref.

    `fresh` are the matching memories of the caller's fresh tail (the server passes its own).
    Memories already forgotten (soft) are offered again, with status `archived`, so that "no,
    delete it for good" can confirm them permanently, before and after a run archived them;
    so are memories decay's retention archived (their text is still kept); deleted ones never.
    """
    if not (query and query.strip()) and not refs:
        raise MindflowError("say what to forget: a query, refs, or both")
    table = table if table is not None else memories_table(settings)
    state = state if state is not None else state_of(read_marks(settings.loop, being_id))
    fresh = list(fresh)
    found: dict[str, Candidate] = {}

    def add(candidate: Candidate) -> None:
        if candidate.ref in found or state.is_deleted(candidate.ref, candidate.source_episode_ids):
            return
        if candidate.store in ("memory", "fresh") and state.hides(
            candidate.ref, candidate.source_episode_ids
        ):
            candidate = replace(candidate, status="archived")
        found[candidate.ref] = candidate

    def memory(row: dict | Memory, store: str, score: float | None = None) -> Candidate:
        m = row if isinstance(row, Memory) else Memory.from_row(row)
        return Candidate(m.memory_ref, store, m.text, m.status, list(m.source_episode_ids), score)

    facts = None
    wanted = list(dict.fromkeys(refs))
    if wanted:
        # A memory deleted for good is no memory any more, as every read says (404).
        by_ref = {
            r["memory_ref"]: r
            for r in _memory_rows(table, being_id, wanted)
            if not state.is_deleted(r["memory_ref"], r.get("source_episode_ids") or ())
        }
        fresh_by_ref = {m.memory_ref: m for m in fresh}
        missing = [r for r in wanted if r not in by_ref and r not in fresh_by_ref]
        if missing:
            facts = _fact_rows(settings, being_id)
            known_facts = {_fact_ref(s, r) for s, r in facts}
            missing = [r for r in missing if r not in known_facts]
        if missing:
            # The same answer for another being's ref as for a ref that never existed.
            raise unknown_memory(being_id, missing[0])
        for ref in wanted:
            if ref in by_ref:
                add(memory(by_ref[ref], "memory"))
            elif ref in fresh_by_ref:
                add(memory(fresh_by_ref[ref], "fresh"))
    terms = _terms(query or "")
    wanted_words = _weigh(terms, table, being_id, fresh)
    if terms and table is not None:
        # Half the words' weight at least (`_Words`): "forget the cello plan" finds "learn the
        # cello this spring", and a common word shared with the request sweeps in nothing.
        # search_memory matches substrings too (a search tool's choice): counted again here by
        # whole words of the memory's own text. Archived memories too (FORGETTABLE): a run
        # archives a forgotten one, and "no, delete it for good" must still find it by its words.
        hits = search_memory(
            table, being_id, " ".join(terms), mode="or", k=MAX_CANDIDATES, statuses=FORGETTABLE
        )
        for m in hits:
            share = wanted_words.share(m.text)
            if share >= MIN_SHARE:
                add(memory(m, "memory", share))
    for m in fresh:
        share = wanted_words.share(m.text)
        if share >= MIN_SHARE and m.memory_ref not in found:
            add(memory(m, "fresh", share))
    memories = [c for c in found.values() if c.store in ("memory", "fresh")]
    episodes = {e for c in memories for e in c.source_episode_ids}
    if facts is None:
        facts = _fact_rows(settings, being_id)
    for store, row in facts:
        text = _fact_text(store, row)
        sources = list(row.get("source_episode_ids") or [])
        ref = _fact_ref(store, row)
        if ref in wanted or wanted_words.matches(text) or episodes.intersection(sources):
            add(Candidate(ref, store, text, "active", sources))
    _cited_in_workspace(settings, being_id, memories, wanted_words, add)
    return list(found.values())[:MAX_CANDIDATES]


def _cited_in_workspace(
    settings: Settings, being_id: str, memories: list[Candidate], words: _Words, add
) -> None:
    from mindflow.narrative import CHAPTER

    folder = settings.workspace / being_id
    core = folder / "MEMORY.md"
    if core.is_file():
        for number, line in enumerate(core.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if line.startswith("- ") and (_cites(line, memories) or words.matches(line)):
                add(Candidate(f"MEMORY.md:{number}", "memory_md", line[2:].strip()))
    story = folder / "STORY.md"
    if story.is_file():
        text = story.read_text(encoding="utf-8", errors="replace")
        heads = list(CHAPTER.finditer(text))
        for i, head in enumerate(heads):
            body = text[head.start() : heads[i + 1].start() if i + 1 < len(heads) else len(text)]
            if _cites(body, memories) or words.matches(body):
                add(Candidate(f"STORY.md:{head.group(1)}", "story", f"{head.group(1)} {head.group(2)}"))


def trigger_proposal_id(being_id: str, episode_id: str) -> str:
    """One proposal per forget instruction, whichever path (API, file drop, ingestion) sees it first."""
    return "p-" + hashlib.sha256(f"forget\x1f{being_id}\x1f{episode_id}".encode()).hexdigest()[:32]


def propose(
    settings: Settings,
    being_id: str,
    query: str | None,
    refs: Sequence[str] = (),
    *,
    created_by: str = "user",
    table=None,
    fresh: Iterable[Memory] = (),
    proposal_id: str | None = None,
    source_episode_id: str | None = None,
    candidates: Sequence[Candidate] | None = None,
) -> Proposal | None:
    """Find the candidates and keep them in a pending `forget` proposal; nothing is changed.

    `candidates`: found already (the CLI shows them before it opens anything). None when
    there is no candidate: a proposal without one could never be confirmed, and would wait
    among the pending ones for good."""
    if candidates is None:
        candidates = find_candidates(settings, being_id, query, refs, table=table, fresh=fresh)
    if not candidates:
        return None
    payload = {
        "query": query,
        "refs": list(refs),
        "candidates": [c.to_dict() for c in candidates],
        "permanent": False,
        "confirmed_refs": [],
        "confirmed_episode_ids": [],
    }
    if source_episode_id is not None:
        payload["source_episode_id"] = source_episode_id
    return ProposalStore(settings.proposals).create(
        being_id, "forget", payload, created_by, proposal_id=proposal_id
    )


@dataclass
class ForgetDecision:
    proposal: Proposal
    mark: Mark | None  # None when rejected


def confirm(
    settings: Settings,
    being_id: str,
    proposal_id: str,
    refs: Sequence[str] | None = None,
    *,
    permanent: bool = False,
    decided_by: str = "user",
) -> ForgetDecision:
    """Apply a pending forget proposal to `refs` (all its candidates when None): one mark.

    Conflict when it was decided already; MindflowError for a ref that is not one of
    its candidates. The mark is appended under the proposal's lock before it is approved
    (`ProposalStore.decide`), so the two never disagree for good; a soft forget is applied
    then too, a permanent one when the `forget` job has erased it.
    """
    store = ProposalStore(settings.proposals)
    proposal = store.get(being_id, proposal_id)
    if proposal.kind != "forget":
        raise MindflowError(f"proposal {proposal_id} is a {proposal.kind} proposal, not a forget")
    candidates = {c["ref"]: c for c in proposal.payload.get("candidates", [])}
    chosen = list(dict.fromkeys(refs)) if refs is not None else list(candidates)
    unknown = [r for r in chosen if r not in candidates]
    if unknown:
        raise MindflowError(
            f"{unknown[0]!r} is not a candidate of proposal {proposal_id}; "
            f"choose among its {len(candidates)} candidates"
        )
    if not chosen:
        raise MindflowError(f"proposal {proposal_id} has no candidates to forget; nothing to confirm")
    target = [r for r in chosen if candidates[r]["store"] in ("memory", "fresh", "fact", "relation")]
    episodes = sorted(
        {
            e
            for r in chosen
            if candidates[r]["store"] in ("memory", "fresh")
            for e in candidates[r]["source_episode_ids"]
        }
    )
    payload = {
        **proposal.payload,
        "permanent": bool(permanent),
        "confirmed_refs": chosen,
        "confirmed_episode_ids": episodes,
    }
    mark = new_mark(
        being_id,
        "delete" if permanent else "forget",
        target,
        episodes,
        actor=decided_by,
        proposal_id=proposal_id,
    )
    # A permanent forget's texts are refused by POST episodes and the fresh tail from now on, under
    # any id; the `forget` job records them again from DuckDB (this is only the earliest moment).
    hashes = _text_hashes(candidates[r] for r in target) if permanent else []

    def apply() -> None:
        append_marks(settings.loop, [mark])
        if hashes:
            record_hashes(settings.loop, being_id, hashes, [proposal_id])

    decided = store.decide(
        being_id,
        proposal_id,
        "approved",
        decided_by,
        payload,
        apply=apply,
        # A soft forget holds once its mark is written (the runs only fold it in); a permanent
        # one is applied when the `forget` job has erased it (erase.finish).
        applied=not permanent,
    )
    return ForgetDecision(decided, mark)


def _text_hashes(candidates: Iterable[dict[str, Any]]) -> list[str]:
    """The sha256 of each candidate's text (one a scrub left as `sha256:<hex>` is that hash)."""
    out = set()
    for c in candidates:
        text = c.get("text") or ""
        if text.startswith(HASHED):
            out.add(text.removeprefix(HASHED))
        elif text.strip():
            out.add(text_sha256(text))
    return sorted(out)


def reject(settings: Settings, being_id: str, proposal_id: str, decided_by: str = "user") -> Proposal:
    return ProposalStore(settings.proposals).decide(being_id, proposal_id, "rejected", decided_by)


def _episodes_of(settings: Settings, being_id: str, ref: str) -> list[str]:
    """The source episodes a forget recorded for `ref` (from its proposal's candidates)."""
    store = ProposalStore(settings.proposals)
    for mark in reversed(read_marks(settings.loop, being_id)):
        if mark.op in ("forget", "delete") and ref in mark.refs and mark.proposal_id:
            try:
                proposal = store.get(being_id, mark.proposal_id)
            except NotFound:
                break
            for c in proposal.payload.get("candidates", []):
                if c["ref"] == ref:
                    return list(c.get("source_episode_ids") or [])
            break
    return []


def restore(settings: Settings, being_id: str, ref: str, actor: str = "user") -> Mark:
    """Undo a soft forget of one memory or fact; NotFound if nothing forgot it, Conflict once deleted."""
    state = state_of(read_marks(settings.loop, being_id))
    episodes = _episodes_of(settings, being_id, ref)
    if state.is_deleted(ref, episodes):
        raise Conflict(f"{ref} was deleted permanently; it cannot be restored")
    if not state.hides(ref, episodes):
        row = memory_row(settings, being_id, ref)
        if row is None or row.get("status") != "archived":
            raise NotFound(f"no forgotten memory {ref!r} for being {being_id!r}")
    mark = new_mark(being_id, "restore", [ref], episodes, actor=actor)
    append_marks(settings.loop, [mark])
    return mark


def pin(
    settings: Settings,
    being_id: str,
    ref: str,
    pinned: bool = True,
    *,
    actor: str = "user",
    fresh_refs: Iterable[str] = (),
    table=None,
) -> Mark:
    """Pin (or unpin) a memory: visible in the API at once, folded into DuckDB by the next run."""
    state = state_of(read_marks(settings.loop, being_id))
    if ref not in set(fresh_refs):
        row = memory_row(settings, being_id, ref, table)
        if row is None or state.is_deleted(ref, row.get("source_episode_ids") or []):
            raise unknown_memory(being_id, ref)
        if state.hides(ref, row.get("source_episode_ids") or []):
            raise Conflict(f"{ref} is forgotten; restore it before pinning it")
    mark = new_mark(being_id, "pin" if pinned else "unpin", [ref], actor=actor)
    append_marks(settings.loop, [mark])
    return mark


def proposals_for_triggers(
    settings: Settings,
    being_id: str,
    episodes: Sequence[dict],
    *,
    table=None,
    fresh: Iterable[Memory] = (),
) -> list[Proposal]:
    """A pending forget proposal per forget instruction among `episodes` (dicts with id, text,
    trigger, session_id), with its candidates; never applied without a confirm.

    "Scratch that" names no object: its candidate is the episode just before it in the
    same session.
    """
    from mindflow.loop.refs import episode_memory_ref

    out = []
    fresh = list(fresh)
    previous: dict[str | None, dict] = {}
    for episode in episodes:
        session = episode.get("session_id")
        if episode.get("trigger") == "forget":
            query = forget_query(episode.get("text") or "")
            refs: list[str] = []
            if not _terms(query):
                before = previous.get(session)
                if before is None:
                    previous[session] = episode
                    continue
                refs = [episode_memory_ref(being_id, before["id"])]
                known = {m.memory_ref for m in fresh}
                if refs[0] not in known:
                    fresh = [*fresh, _as_memory(being_id, before)]
                query = None
            try:
                proposal = propose(
                    settings,
                    being_id,
                    query,
                    refs,
                    created_by="user",
                    table=table,
                    fresh=fresh,
                    proposal_id=trigger_proposal_id(being_id, episode["id"]),
                    source_episode_id=episode["id"],
                )
            except NotFound:
                proposal = None  # the turn before was never kept (a heartbeat, a quarantined line)
            if proposal is not None:
                out.append(proposal)
        previous[session] = episode
    return out


def _as_memory(being_id: str, episode: dict) -> Memory:
    from mindflow.loop.refs import episode_memory_ref

    return Memory(
        memory_ref=episode_memory_ref(being_id, episode["id"]),
        being_id=being_id,
        text=episode.get("text") or "",
        source_episode_ids=[episode["id"]],
    )


def propose_ingested(con, settings: Settings, since: datetime) -> list[Proposal]:
    """Pending forget proposals for the forget instructions ingested since `since` (file drops,
    transcripts, `mindflow ingest`); one per instruction, so an episode the API already
    proposed keeps its proposal."""
    rows = con.execute(
        """
        SELECT f.being_id, f.episode_id, f.text, f.session_id,
               p.episode_id AS before_id, p.text AS before_text
        FROM episodes f
        LEFT JOIN LATERAL (
            SELECT e.episode_id, e.text FROM episodes e
            WHERE e.being_id = f.being_id AND e.session_id IS NOT DISTINCT FROM f.session_id AND e.ts < f.ts
            ORDER BY e.ts DESC LIMIT 1
        ) p ON TRUE
        WHERE f.ingested_at >= ? AND f.trigger = 'forget'
        ORDER BY f.being_id, f.ts
        """,
        [since],
    ).fetchall()
    if not rows:  # the usual ingest run: no LanceDB to open
        return []
    table = memories_table(settings)
    out: list[Proposal] = []
    for being_id, episode_id, text, session_id, before_id, before_text in rows:
        records = []
        if before_id is not None:
            records.append({"id": before_id, "text": before_text, "trigger": None, "session_id": session_id})
        records.append({"id": episode_id, "text": text, "trigger": "forget", "session_id": session_id})
        out += proposals_for_triggers(settings, being_id, records, table=table)
    return out
