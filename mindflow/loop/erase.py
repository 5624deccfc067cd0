"""The permanent forget: an approved delete erased everywhere under MINDFLOW_HOME, crash-only.

A `forget` proposal approved with `permanent` (and its `delete` mark, which hides the
memories on every server at once) is carried out by the `forget` job, in this order:

1. plan: from DuckDB, what goes: the confirmed refs and episodes, the memories formed from
   those episodes, their scenes, facts, relations, and every text they hold; the sha256 of each
   text appended to `loop/<being>/deleted.jsonl`, so the read API refuses it from then on;
2. inbox: the episodes' lines in pending and done inbox files blanked (line numbers keep),
   `inbox_files.sha256` brought in line so a backfill reads the new files; quarantine
   lines holding the texts removed;
3. events: the refs removed from recall-event lines;
4. lance: the rows removed from `memories`, `memory_history`, `facts`, `relations` and
   `aliases` by writing each table again without them (a delete only marks rows, and
   compaction keeps a fragment with few deleted rows), its indexes built again (the
   full-text index holds the words), then every older version and unverified file removed,
   and the servers' hot index files of the older versions of `memories` (`cache/hot`);
5. workspace: the STORY.md chapters that tell a deleted episode narrated again without it
   (mechanically), MEMORY.md rebuilt, other lines holding the texts removed, each an
   audited commit; then the being's rows of `journal_chunks` (chunks of those files, read
   before they were rewritten) removed the same way as in step 4, and its `journal_files`
   rows, so the next index reads the rewritten files;
6. audit: one DELETE row with the refs and the sha256 of each deleted text, never the text;
7. git: the workspace history rewritten so no commit holds a text, old objects pruned;
8. proposal_texts: every proposal of the being (any kind, any status) scrubbed: each text
   that holds a deleted text (or is one, by its sha256) replaced by its sha256, as are the
   candidates of an erased memory and the query of a forget that found one; an open
   reflection or sub-agent proposal citing what goes is rejected;
9. duckdb: the rows deleted, history rows of the refs kept without their content plus a
   `deleted` tombstone each, embedding cache rows dropped; memory_history republished;
10. duckdb_file: the file copied into a new one and swapped in, so no freed block keeps
   the deleted bytes (`rewrite_duckdb`);
11. proposal: the permanent forgets marked applied.

Every text the later steps need is read in step 1 from DuckDB, which keeps it until step 9;
after that no step needs one (so the proposals are scrubbed before it). Each step finds what
is left to do from the stores themselves, so a run killed anywhere and run again finishes the
job, and a finished step does nothing; the proposal is marked applied last.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

import duckdb
from filelock import FileLock

from mindflow import lance, store
from mindflow.audit import AuditRow
from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.files import atomic_write, fsync_dir
from mindflow.inbox import Deleted, text_sha256
from mindflow.loop import deleted_texts
from mindflow.loop.deleted_texts import HASHED
from mindflow.loop.proposals import Proposal, ProposalStore
from mindflow.loop.scrub import Matcher, plain, words
from mindflow.models import utcnow

STEPS = (
    "plan",
    "inbox",
    "events",
    "lance",
    "workspace",
    "audit",
    "git",
    "proposal_texts",
    "duckdb",
    "duckdb_file",
    "proposal",
)
# The LanceDB tables that hold a being's memories, facts and their history, with their key.
LANCE_TABLES = {
    "memories": "memory_ref",
    "memory_history": "memory_ref",
    "facts": "fact_id",
    "relations": "relation_id",
    "aliases": "alias_id",
}
REWRITE_SUFFIX = ".erase-tmp"
# Files of a being's workspace the line scrub leaves alone: STORY.md is narrated again under its
# lock; SOUL.md and IDENTITY.md are critical files a person approves (and hold no memories).
_OWN_FILES = ("STORY.md", "SOUL.md", "IDENTITY.md")
_REMOVED = "_(lines removed by a permanent forget)_\n"
# How a DELETE audit row lists the sha256 of each deleted text (ingestion reads them back).
_HASHES_SAID = "; sha256 of each deleted text: "
_SHA256 = re.compile(r"\b[0-9a-f]{64}\b")


@dataclass
class EraseReport:
    """What one `forget` run erased, per store."""

    proposals: int = 0
    refs: int = 0  # memories, facts and relations deleted
    episodes: int = 0
    # DuckDB rows
    episode_rows: int = 0
    scene_notes: int = 0
    nodes: int = 0
    facts: int = 0
    relations: int = 0
    aliases: int = 0
    co_occurrences: int = 0
    decay_scores: int = 0
    embedding_cache: int = 0
    history_scrubbed: int = 0
    tombstones: int = 0
    published_rows: int = 0
    folded_events: int = 0
    # files
    inbox_lines: int = 0
    inbox_files: int = 0
    quarantine_lines: int = 0
    event_lines: int = 0
    # LanceDB
    lance_rows: int = 0
    lance_versions_removed: int = 0
    hot_index_folders: int = 0
    # workspace
    chapters_renarrated: int = 0
    journal_rows: int = 0  # chunks of the being's memory files removed (indexed again later)
    workspace_lines: int = 0
    commits_rewritten: int = 0
    blobs_rewritten: int = 0
    proposal_texts: int = 0  # proposals whose texts were replaced by their sha256
    # the DuckDB file
    duckdb_bytes_before: int = 0
    duckdb_bytes_after: int = 0
    duckdb_rewrite_seconds: float = 0.0
    seconds: float = 0.0
    steps: list[str] = field(default_factory=list)

    def add(self, other: EraseReport) -> None:
        for key, value in asdict(other).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                setattr(self, key, getattr(self, key) + value)

    def counts(self) -> dict[str, int | float]:
        return {k: v for k, v in asdict(self).items() if k != "steps"}


@dataclass
class Plan:
    """What one being's permanent forgets remove, read from DuckDB (and the proposals)."""

    being_id: str
    proposals: list[Proposal]
    refs: set[str]  # every ref that goes: confirmed, and memories formed from the episodes
    episodes: dict[str, object]  # episode id -> its ts (None once DuckDB no longer has it)
    nodes: list[str]
    scenes: list[str]
    facts: list[str]
    relations: list[str]
    alias_keys: list[str]  # entity keys only the deleted facts and relations named
    texts: list[str]  # every deleted text (episodes, memories, facts, candidates)
    cache_keys: list[str]  # embedding_cache sha256 keys of the texts that were embedded

    @property
    def matcher(self) -> Matcher:
        return Matcher(self.texts)

    def text_hashes(self) -> list[str]:
        return sorted({text_sha256(t) for t in self.texts if t})


