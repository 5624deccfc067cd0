"""Parse landed files (inbox JSONL, OpenClaw transcripts, daily Markdown notes) into episodes."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

from mindflow.config import MAX_EPISODE_CHARS
from mindflow.errors import MindflowError
from mindflow.models import EPISODE_KINDS, TRIGGERS, Episode, ParseResult, QuarantinedLine, episode_hash_id

FORMATS = ("jsonl", "openclaw", "daily-md")

_ACCEPTED = (
    "accepted formats: jsonl (*.jsonl inbox lines), openclaw (*.jsonl session transcripts), "
    "daily-md (daily notes named YYYY-MM-DD.md)"
)

_DAILY_NAME = re.compile(r"^(\d{4})-(\d{2})-(\d{2})\.md$", re.IGNORECASE)

_OPENCLAW_TYPES = frozenset({"session", "message", "model_change", "thinking_level_change", "custom"})

# Keep-alive and liveness chatter: the OpenClaw heartbeat probe and its reply, the
# "nothing to say" token, bare ping/pong and explicit probes. Remembering these would
# fill memory with noise, so they are counted instead of stored.
_HEARTBEAT_PATTERNS = (
    re.compile(r"\bHEARTBEAT_OK[\s.!]*\Z"),
    re.compile(r"\A(?=.*HEARTBEAT\.md)(?=.*HEARTBEAT_OK)", re.DOTALL),
    re.compile(r"\ANO_REPLY[\s.!]*\Z"),
    re.compile(r"\A(?:ping|pong)[\s.!?]*\Z", re.IGNORECASE),
    re.compile(r"\A\[probe\]", re.IGNORECASE),
)

# Triggers count only in imperative form, i.e. at the start of a clause (after
# punctuation, "please" or a filler word), so "I remember when..." or "I don't
# remember where" are recollections, not instructions.
_LEAD = (
    r"(?:\A|[.!?;:,\n(\"“]|\bplease\b|\bpls\b)\s*"
    r"(?:(?:also|and|but|so|now|oh|hey|ok|okay|just|btw|please|pls)\b,?\s*)*"
)
_NOT = r"(?:don['’]?t|do\s+not)"
# A reflect phrase that is also an everyday verb ("review", "clean up", "consolidate") is
# an instruction to the memory only when the being's memory is its object ("review your
# memory", "clean up your notes", "consolidate memories") or when it is the whole turn
# ("Consolidate."). "Review my notes" is the user's own; "clean up the memory leak" or
# "review the memory usage" name a thing, so memory must end the object.
_MEMORY_OBJECT = (
    r"\s+(?:(?:all\s+(?:of\s+)?)?(?:(?:your|the)\s+)?memor(?:y|ies)|your\s+(?:notes|knowledge)"
    r"|what\s+you\s+(?:know|remember))\b"
    r"(?=\s*(?:\Z|[.,;:!?)\]\"”]|(?:of|about|from|for|on|in|with|since|and|please|now|today|tonight)\b))"
)
_TRIGGER_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "forget",
        re.compile(
            _LEAD
            + r"(?:forget\s+(?:that|this|about|what\s+i\s+(?:said|told|wrote|mentioned))\b"
            + rf"|{_NOT}\s+remember\b"
            # The rest of seed 001's forget phrases.
            r"|never\s*mind\b|disregard\b|scratch\s+that\b"
            r"|ignore\s+what\s+i\s+(?:said|told\s+you|wrote)\b"
            r"|remove\s+(?:this\s+|that\s+|it\s+)?from\s+(?:your\s+)?memory\b"
            r"|delete\s+(?:the|this|that)\s+memory\b)"
            # "That plan is no longer relevant": said of something, so anywhere in the turn.
            r"|\bno\s+longer\s+relevant\b|\bplease\s+forget\b",
            re.IGNORECASE,
        ),
    ),
    (
        "remember",
        re.compile(
            # "remember that time..." asks about the past, so it is excluded.
            _LEAD + r"(?:remember\s+(?:that|this)\b(?!\s+(?:time|day|night|one)\b)"
            rf"|remember\s*:|(?:{_NOT}|never)\s+forget\b|keep\s+in\s+mind\b"
            # The rest of seed 001's remember phrases.
            r"|note\s+that\b|important\s*:|save\s+this\b"
            # "Save this file" or "save this as a PDF" ask to keep something other than a memory.
            r"(?=\s*(?:\Z|[^\w\s]|for\s+(?:later|me|the\s+future)\b|(?:in|to)\s+(?:your\s+)?memory\b)))"
            r"|\bplease\s+remember\b|\bnote\s+to\s+self\b|\bfor\s+future\s+reference\b"
            r"|\bfyi\s+for\s+later\b",
            re.IGNORECASE,
        ),
    ),
    (
        "reflect",
        re.compile(
            _LEAD + r"(?:reflect\s+on\b|think\s+back\s+(?:on|to)\b"
            rf"|(?:consolidate|review|clean\s+up){_MEMORY_OBJECT})"
            r"|\A\s*(?:please\s+)?(?:consolidate|review|clean\s+up)\W*\Z"
            r"|\blet(?:['’]s|\s+us)\s+reflect\b"
            # The seed's search form of reflection: the subject follows "about".
            r"|\bwhat\s+do\s+you\s+remember\s+about\b",
            re.IGNORECASE,
        ),
    ),
)

# Daily-log tag words of the Gandalf design that are not memory types themselves, and the
# type each becomes (the word stays a tag). Any other word becomes a tag on a `message`.
SEED_KINDS = {
    "lesson": "fact", "learning": "fact", "insight": "fact", "context": "event", "note": "message",
    "todo": "task", "goal": "task", "plan": "task", "idea": "message", "mood": "emotion",
    "feeling": "emotion", "fix": "correction", "mistake": "correction", "meeting": "event",
    "milestone": "event", "person": "fact", "project": "fact",
}  # fmt: skip

_CONFIDENCE_WORDS = {"high": 0.9, "medium": 0.6, "med": 0.6, "low": 0.3}

_BULLET = re.compile(r"^\s*[-*]\s+\[([^\]]*)\]\s*(.*)$")
_HEADING2 = re.compile(r"^##(?!#)\s*(.*)$")
_HEADING1 = re.compile(r"^#(?!#)\s")
_ANY_HEADING = re.compile(r"^\s{0,3}#{1,6}(\s|$)")
_PLAIN_BULLET = re.compile(r"^\s*[-*+]\s+(\S.*)$")
_RULE = re.compile(r"^\s*([-*_=])(\s*\1){2,}\s*$")  # a thematic break (---, ***): structure
# Prose and untagged bullets of a daily log: notes with no tag block.
_PLAIN_NOTE: dict = {"kind": "message", "importance": None, "confidence": None, "tags": ()}
_TIME = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_TIME_LIKE = re.compile(r"^\d{1,2}:\d")
_KEY_VALUE = re.compile(r"^([a-z]+)\s*[:=]\s*(.*)$", re.IGNORECASE)

# Deeper lines are quarantined before json.loads sees them: it recurses once per level and
# raises RecursionError near the interpreter's limit, which depends on how deep the caller's
# stack already is (a sensor tick, an API worker), so the same line would pass in one place
# and crash another. No episode or transcript line needs more than a handful of levels.
MAX_JSON_DEPTH = 100
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_JSON_BRACKET = re.compile(r"[\[\]{}]")
# json.loads turns a `\udXXX` escape without its partner into a lone surrogate, which no
# UTF-8 writer (DuckDB, Arrow, hashlib, the response encoder) accepts. Lines decoded from
# UTF-8 can only carry one as such an escape, so only a line with a surrogate escape
# (emoji arrive as escaped pairs from many clients) has its parsed values walked.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_SURROGATE = re.compile(r"[\ud800-\udfff]")


REUSED_ID = "id already used with other text"


class _Reject(Exception):
    """A line that must be quarantined; the message is the reason."""


# --------------------------------------------------------------------------- helpers


def is_heartbeat(text: str) -> bool:
    """True for heartbeat probes/replies and other liveness chatter."""
    stripped = text.strip()
    return any(p.search(stripped) for p in _HEARTBEAT_PATTERNS)


# Every trigger pattern needs one of these words (single words: the patterns allow any
# whitespace between words); most texts have none.
_TRIGGER_WORDS = (
    "forget", "remember", "keep", "note", "reflect", "back", "never", "disregard", "scratch",
    "relevant", "ignore", "memory", "important", "reference", "save", "fyi", "consolidate",
    "review", "clean",
)  # fmt: skip
# re.IGNORECASE matches "i" and "s" to these, which str.lower() leaves apart.
_FOLD = str.maketrans({"\u0130": "i", "\u0131": "i", "\u017f": "s"})
_TRIGGER_SEARCH = re.compile(
    "|".join(f"(?P<{trigger}>{pattern.pattern})" for trigger, pattern in _TRIGGER_PATTERNS), re.IGNORECASE
).search


def detect_trigger(text: str, role: str | None = "user") -> str | None:
    """The explicit memory instruction in a user's turn: "remember", "forget", "reflect" or None.

    Only the user instructs the memory: an assistant (or the being's own daily notes) saying
    "please remember" is part of the conversation, not an instruction.
    """
    if role is None or role.lower() != "user":
        return None
    lowered = text.lower() if text.isascii() else text.translate(_FOLD).lower()
    if not any(word in lowered for word in _TRIGGER_WORDS):
        return None
    # With several instructions in one text the first one wins (at one place, the first
    # of forget, remember, reflect): one scan of the text for all three.
    found = _TRIGGER_SEARCH(text)
    return found.lastgroup if found else None


def parse_timestamp(value: Any) -> datetime:
    """Turn an ISO 8601 string or epoch number into a naive UTC datetime."""
    if isinstance(value, datetime):
        dt = value
    elif isinstance(value, bool):
        # bool is an int subclass; True is not a moment in time.
        raise ValueError(f"not a timestamp: {value!r}")
    elif isinstance(value, (int, float)):
        if not math.isfinite(value):
            raise ValueError(f"not a finite number: {value!r}")
        try:
            # Above 1e11 seconds is past year 5000, so such values must be milliseconds.
            delta = timedelta(milliseconds=value) if value > 1e11 else timedelta(seconds=value)
            dt = datetime(1970, 1, 1) + delta
        except OverflowError as exc:
            raise ValueError(f"epoch value out of range: {value!r}") from exc
    elif isinstance(value, str):
        s = value.strip()
        if not s:
            raise ValueError("empty timestamp")
        if s[-1] in "zZ":
            s = s[:-1] + "+00:00"
        try:
            dt = datetime.fromisoformat(s)
        except ValueError as exc:
            raise ValueError(f"not an ISO 8601 timestamp: {value!r}") from exc
    else:
        raise ValueError(f"not a timestamp: {value!r}")
    if dt.tzinfo is not None:
        try:
            dt = dt.astimezone(UTC).replace(tzinfo=None)
        except OverflowError as exc:
            raise ValueError(f"timestamp out of range: {value!r}") from exc
    if not 1970 <= dt.year <= 2100:
        raise ValueError(f"year {dt.year} outside 1970..2100: {value!r}")
    return dt


def _short(value: Any, limit: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _opt_str(value: Any) -> str | None:
    """A stripped non-empty string, or None; ints are accepted as ids often are numeric."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    return None


def _unit_float(value: Any, name: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        raise _Reject(f"{name} out of range: {_short(value)}")
    return float(value)


def _lines(data: bytes, file_name: str, result: ParseResult):
    """Yield (line number, decoded line) for non-blank lines; quarantine undecodable ones."""
    for index, raw in enumerate(data.split(b"\n")):
        line_no = index + 1
        if line_no == 1 and raw.startswith(b"\xef\xbb\xbf"):
            # Editors on Windows prepend a BOM; json.loads rejects it.
            raw = raw[3:]
        raw = raw.rstrip(b"\r")
        if not raw.strip():
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            reason = f"invalid UTF-8: byte 0x{raw[exc.start]:02x} at column {exc.start + 1}"
            result.quarantined.append(
                QuarantinedLine(file_name, line_no, reason, raw.decode("utf-8", errors="replace"))
            )
            continue
        yield line_no, line


def _json_depth(line: str) -> int:
    """How deep a JSON line's arrays and objects nest (brackets inside strings do not count)."""
    depth = deepest = 0
    for bracket in _JSON_BRACKET.findall(_JSON_STRING.sub("", line)):
        depth += 1 if bracket in "[{" else -1
        deepest = max(deepest, depth)
    return deepest


def _load_json(line: str) -> Any:
    """json.loads for one line, with what it cannot take (too deep, lone surrogates) rejected."""
    # Fewer brackets than the limit cannot nest deeper than it; most lines stop here.
    if line.count("[") + line.count("{") > MAX_JSON_DEPTH and _json_depth(line) > MAX_JSON_DEPTH:
        raise _Reject(f"line nested deeper than {MAX_JSON_DEPTH} levels")
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise _Reject(f"bad JSON: {exc.msg} at column {exc.colno}") from exc
    except RecursionError as exc:  # only when the caller's own stack is nearly exhausted
        raise _Reject(f"line nested deeper than {MAX_JSON_DEPTH} levels") from exc
    if _SURROGATE_ESCAPE.search(line):
        _reject_surrogates(value)
    return value


def _escaped(text: str) -> str:
    """Text safe to print and store: lone surrogates shown as their escape."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _reject_surrogates(value: Any) -> None:
    """Reject a parsed line holding a lone surrogate, naming the field it sits in.

    A field's path is spelled out only for the one rejected: a line of emoji is walked
    without building a string per field.
    """
    # Containers still to look into, each with its place as a (parent, key or index) chain.
    stack: list[tuple[tuple | None, Any]] = [(None, value)]
    while stack:
        at, item = stack.pop()
        if isinstance(item, str):  # only the line itself
            children: Any = ((None, item),)
        elif isinstance(item, dict):
            for key in item:
                if not key.isascii() and (found := _SURROGATE.search(key)):
                    raise _Reject(
                        f"field name {_escaped(_field_path((at, key)))!r} contains an unpaired surrogate "
                        f"{_escaped(found[0])} (half of a UTF-16 pair); send valid Unicode"
                    )
            children = item.items()
        else:
            children = enumerate(item) if isinstance(item, list) else ()
        for step, child in children:
            place = (at, step) if step is not None else at
            if isinstance(child, (dict, list)):
                stack.append((place, child))
            elif isinstance(child, str) and not child.isascii() and (found := _SURROGATE.search(child)):
                raise _Reject(
                    f"text contains an unpaired surrogate {_escaped(found[0])} at field "
                    f"{_escaped(_field_path(place) or 'line')!r} (half of a UTF-16 pair); send valid Unicode"
                )


def _field_path(at: tuple | None) -> str:
    """`message.content[0].text` from a (parent, key or index) chain."""
    steps: list[str | int] = []
    while at is not None:
        at, step = at
        steps.append(step)
    path = ""
    for step in reversed(steps):
        path += f"[{step}]" if isinstance(step, int) else f".{step}" if path else step
    return path


def _json_object(line: str) -> dict:
    record = _load_json(line)
    if not isinstance(record, dict):
        raise _Reject("not a JSON object")
    return record


def _checked_text(text: str, max_chars: int) -> str:
    if len(text) > max_chars:
        raise _Reject(
            f"text is {len(text):,} characters, over the {max_chars:,} limit (MINDFLOW_MAX_EPISODE_CHARS)"
        )
    return text


def _keep(
    result: ParseResult, episode: Episode, file_name: str, line_no: int, line: str, firsts: dict[str, Episode]
) -> None:
    """Add an episode, or quarantine it when an earlier line gave its id other text.

    Storing either text silently would lose the other one; an identical re-send stays
    an episode, counted as a duplicate when ingested.
    """
    first = firsts.setdefault(episode.episode_id, episode)
    if first.text != episode.text:
        reason = f"{REUSED_ID}: {_short(episode.episode_id)!r} at line {first.source_ref.rsplit(':', 1)[1]}"
        result.quarantined.append(QuarantinedLine(file_name, line_no, reason, line))
        return
    result.episodes.append(episode)


def _ts_field(value: Any) -> datetime:
    if value is None:
        raise _Reject("missing ts")
    try:
        return parse_timestamp(value)
    except ValueError as exc:
        raise _Reject(f"invalid timestamp: {_short(value)}") from exc


# --------------------------------------------------------------------------- formats


def _parse_jsonl(data: bytes, file_name: str, being_id: str, result: ParseResult, max_chars: int) -> None:
    firsts: dict[str, Episode] = {}
    for line_no, line in _lines(data, file_name, result):
        try:
            episode = _jsonl_record(_json_object(line), being_id, file_name, line_no, result, max_chars)
        except _Reject as reject:
            result.quarantined.append(QuarantinedLine(file_name, line_no, str(reject), line))
            continue
        if episode is not None:
            _keep(result, episode, file_name, line_no, line, firsts)


def _jsonl_record(
    rec: dict, being_id: str, file_name: str, line_no: int, result: ParseResult, max_chars: int
) -> Episode | None:
    text = rec.get("text")
    if text is None:
        raise _Reject("missing text")
    if not isinstance(text, str):
        raise _Reject("text is not a string")
    text = _checked_text(text.strip(), max_chars)
    if not text:
        raise _Reject("missing text")
    # Checked before the other fields so that a malformed heartbeat is not reported.
    if is_heartbeat(text):
        result.heartbeats += 1
        return None
    ts = _ts_field(rec.get("ts"))
    kind = rec.get("kind")
    if kind is None:
        kind = "message"
    if not isinstance(kind, str) or kind not in EPISODE_KINDS:
        raise _Reject(f"unknown kind: {_short(kind)}")
    importance = _unit_float(rec.get("importance"), "importance")
    confidence = _unit_float(rec.get("confidence"), "confidence")
    tags = rec.get("tags")
    if tags is None:
        tags = []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise _Reject("tags must be a list of strings")
    given_role = _opt_str(rec.get("role"))
    speaker = _opt_str(rec.get("speaker")) or given_role or "unknown"
    client_id = _opt_str(rec.get("id"))
    trigger = rec.get("trigger")
    if trigger is not None and trigger not in TRIGGERS:
        raise _Reject(f"unknown trigger: {_short(trigger)} (use remember, forget or reflect)")
    return Episode(
        episode_id=client_id or episode_hash_id(being_id, ts, speaker, text),
        being_id=being_id,
        ts=ts,
        speaker=speaker,
        role=given_role or "user",
        text=text,
        session_id=_opt_str(rec.get("session_id")),
        kind=kind,
        confidence=confidence,
        tags=tuple(t.strip() for t in tags if t.strip()),
        importance=importance,
        source=_opt_str(rec.get("source")),
        source_ref=f"{file_name}:{line_no}",
        format="jsonl",
        # An explicit instruction (the `remember` tool) holds whoever speaks.
        trigger=trigger or detect_trigger(text, given_role or "user"),
    )


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content.strip()
    if isinstance(content, list):
        # Tool calls, thinking and images are not things the being said.
        parts = [
            p["text"]
            for p in content
            if isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        return "\n".join(parts).strip()
    return ""


def _parse_openclaw(data: bytes, file_name: str, being_id: str, result: ParseResult, max_chars: int) -> None:
    records: list[tuple[int, str, dict]] = []
    for line_no, line in _lines(data, file_name, result):
        try:
            records.append((line_no, line, _json_object(line)))
        except _Reject as reject:
            result.quarantined.append(QuarantinedLine(file_name, line_no, str(reject), line))
    # The header normally comes first, but it names the whole file's session wherever it is.
    session_id = (
        next(
            (
                _opt_str(rec.get("id"))
                for _, _, rec in records
                if rec.get("type") == "session" and _opt_str(rec.get("id"))
            ),
            None,
        )
        or Path(file_name).stem
    )
    firsts: dict[str, Episode] = {}
    for line_no, line, rec in records:
        try:
            episode = _openclaw_record(rec, being_id, session_id, file_name, line_no, result, max_chars)
        except _Reject as reject:
            result.quarantined.append(QuarantinedLine(file_name, line_no, str(reject), line))
            continue
        if episode is not None:
            _keep(result, episode, file_name, line_no, line, firsts)
    result.quarantined.sort(key=lambda q: q.line)


def _openclaw_record(
    rec: dict,
    being_id: str,
    session_id: str,
    file_name: str,
    line_no: int,
    result: ParseResult,
    max_chars: int,
) -> Episode | None:
    if isinstance(rec.get("message"), dict):
        msg = rec["message"]
    elif "message" in rec and rec.get("type") == "message":
        raise _Reject(f"a message record whose `message` is not an object: {_short(rec['message'])}")
    elif "type" not in rec or rec.get("type") == "message":
        msg = rec
    else:
        return None  # the session header, model changes, custom records: nothing anyone said
    role = msg.get("role")
    if role is None and rec.get("type") == "message":
        raise _Reject("a message record without a `role`")
    if role not in ("user", "assistant"):
        return None  # tool results, system prompts
    content = msg.get("content")
    if content is not None and not isinstance(content, (str, list)):
        raise _Reject(f"`content` is neither text nor a list of parts: {_short(content)}")
    text = _checked_text(_content_text(content), max_chars)
    if not text:
        return None
    if is_heartbeat(text):
        result.heartbeats += 1
        return None
    ts_value = rec.get("timestamp")
    if ts_value is None:
        ts_value = msg.get("timestamp")
    ts = _ts_field(ts_value)
    speaker = "user" if role == "user" else being_id
    message_id = _opt_str(rec.get("id")) or _opt_str(msg.get("id"))
    return Episode(
        episode_id=message_id or episode_hash_id(being_id, ts, speaker, text),
        being_id=being_id,
        ts=ts,
        speaker=speaker,
        role=role,
        text=text,
        session_id=session_id,
        source_ref=f"{file_name}:{line_no}",
        format="openclaw",
        trigger=detect_trigger(text, role),
    )


def _daily_date(file_name: str) -> date:
    m = _DAILY_NAME.match(Path(file_name).name)
    try:
        if m:
            return date(int(m[1]), int(m[2]), int(m[3]))
    except ValueError:
        pass
    raise MindflowError(
        f"cannot read {_escaped(Path(file_name).name)} as daily notes: the name must be a real date "
        f"like 2026-01-05.md; rename the file"
    )


def _entry_fields(parts: list[str]) -> dict:
    """Kind, importance, confidence and tags from the `|`-separated parts of a tag block."""
    fields: dict[str, Any] = {"kind": None, "importance": None, "confidence": None, "tags": ()}
    for part in (p.strip() for p in parts):
        if not part:
            continue
        kv = _KEY_VALUE.match(part)
        key = kv[1].lower() if kv else None
        value = kv[2].strip() if kv else ""
        if key in ("i", "importance"):
            try:
                number = float(value)
            except ValueError:
                raise _Reject(f"importance out of range: {value}") from None
            fields["importance"] = _unit_float(number, "importance")
        elif key == "confidence":
            if value.lower() in _CONFIDENCE_WORDS:
                fields["confidence"] = _CONFIDENCE_WORDS[value.lower()]
            else:
                try:
                    number = float(value)
                except ValueError:
                    raise _Reject(f"confidence out of range: {value}") from None
                fields["confidence"] = _unit_float(number, "confidence")
        elif key == "tags":
            listed = (t.strip() for t in value.strip("[]").split(","))
            fields["tags"] = (*fields["tags"], *(t for t in listed if t))
        else:
            word = " ".join((value if key == "kind" else part).lower().split())
            if word in EPISODE_KINDS:
                if fields["kind"] not in (None, word):
                    raise _Reject(f"more than one kind: {fields['kind']}, {word}")
                fields["kind"] = word
            else:
                # Any other tag word is kept as a tag; the seed's own kinds also choose the type.
                fields["tags"] = (*fields["tags"], word)
    seed_kinds = [SEED_KINDS[t] for t in fields["tags"] if t in SEED_KINDS]
    fields["kind"] = fields["kind"] or (seed_kinds[0] if seed_kinds else "message")
    return fields


def _parse_daily_md(data: bytes, file_name: str, being_id: str, result: ParseResult, max_chars: int) -> None:
    midnight = datetime.combine(_daily_date(file_name), datetime.min.time())

    # A bullet's id comes from its day and text (and which repeat of that text on the day it
    # is), never its line number: a line written above it later must not make it a new
    # episode when the edited file lands again. Its time still keeps the file's order.
    repeats: Counter[str] = Counter()

    def bullet_id(text: str) -> str:
        repeat = repeats[text]
        repeats[text] += 1
        return episode_hash_id(being_id, midnight, being_id, text if not repeat else f"{text}\x1f{repeat}")

    def emit(line_no: int, ts: datetime, text: str, fields: dict, episode_id: str | None = None) -> None:
        if is_heartbeat(text):
            result.heartbeats += 1
            return
        result.episodes.append(
            Episode(
                episode_id=episode_id or episode_hash_id(being_id, ts, being_id, text),
                being_id=being_id,
                ts=ts,
                speaker=being_id,
                role="assistant",
                text=text,
                kind=fields["kind"],
                confidence=fields["confidence"],
                tags=fields["tags"],
                importance=fields["importance"],
                source_ref=f"{file_name}:{line_no}",
                format="daily-md",
                # The being's own notes: triggers come only from the user's turns.
                trigger=detect_trigger(text, "assistant"),
            )
        )

    # The open headed entry: (line number, raw heading, ts, fields, body lines), or a
    # rejected heading whose body must still be swallowed, marked by fields None.
    entry: list | None = None

    def close_entry() -> None:
        nonlocal entry
        if entry is not None and entry[3] is not None:
            line_no, raw, ts, fields, body = entry
            text = "\n".join(b.strip() for b in body if b.strip())
            try:
                if not _checked_text(text, max_chars):
                    raise _Reject("empty body")
            except _Reject as reject:
                result.quarantined.append(QuarantinedLine(file_name, line_no, str(reject), raw))
            else:
                emit(line_no, ts, text, fields)
        entry = None

    # The open paragraph of prose outside any entry: [first line number, texts, lines]. Nothing of a
    # daily log is lost: prose and untagged bullets are notes of their own (kind message).
    paragraph: list | None = None

    def close_paragraph() -> None:
        nonlocal paragraph
        if paragraph is not None:
            line_no, body, raw = paragraph
            text = "\n".join(b.strip() for b in body)
            try:
                _checked_text(text, max_chars)
            except _Reject as reject:
                result.quarantined.append(QuarantinedLine(file_name, line_no, str(reject), "\n".join(raw)))
            else:
                emit(line_no, midnight + timedelta(seconds=line_no), text, _PLAIN_NOTE, bullet_id(text))
        paragraph = None

    for line_no, line in _lines(data, file_name, result):
        if paragraph is not None and line_no != paragraph[0] + len(paragraph[2]):
            close_paragraph()  # a blank (or undecodable) line ends a paragraph
        bullet = _BULLET.match(line)
        # "- [ ]" and "- [x]" are Markdown checkboxes, not tag blocks.
        if bullet and bullet[1].strip().lower() not in ("", "x"):
            close_paragraph()
            close_entry()
            try:
                fields = _entry_fields(bullet[1].split("|"))
                text = _checked_text(bullet[2].strip(), max_chars)
                if not text:
                    raise _Reject("missing text")
            except _Reject as reject:
                result.quarantined.append(QuarantinedLine(file_name, line_no, str(reject), line))
                continue
            # One second per line keeps bullets ordered.
            emit(line_no, midnight + timedelta(seconds=line_no), text, fields, bullet_id(text))
            continue
        heading = _HEADING2.match(line)
        if heading:
            close_paragraph()
            close_entry()
            parts = heading[1].split("|")
            head = parts[0].strip()
            # "## Notes" is an ordinary section heading; only time-stamped ones are entries.
            if "|" not in heading[1] and not _TIME_LIKE.match(head):
                continue
            try:
                t = _TIME.match(head)
                if not t or int(t[1]) > 23 or int(t[2]) > 59 or int(t[3] or 0) > 59:
                    raise _Reject(f"invalid time: {head}")
                clock = timedelta(hours=int(t[1]), minutes=int(t[2]), seconds=int(t[3] or 0))
                ts = midnight + clock
                entry = [line_no, line, ts, _entry_fields(parts[1:]), []]
            except _Reject as reject:
                result.quarantined.append(QuarantinedLine(file_name, line_no, str(reject), line))
                entry = [line_no, line, None, None, []]
            continue
        if _HEADING1.match(line):
            close_paragraph()
            close_entry()
            continue
        if entry is not None:
            entry[4].append(line)
        elif _ANY_HEADING.match(line) or _RULE.match(line):
            close_paragraph()  # a section title or a rule outside an entry: structure, not a note
        elif _PLAIN_BULLET.match(line):
            close_paragraph()  # an untagged bullet (a checkbox too) is a note of its own
            paragraph = [line_no, [_PLAIN_BULLET.match(line)[1]], [line]]
            close_paragraph()
        elif paragraph is None:
            paragraph = [line_no, [line], [line]]
        else:
            paragraph[1].append(line)
            paragraph[2].append(line)
    close_paragraph()
    close_entry()
    result.quarantined.sort(key=lambda q: q.line)


_PARSERS = {"jsonl": _parse_jsonl, "openclaw": _parse_openclaw, "daily-md": _parse_daily_md}


# --------------------------------------------------------------------------- public entry points


def detect_format(path: Path, name: str | None = None) -> str:
    """Pick the parser for a landed file from its name and, for JSONL, its first record.

    `name` is the name the file lands under, when that differs from the path's.
    """
    path = Path(path)
    name = name or path.name
    suffix = Path(name).suffix.lower()
    if suffix == ".md":
        _daily_date(name)
        return "daily-md"
    if suffix != ".jsonl":
        raise MindflowError(f"cannot ingest {_escaped(name)}: unsupported file type; {_ACCEPTED}")
    try:
        with path.open("rb") as fh:
            for raw in fh:
                try:
                    record = _load_json(raw.decode("utf-8-sig"))
                except (UnicodeDecodeError, _Reject):
                    continue
                if isinstance(record, dict) and (
                    record.get("type") in _OPENCLAW_TYPES or isinstance(record.get("message"), dict)
                ):
                    return "openclaw"
                return "jsonl"
    except OSError as exc:
        raise MindflowError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return "jsonl"


def parse_bytes(
    data: bytes, file_name: str, being_id: str, fmt: str, *, max_chars: int = MAX_EPISODE_CHARS
) -> ParseResult:
    """Parse a file's bytes; bad lines are quarantined, never fatal.

    An episode text over `max_chars` is a bad line: recall returns whole texts, so one
    pasted log would otherwise fill every agent context it is recalled into.
    """
    if fmt not in _PARSERS:
        raise MindflowError(f"unknown format {fmt!r}; {_ACCEPTED}")
    result = ParseResult()
    _PARSERS[fmt](data, file_name, being_id, result, max_chars)
    return result


def parse_file(path: Path, being_id: str, fmt: str | None = None) -> ParseResult:
    """Parse one landed file, detecting its format when none is given."""
    path = Path(path)
    if fmt is None:
        fmt = detect_format(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise MindflowError(f"cannot read {path}: {exc.strerror or exc}") from exc
    return parse_bytes(data, path.name, being_id, fmt)
