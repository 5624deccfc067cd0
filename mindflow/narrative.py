"""STORY.md: a being's first-person narrative, advanced past a LAST_PROCESSED anchor, batch by batch.

The anchor (`<!-- LAST_PROCESSED: <ISO timestamp> -->`) lives in STORY.md itself, so the
story and the anchor are always written together, in one atomic replace: an episode is
narrated once, even when a run fails halfway and is retried. Writers hold STORY.md.lock
for the whole pass; a second writer waits for it, then starts from the new anchor.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from pathlib import Path

import duckdb
from filelock import FileLock, Timeout

from mindflow import audit
from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.ingest import is_heartbeat, parse_file

ANCHOR = re.compile(r"^<!-- LAST_PROCESSED: (\S+) -->[ \t]*\n?", re.MULTILINE)
CHAPTER = re.compile(r"^### \[(\d{4}-\d{2}-\d{2} \d{2}:\d{2})\] (.+)$", re.MULTILINE)
MECHANICAL_MARK = "<!-- mindflow: mechanical chronicle -->"
MECHANICAL_NOTE = (
    "> Mechanical chronicle: written without a language model, from each day's most important\n"
    "> memories and explicit remember requests. Configure MINDFLOW_LLM (or MINDFLOW_LLM_NARRATIVE)\n"
    "> for a first-person narrative."
)
MIXED_NOTE = (
    "> The chapters before {when} are a mechanical chronicle, written without a language model;\n"
    "> the narrative model wrote the chapters from {when} on."
)
MIXED_TAIL = "> the narrative model wrote the chapters from"
# Where the writer changes within one story, a marker and a note say so before the new chapters.
MODEL_FROM_MARK = "<!-- mindflow: narrative model from here -->"
MODEL_FROM_NOTE = "> From here on, the narrative model writes the chapters."
MECHANICAL_FROM_MARK = "<!-- mindflow: mechanical chronicle from here -->"
MECHANICAL_FROM_NOTE = (
    "> From here on, a mechanical chronicle: written without a language model, from each day's\n"
    "> most important memories (no narrative model was usable for these chapters)."
)
SUMMARY_TITLE = "Earlier chapters, condensed"
LEGACY_NAME = re.compile(r"^\d{4}-\d{2}-\d{2}\.md$")
# Agent plumbing that is not part of anyone's story.
TECHNICAL_ROLES = frozenset({"tool", "system", "toolresult", "tool_result", "function"})
TECHNICAL_TEXT = re.compile(
    r"\A\s*(?:NO_REPLY|HEARTBEAT_OK|\[probe\]|\[tool(?:Call|Result)?\]|\[thinking\]|ping|pong)\b",
    re.IGNORECASE,
)
TECHNICAL_TAGS = frozenset({"heartbeat", "probe", "technical", "tool"})
# The longest answer asked of the model (new chapters, a condensed summary); a small context
# window gets a quarter of itself instead.
ANSWER_TOKENS = 4_096
# The smallest batch worth a call: below it, older chapters are condensed first.
MIN_BATCH_TOKENS = 500


def estimate_tokens(text: str) -> int:
    from mindflow.llm import estimate_tokens as estimate

    return estimate(text)


@dataclass(frozen=True)
class Item:
    """One thing to narrate: an episode, or an entry of a legacy daily log."""

    ts: datetime
    speaker: str
    kind: str
    text: str
    importance: float
    trigger: str | None = None
    ref: str = ""

    def line(self) -> str:
        trig = f", {self.trigger}" if self.trigger else ""
        return f"[{self.ts:%Y-%m-%d %H:%M}] {self.speaker} ({self.kind}{trig}): {' '.join(self.text.split())}"


@dataclass
class Story:
    body: str  # the markdown without the anchor line
    anchor: datetime | None

    @property
    def chapters(self) -> list[tuple[str, str]]:
        return CHAPTER.findall(self.body)

    def render(self) -> str:
        anchor = f"<!-- LAST_PROCESSED: {_iso(self.anchor)} -->\n" if self.anchor else ""
        return anchor + self.body.strip() + "\n"


@dataclass
class NarrativeReport:
    being_id: str
    mode: str  # "llm" | "mechanical"
    items: int = 0  # narrated by this pass
    skipped_technical: int = 0
    batches: int = 0
    failed_batches: int = 0
    chapters_added: int = 0
    summarised: int = 0
    words: int = 0
    anchor_before: datetime | None = None
    anchor_after: datetime | None = None
    legacy_entries: int = 0
    errors: list[str] = field(default_factory=list)
    titles: list[str] = field(default_factory=list)


def _iso(ts: datetime | None) -> str:
    return ts.isoformat() + "Z" if ts else ""


def parse_story(text: str) -> Story:
    """The story body and its anchor; a malformed anchor is an error, never silently reset."""
    m = ANCHOR.search(text)
    if m is None:
        return Story(text.strip(), None)
    try:
        anchor = datetime.fromisoformat(m.group(1).rstrip("Z"))
    except ValueError as exc:
        raise MindflowError(
            f"STORY.md has an unreadable anchor {m.group(0).strip()!r}: fix or remove the line "
            "(removing it narrates every episode again)"
        ) from exc
    return Story((text[: m.start()] + text[m.end() :]).strip(), anchor.replace(tzinfo=None))


def story_path(settings: Settings, being_id: str) -> Path:
    return settings.workspace / being_id / "STORY.md"


def read_story(settings: Settings, being_id: str) -> Story:
    path = story_path(settings, being_id)
    return parse_story(path.read_text()) if path.is_file() else Story("", None)


def read_soul(settings: Settings, being_id: str) -> str:
    path = settings.workspace / being_id / "SOUL.md"
    return path.read_text().strip() if path.is_file() else ""


def is_technical(role: str | None, text: str, tags: list[str] | None = None) -> bool:
    """Heartbeats, probes and tool plumbing: counted, never narrated."""
    if (role or "").lower() in TECHNICAL_ROLES:
        return True
    if is_heartbeat(text) or TECHNICAL_TEXT.match(text):
        return True
    return bool(TECHNICAL_TAGS & {t.lower() for t in (tags or [])})


def word_count(text: str) -> int:
    return len(re.findall(r"\S+", text))


# ---- what is pending ------------------------------------------------------------------------


def pending_items(
    con: duckdb.DuckDBPyConnection, settings: Settings, being_id: str, anchor: datetime | None
) -> tuple[list[Item], int, datetime | None]:
    """Items newer than the anchor, oldest first; the number of technical ones skipped; their max ts.

    Importance is the node's where patrol formed one from the episode, else the episode's own.
    Entries of legacy daily logs (`workspace/<being>/memory/YYYY-MM-DD.md`) join the stream,
    unless the same text was ingested as an episode.
    """
    rows = con.execute(
        """
        SELECT e.ts, coalesce(e.speaker, e.role, 'someone'), e.role, e.kind, e.text, e.tags,
               greatest(coalesce(n.importance, 0), coalesce(e.importance, 0.3)),
               e.trigger, e.episode_id
        FROM episodes e
        LEFT JOIN (
            SELECT unnest(source_episode_ids) AS episode_id, max(importance) AS importance
            FROM nodes WHERE being_id = ? GROUP BY 1
        ) n ON n.episode_id = e.episode_id
        WHERE e.being_id = ? AND (?::TIMESTAMP IS NULL OR e.ts > ?::TIMESTAMP)
        ORDER BY e.ts, e.episode_id
        """,
        [being_id, being_id, anchor, anchor],
    ).fetchall()
    items, skipped, last = [], 0, None
    texts = set()
    for ts, speaker, role, kind, text, tags, importance, trigger, episode_id in rows:
        last = ts if last is None or ts > last else last
        texts.add(" ".join(text.split()))
        if is_technical(role, text, tags):
            skipped += 1
            continue
        items.append(Item(ts, speaker, kind, text, float(importance), trigger, episode_id))
    for item in legacy_items(settings, being_id):
        if (anchor is None or item.ts > anchor) and " ".join(item.text.split()) not in texts:
            items.append(item)
            last = item.ts if last is None or item.ts > last else last
    items.sort(key=lambda i: (i.ts, i.ref))
    return items, skipped, last


def legacy_items(settings: Settings, being_id: str) -> list[Item]:
    """Entries of daily logs kept in the workspace before mindflow (MindBot's memory/ layout)."""
    out = []
    for folder in (settings.workspace / being_id / "memory", settings.workspace / being_id):
        if not folder.is_dir():
            continue
        for path in sorted(folder.iterdir()):
            if not LEGACY_NAME.match(path.name):
                continue
            result = parse_file(path, being_id, "daily-md")
            for ep in result.episodes:
                if is_technical(ep.role, ep.text, list(ep.tags)):
                    continue
                out.append(
                    Item(
                        ep.ts,
                        ep.speaker,
                        ep.kind,
                        ep.text,
                        ep.importance or 0.3,
                        ep.trigger,
                        f"legacy:{path.name}:{ep.source_ref or ''}",
                    )
                )
    return out


def pending_tokens(
    con: duckdb.DuckDBPyConnection, settings: Settings, being_id: str
) -> tuple[int, int, datetime | None]:
    """(estimated tokens, items) of what the next narrative run would narrate, and the anchor."""
    story = read_story(settings, being_id)
    items, _, _ = pending_items(con, settings, being_id, story.anchor)
    return sum(estimate_tokens(i.line()) for i in items), len(items), story.anchor


def truncate_item(item: Item, limit: int, count: Callable[[str], int] = estimate_tokens) -> Item:
    """The item with its text cut (marked `…[truncated]`) so that its line costs at most `limit` tokens."""
    if count(item.line()) + 1 <= limit:
        return item
    text = " ".join(item.text.split())
    while len(text) > 40:
        text = text[: int(len(text) * 0.8)].rstrip()
        cut = replace(item, text=text + " …[truncated]")
        if count(cut.line()) + 1 <= limit:
            return cut
    return replace(item, text=text + " …[truncated]")


def batches(items: list[Item], limit: int, count: Callable[[str], int] = estimate_tokens) -> list[list[Item]]:
    """Consecutive batches under `limit` tokens; items sharing a timestamp never straddle two.

    The anchor is the last timestamp of a batch, so splitting equal timestamps would lose
    the later ones. A single item over the limit is truncated (`…[truncated]`) to fit.
    """
    out: list[list[Item]] = []
    current: list[Item] = []
    used = 0
    for item in items:
        item = truncate_item(item, limit, count)
        cost = count(item.line()) + 1
        if current and used + cost > limit and item.ts != current[-1].ts:
            out.append(current)
            current, used = [], 0
        current.append(item)
        used += cost
    if current:
        out.append(current)
    return out


# ---- writing --------------------------------------------------------------------------------


def render_chapter(when: str, title: str, text: str, episodes: list[str] | None = None) -> str:
    """A chapter; with `episodes`, a last line citing the ids of the episodes it tells (never their
    text), so that a permanent forget finds the chapters to narrate again (mindflow/loop/erase.py)."""
    title = " ".join(title.replace("#", "").split())[:80] or "Untitled"
    cite = f"\n{citation(episodes)}\n" if episodes else ""
    return f"### [{when}] {title}\n\n{text.strip()}\n{cite}"


# `<!-- episodes: ["id", ...] -->`: JSON, so any id is safe inside it, with `>` escaped so an id
# cannot close the comment.
CITATION = re.compile(r"^<!-- episodes: (\[.*\]) -->[ \t]*$", re.MULTILINE)


def citation(episodes: list[str]) -> str:
    return "<!-- episodes: " + json.dumps(list(episodes)).replace(">", "\\u003e") + " -->"


def cited_episodes(chapter: str) -> list[str] | None:
    """The episode ids a chapter cites; None for a chapter written before chapters cited them."""
    m = CITATION.search(chapter)
    if m is None:
        return None
    try:
        ids = json.loads(m.group(1))
    except ValueError:
        return None
    return [str(i) for i in ids] if isinstance(ids, list) else None


def _strip_identity(text: str, soul: str) -> str:
    """Drop headings and any line copied from SOUL.md: identity is context, never story."""
    soul_lines = {" ".join(line.split()).lower() for line in soul.splitlines() if len(line.strip()) >= 20}
    kept = []
    for line in text.splitlines():
        norm = " ".join(line.split()).lower()
        if line.lstrip().startswith("#") or (norm and norm in soul_lines):
            continue
        kept.append(line)
    return "\n".join(kept).strip()


def _written_mechanically(body: str) -> bool:
    """Whether the story's newest chapters are a mechanical chronicle (its last writer marker)."""
    marks = {MECHANICAL_MARK: True, MECHANICAL_FROM_MARK: True, MODEL_FROM_MARK: False}
    last = max(((body.rfind(m), v) for m, v in marks.items() if m in body), default=(-1, False))
    if last[0] == body.find(MECHANICAL_MARK) and MIXED_TAIL in body:
        return False  # the top note already says a model took over
    return last[1]


def story_kind(body: str) -> str:
    """'mechanical chronicle', 'narrative', or 'narrative and mechanical chronicle' for a mixed story."""
    mechanical = MECHANICAL_MARK in body or MECHANICAL_FROM_MARK in body
    model = MECHANICAL_MARK not in body or MODEL_FROM_MARK in body or MIXED_TAIL in body
    if mechanical and model:
        return "narrative and mechanical chronicle"
    return "mechanical chronicle" if mechanical else "narrative"


def _with_chapters(story: Story, being_id: str, chapters: list[str], mechanical: bool) -> str:
    body = story.body.strip()
    if not body:
        body = f"# The story of {being_id}"
        if mechanical:
            body += f"\n\n{MECHANICAL_MARK}\n{MECHANICAL_NOTE}"
    elif mechanical and not _written_mechanically(body):
        # Model-written chapters, then a run without a usable model: mark where the chronicle starts.
        body += f"\n\n{MECHANICAL_FROM_MARK}\n{MECHANICAL_FROM_NOTE}"
    elif not mechanical and _written_mechanically(body):
        if MECHANICAL_NOTE in body:
            # A model now writes on: the top note says which chapters the mechanical chronicle wrote.
            first = CHAPTER.search("\n".join(chapters))
            body = body.replace(MECHANICAL_NOTE, MIXED_NOTE.format(when=first.group(1) if first else "now"))
            body += f"\n\n{MODEL_FROM_MARK}"
        else:
            body += f"\n\n{MODEL_FROM_MARK}\n{MODEL_FROM_NOTE}"
    return body + "\n\n" + "\n".join(chapters)


def _split_chapters(body: str) -> tuple[str, list[str]]:
    """(the preamble before the first chapter, the chapters as markdown blocks)."""
    starts = [m.start() for m in CHAPTER.finditer(body)]
    if not starts:
        return body, []
    blocks = [body[a:b].strip() + "\n" for a, b in zip(starts, [*starts[1:], len(body)], strict=True)]
    return body[: starts[0]].strip(), blocks


def condense(
    body: str, max_words: int, summarise: Callable[[str, int], tuple[str, str]] | None
) -> tuple[str, int]:
    """Summarise the older chapters when the story nears `max_words`; returns (body, chapters condensed).

    The newest chapters stay verbatim; the older half becomes one chapter, written by the
    model (`summarise(chapters_markdown, target_words) -> (title, text)`), or mechanically
    (each chapter's title and first sentence) without one or when the model fails.
    Git keeps every earlier version.
    """
    total = 0
    for _ in range(8):  # each round condenses the older half again, until the story fits
        body, n = _condense_once(body, max_words, summarise)
        total += n
        if not n:
            break
    return body, total


def _condense_once(body: str, max_words: int, summarise) -> tuple[str, int]:
    if word_count(body) <= int(max_words * 0.9):
        return body, 0
    preamble, blocks = _split_chapters(body)
    if len(blocks) < 3:
        return body, 0
    keep = max(2, len(blocks) // 2)
    old, recent = blocks[:-keep], blocks[-keep:]
    first = CHAPTER.search(old[0]).group(1)
    target = max(150, max_words // 5)
    summary = None
    if summarise is not None:
        try:
            title, text = summarise("\n".join(old), target)
            if text.strip() and word_count(text) <= target * 2:
                summary = render_chapter(first, title, text)
        except MindflowError:
            summary = None
    if summary is None:
        lines = []
        for block in old:
            m = CHAPTER.search(block)
            prose = block[m.end() :].strip()
            if m.group(2) == SUMMARY_TITLE:  # an earlier condensed chapter: keep its lines
                lines += [line for line in prose.splitlines() if line.startswith("- ")]
                continue
            prose = re.sub(r"^[-*] ", "", prose.split("\n")[0]) if prose else ""
            sentence = re.split(r"(?<=[.!?])\s", prose, maxsplit=1)[0][:200]
            lines.append(f"- {m.group(1)[:10]}, {m.group(2)}: {sentence}")
        while len(lines) > 1 and word_count("\n".join(lines)) > target:
            lines.pop(0)  # the oldest go first; git history keeps them
        summary = render_chapter(first, SUMMARY_TITLE, "\n".join(lines))
    new_body = (preamble + "\n\n" if preamble else "") + "\n".join([summary, *recent])
    return new_body, len(old)


class StoryLock:
    """The exclusive STORY.md.lock of a being: waits up to the timeout, then fails cleanly."""

    def __init__(self, settings: Settings, being_id: str):
        path = story_path(settings, being_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.lock = FileLock(str(path) + ".lock")
        self.timeout = settings.narrative_lock_timeout_s
        self.path = path

    def __enter__(self):
        try:
            self.lock.acquire(timeout=self.timeout)
        except Timeout as exc:
            raise MindflowError(
                f"{self.path} is being written by another narrative run for more than "
                f"{self.timeout:.0f} s; try again when it finishes"
            ) from exc
        return self

    def __exit__(self, *exc):
        self.lock.release()


def _write(settings, being_id, story: Story, *, action, summary, run_id, trigger, con) -> None:
    audit.write_file(
        settings,
        f"{being_id}/STORY.md",
        story.render(),
        action=action,
        summary=summary,
        actor="narrative",
        trigger=trigger,
        run_id=run_id,
        con=con,
    )


# ---- the pass -------------------------------------------------------------------------------


def narrate(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    being_id: str,
    *,
    llm=None,
    run_id: str | None = None,
    trigger: str = "manual",
    log: Callable[[str], None] = lambda _msg: None,
) -> NarrativeReport:
    """Narrate everything newer than the anchor: with `llm` batch by batch, else a mechanical chronicle.

    Each successful batch moves the anchor to its last timestamp in the same write as its
    chapters. A batch whose model call fails or answers invalidly leaves STORY.md as it
    was and stops the pass: the next run starts again from the anchor.
    """
    with StoryLock(settings, being_id):
        story = read_story(settings, being_id)
        report = NarrativeReport(
            being_id,
            "llm" if llm is not None else "mechanical",
            anchor_before=story.anchor,
            anchor_after=story.anchor,
        )
        items, report.skipped_technical, last_ts = pending_items(con, settings, being_id, story.anchor)
        report.legacy_entries = sum(1 for i in items if i.ref.startswith("legacy:"))
        if not items:
            if last_ts is not None and story.body:
                # Only technical messages since the anchor: move past them without a new chapter.
                story.anchor = last_ts
                _write(
                    settings,
                    being_id,
                    story,
                    action="EDIT",
                    run_id=run_id,
                    trigger=trigger,
                    con=con,
                    summary=f"anchor moved past {report.skipped_technical} technical messages",
                )
                report.anchor_after = last_ts
            report.words = word_count(story.body)
            return report
        if llm is None:
            _mechanical(con, settings, being_id, story, items, last_ts, report, run_id, trigger)
        else:
            _with_llm(con, settings, being_id, story, items, report, llm, run_id, trigger, log)
        report.words = word_count(read_story(settings, being_id).body)
        return report


def _mechanical(con, settings, being_id, story, items, last_ts, report, run_id, trigger) -> None:
    by_day: dict[date, list[Item]] = {}
    for item in items:
        by_day.setdefault(item.ts.date(), []).append(item)
    chapters = []
    for _day, day_items in sorted(by_day.items()):
        chapter, title = mechanical_chapter(day_items)
        chapters.append(chapter)
        report.titles.append(title)
    body = _with_chapters(story, being_id, chapters, mechanical=True)
    body, report.summarised = condense(body, settings.narrative_max_words, None)
    new = Story(body, max(last_ts, items[-1].ts) if last_ts else items[-1].ts)
    _write(
        settings,
        being_id,
        new,
        action="CREATE" if not story.body else "APPEND",
        run_id=run_id,
        trigger=trigger,
        con=con,
        summary=f"mechanical chronicle: {len(chapters)} chapters from {len(items)} episodes",
    )
    report.batches = 1
    report.items = len(items)
    report.chapters_added = len(chapters)
    report.anchor_after = new.anchor


TITLE_KINDS = frozenset({"decision", "event", "fact", "emotion"})
_FILLER = re.compile(
    r"^(?:(?:ok(?:ay)?|yes|yeah|so|well|fine|hi|hey|morning|good|great|right|quick one|"
    r"but|and|by the way|bram|ada)\b[\s,.!:;-]*)+",
    re.IGNORECASE,
)


def mechanical_title(text: str, words: int = 7) -> str:
    """The first clause of a moment, without interjections, in at most `words` words."""
    clauses = re.split(r"(?<=[.!?;:])\s|,\s|\s[-–—]\s", _FILLER.sub("", " ".join(text.split())))
    # "Decision made: I'm taking the job" reads better as its second clause.
    found = next(
        (w for w in (re.findall(r"[\wÀ-ÿ'’/-]+", _FILLER.sub("", c)) for c in clauses) if len(w) >= 3),
        re.findall(r"[\wÀ-ÿ'’/-]+", clauses[0]),
    )
    return " ".join(found[:words]) + ("…" if len(found) > words else "")


def mechanical_chapter(items: list[Item], top: int = 6) -> tuple[str, str]:
    """One dated chapter: the day's most important moments and everything asked to be remembered."""
    ranked = sorted(items, key=lambda i: (-i.importance, i.ts))
    chosen = {id(i) for i in ranked[:top]} | {id(i) for i in items if i.trigger == "remember"}
    picked = [i for i in items if id(i) in chosen]
    lead = max(items, key=lambda i: (i.kind in TITLE_KINDS, i.importance, -i.ts.timestamp()))
    title = mechanical_title(lead.text) or lead.kind
    lines = []
    for i in picked:
        text = " ".join(i.text.split())
        text = text if len(text) <= 280 else text[:277] + "…"
        mark = " (asked to remember)" if i.trigger == "remember" else ""
        lines.append(f"- {i.ts:%H:%M} {i.speaker}{mark}: {text}")
    rest = len(items) - len(picked)
    if rest:
        lines.append(f"- …and {rest} more moments that day.")
    cited = [i.ref for i in items if i.ref and not i.ref.startswith("legacy:")]
    when = f"{items[0].ts:%Y-%m-%d %H:%M}"
    return render_chapter(when, title or lead.kind, "\n".join(lines), cited), title


def _prompt_tokens(llm, prompt) -> int:
    """Tokens of a prompt as sent: the system text with its schema, then each message."""
    return llm.count_tokens(prompt.full_system()) + sum(
        llm.count_tokens(m["content"]) + 4 for m in prompt.messages
    )


def _with_llm(con, settings, being_id, story, items, report, llm, run_id, trigger, log) -> None:
    """Narrate `items` batch by batch; each prompt, answer included, fits the model's context.

    The room for episodes is recomputed before every batch from the story as it is then.
    When the story leaves no room for even a small batch, its older chapters are condensed
    first (by the model, else mechanically), and that condensed story is what the batch
    writes; if the newest chapters alone still do not fit, the prompt shows only as many
    of them as fit (the file keeps them all).
    """
    from mindflow.llm import LLMError
    from mindflow.prompts import narrative_bootstrap, narrative_incremental, narrative_summarise

    soul = read_soul(settings, being_id)
    context = llm.context_tokens()
    limit = min(settings.narrative_batch_tokens, context)
    answer_tokens = min(ANSWER_TOKENS, max(256, context // 4))

    def build(body: str, lines: str):
        if not body:
            return narrative_bootstrap.build(being_id, soul, lines, max_tokens=answer_tokens)
        # The citations are bookkeeping, not story: the model neither reads nor imitates them.
        body = CITATION.sub("", body)
        return narrative_incremental.build(being_id, soul, body, lines, max_tokens=answer_tokens)

    def room(body: str) -> int:
        """Tokens left for the episodes of a batch once instructions, identity, story and answer fit."""
        return limit - answer_tokens - _prompt_tokens(llm, build(body, ""))

    def summarise(chapters_md: str, target: int) -> tuple[str, str]:
        prompt = narrative_summarise.build(
            being_id, chapters_md, target_words=target, max_tokens=answer_tokens
        )
        if _prompt_tokens(llm, prompt) + answer_tokens > context:
            raise MindflowError("the chapters to condense do not fit the model's context")
        answer = llm.complete(prompt)
        return answer.title, _strip_identity(answer.text, soul)

    def fit(body: str, need: int) -> tuple[str, int]:
        """Condense older chapters until a batch of `need` tokens fits; (body, chapters condensed)."""
        condensed = 0
        for _ in range(8):
            if room(body) >= need:
                break
            body, n = _condense_once(body, max(100, int(word_count(body) * 0.6)), summarise)
            if not n:
                break
            condensed += n
        return body, condensed

    def excerpt(body: str, need: int) -> str:
        """The newest chapters that fit the prompt, for context only."""
        _, blocks = _split_chapters(body)
        shown: list[str] = []
        for block in reversed(blocks):
            candidate = "(earlier chapters omitted)\n\n" + "\n".join([block, *shown])
            if room(candidate) < need:
                break
            shown.insert(0, block)
        return (
            "(earlier chapters omitted)\n\n" + "\n".join(shown)
            if shown
            else "(the story so far is too long to show)"
        )

    remaining = list(items)
    estimate = max(1, room(story.body))
    log(
        f"{being_id}: {len(items)} episodes to narrate, about "
        f"{-(-sum(llm.count_tokens(i.line()) + 1 for i in items) // estimate)} batches "
        f"(context {context} tokens)"
    )
    n = 0
    while remaining:
        n += 1
        report.batches += 1
        # Room for a useful batch (or for all that is left, if less), else condense first.
        need = min(MIN_BATCH_TOKENS, sum(llm.count_tokens(i.line()) + 1 for i in remaining))
        body, condensed = (story.body, 0)
        if body and room(body) < need:
            body, condensed = fit(body, need)
            if condensed:
                log(f"{being_id}: condensed {condensed} older chapters to fit the model's context")
        shown = body if not body or room(body) >= need else excerpt(body, need)
        budget = room(shown)
        if budget < min(need, 50):
            msg = (
                f"batch {n}: the instructions and SOUL.md leave no room for episodes in a "
                f"{context}-token context (MINDFLOW_LLM_CONTEXT_TOKENS); use a larger model"
            )
            report.failed_batches += 1
            report.errors.append(msg)
            log(f"{being_id}: {msg}; STORY.md and its anchor unchanged")
            break
        batch = batches(remaining, budget, llm.count_tokens)[0]
        lines = "\n".join(i.line() for i in batch)
        try:
            answer = llm.complete(build(shown, lines))
            chapters = _valid_chapters(answer, soul, batch)
        except (LLMError, MindflowError, ValueError, AttributeError, TypeError) as exc:
            report.failed_batches += 1
            report.errors.append(f"batch {n}: {exc}"[:300])
            log(f"{being_id}: batch {n} failed, STORY.md and its anchor unchanged: {exc}")
            break
        current = Story(body, story.anchor)
        cites = _cite(chapters, batch)
        rendered = [render_chapter(*c, cited) for c, cited in zip(chapters, cites, strict=True)]
        new_body = _with_chapters(current, being_id, rendered, mechanical=False)
        new_body, more = condense(new_body, settings.narrative_max_words, summarise)
        report.summarised += condensed + more
        new = Story(new_body, batch[-1].ts)
        left = len(remaining) - len(batch)
        _write(
            settings,
            being_id,
            new,
            action="CREATE" if not story.body else "APPEND",
            run_id=run_id,
            trigger=trigger,
            con=con,
            summary=f"{len(chapters)} chapters from {len(batch)} episodes (batch {n}, {left} episodes left)",
        )
        story = new
        remaining = remaining[len(batch) :]
        report.items += len(batch)
        report.chapters_added += len(chapters)
        report.titles.extend(c[1] for c in chapters)
        report.anchor_after = new.anchor
        log(f"{being_id}: batch {n} narrated {len(batch)} episodes, anchor {_iso(new.anchor)}, {left} left")


def _cite(chapters: list[tuple[str, str, str]], batch: list[Item]) -> list[list[str]]:
    """The episodes each chapter of a batch tells: those from its time to the next chapter's (the
    first chapter also those before it). A chapter dated out of order cites the batch's span it
    covers in time order, so every episode of the batch is cited by some chapter."""
    starts = sorted({c[0] for c in chapters})
    cited: dict[str, list[str]] = {s: [] for s in starts}
    for item in batch:
        if not item.ref or item.ref.startswith("legacy:"):
            continue
        when = f"{item.ts:%Y-%m-%d %H:%M}"
        at = max((s for s in starts if s <= when), default=starts[0])
        cited[at].append(item.ref)
    return [cited[c[0]] for c in chapters]


def _valid_chapters(answer, soul: str, batch: list[Item]) -> list[tuple[str, str, str]]:
    """(when, title, text) of each chapter, or ValueError: nothing invalid reaches STORY.md.

    A date outside the batch's span (a day of slack each side) is a model's slip, not a
    reason to lose the batch: the chapter is dated at the batch's first episode instead.
    """
    lo, hi = batch[0].ts - timedelta(days=1), batch[-1].ts + timedelta(days=1)
    chapters = getattr(answer, "chapters", None)
    if not isinstance(chapters, list) or not chapters:
        raise ValueError("the model answered without chapters")
    out = []
    for c in chapters:
        if not isinstance(c.text, str) or not isinstance(c.title, str) or not isinstance(c.when, str):
            raise ValueError("a chapter is not text")
        when = datetime.strptime(c.when, "%Y-%m-%d %H:%M")
        if not lo <= when <= hi:
            when = batch[0].ts
        text = _strip_identity(CITATION.sub("", c.text), soul)
        if not text or not c.title.strip():
            raise ValueError("a chapter is empty once identity lines are removed")
        out.append((f"{when:%Y-%m-%d %H:%M}", c.title.strip(), text))
    return out


# ---- the demo -------------------------------------------------------------------------------


def place_personas(
    settings: Settings, samples: Path, con: duckdb.DuckDBPyConnection | None = None
) -> list[str]:
    """Copy `<samples>/<being>/SOUL.md` into the workspace through the audit layer; never overwrite.

    With `con`, the CREATE rows also go to the DuckDB audit_log table (as well as audit.log and git).
    """
    placed = []
    if not samples.is_dir():
        return placed
    for soul in sorted(samples.glob("*/SOUL.md")):
        rel = f"{soul.parent.name}/SOUL.md"
        if (settings.workspace / rel).exists():
            continue
        audit.write_file(
            settings,
            rel,
            soul.read_text(),
            action="CREATE",
            summary="sample persona",
            actor="demo",
            trigger="mindflow demo",
            run_id=None,
            con=con,
        )
        placed.append(rel)
    return placed


def outline(settings: Settings, being_id: str, last: int = 12) -> str:
    """STORY.md without its content, for run metadata: its newest chapters' dates, words and tokens."""
    story = read_story(settings, being_id)
    if not story.body:
        return ""
    _, blocks = _split_chapters(story.body)
    rows = [
        f"| {CHAPTER.search(b).group(1)} | {word_count(b)} | {estimate_tokens(b)} |" for b in blocks[-last:]
    ]
    return (
        f"{being_id}/STORY.md: {len(blocks)} chapters, {word_count(story.body)} words, "
        f"LAST_PROCESSED {_iso(story.anchor)}\n\n| chapter | words | tokens (est.) |\n|---|---|---|\n"
        + "\n".join(rows)
    )


def workspace_summary(settings: Settings) -> str:
    """Per being: STORY.md's chapters and anchor, MEMORY.md's size; then the audit trail's length."""
    lines = []
    root = settings.workspace
    for being in (
        sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))
        if root.is_dir()
        else []
    ):
        path = being / "STORY.md"
        if not path.exists():
            continue
        story = parse_story(path.read_text())
        chapters = story.chapters
        kind = story_kind(story.body)
        lines.append(
            f"{path} ({kind}): {len(chapters)} chapters, {word_count(story.body)} words, "
            f"LAST_PROCESSED {_iso(story.anchor)}"
        )
        lines += [f"  ### [{when}] {title}" for when, title in chapters[:3]]
        if len(chapters) > 3:
            lines.append(f"  ... {len(chapters) - 3} more")
        memory = being / "MEMORY.md"
        if memory.exists():
            lines.append(f"{memory}: {estimate_tokens(memory.read_text())} estimated tokens (cap 3000)")
    log = audit.read_log(settings)
    if log:
        lines.append(f"{root / audit.AUDIT_LOG}: {len(log)} entries; `mindflow audit` shows them")
    return "\n".join(lines) or "no STORY.md yet"