# --------------------------------------------------------------------------- what waits


def pending(settings: Settings) -> dict[str, list[Proposal]]:
    """Approved permanent forgets not carried out yet, per being (no DuckDB: the sensor calls it)."""
    store_ = ProposalStore(settings.proposals)
    out: dict[str, list[Proposal]] = {}
    for being_id in store_.beings():
        waiting = [
            p
            for p in store_.list(being_id, status="approved", kind="forget")
            if p.payload.get("permanent") and p.applied_at is None
        ]
        if waiting:
            out[being_id] = waiting
    return out


def erase_all(
    settings: Settings, run_id: str | None = None, narrator: Callable[[], object | None] | None = None
) -> EraseReport:
    """Carry out every approved permanent forget; nothing waiting costs a few file reads.

    `narrator` gives the narrative model (or None), asked for only when there is work: chapters
    are narrated again and MEMORY.md rebuilt with it; without one, mechanically.
    """
    started = time.monotonic()
    total = EraseReport()
    remove_leftover(settings)
    waiting = pending(settings)
    if not waiting:
        total.seconds = round(time.monotonic() - started, 3)
        return total
    llm = narrator() if narrator is not None else None
    with store.connect(settings.duckdb_path, lock_timeout_s=settings.duckdb_lock_timeout_s) as con:
        for being_id, proposals in waiting.items():
            report = erase(settings, con, being_id, proposals, run_id, llm=llm)
            total.add(report)
            total.steps = report.steps
    # The connection is closed: the file can be swapped.
    before, after, seconds = rewrite_duckdb(settings)
    total.duckdb_bytes_before, total.duckdb_bytes_after = before, after
    total.duckdb_rewrite_seconds = round(seconds, 3)
    total.steps.append("duckdb_file")
    for being_id, proposals in waiting.items():
        finish(settings, being_id, proposals, run_id)
    total.steps.append("proposal")
    total.seconds = round(time.monotonic() - started, 3)
    return total


def erase(
    settings: Settings,
    con: duckdb.DuckDBPyConnection,
    being_id: str,
    proposals: list[Proposal],
    run_id: str | None = None,
    *,
    llm=None,
) -> EraseReport:
    """Steps 1-9 for one being (the ones that need a DuckDB connection), in their order."""
    report = EraseReport(proposals=len(proposals))
    plan = make_plan(con, being_id, proposals)
    # Before anything is erased, while DuckDB still holds every text: the read API refuses them
    # from now on (POST episodes, the fresh tail), as ingestion does.
    deleted_texts.record_hashes(
        settings.loop, being_id, plan.text_hashes(), [p.proposal_id for p in proposals]
    )
    report.steps.append("plan")
    report.refs, report.episodes = len(plan.refs), len(plan.episodes)
    erase_inbox(con, settings, plan, report)
    report.steps.append("inbox")
    erase_events(con, settings, plan, report)
    report.steps.append("events")
    erase_lance(settings, plan, report)
    report.steps.append("lance")
    erase_workspace(con, settings, plan, report, run_id, llm)
    erase_journal_index(con, settings, plan, report)
    report.steps.append("workspace")
    audit_deletion(con, settings, plan, run_id)
    report.steps.append("audit")
    rewrite_history(settings, plan, report, run_id)
    report.steps.append("git")
    scrub_proposals(settings, plan, report)
    report.steps.append("proposal_texts")
    erase_duckdb(con, settings, plan, report, run_id)
    report.steps.append("duckdb")
    return report


def deleted(con: duckdb.DuckDBPyConnection, loop_dir: Path, being_id: str) -> Deleted:
    """What the being's permanent forgets deleted, for ingestion to refuse: the episode ids of its
    `delete` marks (set at the confirm, before the erase), and the sha256 of each text the DELETE
    audit rows recorded (step 6) or `loop/<being>/deleted.jsonl` lists (step 1), so the same text
    under another id is refused too."""
    from mindflow.loop.marks import read_marks, state_of

    hashes: set[str] = set()
    for (summary,) in con.execute(
        "SELECT summary FROM audit_log WHERE action = 'DELETE' AND target = 'table:nodes' "
        "AND starts_with(summary, ?)",
        [f"{being_id}: proposal "],
    ).fetchall():
        _, _, listed = (summary or "").partition(_HASHES_SAID)
        hashes.update(_SHA256.findall(listed))
    hashes.update(deleted_texts.read_hashes(loop_dir, being_id))
    episodes = state_of(read_marks(loop_dir, being_id)).deleted_episodes
    return Deleted(frozenset(episodes), frozenset(hashes))


# --------------------------------------------------------------------------- 1. plan


def _targets(proposals: list[Proposal]) -> tuple[set[str], set[str]]:
    refs: set[str] = set()
    episodes: set[str] = set()
    for p in proposals:
        refs.update(p.payload.get("confirmed_refs") or [])
        episodes.update(p.payload.get("confirmed_episode_ids") or [])
    # Lines of MEMORY.md and chapters of STORY.md are candidates too: rebuilt, not rows.
    return {r for r in refs if not r.startswith(("MEMORY.md:", "STORY.md:"))}, episodes


