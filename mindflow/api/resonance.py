"""The resonance block: a few recalled memories with relative times, as MindBot's subconscious shows them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from mindflow.recall import Memory, rerank

HEADER = "[SUBCONSCIOUS RESONANCE]"
FENCE = "---"
FACT_KINDS = ("fact", "preference")
FACT_SLOTS = 2  # facts offered beside the Hot ones (which are all offered)
MENTIONED_ENTITIES = 3  # entities of the query whose facts resonate

# The seed's relative-time table (MindBot, phase 4): elapsed time since the memory, not
# calendar days. (label, below this many minutes); a month is 30 days, a year 365.
_HOUR, _DAY = 60, 24 * 60
RELATIVE_TIME: tuple[tuple[str, float], ...] = (
    ("a moment ago", 30),
    ("a while ago", 2 * _HOUR),
    ("a few hours ago", 6 * _HOUR),
    ("earlier today", 18 * _HOUR),
    ("yesterday", 30 * _HOUR),
    ("a few days ago", 4 * _DAY),
    ("last week", 10 * _DAY),
    ("a few weeks ago", 20 * _DAY),
    ("a month ago", 45 * _DAY),
    ("a couple of months ago", 90 * _DAY),
    ("several months ago", 180 * _DAY),
    ("almost a year ago", 335 * _DAY),
    ("a year ago", 395 * _DAY),
    ("a year and something ago", 640 * _DAY),
)
# Past that, by whole years N: N years ago within 30 days of the N-th anniversary, then N
# years and something, and almost N+1 years ago in the last 60 days before the next one
# less 30 (the same bands as one year: 335-395, 395-640, 640-700 days).
YEAR_DAYS, NEAR_DAYS, ALMOST_DAYS = 365, 30, 60


def relative_time(ts: datetime, now: datetime) -> str:
    """The table's label for a memory formed at `ts`, seen from `now`."""
    minutes = (now - ts).total_seconds() / 60
    for label, below in RELATIVE_TIME:
        if minutes < below:  # a memory stamped slightly ahead of `now` (clock skew) too
            return label
    days = minutes / _DAY
    years = int((days + NEAR_DAYS) // YEAR_DAYS)
    past = days - years * YEAR_DAYS
    if past < NEAR_DAYS:
        return f"{years} years ago"
    if past < YEAR_DAYS - NEAR_DAYS - ALMOST_DAYS:
        return f"{years} years and something ago"
    return f"almost {years + 1} years ago"


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


TIER_ORDER = {"hot": 0, "warm": 1, "cool": 2}


@dataclass(frozen=True)
class GraphFact:
    """A fact of an entity the query names (phase 2), as resonance shows it."""

    fact_id: str
    entity: str
    key: str
    value: str
    tier: str  # hot | warm | cool
    activation: float
    importance: float
    ts: datetime | None  # valid_at: since when it holds
    source_episode_ids: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        return f"{self.entity} {self.key}: {self.value}"

    @classmethod
    def from_row(cls, row: dict) -> GraphFact:
        return cls(
            fact_id=row["fact_id"], entity=row["entity"], key=row["key"], value=row["value"],
            tier=row.get("tier") or "warm", activation=float(row.get("activation") or 0.0),
            importance=float(row.get("importance") or 0.0), ts=row.get("valid_at"),
            source_episode_ids=tuple(row.get("source_episode_ids") or ()),
        )  # fmt: skip


def rank_facts(facts: list[GraphFact]) -> list[GraphFact]:
    """Hot first, then by activation and importance; the order of the entities breaks ties."""
    order = {f.fact_id: i for i, f in enumerate(facts)}
    return sorted(
        facts, key=lambda f: (TIER_ORDER.get(f.tier, 3), -f.activation, -f.importance, order[f.fact_id])
    )


def _group(memory: Memory) -> int:
    if memory.pinned or memory.trigger == "remember":
        return 0  # pinned, or boosted by an explicit "remember"
    if memory.kind in FACT_KINDS:
        return 1
    return 2


def arrange(
    candidates: list[Memory], k: int, facts: list[GraphFact] | None = None
) -> list[Memory | GraphFact]:
    """Up to k items in the seed's order: pinned/boosted memories, then facts, then the rest
    spread over time.

    The facts are those of the entities the query names (Hot first: every Hot one is offered,
    then the best of the others, leaving a place for a memory when there is one), followed by
    memories that are facts or preferences. Candidates come in relevance order, which each
    group keeps. The rest prefers memories from days not shown yet, so five memories of one
    afternoon do not crowd out the rest of a life, and is shown newest first.
    """
    boosted = [m for m in candidates if _group(m) == 0][:k]
    room = k - len(boosted) - (1 if len(candidates) > len(boosted) else 0)
    ranked = rank_facts(facts or [])
    hot = [f for f in ranked if f.tier == "hot"]
    graph_facts = (hot + [f for f in ranked if f.tier != "hot"][: max(0, FACT_SLOTS - len(hot))])[
        : max(room, 0)
    ]
    chosen: list[Memory | GraphFact] = [*boosted, *graph_facts, *(m for m in candidates if _group(m) == 1)]
    chosen = chosen[:k]
    rest = [m for m in candidates if _group(m) == 2]
    days = {m.ts.date() for m in chosen if isinstance(m, Memory) and m.ts is not None}
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


RRF_K = 60  # reciprocal rank fusion's constant: a list's first places matter, none dominates


def fuse(ranked_lists: list[list[Memory]]) -> list[Memory]:
    """One relevance order from the results of several queries (reciprocal rank fusion)."""
    if len(ranked_lists) == 1:
        return ranked_lists[0]
    by_ref: dict[str, Memory] = {}
    for found in ranked_lists:
        for memory in found:
            by_ref.setdefault(memory.memory_ref, memory)
    refs = [[m.memory_ref for m in found] for found in ranked_lists]
    return [by_ref[f.key] for f in rerank.fuse_ranked(refs, [1.0] * len(refs), RRF_K)]


def line(full_label: str, item: Memory | GraphFact) -> str:
    """`- A few days ago — Jan 9, text`, with the feeling of a memory that has one."""
    feeling = f" (felt: {item.feeling})" if isinstance(item, Memory) and item.feeling else ""
    return f"- {full_label[:1].upper()}{full_label[1:]}, {item.text}{feeling}"


def render(lines: list[tuple[str, Memory | GraphFact]]) -> str:
    """The seed's block an agent puts in its prompt (`---`, the header, `- ...` lines, `---`);
    empty when nothing resonates."""
    if not lines:
        return ""
    return render_lines([line(full_label, item) for full_label, item in lines])


def render_lines(lines: list[str]) -> str:
    """The block around ready lines (a model's rewriting: each gets its `- `)."""
    if not lines:
        return ""
    body = [f"- {' '.join(text.removeprefix('- ').split())}" for text in lines]
    return "\n".join([FENCE, HEADER, *body, FENCE])
