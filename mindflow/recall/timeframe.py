"""The time a query names ("in May 2022", "on October 6, 2022", "last week"), as a window of days.

Recall's time lever (`RecallConfig.time_weight`) lifts the memories written inside it: an agent
asking what happened "in June" means June's memories, however well others match the words.
English calendar phrases only; a query naming no time gives None and recall is unchanged.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sept", "sep"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
# Northern-hemisphere seasons as (first month, months long); winter starts the December before.
_SEASONS = {"spring": (3, 3), "summer": (6, 3), "fall": (9, 3), "autumn": (9, 3), "winter": (12, 3)}
_UNITS = {"day": 1, "week": 7, "month": 30, "year": 365}
_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "few": 3}

_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_FULL_MONTH = r"(?P<month>" + "|".join(name for name in _MONTHS if len(name) > 3 or name == "may") + r")"
_DAY = r"(?P<day>[0-3]?\d)(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>(?:19|20)\d\d)"
_SEASON = r"(?P<season>spring|summer|fall|autumn|winter)"
_COUNT = "|".join(_NUMBERS)
_RELATIVE = r"yesterday|today|tonight|(?:last|past|this)\s+(?:week|month|year|weekend)"
_PATTERNS = [
    # 2022-10-06
    ("day", re.compile(r"\b(?P<year>(?:19|20)\d\d)-(?P<mnum>[01]\d)-(?P<day>[0-3]\d)\b")),
    # October 6, 2022 / October 6 2022 / Oct 6th
    ("day", re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?:,?\s*{_YEAR}\b)?")),
    # 6 October 2022 / 6th of October, 2022
    ("day", re.compile(rf"\b{_DAY}\s+(?:of\s+)?{_MONTH}\b(?:,?\s*{_YEAR}\b)?")),
    # summer 2021 / last summer / the summer of 2021
    ("season", re.compile(rf"\b(?P<last>last\s+)?{_SEASON}\b(?:\s+(?:of\s+)?{_YEAR}\b)?")),
    # May 2022 / in May / last May (full names: "mar", "jan" alone are words)
    ("month", re.compile(rf"\b(?P<last>last\s+)?{_FULL_MONTH}\b(?:,?\s*(?:of\s+)?{_YEAR}\b)?")),
    ("year", re.compile(rf"\b{_YEAR}\b")),
    ("ago", re.compile(rf"\b(?P<n>\d+|{_COUNT})\s+(?P<unit>day|week|month|year)s?\s+ago\b")),
    ("relative", re.compile(rf"\b(?P<which>{_RELATIVE})\b")),
]  # fmt: skip
# A month name alone is a month only after one of these ("may", "march", "august" are words too).
_BEFORE_MONTH = re.compile(
    r"\b(?:in|during|since|until|till|by|of|from|through|early|late|mid|last|this|next|before|after)\s*$"
)


@dataclass(frozen=True)
class Window:
    """Days named by a query: `start` inclusive, `end` exclusive, both naive UTC midnights."""

    start: datetime
    end: datetime

    def widened(self, days: float) -> Window:
        return Window(self.start - timedelta(days=days), self.end + timedelta(days=days))


def named_window(
    query: str, now: datetime, latest: Callable[[], datetime | None] | None = None
) -> Window | None:
    """The span of every time the query names (their union), or None when it names none.

    A day or month without a year takes the one year the query names, if it names exactly one,
    else its latest occurrence not after `now` or the newest memory (`latest()`, asked only
    then), whichever is earlier; "last May", "last week", "three days ago" count from `now`.
    """
    now = _naive(now)
    text = query.lower()
    years = {int(y) for y in re.findall(r"\b(?:19|20)\d\d\b", text)}
    the_year = next(iter(years)) if len(years) == 1 else None
    # Asked once for all the dates the query names ("between August 11 and August 15"): from
    # LanceDB the newest memory is a scan of the being's times.
    held = functools.cache(lambda: _held(now, latest))
    taken: list[tuple[int, int]] = []
    spans: list[tuple[date, date]] = []
    for kind, pattern in _PATTERNS:
        for match in pattern.finditer(text):
            if any(match.start() < end and start < match.end() for start, end in taken):
                continue  # already part of a longer phrase ("October 6, 2022" holds "2022")
            span = _span(kind, match, now.date(), the_year, text, held)
            if span is not None:
                spans.append(span)
                taken.append((match.start(), match.end()))
    if not spans:
        return None
    start, end = min(s for s, _ in spans), max(e for _, e in spans)
    return Window(datetime.combine(start, datetime.min.time()), datetime.combine(end, datetime.min.time()))


def _naive(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None) if moment.tzinfo is not None else moment


def _held(now: datetime, latest: Callable[[], datetime | None] | None) -> date:
    """The last day memories are held for: no memory is written after the newest one."""
    newest = latest() if latest is not None else None
    return min(now, _naive(newest)).date() if newest is not None else now.date()


def _span(kind: str, match: re.Match, today: date, the_year: int | None, text: str, held: Callable[[], date]):
    groups = match.groupdict()
    if kind == "year":
        year = int(groups["year"])
        return date(year, 1, 1), date(year + 1, 1, 1)
    if kind == "ago":
        n = groups["n"]
        count = int(n) if n.isdigit() else _NUMBERS[n]
        unit = _UNITS[groups["unit"]]
        middle = today - timedelta(days=count * unit)
        return middle - timedelta(days=unit), middle + timedelta(days=unit + 1)
    if kind == "relative":
        return _relative(" ".join(groups["which"].split()), today)
    year = int(groups["year"]) if groups.get("year") else None
    if kind == "season":
        first, months = _SEASONS[groups["season"]]
        if year is None and groups["last"] is None and the_year is None:
            return None  # "summer" alone: a topic more often than a time
        year = year or the_year

        def start_of(y: int) -> date:
            return date(y - 1, 12, 1) if first == 12 else date(y, first, 1)

        if year is None:  # "last summer": the latest one that has ended
            year = next(
                y for y in range(today.year, today.year - 3, -1) if _add_months(start_of(y), months) <= today
            )
        start = start_of(year)
        return start, _add_months(start, months)
    month = _MONTHS.get(groups.get("month") or "") or int(groups.get("mnum") or 0)
    if not 1 <= month <= 12:
        return None
    if kind == "month" and year is None and not groups.get("last"):
        if not _BEFORE_MONTH.search(text[: match.start()]):
            return None
    year = year or the_year
    if kind == "day":
        day = int(groups["day"])
        if year is None:
            last = held()
            year = last.year if (month, day) <= (last.month, last.day) else last.year - 1
        try:
            start = date(year, month, day)
        except ValueError:
            return None
        return start, start + timedelta(days=1)
    if year is None and groups.get("last"):  # "last May": the May before the latest one that has begun
        year = today.year if month < today.month else today.year - 1
    elif year is None:  # "in May": the latest May the memories can hold
        last = held()
        year = last.year if month <= last.month else last.year - 1
    start = date(year, month, 1)
    return start, _add_months(start, 1)


def _relative(which: str, today: date) -> tuple[date, date]:
    if which == "yesterday":
        return today - timedelta(days=1), today
    if which in ("today", "tonight"):
        return today, today + timedelta(days=1)
    last = which.startswith(("last", "past"))
    unit = which.split()[1]
    if unit in ("week", "weekend"):
        monday = today - timedelta(days=today.weekday())
        start = monday - timedelta(days=7) if last else monday
        return start, start + timedelta(days=7)
    if unit == "month":
        start = date(today.year, today.month, 1)
        start = _add_months(start, -1) if last else start
        return start, _add_months(start, 1)
    year = today.year - 1 if last else today.year
    return date(year, 1, 1), date(year + 1, 1, 1)


def _add_months(day: date, months: int) -> date:
    index = day.year * 12 + day.month - 1 + months
    return date(index // 12, index % 12 + 1, 1)