def make_plan(con: duckdb.DuckDBPyConnection, being_id: str, proposals: list[Proposal]) -> Plan:
    from mindflow.graph import key_of_many
    from mindflow.patrol import node_text

    refs, episode_ids = _targets(proposals)
    p = {"being": being_id, "refs": sorted(refs)}
    # The episodes of the confirmed memories, then every memory formed from one of them.
    for (sources,) in con.execute(
        "SELECT source_episode_ids FROM nodes WHERE being_id = $being AND list_contains($refs, node_id)", p
    ).fetchall():
        episode_ids.update(sources or [])
    p["episodes"] = sorted(episode_ids)
    nodes = con.execute(
        """SELECT node_id, scene_id, scene."when", scene.action, feeling, scene.dialogue, scene.setting,
                  scene.sensory FROM nodes
           WHERE being_id = $being
             AND (list_contains($refs, node_id) OR list_has_any(source_episode_ids, $episodes))
           ORDER BY node_id""",
        p,
    ).fetchall()
    # The texts searched for in derived text and hashed for the audit: what a memory says. Its
    # short parts (a setting, a feeling, a fact's bare value) go with the rows, but as search
    # terms they would match unrelated lines.
    texts: list[str] = []
    cache_keys: set[str] = set()
    for _node, _scene, when, action, feeling, *_rest in nodes:
        cache_keys.add(text_sha256(node_text(list(when or []), action, feeling)))
        texts.append(action or "")
    p["nodes"] = [n[0] for n in nodes]
    p["scenes"] = [n[1] for n in nodes if n[1]]
    episodes = con.execute(
        "SELECT episode_id, ts, text FROM episodes "
        "WHERE being_id = $being AND list_contains($episodes, episode_id)",
        {k: p[k] for k in ("being", "episodes")},
    ).fetchall()
    for _id, _ts, text in episodes:
        texts.append(text)
        cache_keys.add(text_sha256(text))
    scenes = con.execute(
        """SELECT scene_id, action FROM scene_notes
           WHERE being_id = $being
             AND (list_has_any(episode_ids, $episodes) OR list_contains($scenes, scene_id))""",
        {k: p[k] for k in ("being", "episodes", "scenes")},
    ).fetchall()
    texts += [action or "" for _, action in scenes]
    graph_p = {k: p[k] for k in ("being", "refs", "episodes")}
    facts = con.execute(
        "SELECT fact_id, entity, key, value FROM facts "
        "WHERE being_id = $being AND (list_contains($refs, fact_id) "
        "OR list_has_any(coalesce(source_episode_ids, []), $episodes))",
        graph_p,
    ).fetchall()
    relations = con.execute(
        "SELECT relation_id, subject, predicate, object FROM relations WHERE being_id = $being AND "
        "(list_contains($refs, relation_id) OR list_has_any(coalesce(source_episode_ids, []), $episodes))",
        graph_p,
    ).fetchall()
    texts += [f"{e} {k}: {v}" for _, e, k, v in facts]
    texts += [f"{s} {pr} {o}" for _, s, pr, o in relations]
    named = set(key_of_many([e for _, e, _, _ in facts] + [x for _, s, _, o in relations for x in (s, o)]))
    others = con.execute(
        "SELECT entity FROM facts WHERE being_id = $being AND NOT list_contains($gone, fact_id) "
        "UNION SELECT subject FROM relations "
        "WHERE being_id = $being AND NOT list_contains($rgone, relation_id) "
        "UNION SELECT object FROM relations "
        "WHERE being_id = $being AND NOT list_contains($rgone, relation_id)",
        {"being": being_id, "gone": [f[0] for f in facts], "rgone": [r[0] for r in relations]},
    ).fetchall()
    alias_keys = sorted(named - set(key_of_many([o[0] for o in others])))
    for proposal in proposals:
        for c in proposal.payload.get("candidates") or []:
            if c.get("ref") in refs or set(c.get("source_episode_ids") or []) & episode_ids:
                text = c.get("text") or ""
                if not text.startswith(HASHED):
                    texts.append(text)
    refs |= set(p["nodes"]) | {f[0] for f in facts} | {r[0] for r in relations}
    known_ts = {e[0]: e[1] for e in episodes}
    return Plan(
        being_id=being_id,
        proposals=proposals,
        refs=refs,
        episodes={e: known_ts.get(e) for e in sorted(episode_ids)},
        nodes=p["nodes"],
        scenes=sorted({s[0] for s in scenes}),
        facts=[f[0] for f in facts],
        relations=[r[0] for r in relations],
        alias_keys=alias_keys,
        texts=sorted({t for t in texts if t and t.strip()}),
        cache_keys=sorted(cache_keys),
    )


# --------------------------------------------------------------------------- 2. inbox


def _inbox_files(settings: Settings, being_id: str) -> list[Path]:
    from mindflow.inbox import DONE

    out = []
    for folder in (settings.inbox / being_id, settings.inbox / DONE / being_id):
        if folder.is_dir():
            out += sorted(
                p
                for p in folder.rglob("*")
                if p.is_file() and p.suffix in (".jsonl", ".md") and not p.name.startswith(".")
            )
    return out


def _without_episodes(
    data: bytes, path: Path, plan: Plan, matcher: Matcher, max_chars: int
) -> tuple[bytes, int]:
    """The file with the lines of the deleted episodes blank (line numbers, hence the other
    episodes' source_ref and a daily log's bullet times, stay), and lines holding a whole
    deleted text (a quarantined copy) blank too."""
    from mindflow.inbox import blank_episodes

    def quotes(raw: bytes) -> bool:
        return matcher.holds_whole(plain(raw.decode("utf-8", "replace")))

    return blank_episodes(
        data, path, plan.being_id, set(plan.episodes), max_chars=max_chars, quotes=quotes if matcher else None
    )


def erase_inbox(con: duckdb.DuckDBPyConnection, settings: Settings, plan: Plan, report: EraseReport) -> None:
    from mindflow.inbox import DONE, QUARANTINE, inbox_lock

    matcher = plan.matcher
    if plan.episodes or matcher:
        # Writers append to the being's pending files under this lock; the ingest moves them under it.
        with inbox_lock(settings.inbox, plan.being_id, timeout=60):
            for path in _inbox_files(settings, plan.being_id):
                data = path.read_bytes()
                new, n = _without_episodes(data, path, plan, matcher, settings.max_episode_chars)
                if n:
                    atomic_write(path, new)
                    report.inbox_lines += n
    # The recorded checksum follows the file, so a backfill reads it (and nothing re-ingests).
    done = settings.inbox / DONE / plan.being_id
    for file_name, sha, count in con.execute(
        "SELECT file_name, sha256, episodes FROM inbox_files WHERE being_id = ?", [plan.being_id]
    ).fetchall():
        path = done / file_name
        if not path.is_file():
            continue
        data = path.read_bytes()
        actual = hashlib.sha256(data).hexdigest()
        if actual != sha:
            con.execute(
                "UPDATE inbox_files SET sha256 = ?, episodes = ? WHERE being_id = ? AND file_name = ?",
                [actual, _episodes_in(data, path, plan.being_id, count), plan.being_id, file_name],
            )
            report.inbox_files += 1
    quarantine = settings.inbox / QUARANTINE / plan.being_id
    if matcher and quarantine.is_dir():
        for path in sorted(p for p in quarantine.rglob("*") if p.is_file() and not p.name.startswith(".")):
            data = path.read_bytes()
            lines = data.split(b"\n")
            kept = [
                raw
                for raw in lines
                if not (raw.strip() and matcher.holds_whole(plain(raw.decode("utf-8", "replace"))))
            ]
            if len(kept) == len(lines):
                continue
            report.quarantine_lines += len(lines) - len(kept)
            if any(raw.strip() for raw in kept):
                atomic_write(path, b"\n".join(kept))
            else:
                path.unlink()
                fsync_dir(path.parent)


