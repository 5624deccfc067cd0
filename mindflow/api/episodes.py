"""The agent write path: episodes validated as inbox JSONL lines, appended to the being's inbox."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from filelock import Timeout

from mindflow.config import MAX_EPISODE_CHARS
from mindflow.errors import Conflict, MindflowError
from mindflow.files import append_lines
from mindflow.inbox import Deleted, inbox_lock, validate_being_id
from mindflow.ingest import REUSED_ID, parse_bytes
from mindflow.models import Episode, utcnow

LOCK_TIMEOUT_S = 30.0


class InvalidEpisodes(MindflowError):
    """Some episodes of a request break the inbox rules; none was written."""

    def __init__(self, problems: list[dict[str, Any]], total: int):
        self.problems = problems
        super().__init__(
            f"{len(problems)} of {total} episodes are invalid, so none was written: "
            + "; ".join(f"episodes[{p['index']}]: {p['reason']}" for p in problems[:5])
            + (" ..." if len(problems) > 5 else "")
        )


class InboxBusy(Exception):
    """Another writer held the inbox file too long; the request may be retried."""


@dataclass
class AppendReport:
    ids: list[str]
    heartbeats: int
    path: Path
    episodes: list = field(default_factory=list)  # the parsed episodes written (mindflow.models.Episode)


def api_file_name(now: datetime) -> str:
    return f"api-{now.date().isoformat()}.jsonl"


def _line(record: dict[str, Any], ascii_only: bool = False) -> str:
    return json.dumps(record, ensure_ascii=ascii_only, separators=(",", ":"))


def append_episodes(
    inbox: Path,
    being_id: str,
    episodes: list[dict[str, Any]],
    now: datetime | None = None,
    *,
    max_chars: int = MAX_EPISODE_CHARS,
    deleted: Deleted | None = None,
    known: Callable[[list[str]], dict[str, Episode]] | None = None,
) -> AppendReport:
    """Validate every episode with the inbox JSONL parser, then append them all or nothing.

    An episode without an id is written with the id the parser derived, so the
    ingestion of the file stores exactly the ids returned here. An episode `deleted` refuses (an id
    a permanent forget deleted, or a deleted text under any id, as ingestion refuses them) is
    refused (Conflict, naming the id, never the text): none is written. `known(ids)` gives the
    episodes already written under some of those ids: one with other text refuses the
    request (ingestion would quarantine the line), asked under the inbox lock so no
    other writer slips in between.
    """
    validate_being_id(being_id)
    file_name = api_file_name(now or utcnow())
    # json.dumps escapes newlines, so line i + 1 is episode i. Escaped to ASCII, a lone
    # surrogate the client sent reaches the parser, which names its field, instead of
    # failing to encode here; the lines written after validation hold none.
    data = "\n".join(_line(e, ascii_only=True) for e in episodes).encode("ascii")
    result = parse_bytes(data, file_name, being_id, "jsonl", max_chars=max_chars)
    if result.quarantined:
        problems = [{"index": q.line - 1, "reason": q.reason} for q in result.quarantined]
        raise InvalidEpisodes(problems, len(episodes))
    if deleted is not None and (gone := [e for e in result.episodes if deleted.refuses(e)]):
        first = gone[0]
        what = (
            f"episode {first.episode_id!r} of {being_id} was permanently forgotten"
            if first.episode_id in deleted.episode_ids
            else f"the text of episode {first.episode_id!r} of {being_id} was permanently forgotten"
        )
        raise Conflict(
            f"{what} and is never stored again; send the request without it "
            f"({len(gone)} such; none of the {len(episodes)} was written)"
        )
    parsed = {int(e.source_ref.rsplit(":", 1)[1]): e for e in result.episodes}
    lines, ids = [], []
    for index, record in enumerate(episodes):
        episode = parsed.get(index + 1)  # None for a heartbeat: written, counted at ingestion
        if episode is not None:
            record = {**record, "id": episode.episode_id}
            ids.append(episode.episode_id)
        lines.append(_line(record))
    path = inbox / being_id / file_name
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        with inbox_lock(inbox, being_id, timeout=LOCK_TIMEOUT_S):
            if known is not None:
                _refuse_reused(parsed, episodes, known)
            append_lines(path, ("\n".join(lines) + "\n").encode("utf-8"))
    except Timeout as exc:
        raise InboxBusy(f"the inbox file {file_name} of {being_id} is busy; retry shortly") from exc
    return AppendReport(ids=ids, heartbeats=result.heartbeats, path=path, episodes=list(result.episodes))


def _refuse_reused(parsed: dict[int, Episode], episodes: list[dict[str, Any]], known) -> None:
    """InvalidEpisodes naming each episode whose id was written before with other text.

    Only ids the client chose are looked up: a derived id hashes the text, so it cannot come
    with another. The same id with the same text is a retry: taken, and stored once."""
    chosen = {line: e for line, e in parsed.items() if "id" in episodes[line - 1]}
    if not chosen:
        return
    before = known(sorted({e.episode_id for e in chosen.values()}))
    problems = [
        {
            "index": line - 1,
            "reason": f"{REUSED_ID}: {e.episode_id!r} is at {before[e.episode_id].source_ref}",
        }
        for line, e in sorted(chosen.items())
        if e.episode_id in before and before[e.episode_id].text != e.text
    ]
    if problems:
        raise InvalidEpisodes(problems, len(episodes))
