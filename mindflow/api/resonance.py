"""The resonance block: a few recalled memories with relative times, as MindBot's subconscious shows them."""

from __future__ import annotations

from datetime import datetime, timedelta

from mindflow.recall import Memory

HEADER = "[SUBCONSCIOUS RESONANCE]"
FACT_KINDS = ("fact", "preference")

# The seed's relative-time table. Days count calendar days between the memory and
# `now` (both UTC); "just now" wins whenever less than an hour has passed, even
# across midnight. (label, first day, last day); None: open-ended.
JUST_NOW = "just now"
JUST_NOW_WITHIN = timedelta(hours=1)
RELATIVE_TIME: tuple[tuple[str, int, int | None], ...] = (
    ("earlier today", 0, 0),
    ("yesterday", 1, 1),
    ("a few days ago", 2, 6),
    ("last week", 7, 13),
    ("a few weeks ago", 14, 29),
    ("last month", 30, 59),
    ("a few months ago", 60, 364),
    ("last year", 365, 729),
    ("years ago", 730, None),
)


def relative_time(ts: datetime, now: datetime) -> str:
    """The table's label for a memory formed at `ts`, seen from `now`."""
    if now - ts < JUST_NOW_WITHIN:
        return JUST_NOW  # also a memory stamped slightly ahead of `now` (clock skew)
    days = (now.date() - ts.date()).days
    for label, first, last in RELATIVE_TIME:
        if first <= days and (last is None or days <= last):
            return label
    return JUST_NOW


def exact_date(ts: datetime, now: datetime) -> str:
    """`Jan 9`, with the year when it differs from the year of `now`: `Dec 30, 2025`."""
    text = f"{ts:%b} {ts.day}"
    return text if ts.year == now.year else f"{text}, {ts.year}"


def label(ts: datetime | None, now: datetime) -> tuple[str, str, str]:
    """(full label, relative, date); a memory without a timestamp is only `some time ago`."""
    if ts is None:
        return "some time ago", "some time ago", ""
    relative, day = relative_time(ts, now), exact_date(ts, now)
    return f"{relative} — {day}", relative, day


def _group(memory: Memory) -> int:
    if memory.pinned or memory.trigger == "remember":
        return 0  # pinned, or boosted by an explicit "remember"
    if memory.kind in FACT_KINDS:
        return 1
    return 2


def arrange(candidates: list[Memory], k: int) -> list[Memory]:
    """Up to k memories: pinned/boosted first, then facts, then the rest spread over time.

    Candidates come in relevance order, which each group keeps. The rest prefers
    memories from days not shown yet, so five memories of one afternoon do not
    crowd out the rest of a life, and is shown newest first.
    """
    chosen = [m for m in candidates if _group(m) == 0] + [m for m in candidates if _group(m) == 1]
    chosen = chosen[:k]
    rest = [m for m in candidates if _group(m) == 2]
    days = {m.ts.date() for m in chosen if m.ts is not None}
    spread: list[Memory] = []
    for memory in rest:
        if len(chosen) + len(spread) >= k:
            break
        day = memory.ts.date() if memory.ts is not None else None
        if day is None or day not in days:
            spread.append(memory)
            days.add(day)
    picked = {m.memory_ref for m in spread}
    for memory in rest:
        if len(chosen) + len(spread) >= k:
            break
        if memory.memory_ref not in picked:
            spread.append(memory)
    spread.sort(key=lambda m: m.ts or datetime.min, reverse=True)
    return chosen + spread


def render(lines: list[tuple[str, Memory]]) -> str:
    """The block an agent puts in its prompt; empty when nothing resonates."""
    if not lines:
        return ""
    out = [HEADER]
    for full_label, memory in lines:
        feeling = f" (felt: {memory.feeling})" if memory.feeling else ""
        out.append(f"- {full_label}: {memory.text}{feeling}")
    return "\n".join(out)