def _episodes_in(data: bytes, path: Path, being_id: str, fallback: int) -> int:
    from mindflow.ingest import detect_format, parse_bytes

    try:
        return len(parse_bytes(data, path.name, being_id, detect_format(path)).episodes)
    except MindflowError:
        return fallback


# --------------------------------------------------------------------------- 3. events


def erase_events(con: duckdb.DuckDBPyConnection, settings: Settings, plan: Plan, report: EraseReport) -> None:
    """Recall-event lines lose the deleted refs; a line left with none goes, with its folded row."""
    if not plan.refs or not settings.events.is_dir():
        return
    dropped: list[str] = []
    for path in sorted(settings.events.glob("*/*.jsonl")):
        if path.name.startswith("."):
            continue
        with FileLock(str(path) + ".lock"):  # the server appends under it
            data = path.read_bytes()
            out, changed = [], 0
            for raw in data.splitlines(keepends=True):
                try:
                    record = json.loads(raw)
                    named = set(record["memory_refs"]) & plan.refs and record["being_id"] == plan.being_id
                except (ValueError, KeyError, TypeError):
                    out.append(raw)
                    continue
                if not named:
                    out.append(raw)
                    continue
                changed += 1
                kept = [
                    (r, i)
                    for r, i in zip(record["memory_refs"], record["increments"], strict=False)
                    if r not in plan.refs
                ]
                if not kept:
                    dropped.append(str(record["event_id"]))
                    continue
                record["memory_refs"] = [r for r, _ in kept]
                record["increments"] = [i for _, i in kept]
                out.append((json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n").encode())
            if changed:
                atomic_write(path, b"".join(out))
                report.event_lines += changed
    if dropped:
        (n,) = con.execute("DELETE FROM folded_events WHERE list_contains(?, event_id)", [dropped]).fetchone()
        report.folded_events += int(n)


# --------------------------------------------------------------------------- 4. LanceDB


def _lance_ids(plan: Plan) -> dict[str, set[str]]:
    return {
        "memories": set(plan.refs),
        "memory_history": set(plan.refs),
        "facts": set(plan.facts) | {r for r in plan.refs if r.startswith("f-")},
        "relations": set(plan.relations) | {r for r in plan.refs if r.startswith("r-")},
        "aliases": {f"{plan.being_id}/{k}" for k in plan.alias_keys},
    }


def erase_lance(settings: Settings, plan: Plan, report: EraseReport) -> None:
    if not lance.exists(settings.lance_path):
        return
    db = lance.connect(settings.lance_path)
    for name, ids in _lance_ids(plan).items():
        table = lance.open_table(db, name)
        if table is None:
            continue
        report.lance_rows += _rewrite_without(table, name, LANCE_TABLES[name], ids, plan.being_id)
        # Every version but the latest goes, with index files no version uses and files a killed
        # writer left (`delete_unverified`): the run holds pool `duckdb`, so no other job writes.
        # A server still reading an older version re-opens the table on its next read.
        versions = len(table.list_versions())
        if versions > 1:
            _cleanup(table)
            report.lance_versions_removed += versions - len(table.list_versions())
        if name == "memories":
            report.hot_index_folders += _remove_hot_index(settings, plan.being_id, table.version)


def _remove_hot_index(settings: Settings, being_id: str, version: int) -> int:
    """The being's hot index files of the versions before this one: the servers' copies of the
    rows just removed (`cache/hot`, kept two versions deep by the servers themselves)."""
    from mindflow.recall.hot_files import HotFiles

    files = HotFiles(settings.hot_index)
    if not (files.root / being_id).is_dir():
        return 0
    # The lock a server holds while it builds or prunes them: none is half-written when they go.
    with files.lock(being_id).acquire(timeout=60):
        return files.remove_before(being_id, version)


def _cleanup(table) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # the warning is about concurrent writers
        table.optimize(cleanup_older_than=timedelta(0), delete_unverified=True)


def _rewrite_without(table, name: str, column: str, ids: set[str], being_id: str) -> int:
    """Write the table again without the rows of `ids` (one commit), then its indexes; rows removed."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not ids:
        return 0
    data = table.to_arrow()
    mask = pc.is_in(data[column], value_set=pa.array(sorted(ids), pa.string()))
    if "being_id" in data.column_names:
        mask = pc.and_(mask, pc.equal(data["being_id"], being_id))
    if name == "memory_history":
        # Rows already without content (scrubbed, tombstones) stay: they are what survives.
        mask = pc.and_(mask, pc.or_(pc.is_valid(data["before"]), pc.is_valid(data["after"])))
    removed = int(pc.sum(pc.cast(mask, pa.int64())).as_py() or 0)
    if not removed:
        return 0
    indexes = [(i.index_type, list(i.columns)) for i in table.list_indices()]
    table.add(data.filter(pc.invert(pc.fill_null(mask, False))), mode="overwrite")
    _reindex(table, name, indexes)
    return removed


def _reindex(table, name: str, indexes: list[tuple[str, list[str]]]) -> None:
    """The indexes the table had, built again over the rows it keeps."""
    from lancedb.index import FTS, Bitmap, BTree, LabelList

    scalar = {"FTS": FTS, "BTree": BTree, "Bitmap": Bitmap, "LabelList": LabelList}
    if table.count_rows() == 0:
        return  # the next publish builds them with its first rows (memories) or queries scan
    for kind, columns in indexes:
        if kind in scalar:
            table.create_index(columns[0], config=scalar[kind](), replace=True)
    if name == "memories":
        from mindflow.memories import ensure_indexes

        ensure_indexes(table)  # the vector index, past its threshold


# --------------------------------------------------------------------------- 5. workspace


def erase_journal_index(
    con: duckdb.DuckDBPyConnection, settings: Settings, plan: Plan, report: EraseReport
) -> None:
    """Every chunk of the being's memory files out of `journal_chunks` (a new table version
    without them, older versions removed), and their `journal_files` rows: the chunks were cut
    from the files before this step rewrote them. The journal_files_sensor (or the next
    narrative run) indexes the rewritten files; until then journal_memory_search finds none."""
    from mindflow import journal_index

    con.execute("DELETE FROM journal_files WHERE being_id = ?", [plan.being_id])
    if not lance.exists(settings.lance_path):
        return
    table = lance.open_table(lance.connect(settings.lance_path), journal_index.TABLE)
    if table is None:
        return
    # Every row of the being: the one column's value is the being itself.
    report.journal_rows += _rewrite_without(
        table, journal_index.TABLE, "being_id", {plan.being_id}, plan.being_id
    )
    if len(table.list_versions()) > 1:
        _cleanup(table)


def erase_workspace(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    plan: Plan,
    report: EraseReport,
    run_id: str | None,
    llm=None,
) -> None:
    folder = settings.workspace / plan.being_id
    if not folder.is_dir():
        return
    matcher = plan.matcher
    report.chapters_renarrated += renarrate_story(con, settings, plan, matcher, run_id, llm)
    if (folder / "MEMORY.md").is_file():
        from mindflow.core_memory import build_core_memory

        # The delete mark hides the episodes and memories; the rebuild leaves them out. A person's
        # forget is obeyed in review mode too: this rewrite does not wait for an approval.
        build_core_memory(
            con, settings, plan.being_id, llm=llm, run_id=run_id, trigger="forget job", review=False
        )
    if not matcher:
        return
    from mindflow import audit

    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(settings.workspace).as_posix()
        if not path.is_file() or path.suffix != ".md" or (path.parent == folder and path.name in _OWN_FILES):
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        scrubbed, removed = matcher.scrub(text)
        if not removed:
            continue
        audit.write_file(
            settings,
            rel,
            scrubbed if scrubbed.strip() else _REMOVED,
            action="EDIT",
            summary=f"{removed} lines removed by a permanent forget",
            actor="forget",
            trigger="forget job",
            run_id=run_id,
            approval="user",
            con=con,
        )
        report.workspace_lines += removed


def renarrate_story(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    plan: Plan,
    matcher: Matcher,
    run_id: str | None,
    llm=None,
) -> int:
    """Narrate again, without the deleted episodes, each STORY.md chapter that tells one; returns how many.

    A chapter tells the episodes it cites (chapters written since citations exist), else
    those of its time window: from its time to the next chapter's (the last: to the anchor).
    A condensed chapter ("Earlier chapters, condensed") only loses its lines that hold a
    deleted text. With `llm` the narrative model writes the chapter again from the episodes
    that stay (it never sees a deleted one); without one, or when it fails, it is written
    mechanically. Either way the new chapter cites its episodes.
    """
    from mindflow import audit, narrative

    if not narrative.story_path(settings, plan.being_id).is_file():
        return 0
    deleted = set(plan.episodes)
    with narrative.StoryLock(settings, plan.being_id):
        story = narrative.read_story(settings, plan.being_id)
        preamble, blocks = narrative._split_chapters(story.body)
        heads = [narrative.CHAPTER.search(b) for b in blocks]
        starts = [datetime.strptime(h.group(1), "%Y-%m-%d %H:%M") for h in heads]
        items = {i.ref: i for i in _items(con, settings, plan.being_id)}
        out, renarrated = [], 0
        for n, block in enumerate(blocks):
            cited = narrative.cited_episodes(block)
            if heads[n].group(2) == narrative.SUMMARY_TITLE:
                out.append(matcher.scrub(block)[0] if matcher else block)
                continue
            if cited is not None:
                told = cited
            else:
                end = starts[n + 1] if n + 1 < len(starts) else None
                # Episodes past the anchor are not narrated yet: no chapter tells them.
                told = [
                    ref
                    for ref, ts in [*((i.ref, i.ts) for i in items.values()), *plan.episodes.items()]
                    if ts is not None
                    and starts[n] <= ts
                    and (ts < end if end is not None else story.anchor is None or ts <= story.anchor)
                ]
            if not (set(told) & deleted) and not (matcher and matcher.holds(block)):
                out.append(block)
                continue
            renarrated += 1
            kept = sorted(
                (items[r] for r in dict.fromkeys(told) if r in items and r not in deleted),
                key=lambda i: (i.ts, i.ref),
            )
            if kept:
                chapter = _with_model(llm, settings, plan.being_id, kept) if llm is not None else None
                out.append(chapter or narrative.mechanical_chapter(kept)[0])
        body = (preamble + "\n\n" if preamble else "") + "\n".join(out)
        if matcher:
            body = matcher.scrub(body)[0]  # a line the rules above missed (a quote in the preamble)
        if not renarrated and body == story.body:
            return 0
        new = narrative.Story(body, story.anchor)
        audit.write_file(
            settings,
            f"{plan.being_id}/STORY.md",
            new.render(),
            action="EDIT",
            summary=f"{renarrated} chapters narrated again without {len(deleted)} deleted episodes",
            actor="forget",
            trigger="forget job",
            run_id=run_id,
            approval="user",
            con=con,
        )
    return renarrated


def _with_model(llm, settings: Settings, being_id: str, items) -> str | None:
    """The chapters the narrative model writes from `items` alone, citing them; None when it fails."""
    from mindflow import narrative
    from mindflow.llm import LLMError
    from mindflow.prompts import narrative_bootstrap

    soul = narrative.read_soul(settings, being_id)
    lines = "\n".join(i.line() for i in items)
    try:
        answer = llm.complete(
            narrative_bootstrap.build(being_id, soul, lines, max_tokens=narrative.ANSWER_TOKENS)
        )
        chapters = narrative._valid_chapters(answer, soul, items)
    except (LLMError, MindflowError, ValueError, AttributeError, TypeError):
        return None
    cites = narrative._cite(chapters, items)
    return "\n".join(narrative.render_chapter(*c, cited) for c, cited in zip(chapters, cites, strict=True))


def _items(con: duckdb.DuckDBPyConnection, settings: Settings, being_id: str):
    """Every narratable episode of the being still in DuckDB (the narrative's own selection)."""
    from mindflow import narrative

    items, _, _ = narrative.pending_items(con, settings, being_id, None)
    return [i for i in items if not i.ref.startswith("legacy:")]


# --------------------------------------------------------------------------- 6. audit


def audit_deletion(
    con: duckdb.DuckDBPyConnection, settings: Settings, plan: Plan, run_id: str | None
) -> None:
    """One DELETE row per proposal: who decided, the refs, the sha256 of each deleted text (once)."""
    from mindflow.audit.writes import commit_table_mutations

    rows = []
    for proposal in plan.proposals:
        tag = f"proposal {proposal.proposal_id}"
        done = con.execute(
            "SELECT count(*) FROM audit_log WHERE action = 'DELETE' AND contains(summary, ?)", [tag]
        ).fetchone()[0]
        if done:
            continue
        refs = sorted(plan.refs)
        summary = (
            f"{plan.being_id}: {tag}: permanently deleted {len(refs)} memories, facts and relations "
            f"({', '.join(refs) or 'none'}) and {len(plan.episodes)} episodes "
            f"({', '.join(plan.episodes) or 'none'}){_HASHES_SAID}"
            f"{', '.join(plan.text_hashes()) or 'none'}"
        )
        actor = proposal.decided_by or "user"
        rows.append(AuditRow("DELETE", "table:nodes", actor, summary, approval="user", run_id=run_id))
    if rows:
        commit_table_mutations(con, rows, settings, trigger="forget job")


# --------------------------------------------------------------------------- 7. git history


def _blobs_holding(workspace: Path, matcher: Matcher) -> int:
    """Objects of the repository (reachable or not) with a line that holds a deleted text, read as a
    stream (one object in memory at a time)."""
    proc = subprocess.Popen(
        ["git", "cat-file", "--batch-all-objects", "--batch"],
        cwd=workspace,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    found = 0
    assert proc.stdout is not None
    with proc.stdout as out:
        while header := out.readline():
            _sha, kind, size = header.split()
            body = out.read(int(size) + 1)[:-1]  # each object ends with a newline
            if kind == b"blob" and b"\0" not in body[:8000]:
                text = body.decode("utf-8", "replace")
                if any(matcher.holds(line) for line in text.splitlines()):
                    found += 1
    if proc.wait():
        raise MindflowError(f"could not read the objects of {workspace} (git cat-file failed)")
    return found


def rewrite_history(settings: Settings, plan: Plan, report: EraseReport, run_id: str | None) -> None:
    """No commit of the workspace keeps a line holding a deleted text; unreachable objects pruned."""
    from mindflow.audit.trail import AUDIT_LOG, _commit, commit_message, open_repo, workspace_lock

    matcher = plan.matcher
    workspace = settings.workspace
    if not matcher or not (workspace / ".git").is_dir():
        return
    if not _blobs_holding(workspace, matcher):
        return
    with workspace_lock(settings):
        repo = open_repo(settings)
        # The rewrite ends with `git reset --hard`: audit lines not committed yet are committed first.
        if repo.is_dirty(untracked_files=False, path=AUDIT_LOG):
            _commit(
                repo,
                [AUDIT_LOG],
                commit_message(
                    "EDIT",
                    AUDIT_LOG,
                    "audit lines logged before a history rewrite",
                    actor="forget",
                    approval="auto",
                    trigger="forget job",
                    run_id=run_id,
                ),
                "forget",
            )
        if repo.is_dirty(untracked_files=False):
            raise MindflowError(
                f"the workspace {workspace} has uncommitted changes to tracked files; commit or undo them "
                "(`git -C {workspace} status`), then run the forget job again"
            )
        # A marker of an earlier rewrite would make git-filter-repo ask on the terminal.
        shutil.rmtree(workspace / ".git" / "filter-repo", ignore_errors=True)
        proc = subprocess.run(
            [sys.executable, "-m", "mindflow.loop.scrub"],
            cwd=workspace,
            input=json.dumps(plan.texts).encode(),
            capture_output=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
        )
        if proc.returncode:
            raise MindflowError(
                "rewriting the workspace history failed; the forget job tries again on its next run "
                f"(git-filter-repo said: {proc.stderr.decode(errors='replace')[-300:]})"
            )
        counts = json.loads(proc.stdout.decode().strip().splitlines()[-1])
        report.commits_rewritten += int(counts["commits"])
        report.blobs_rewritten += int(counts["blobs"])
        shutil.rmtree(workspace / ".git" / "filter-repo", ignore_errors=True)
        for cmd in (
            ["git", "reflog", "expire", "--expire=now", "--all"],
            ["git", "gc", "--prune=now", "--quiet"],
        ):
            subprocess.run(cmd, cwd=workspace, check=True, capture_output=True)
    if _blobs_holding(workspace, matcher):
        raise MindflowError(
            f"the workspace history still holds a deleted text after the rewrite; run the forget job again "
            f"(or inspect {workspace})"
        )


# --------------------------------------------------------------------------- 9. DuckDB rows

_HISTORY_COLUMNS = "(history_id, ts, memory_ref, being_id, operation, before, after, run_id, actor)"


def erase_duckdb(
    con: duckdb.DuckDBPyConnection, settings: Settings, plan: Plan, report: EraseReport, run_id: str | None
) -> None:
    """The rows go in one transaction; history rows of the refs keep only when and what happened."""
    from mindflow.graph import key_of_many

    refs = sorted(plan.refs)
    p = {
        "being": plan.being_id,
        "refs": refs,
        "nodes": plan.nodes,
        "facts": plan.facts,
        "relations": plan.relations,
        "episodes": sorted(plan.episodes),
        "scenes": plan.scenes,
    }

    def run(sql: str, *names: str) -> int:
        row = con.execute(sql, {k: p[k] for k in names}).fetchone()
        return int(row[0]) if row else 0

    now = utcnow()
    aliases = con.execute("SELECT alias, entity FROM aliases WHERE being_id = ?", [plan.being_id]).fetchall()
    gone_keys = set(plan.alias_keys)
    alias_keys = key_of_many([a for a, _ in aliases])
    entity_keys = key_of_many([e for _, e in aliases])
    gone_aliases = [
        a
        for (a, _), ak, ek in zip(aliases, alias_keys, entity_keys, strict=True)
        if ak in gone_keys or ek in gone_keys
    ]
    with store.transaction(con):
        report.co_occurrences += run(
            "DELETE FROM co_occurrences WHERE being_id = $being AND "
            "(list_contains($facts, fact_a) OR list_contains($facts, fact_b))",
            "being",
            "facts",
        )
        if gone_aliases:
            (n,) = con.execute(
                "DELETE FROM aliases WHERE being_id = ? AND list_contains(?, alias)",
                [plan.being_id, gone_aliases],
            ).fetchone()
            report.aliases += int(n)
        report.facts += run("DELETE FROM facts WHERE list_contains($facts, fact_id)", "facts")
        report.relations += run(
            "DELETE FROM relations WHERE list_contains($relations, relation_id)", "relations"
        )
        report.decay_scores += run("DELETE FROM decay_scores WHERE list_contains($refs, memory_ref)", "refs")
        report.nodes += run("DELETE FROM nodes WHERE list_contains($nodes, node_id)", "nodes")
        report.scene_notes += run("DELETE FROM scene_notes WHERE list_contains($scenes, scene_id)", "scenes")
        report.episode_rows += run(
            "DELETE FROM episodes WHERE being_id = $being AND list_contains($episodes, episode_id)",
            "being",
            "episodes",
        )
        report.embedding_cache += int(
            con.execute(
                "DELETE FROM embedding_cache WHERE list_contains(?, text_sha256)", [plan.cache_keys]
            ).fetchone()[0]
        )
        report.published_rows += run(
            "DELETE FROM published_memories WHERE list_contains($refs, memory_ref)", "refs"
        )
        report.published_rows += int(
            con.execute(
                "DELETE FROM published_graph WHERE list_contains(?, ref)",
                [refs + [f"{plan.being_id}/{k}" for k in plan.alias_keys]],
            ).fetchone()[0]
        )
        # The rows are written again to LanceDB `memory_history` without their content.
        run(
            "DELETE FROM published_history WHERE history_id IN (SELECT history_id FROM history "
            "WHERE being_id = $being AND list_contains($refs, memory_ref) "
            "AND (before IS NOT NULL OR after IS NOT NULL))",
            "being",
            "refs",
        )
        report.history_scrubbed += run(
            "UPDATE history SET before = NULL, after = NULL WHERE being_id = $being "
            "AND list_contains($refs, memory_ref) AND (before IS NOT NULL OR after IS NOT NULL)",
            "being",
            "refs",
        )
        # A tombstone per ref: when and by whose decision it went, nothing of what it was.
        report.tombstones += int(
            con.execute(
                f"INSERT INTO history {_HISTORY_COLUMNS} "
                "SELECT 'h-' || uuid()::VARCHAR, ?, r.ref, ?, 'deleted', NULL, NULL, ?, 'user' "
                "FROM (SELECT unnest(?::VARCHAR[]) AS ref) r WHERE NOT EXISTS (SELECT 1 FROM history h "
                "WHERE h.memory_ref = r.ref AND h.being_id = ? AND h.operation = 'deleted')",
                [now, plan.being_id, run_id, refs, plan.being_id],
            ).fetchone()[0]
        )
    if lance.exists(settings.lance_path):
        from mindflow import memory_history

        db = lance.connect(settings.lance_path)
        if memory_history.publish(con, db, now).appended:
            _cleanup(db.open_table(memory_history.TABLE))  # one version, as step 4 left it


# --------------------------------------------------------------------------- 10. the DuckDB file


def _tmp_path(settings: Settings) -> Path:
    return settings.duckdb_path.with_name(settings.duckdb_path.name + REWRITE_SUFFIX)


def remove_leftover(settings: Settings) -> None:
    """A copy a killed rewrite left (never the live file)."""
    tmp = _tmp_path(settings)
    for path in (tmp, tmp.with_name(tmp.name + ".wal")):
        path.unlink(missing_ok=True)


def rewrite_duckdb(settings: Settings) -> tuple[int, int, float]:
    """Copy the DuckDB file into a new one and swap it in: deleted rows leave no bytes behind.

    DuckDB reuses freed blocks but never zeroes them. Under the file lock every writer
    takes: CHECKPOINT (the WAL folded in), `COPY FROM DATABASE` into a new file, fsync,
    one atomic rename. Killed before the rename, the old file stays (and the copy is removed
    by the next run); after it, the new one. Returns (bytes before, after, seconds).
    """
    path = settings.duckdb_path
    if not path.is_file():
        return 0, 0, 0.0
    started = time.monotonic()
    tmp = _tmp_path(settings)
    lock = FileLock(str(path) + ".lock")
    with lock.acquire(timeout=settings.duckdb_lock_timeout_s):
        remove_leftover(settings)
        before = path.stat().st_size
        con = duckdb.connect(str(path))
        try:
            con.execute("CHECKPOINT")
            name = con.execute("SELECT current_database()").fetchone()[0]
            con.execute(f"ATTACH {lance.literal(str(tmp))} AS erase_copy")
            con.execute(f'COPY FROM DATABASE "{name.replace(chr(34), chr(34) * 2)}" TO erase_copy')
            con.execute("CHECKPOINT erase_copy")
            con.execute("DETACH erase_copy")
        finally:
            con.close()
        for leftover in (path.with_name(path.name + ".wal"), tmp.with_name(tmp.name + ".wal")):
            if leftover.exists():
                # A WAL replayed onto the other file would corrupt it: keep the old file.
                remove_leftover(settings)
                raise MindflowError(f"{leftover} remained after a checkpoint; run the forget job again")
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(path.parent)
        after = path.stat().st_size
    return before, after, time.monotonic() - started


# --------------------------------------------------------------------------- 8 and 11. the proposals


def _hashed(text: str | None) -> str | None:
    if not text or text.startswith(HASHED):
        return text
    return HASHED + text_sha256(text)


def _scrubbed(value, picks: Callable[[str], bool]):
    """`value` with every string `picks` chooses replaced by its sha256, at any depth (dict keys are
    refs: kept)."""
    if isinstance(value, str):
        return _hashed(value) if picks(value) else value
    if isinstance(value, list):
        return [_scrubbed(v, picks) for v in value]
    if isinstance(value, dict):
        return {k: _scrubbed(v, picks) for k, v in value.items()}
    return value


class _Erased:
    """What a proposal's strings are tested against: the deleted texts, their sha256, refs and episodes."""

    def __init__(self, plan: Plan):
        self.matcher = plan.matcher
        self.hashes = set(plan.text_hashes())
        self.refs = plan.refs
        self.episodes = set(plan.episodes)
        self.applying = {p.proposal_id for p in plan.proposals}
        self.worded = [" " + " ".join(words(t)) + " " for t in plan.texts if t and not t.startswith(HASHED)]

    def holds(self, text: str) -> bool:
        """The text is a deleted one, or derived from one (shares a run of words with it)."""
        if not text or text.startswith(HASHED):
            return False
        return text_sha256(text) in self.hashes or self.matcher.holds(text)

    def asked_for(self, query: str) -> bool:
        """A forget's query is words of a deleted text ("tangerinewolf", "bank PIN hint"):
        kept, it would tell what was deleted."""
        from mindflow.loop.forget import _terms

        if not query or query.startswith(HASHED) or not _terms(query):
            return False
        asked = " " + " ".join(words(query)) + " "
        return self.holds(query) or any(asked in text for text in self.worded)

    def names(self, candidate: dict) -> bool:
        return candidate.get("ref") in self.refs or bool(
            set(candidate.get("source_episode_ids") or []) & self.episodes
        )


def scrub_proposals(settings: Settings, plan: Plan, report: EraseReport) -> None:
    """Every proposal of the being keeps, of what goes, only sha256: whatever its kind and status.

    Runs while DuckDB still holds the deleted texts (step 9 removes them): a run killed after it
    finds nothing left to scrub, one killed during it scrubs the rest with the same texts.
    """
    store_ = ProposalStore(settings.proposals)
    deleted = _Erased(plan)
    for proposal in store_.list(plan.being_id):
        if proposal.kind == "forget":
            payload, decide = _scrub_forget(proposal, deleted), False
        else:
            payload, decide = _scrub_other(proposal, deleted)
        if payload == proposal.payload and not decide:
            continue
        report.proposal_texts += 1
        if decide:
            # Nobody may approve a change built on what the person had erased.
            store_.decide(plan.being_id, proposal.proposal_id, "rejected", "forget", payload=payload)
        else:
            store_.rewrite(plan.being_id, proposal.proposal_id, payload)


def _scrub_forget(proposal: Proposal, deleted: _Erased) -> dict:
    """A forget's candidates of what goes (or holding it) hashed, and its query when it found one
    of them or asked for a deleted text's words; a forget with no candidates too."""
    payload = dict(proposal.payload)
    mine = proposal.proposal_id in deleted.applying
    candidates, found = [], mine
    for c in payload.get("candidates") or []:
        named = deleted.names(c)
        found |= named
        if (mine or named or deleted.holds(str(c.get("text") or ""))) and c.get("text"):
            c = {**c, "text": _hashed(str(c["text"]))}
        candidates.append(_scrubbed(c, deleted.holds))
    if "candidates" in payload:
        payload["candidates"] = candidates
    query = payload.get("query")
    if isinstance(query, str) and (found or deleted.asked_for(query)):
        payload["query"] = _hashed(query)
    return _scrubbed(payload, deleted.holds)


# Free text of reflection's and sub-agents' proposals: hashed whole once the proposal cites what goes.
_TEXT_KEYS = ("text", "diff", "content", "reason", "value", "keep_value", "name", "trigger", "notes")


def _scrub_other(proposal: Proposal, deleted: _Erased) -> tuple[dict, bool]:
    """A reflection, procedure or sub-agent proposal with the texts that hold a deleted one hashed;
    one that cites an erased memory, fact or episode, or held a deleted text, keeps only hashes
    of its texts. The second value: it is open, so it is rejected."""
    p = proposal.payload
    cited: set[str] = set()
    if proposal.kind in ("merge", "archive"):
        cited = {p.get("survivor"), *p.get("absorbed", []), *p.get("refs", []), *p.get("memories", {})} - {
            None
        }
    elif proposal.kind == "contradiction":
        cited = {s.get("fact_id") for s in p.get("sides", [])}
        cited |= {e for s in p.get("sides", []) for e in s.get("sources", [])}
    elif proposal.kind == "procedure":
        cited = set(p.get("learned_from") or [])
    elif proposal.kind == "memory":
        cited = {s.get("ref") for s in p.get("conflict") or []} - {None}
    scrubbed = _scrubbed(p, deleted.holds)
    open_ = proposal.status in ("pending", "deferred")
    # A pending MEMORY.md rewrite was composed before the erase and may quote it: it counts as citing.
    touched = (
        bool(cited & (deleted.refs | deleted.episodes))
        or scrubbed != p
        or (proposal.kind == "core" and open_)
    )
    if not touched:
        return dict(p), False
    payload = dict(scrubbed)
    if "memories" in payload:
        payload["memories"] = {ref: _hashed(text) for ref, text in payload["memories"].items()}
    if "sides" in payload:
        payload["sides"] = [{**side, "value": _hashed(str(side.get("value")))} for side in payload["sides"]]
    if "conflict" in payload:
        payload["conflict"] = [
            {**side, "text": _hashed(str(side.get("text"))), "value": _hashed(str(side.get("value")))}
            for side in payload["conflict"]
        ]
    for key in _TEXT_KEYS:
        if isinstance(payload.get(key), str):
            payload[key] = _hashed(payload[key])
        elif key == "keep_value" and key in payload:
            payload[key] = _hashed(str(payload[key]))
    for key in ("promoted", "demoted", "steps", "added", "removed"):
        if isinstance(payload.get(key), list):
            payload[key] = [_hashed(x) if isinstance(x, str) else x for x in payload[key]]
    payload["erased"] = "cites what a permanent forget erased"
    return payload, open_


def finish(settings: Settings, being_id: str, proposals: list[Proposal], run_id: str | None) -> None:
    """The permanent forgets marked applied, last: until then the sensor asks for a run again."""
    store_ = ProposalStore(settings.proposals)
    for proposal in proposals:
        store_.mark_applied(being_id, proposal.proposal_id, run_id)
