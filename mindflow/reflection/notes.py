"""The reflection folder of a being's workspace: pending-reflection.md, reflection-log.md, evolution.md.

Every write goes through the audit layer (one commit each), as for every workspace file.
"""

from __future__ import annotations

from datetime import datetime

from mindflow import audit
from mindflow.config import Settings
from mindflow.llm.budget import estimate_tokens
from mindflow.reflection.items import Item

FOLDER = "reflection"
PENDING = "pending-reflection.md"
LOG = "reflection-log.md"
EVOLUTION = "evolution.md"
MILESTONES = (10, 25, 50, 100)
ANSWERS = (
    'Answer with one of: **approve all** · **approve 1,3** · **reject 2** · **edit 4 "new text"** '
    "(or a target: `edit 2 target=<ref>`) · item by item (partial).\n"
    "`mindflow review --being {being}`, the /review page, or "
    "`POST /v1/beings/{being}/proposals/<id>/decision`."
)


def rel(being_id: str, name: str) -> str:
    return f"{being_id}/{FOLDER}/{name}"


def read(settings: Settings, being_id: str, name: str) -> str:
    path = settings.workspace / rel(being_id, name)
    return path.read_text(encoding="utf-8") if path.is_file() else ""


def _write(
    settings: Settings, being_id: str, name: str, text: str, summary: str, *, actor: str, run_id, con
) -> bool:
    exists = (settings.workspace / rel(being_id, name)).is_file()
    return audit.write_file(
        settings,
        rel(being_id, name),
        text,
        action="EDIT" if exists else "CREATE",
        summary=summary,
        actor=actor,
        trigger="reflection",
        run_id=run_id,
        con=con,
    )


def item_lines(item: Item, *, markdown: bool = True, diff_lines: int = 80) -> list[str]:
    """One numbered item with its evidence and diff: in pending-reflection.md and `mindflow review`."""
    tag = f"**[{item.tag}]**" if markdown else f"[{item.tag}]"
    ref = f"`{item.proposal_id}`" if markdown else item.proposal_id
    manual = " (manual: decide it by itself)" if item.proposal.payload.get("review") == "manual" else ""
    block = [f"{item.number}. {tag} {item.title} — {ref}{manual}"]
    if item.proposal.status == "deferred":
        block[0] += " (deferred)"
    block += [f"   - {line}" for line in item.evidence]
    if item.diff:
        fence = ["   ```diff"] if markdown else []
        block += ["", *fence, *[f"   {line}" for line in item.diff.splitlines()[:diff_lines]]]
        block += ["   ```"] if markdown else []
    return block


def render_pending(
    being_id: str,
    number: int,
    reflection_id: str,
    when: datetime,
    mode: str,
    survey_lines: list[str],
    insights: list[str],
    items: list[Item],
    budget_tokens: int,
) -> str:
    """The seed's summary: survey, meta-reflection, one numbered item per pending proposal, the answers.

    Items past the token budget are counted, not shown: `mindflow review` lists them all."""
    head = [
        f"# Pending reflection — {being_id}",
        "",
        f"Reflection {number} (`{reflection_id}`), {when:%Y-%m-%d %H:%M} UTC, approval mode **{mode}**.",
        "",
        "## Survey",
        *[f"- {line}" for line in survey_lines],
        "",
    ]
    if insights:
        head += ["## Meta-reflection", *[f"- {x}" for x in insights], ""]
    head += [f"## Proposals ({len(items)} pending)", ""]
    tail = ["", "## Your answer", "", ANSWERS.format(being=being_id), ""]
    body: list[str] = []
    used = estimate_tokens("\n".join(head + tail))
    shown = 0
    for item in items:
        block = item_lines(item)
        cost = estimate_tokens("\n".join(block))
        if used + cost > budget_tokens:
            break
        body += block
        used += cost
        shown += 1
    if not items:
        body.append("Nothing waits for a decision.")
    elif shown < len(items):
        body.append(
            f"{len(items) - shown} more item(s) past this summary's budget: "
            f"`mindflow review --being {being_id}`."
        )
    return "\n".join(head + body + tail)


def write_pending(settings, being_id, text: str, *, actor: str, run_id, con) -> bool:
    return _write(
        settings, being_id, PENDING, text, "pending reflection summary", actor=actor, run_id=run_id, con=con
    )


def append_log(settings, being_id, lines: list[str], *, actor: str, run_id, con) -> bool:
    """Append one dated section to reflection-log.md."""
    current = read(settings, being_id, LOG) or f"# Reflection log — {being_id}\n"
    text = current.rstrip("\n") + "\n\n" + "\n".join(lines) + "\n"
    return _write(
        settings, being_id, LOG, text, lines[0].lstrip("# ")[:120], actor=actor, run_id=run_id, con=con
    )


def milestone(settings, being_id, number: int, lines: list[str], *, actor: str, run_id, con) -> bool:
    """At reflections 10, 25, 50 and 100, a section of evolution.md: how the memory has changed."""
    if number not in MILESTONES:
        return False
    current = read(settings, being_id, EVOLUTION) or f"# Evolution — {being_id}\n"
    text = current.rstrip("\n") + f"\n\n## Milestone: reflection {number}\n\n" + "\n".join(lines) + "\n"
    return _write(
        settings,
        being_id,
        EVOLUTION,
        text,
        f"milestone at reflection {number}",
        actor=actor,
        run_id=run_id,
        con=con,
    )
