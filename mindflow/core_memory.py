"""MEMORY.md: a being's core memory in four blocks, always under a hard 3,000-token cap.

Identity (from SOUL.md), Active Context (what is going on lately), Persona (how the
being's people like to work) and Critical Facts (pinned and vault memories first, then
the highest decay scores). Written mechanically, or rewritten by the narrative model
when one is configured; pinned and vault memories survive any rewrite.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import duckdb

from mindflow import audit
from mindflow.config import Settings
from mindflow.errors import MindflowError
from mindflow.models import utcnow
from mindflow.narrative import estimate_tokens, read_soul

MAX_TOKENS = 3_000
BLOCKS = ("Identity", "Active Context", "Persona", "Critical Facts")
IDENTITY_TOKENS = 350
ACTIVE_DAYS = 7
PERSONA_KINDS = ("preference", "correction")


@dataclass
class CoreMemoryReport:
    being_id: str
    mode: str  # mechanical | llm | mechanical (llm failed)
    tokens: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # lines per block
    pinned: int = 0
    dropped: int = 0  # candidate lines that did not fit under the cap
    changed: bool = False
    error: str | None = None
    proposal_id: str | None = None  # review mode: the pending MEMORY.md rewrite


@dataclass
class Blocks:
    identity: list[str]
    active: list[str]
    persona: list[str]
    critical: list[str]  # non-vault critical facts
    vault: list[str]  # pinned / remember: always kept


def _line(text: str, limit: int = 240) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _identity_lines(soul: str) -> list[str]:
    """SOUL.md's prose without headings, trimmed to the identity budget."""
    out, used = [], 0
    for raw in soul.splitlines():
        line = raw.strip().lstrip("-* ").strip()
        if not line or line.startswith("#") or line.startswith("<!--"):
            continue
        cost = estimate_tokens(line) + 2
        if used + cost > IDENTITY_TOKENS:
            break
        out.append(_line(line, 400))
        used += cost
    return out


# An episode no tombstone covers: neither named by a mark ($hidden) nor the source of a
# forgotten node. MEMORY.md never shows what the person asked to forget.
_KEPT_EPISODE = """NOT list_contains($hidden, e.episode_id) AND NOT EXISTS (
    SELECT 1 FROM nodes f WHERE f.being_id = e.being_id AND f.forgotten_at IS NOT NULL
      AND list_contains(f.source_episode_ids, e.episode_id))"""


