"""The Being's context in one call: the blocks seed 002 injects at every turn, from files and LanceDB.

- Block 1-A: SOUL.md and think.md (who the being is, what it is thinking about);
- Block 1-B: the diary entries of the last 7 days and MEMORY.md;
- Block 2-B: the 5 memories a recall reached most recently, with an action;
- `story`: STORY.md.

Each block carries its estimated tokens. `alerts` names the being's critical files (SOUL.md,
IDENTITY.md) that changed outside mindflow and were not accepted, compared with the approved
checksums of the workspace record (`meta/integrity.json`): seed 001 wants the user told at the
next conversation start. No DuckDB: the read API never opens it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path

from mindflow import journal_files, records
from mindflow.audit.record import UNREADABLE, read_workspace_record
from mindflow.audit.trail import CRITICAL_NAMES, INTEGRITY, _sha256
from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.llm.budget import estimate_tokens
from mindflow.loop.marks import MarkState

BLOCKS = ("1-A", "1-B", "2-B", "story")
TITLES = {
    "1-A": "Identity: SOUL.md and think.md",
    "1-B": "Recent life: the diary of the last 7 days and MEMORY.md",
    "2-B": "Recently activated memories",
    "story": "STORY.md",
}
DIARY_DAYS = 7
RECENT_MEMORIES = 5


@dataclass
class Block:
    id: str
    title: str
    text: str
    tokens: int
    sources: list[str] = field(default_factory=list)  # workspace-relative files, or memory refs


@dataclass
class Alert:
    file: str  # workspace-relative, e.g. ada/SOUL.md
    change: str  # changed, new or deleted
    message: str


@dataclass
class BeingContext:
    being_id: str
    now: datetime
    blocks: list[Block]
    memories: list[records.MemoryRecord]
    alerts: list[Alert]

    @property
    def tokens(self) -> int:
        return sum(b.tokens for b in self.blocks)


def parse_blocks(spec: str | None) -> tuple[str, ...]:
    """`1-A,2-B` (case and the dash optional: `1a`) as block ids; None or empty means all."""
    if spec is None or not spec.strip():
        return BLOCKS
    by_name = {b.lower().replace("-", ""): b for b in BLOCKS}
    chosen = []
    for part in (p.strip() for p in spec.split(",")):
        block = by_name.get(part.lower().replace("-", "").replace("_", ""))
        if block is None:
            raise MindflowError(f"unknown block {part[:40]!r}: choose among {', '.join(BLOCKS)}")
        if block not in chosen:
            chosen.append(block)
    return tuple(b for b in BLOCKS if b in chosen)


def _read(workspace: Path, being_id: str, name: str) -> tuple[str, str | None]:
    """A file of the being's folder as text, with its workspace path; ("", None) when absent.

    A file that is a link leading out of the folder is not read."""
    folder = journal_files.being_folder(workspace, being_id)
    file = folder / name
    if not journal_files.inside(folder, file) or not file.is_file():
        return "", None
    return journal_files.read_text(file).strip(), f"{being_id}/{name}"


def _section(title: str, text: str) -> str:
    return f"## {title}\n\n{text}" if text else ""


def _diary(workspace: Path, being_id: str, today: date) -> tuple[str, list[str]]:
    """The entries of the last DIARY_DAYS days (diary/YYYY-MM-DD.md), oldest first."""
    parts, sources = [], []
    for back in range(DIARY_DAYS - 1, -1, -1):
        day = (today - timedelta(days=back)).isoformat()
        text, source = _read(workspace, being_id, f"diary/{day}.md")
        if source and text:
            parts.append(f"### {day}\n\n{text}")
            sources.append(source)
    return "\n\n".join(parts), sources


def _memory_line(memory: records.MemoryRecord) -> str:
    when = memory.last_activated or memory.created_at or memory.ts
    stamp = when.strftime("%Y-%m-%d") if when else "undated"
    feeling = f" (feeling: {memory.feeling})" if memory.feeling else ""
    pin = " [pinned]" if memory.pinned else ""
    return f"- {stamp}: {memory.text}{feeling}{pin} [{memory.memory_ref}]"


def _block(block_id: str, text: str, sources: list[str]) -> Block:
    return Block(block_id, TITLES[block_id], text, estimate_tokens(text), sources)


def alerts(settings: Settings, being_id: str) -> list[Alert]:
    """The being's critical files that differ from the approved checksums of the workspace record, and
    its proposals pending for more than a day (seed 001: the user is told at the next start)."""
    return _file_alerts(settings, being_id) + _proposal_alerts(settings, being_id)


def _proposal_alerts(settings: Settings, being_id: str) -> list[Alert]:
    from mindflow.loop.proposals import ProposalStore
    from mindflow.reflection.items import STALE_HOURS, stale_proposals

    stale = stale_proposals(ProposalStore(settings.proposals), being_id)
    if not stale:
        return []
    return [
        Alert(
            f"{being_id}/reflection/pending-reflection.md",
            "stale_proposals",
            f"{len(stale)} proposal(s) have waited more than {STALE_HOURS} hours for a decision: ask the "
            f"user. Decide with `mindflow review --being {being_id}`, on the /review page, or through "
            "POST /v1/beings/{being}/proposals/{id}/decision.".replace("{being}", being_id),
        )
    ]


def _file_alerts(settings: Settings, being_id: str) -> list[Alert]:
    record = read_workspace_record(settings)
    if record is None:
        return []  # nothing recorded yet: no run has approved anything to compare with
    if record == UNREADABLE:
        return [
            Alert(
                INTEGRITY,
                "changed",
                f"{INTEGRITY} is unreadable: the approved checksums cannot be checked; "
                "the next mindflow run rewrites it and logs an ALERT",
            )
        ]
    found = []
    for name in CRITICAL_NAMES:
        key = f"{being_id}/{name}"
        sha = _sha256(settings.workspace / key)  # None when missing, as the integrity check reads it
        approved = record.get(key)
        if sha == approved:
            continue
        change = "new" if approved is None else "deleted" if sha is None else "changed"
        what = {"new": "appeared", "deleted": "was deleted", "changed": "changed"}[change]
        found.append(
            Alert(
                key,
                change,
                f"{key} {what} outside mindflow and was not accepted: tell the user. Keep it with "
                f"`mindflow audit --accept {key}`, or undo it with `mindflow rollback {key} --to HEAD`.",
            )
        )
    return found


def assemble(
    settings: Settings,
    being_id: str,
    table,
    state: MarkState,
    now: datetime,
    blocks: tuple[str, ...] = BLOCKS,
    fresh: list[records.MemoryRecord] | None = None,
) -> BeingContext:
    """The chosen blocks of the being's context as of `now` (naive UTC).

    `fresh` are memories accepted by this server and not published yet; they count as
    activated when they happened.
    """
    workspace = settings.workspace
    out: list[Block] = []
    memories: list[records.MemoryRecord] = []
    if "1-A" in blocks:
        soul, soul_src = _read(workspace, being_id, "SOUL.md")
        think, think_src = _read(workspace, being_id, "think.md")
        text = "\n\n".join(p for p in (_section("SOUL.md", soul), _section("think.md", think)) if p)
        out.append(_block("1-A", text, [s for s in (soul_src, think_src) if s]))
    if "1-B" in blocks:
        diary, diary_src = _diary(workspace, being_id, now.date())
        core, core_src = _read(workspace, being_id, "MEMORY.md")
        text = "\n\n".join(
            p for p in (_section(f"Diary, last {DIARY_DAYS} days", diary), _section("MEMORY.md", core)) if p
        )
        out.append(_block("1-B", text, diary_src + ([core_src] if core_src else [])))
    if "2-B" in blocks:
        published = records.recently_activated(table, being_id, state, RECENT_MEMORIES)
        candidates = [*published, *(fresh or [])]
        candidates = [m for m in candidates if m.text and m.status == "active"]

        def activated(m: records.MemoryRecord) -> datetime:
            return m.last_activated or m.created_at or m.ts or datetime.min

        memories = sorted(candidates, key=activated, reverse=True)[:RECENT_MEMORIES]
        text = _section(TITLES["2-B"], "\n".join(_memory_line(m) for m in memories))
        out.append(_block("2-B", text, [m.memory_ref for m in memories]))
    if "story" in blocks:
        story, story_src = _read(workspace, being_id, "STORY.md")
        out.append(_block("story", story, [story_src] if story_src else []))
    return BeingContext(being_id, now, out, memories, alerts(settings, being_id))