def gather(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    being_id: str,
    top: int = 40,
    hidden_episodes: list[str] | tuple[str, ...] = (),
) -> Blocks:
    """Candidate lines per block, most important first, from nodes, decay scores and facts.

    Forgotten memories and facts, and the episodes they came from, are left out."""
    hidden = {"being": being_id, "hidden": list(hidden_episodes), "top": top}
    vault = [
        f"{_line(text)} ({ts:%Y-%m-%d})"
        for text, ts in con.execute(
            """
            SELECT coalesce(n.scene.action, ''), coalesce(n.episode_ts, n.created_at)
            FROM nodes n WHERE n.being_id = ? AND n.status NOT IN ('dead', 'archived')
              AND (n.pinned OR n.trigger = 'remember') AND coalesce(n.scene.action, '') <> ''
            ORDER BY n.pinned DESC, n.importance DESC, 2
            """,
            [being_id],
        ).fetchall()
    ]
    if not vault:  # before patrol formed nodes: the remember episodes themselves
        vault = [
            f"{_line(text)} ({ts:%Y-%m-%d})"
            for text, ts in con.execute(
                f"SELECT text, ts FROM episodes e WHERE being_id = $being AND trigger = 'remember' "
                f"AND {_KEPT_EPISODE} ORDER BY ts",
                {"being": being_id, "hidden": hidden["hidden"]},
            ).fetchall()
        ]
    critical = [
        f"{_line(text)} ({ts:%Y-%m-%d})"
        for text, ts in con.execute(
            """
            SELECT n.scene.action, coalesce(n.episode_ts, n.created_at)
            FROM nodes n LEFT JOIN decay_scores d ON d.memory_ref = n.node_id
            WHERE n.being_id = ? AND n.status = 'active' AND NOT n.pinned
              AND coalesce(n.trigger, '') <> 'remember' AND coalesce(n.scene.action, '') <> ''
              AND n.kind IN ('fact', 'decision')
              AND coalesce(d.status, 'active') IN ('active', 'fading')
            ORDER BY coalesce(d.score, n.importance) DESC, n.importance DESC, 2 DESC
            LIMIT ?
            """,
            [being_id, top],
        ).fetchall()
    ]
    if not critical:  # before patrol formed nodes: fact and decision episodes
        critical = [
            f"{_line(text)} ({ts:%Y-%m-%d})"
            for text, ts in con.execute(
                "SELECT text, ts FROM episodes e WHERE being_id = $being AND kind IN ('fact', 'decision') "
                f"AND coalesce(trigger, '') NOT IN ('remember', 'forget') AND {_KEPT_EPISODE} "
                "ORDER BY coalesce(importance, 0.5) DESC, ts DESC LIMIT $top",
                hidden,
            ).fetchall()
        ]
    critical += [
        _line(f"{entity} {key}: {value}")
        for entity, key, value in con.execute(
            """
            SELECT entity, key, value FROM facts
            WHERE being_id = ? AND invalid_at IS NULL AND forgotten_at IS NULL
              AND coalesce(category, '') <> 'preference'
            ORDER BY activation * importance DESC, created_at DESC LIMIT ?
            """,
            [being_id, top // 2],
        ).fetchall()
    ]
    active = [
        f"{ts:%Y-%m-%d} {_line(text, 200)}"
        for text, ts in con.execute(
            f"""
            WITH latest AS (SELECT max(ts) AS t FROM episodes WHERE being_id = $being)
            SELECT e.text, e.ts FROM episodes e, latest
            WHERE e.being_id = $being AND e.ts > latest.t - to_days($days)
              AND e.kind IN ('task', 'decision', 'event', 'emotion', 'message')
              AND coalesce(e.trigger, '') NOT IN ('remember', 'forget') AND {_KEPT_EPISODE}
            ORDER BY CASE WHEN e.kind IN ('task', 'decision') THEN 0 ELSE 1 END,
                     coalesce(e.importance, 0.3) DESC, e.ts DESC
            LIMIT $half
            """,
            {"being": being_id, "hidden": hidden["hidden"], "days": ACTIVE_DAYS, "half": top // 2},
        ).fetchall()
        if not _technical(text)
    ]
    persona = [
        _line(text)
        for (text,) in con.execute(
            f"""
            SELECT any_value(text) FROM episodes e
            WHERE being_id = $being AND kind IN ('preference', 'correction') AND {_KEPT_EPISODE}
            GROUP BY lower(text) ORDER BY max(coalesce(importance, 0.5)) DESC, max(ts) DESC LIMIT $top
            """,
            hidden,
        ).fetchall()
    ]
    persona += [
        _line(f"{entity} {key}: {value}")
        for entity, key, value in con.execute(
            "SELECT entity, key, value FROM facts WHERE being_id = ? AND invalid_at IS NULL "
            "AND forgotten_at IS NULL AND category = 'preference' ORDER BY activation DESC LIMIT ?",
            [being_id, top // 2],
        ).fetchall()
    ]
    return Blocks(
        _identity_lines(read_soul(settings, being_id)),
        _dedupe(active),
        _dedupe(persona),
        _dedupe(critical),
        _dedupe(vault),
    )


def _technical(text: str) -> bool:
    from mindflow.narrative import is_technical

    return is_technical(None, text)


def _dedupe(lines: list[str]) -> list[str]:
    seen, out = set(), []
    for line in lines:
        key = re.sub(r"\W+", " ", line.lower()).strip()
        if key and key not in seen:
            seen.add(key)
            out.append(line)
    return out


def render(
    being_id: str,
    blocks: Blocks,
    mode: str,
    cap: int = MAX_TOKENS,
    count: Callable[[str], int] = estimate_tokens,
) -> tuple[str, int, int]:
    """The MEMORY.md text under `cap` tokens; returns (text, tokens, lines dropped).

    Vault lines are placed first and never dropped (they are shortened if they alone
    would overflow); the rest is filled round-robin so that no block starves another.
    """
    header = f"# MEMORY.md — {being_id}\n<!-- mindflow core memory ({mode}); hard cap {cap} tokens -->\n"

    def text_of(chosen: dict[str, list[str]]) -> str:
        parts = [header]
        for name in BLOCKS:
            lines = chosen[name] or ["(nothing yet)"]
            parts.append(f"\n## {name}\n" + "\n".join(f"- {x}" for x in lines) + "\n")
        return "".join(parts)

    chosen = {
        "Identity": list(blocks.identity),
        "Active Context": [],
        "Persona": [],
        "Critical Facts": list(blocks.vault),
    }
    # Vault alone over the cap: shorten every vault line until it fits (never drop one).
    limit = 240
    while count(text_of(chosen)) > cap and limit > 40:
        limit = int(limit * 0.8)
        chosen["Critical Facts"] = [_line(x, limit) for x in blocks.vault]
    while count(text_of(chosen)) > cap and chosen["Identity"]:
        chosen["Identity"].pop()
    if count(text_of(chosen)) > cap:
        raise MindflowError(
            f"{being_id} has {len(blocks.vault)} pinned/remembered memories: more than fit in "
            f"MEMORY.md's {cap} tokens even shortened; unpin some (`mindflow unpin`) to make room"
        )
    queues = [
        ("Critical Facts", list(blocks.critical)),
        ("Active Context", list(blocks.active)),
        ("Persona", list(blocks.persona)),
    ]
    dropped = 0
    used = count(text_of(chosen))
    while any(q for _, q in queues):
        for name, queue in queues:
            if not queue:
                continue
            line = queue.pop(0)
            cost = count(f"- {line}\n") + 1
            if used + cost > cap:
                dropped += 1 + len(queue)
                queue.clear()
                continue
            chosen[name].append(line)
            used += cost
    text = text_of(chosen)
    # The per-line costs are an estimate of the whole; trim until the whole is under the cap.
    while count(text) > cap:
        for name in ("Persona", "Active Context", "Critical Facts"):
            extra = len(chosen[name]) - (len(blocks.vault) if name == "Critical Facts" else 0)
            if extra > 0:
                chosen[name].pop()
                dropped += 1
                break
        text = text_of(chosen)
    return text, count(text), dropped


def compose_core_memory(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    being_id: str,
    *,
    llm=None,
    run_id: str | None = None,
) -> tuple[str, CoreMemoryReport]:
    """The MEMORY.md the being's stores call for now (mechanical, or rewritten by `llm`), unwritten.

    The being's marks are folded in first: a memory forgotten since the last run leaves
    MEMORY.md now, a pinned one takes its place among the Critical Facts."""
    from mindflow.loop.fold import fold_marks

    hidden = sorted(fold_marks(con, settings, being_id, utcnow(), run_id).state.forgotten_episodes)
    blocks = gather(con, settings, being_id, hidden_episodes=hidden)
    count = estimate_tokens if llm is None else (lambda t: max(estimate_tokens(t), llm.count_tokens(t)))
    text, tokens, dropped = render(being_id, blocks, "mechanical", count=count)
    report = CoreMemoryReport(being_id, "mechanical", pinned=len(blocks.vault), dropped=dropped)
    if llm is not None:
        try:
            text, tokens, dropped = _rewrite(settings, being_id, blocks, text, llm, count)
            report.mode, report.dropped = "llm", dropped
        except (MindflowError, ValueError, AttributeError, TypeError) as exc:
            report.mode, report.error = "mechanical (llm failed)", str(exc)[:300]
    report.tokens = tokens
    report.counts = {
        name: len(re.findall(r"^- ", block, re.MULTILINE))
        for name, block in zip(BLOCKS, re.split(r"^## .+$", text, flags=re.MULTILINE)[1:], strict=False)
    }
    return text, report


def build_core_memory(
    con: duckdb.DuckDBPyConnection,
    settings: Settings,
    being_id: str,
    *,
    llm=None,
    run_id: str | None = None,
    trigger: str = "manual",
    review: bool | None = None,
) -> CoreMemoryReport:
    """Write workspace/<being>/MEMORY.md: mechanically, or rewritten by `llm` from the mechanical draft.

    A being in review mode (`review` None reads its approval mode) gets a pending `core`
    proposal with the diff instead: MEMORY.md changes once a person approves it."""
    from mindflow.reflection.core import propose_core
    from mindflow.reflection.modes import in_review

    text, report = compose_core_memory(con, settings, being_id, llm=llm, run_id=run_id)
    if in_review(settings, being_id) if review is None else review:
        report.proposal_id = propose_core(
            settings, being_id, text, report, created_by=f"core_memory:{trigger}"
        )
        return report
    path = settings.workspace / being_id / "MEMORY.md"
    report.changed = audit.write_file(
        settings,
        f"{being_id}/MEMORY.md",
        text,
        action="EDIT" if path.exists() else "CREATE",
        summary=f"core memory ({report.mode}): {report.tokens} tokens, {report.pinned} pinned/vault",
        actor="core_memory",
        trigger=trigger,
        run_id=run_id,
        con=con,
    )
    return report


def _rewrite(settings, being_id, blocks: Blocks, draft: str, llm, count) -> tuple[str, int, int]:
    from mindflow.prompts import core_memory as prompt

    answer = llm.complete(
        prompt.build(being_id, read_soul(settings, being_id), draft, max_words=int(MAX_TOKENS * 0.6))
    )
    for name in ("identity", "active_context", "persona", "critical_facts"):
        if not getattr(answer, name, None):
            raise ValueError(f"the model left the {name} block empty")
    critical = [_line(x) for x in answer.critical_facts if str(x).strip()]
    # Pinned and vault memories are kept verbatim whatever the model wrote.
    rewritten = Blocks(
        identity=[_line(answer.identity, 1200)],
        active=[_line(x) for x in answer.active_context if str(x).strip()],
        persona=[_line(x) for x in answer.persona if str(x).strip()],
        critical=[x for x in critical if x not in blocks.vault],
        vault=list(blocks.vault),
    )
    return render(being_id, rewritten, "rewritten by the narrative model", count=count)
