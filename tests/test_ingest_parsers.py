"""Tests for mindflow.ingest: the three landed-file parsers and their helpers."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from mindflow.errors import MindflowError
from mindflow.ingest import (
    FORMATS,
    detect_format,
    detect_trigger,
    is_heartbeat,
    parse_bytes,
    parse_file,
    parse_timestamp,
)
from mindflow.models import episode_hash_id

BEING = "mia"
PROBE = (
    "Read HEARTBEAT.md if it exists (workspace context). Follow it strictly. Do not infer "
    "or repeat old tasks from prior chats. If nothing needs attention, reply HEARTBEAT_OK."
)


def write_lines(path: Path, lines: list) -> Path:
    """Write dicts as JSON lines and strings verbatim."""
    body = "\n".join(line if isinstance(line, str) else json.dumps(line) for line in lines)
    path.write_text(body + "\n", encoding="utf-8")
    return path


def reasons(result) -> list[tuple[int, str]]:
    return [(q.line, q.reason) for q in result.quarantined]


# --------------------------------------------------------------------------- jsonl


def test_jsonl_realistic_file(tmp_path):
    path = write_lines(
        tmp_path / "inbox-2026-01-05.jsonl",
        [
            {
                "id": "c-1",
                "ts": "2026-01-05T09:00:00Z",
                "speaker": "sam",
                "role": "user",
                "text": "  I moved to Oslo last week.  ",
                "session_id": "s-42",
                "kind": "fact",
                "tags": ["home", "oslo"],
                "importance": 0.8,
                "confidence": 1,
                "source": "telegram",
            },
            "",
            {"ts": 1767603660, "role": "assistant", "text": "Noted, welcome to Oslo!"},
            {"ts": "2026-01-05T09:02:00", "text": "Remember that I'm vegan"},
        ],
    )
    result = parse_file(path, BEING)
    assert result.quarantined == []
    assert result.heartbeats == 0
    first, second, third = result.episodes

    assert first.episode_id == "c-1"
    assert first.being_id == BEING
    assert first.ts == datetime(2026, 1, 5, 9, 0, 0)
    assert (first.speaker, first.role, first.text) == ("sam", "user", "I moved to Oslo last week.")
    assert first.session_id == "s-42"
    assert first.kind == "fact"
    assert first.tags == ("home", "oslo")
    assert first.importance == 0.8
    assert first.confidence == 1.0 and isinstance(first.confidence, float)
    assert first.source == "telegram"
    assert first.source_ref == "inbox-2026-01-05.jsonl:1"
    assert first.format == "jsonl"
    assert first.trigger is None

    # speaker falls back to role; kind to "message"; no client id means a hash id.
    assert (second.speaker, second.role, second.kind) == ("assistant", "assistant", "message")
    assert second.ts == datetime(2026, 1, 5, 9, 1, 0)
    assert second.source_ref == "inbox-2026-01-05.jsonl:3"
    assert second.episode_id == episode_hash_id(BEING, second.ts, "assistant", second.text)
    assert second.tags == () and second.importance is None and second.confidence is None
    assert second.session_id is None and second.source is None

    # Neither speaker nor role: speaker "unknown", role "user".
    assert (third.speaker, third.role) == ("unknown", "user")
    assert third.trigger == "remember"


def test_jsonl_every_quarantine_reason_keeps_good_lines(tmp_path):
    good = {"ts": "2026-01-05T09:00:00Z", "text": "fine"}
    lines = [
        {**good, "text": "good one"},  # 1
        '{"ts": "2026-01-05T09:00:00Z", "text": ',  # 2
        "[1, 2, 3]",  # 3
        {"ts": "2026-01-05T09:00:00Z"},  # 4
        {"ts": "2026-01-05T09:00:00Z", "text": "   "},  # 5
        {"ts": "2026-01-05T09:00:00Z", "text": 42},  # 6
        {"ts": "yesterday", "text": "x"},  # 7
        {"text": "no time"},  # 8
        {**good, "kind": "gossip"},  # 9
        {**good, "importance": 1.5},  # 10
        {**good, "confidence": -0.1},  # 11
        {**good, "tags": "a,b"},  # 12
        {**good, "tags": ["a", 3]},  # 13
        {**good, "text": "good two"},  # 14
        {"ts": "1969-07-20T20:17:00Z", "text": "moon"},  # 15
        {**good, "importance": "high"},  # 16
        {**good, "kind": ["fact"]},  # 17
        {**good, "text": "good three"},  # 18
    ]
    result = parse_file(write_lines(tmp_path / "inbox.jsonl", lines), BEING, "jsonl")
    got = reasons(result)
    assert got[0][0] == 2 and got[0][1].startswith("bad JSON: ")
    assert got[1:] == [
        (3, "not a JSON object"),
        (4, "missing text"),
        (5, "missing text"),
        (6, "text is not a string"),
        (7, "invalid timestamp: yesterday"),
        (8, "missing ts"),
        (9, "unknown kind: gossip"),
        (10, "importance out of range: 1.5"),
        (11, "confidence out of range: -0.1"),
        (12, "tags must be a list of strings"),
        (13, "tags must be a list of strings"),
        (15, "invalid timestamp: 1969-07-20T20:17:00Z"),
        (16, "importance out of range: high"),
        (17, 'unknown kind: ["fact"]'),
    ]
    assert [e.text for e in result.episodes] == ["good one", "good two", "good three"]
    assert [e.source_ref for e in result.episodes] == ["inbox.jsonl:1", "inbox.jsonl:14", "inbox.jsonl:18"]
    bad = result.quarantined[0]
    assert bad.file == "inbox.jsonl"
    assert bad.raw == '{"ts": "2026-01-05T09:00:00Z", "text": '


def test_jsonl_invalid_utf8_in_the_middle(tmp_path):
    ok1 = json.dumps({"ts": "2026-01-05T09:00:00Z", "text": "before"}).encode()
    bad = b'{"ts": "2026-01-05T09:01:00Z", "text": "caf\xe9 au lait"}'
    ok2 = json.dumps({"ts": "2026-01-05T09:02:00Z", "text": "after, café"}, ensure_ascii=False).encode()
    path = tmp_path / "inbox.jsonl"
    path.write_bytes(b"\n".join([ok1, b"", bad, ok2]) + b"\n")
    result = parse_file(path, BEING)
    assert [e.text for e in result.episodes] == ["before", "after, café"]
    assert [e.source_ref for e in result.episodes] == ["inbox.jsonl:1", "inbox.jsonl:4"]
    (q,) = result.quarantined
    assert q.line == 3
    assert q.reason.startswith("invalid UTF-8: ")
    assert q.raw == '{"ts": "2026-01-05T09:01:00Z", "text": "caf\ufffd au lait"}'


def test_jsonl_crlf_bom_and_blank_lines(tmp_path):
    path = tmp_path / "inbox.jsonl"
    path.write_bytes(
        b'\xef\xbb\xbf{"ts": "2026-01-05T09:00:00Z", "text": "one"}\r\n'
        b"   \r\n"
        b"\r\n"
        b'{"ts": "2026-01-05T09:00:01Z", "text": "two"}\r\n'
    )
    result = parse_file(path, BEING)
    assert result.quarantined == []
    assert [(e.text, e.source_ref) for e in result.episodes] == [
        ("one", "inbox.jsonl:1"),
        ("two", "inbox.jsonl:4"),
    ]


def test_jsonl_heartbeats_are_counted_not_stored(tmp_path):
    ts = "2026-01-05T09:00:00Z"
    lines = [
        {"ts": ts, "role": "user", "text": PROBE},
        {"ts": ts, "role": "assistant", "text": "HEARTBEAT_OK"},
        {"ts": ts, "text": "ping"},
        {"ts": ts, "text": "NO_REPLY"},
        {"ts": ts, "text": "[probe] are you alive?"},
        # A heartbeat with a broken timestamp is still just a heartbeat.
        {"ts": "garbage", "text": "pong"},
        {"ts": ts, "text": "ping me when the build is done"},
    ]
    result = parse_file(write_lines(tmp_path / "inbox.jsonl", lines), BEING)
    assert result.heartbeats == 6
    assert result.quarantined == []
    assert [e.text for e in result.episodes] == ["ping me when the build is done"]


# --------------------------------------------------------------------------- openclaw


def oc_message(msg_id, ts, role, content, **extra) -> dict:
    """One OpenClaw `message` record; msg_id None leaves the id out."""
    record = {"type": "message", "timestamp": ts, "message": {"role": role, "content": content}}
    if msg_id is not None:
        record["id"] = msg_id
    return {**record, **extra}


def text_part(text: str) -> dict:
    return {"type": "text", "text": text}


def openclaw_session() -> list:
    t0 = "2026-01-05T09:00:00Z"
    return [
        {"type": "session", "version": 3, "id": "s1", "timestamp": t0, "cwd": "/home/mia"},
        {"type": "model_change", "id": "c1", "timestamp": t0, "provider": "x", "modelId": "y"},
        {"type": "thinking_level_change", "id": "c2", "timestamp": t0, "thinkingLevel": "low"},
        oc_message(
            "m1",
            "2026-01-05T09:00:03.120Z",
            "user",
            [text_part("Remember that my sister is Ana.")],
            parentId=None,
        ),
        oc_message(
            "m2",
            "2026-01-05T09:00:05Z",
            "assistant",
            [
                {"type": "thinking", "thinking": "store this"},
                text_part("Got it."),
                {"type": "toolCall", "id": "t1", "name": "memory_write", "arguments": {"k": "v"}},
                text_part("Ana is your sister."),
            ],
            parentId="m1",
        ),
        oc_message("m3", "2026-01-05T09:00:06Z", "toolResult", [text_part("ok")], parentId="m2"),
        oc_message(
            "m4", "2026-01-05T09:00:07Z", "assistant", [{"type": "toolCall", "id": "t2", "name": "ls"}]
        ),
        oc_message("m5", "2026-01-05T09:30:00Z", "user", PROBE),
        oc_message("m6", "2026-01-05T09:30:02Z", "assistant", [text_part("HEARTBEAT_OK")]),
        {"type": "custom", "customType": "note", "data": {"x": 1}, "timestamp": t0},
        oc_message("m7", "2026-01-05T10:00:00+01:00", "system", "You are Mia."),
        oc_message(
            None, "2026-01-05T09:40:00Z", "user", [{"type": "image", "data": "..."}, text_part("look")]
        ),
    ]


def test_openclaw_realistic_session(tmp_path):
    path = write_lines(tmp_path / "0193-abc.jsonl", openclaw_session())
    assert detect_format(path) == "openclaw"
    result = parse_file(path, BEING)
    assert result.quarantined == []
    assert result.heartbeats == 2
    user, assistant, image_msg = result.episodes

    assert user.episode_id == "m1"
    assert user.ts == datetime(2026, 1, 5, 9, 0, 3, 120000)
    assert (user.speaker, user.role) == ("user", "user")
    assert user.text == "Remember that my sister is Ana."
    assert user.trigger == "remember"
    assert user.session_id == "s1"
    assert user.format == "openclaw"
    assert user.kind == "message"
    assert user.source_ref == "0193-abc.jsonl:4"

    # Thinking and tool calls are dropped; text parts are joined with a newline.
    assert (assistant.speaker, assistant.role) == (BEING, "assistant")
    assert assistant.text == "Got it.\nAna is your sister."
    assert assistant.episode_id == "m2"
    assert assistant.trigger is None

    assert image_msg.text == "look"
    assert image_msg.episode_id == episode_hash_id(BEING, image_msg.ts, "user", "look")
    assert image_msg.source_ref == "0193-abc.jsonl:12"


def test_openclaw_simple_lines_without_header_use_file_stem(tmp_path):
    lines = [
        {"role": "user", "content": "What's my sister's name?", "timestamp": 1767603600000},
        {"role": "assistant", "content": "Ana.", "timestamp": "2026-01-05T09:00:02Z", "id": "a-1"},
        {"role": "tool", "content": "irrelevant", "timestamp": "2026-01-05T09:00:03Z"},
    ]
    data = "\n".join(json.dumps(x) for x in lines).encode()
    result = parse_bytes(data, "chat-77.jsonl", BEING, "openclaw")
    assert result.quarantined == []
    q, a = result.episodes
    assert q.ts == datetime(2026, 1, 5, 9, 0, 0)
    assert (q.speaker, q.text, q.session_id) == ("user", "What's my sister's name?", "chat-77")
    assert (a.speaker, a.episode_id, a.session_id) == (BEING, "a-1", "chat-77")


def test_openclaw_header_after_messages_still_names_session(tmp_path):
    lines = [
        oc_message("m1", "2026-01-05T09:00:00Z", "user", "hi there"),
        {"type": "session", "id": "late-header", "timestamp": "2026-01-05T08:59:59Z"},
    ]
    result = parse_file(write_lines(tmp_path / "x.jsonl", lines), BEING, "openclaw")
    assert [e.session_id for e in result.episodes] == ["late-header"]


def test_openclaw_quarantines_bad_lines_and_keeps_the_rest(tmp_path):
    session = openclaw_session()
    latin1 = oc_message("u8", "2026-01-05T09:00:04Z", "user", "na\xefve")
    no_ts = {"role": "user", "content": "when?"}
    parts = [json.dumps(x).encode() for x in session[:4]]
    parts += [
        b"{not json",  # line 5
        json.dumps(oc_message("bad-ts", "not a time", "user", "hello")).encode(),  # 6
        json.dumps(latin1, ensure_ascii=False).encode("latin-1"),  # 7
        b'"just a string"',  # 8
        json.dumps({"type": "message", "id": "no-ts", "message": no_ts}).encode(),  # 9
        # Skipped record types are never quarantined, even with a broken timestamp.
        json.dumps({"type": "model_change", "timestamp": "garbage"}).encode(),  # 10
        json.dumps(session[4]).encode(),  # 11
    ]
    path = tmp_path / "s1.jsonl"
    path.write_bytes(b"\n".join(parts))
    result = parse_file(path, BEING)
    got = reasons(result)
    assert [line for line, _ in got] == [5, 6, 7, 8, 9]
    assert got[0][1].startswith("bad JSON: ")
    assert got[1][1] == "invalid timestamp: not a time"
    assert got[2][1].startswith("invalid UTF-8: ")
    assert got[3][1] == "not a JSON object"
    assert got[4][1] == "missing ts"
    assert [e.episode_id for e in result.episodes] == ["m1", "m2"]
    assert [e.source_ref for e in result.episodes] == ["s1.jsonl:4", "s1.jsonl:11"]


# --------------------------------------------------------------------------- daily-md

DAILY = """\
# Daily notes for Jan 5

Some loose prose that is not under any heading.
- [decision|i=0.9] Move the weekly sync to Thursdays.
- [fact] Sam's sister is called Ana.
- [i=0.3] Tried the new ramen place.
- plain bullet without tags is a note too
- [ ] an unchecked box is one as well

## 14:30 | decision | confidence:high | tags:[work, planning]
We decided to ship v2 on Friday.
  Risk: the migration.

## 09:15 | tags:[health] | importance:0.8 | confidence:0.5 | preference
Sam prefers morning runs.
## 18:00
Remember that the gym closes at 9.
- [task] Book a dentist appointment.
Text after a bullet belongs to no entry: a note of its own.
## Notes
Free-form notes under a plain section heading are notes too.
"""


def test_daily_md_bullets_and_headed_entries(tmp_path):
    path = tmp_path / "2026-01-05.md"
    path.write_text(DAILY, encoding="utf-8")
    assert detect_format(path) == "daily-md"
    result = parse_file(path, BEING)
    assert result.quarantined == []
    eps = {e.source_ref: e for e in result.episodes}
    assert list(eps) == [
        "2026-01-05.md:3",
        "2026-01-05.md:4",
        "2026-01-05.md:5",
        "2026-01-05.md:6",
        "2026-01-05.md:7",
        "2026-01-05.md:8",
        "2026-01-05.md:10",
        "2026-01-05.md:14",
        "2026-01-05.md:16",
        "2026-01-05.md:18",
        "2026-01-05.md:19",
        "2026-01-05.md:21",
    ]
    # Nothing is lost: prose and untagged bullets outside a timed entry are message notes.
    assert [(eps[f"2026-01-05.md:{n}"].kind, eps[f"2026-01-05.md:{n}"].text) for n in (3, 7, 8, 19, 21)] == [
        ("message", "Some loose prose that is not under any heading."),
        ("message", "plain bullet without tags is a note too"),
        ("message", "[ ] an unchecked box is one as well"),
        ("message", "Text after a bullet belongs to no entry: a note of its own."),
        ("message", "Free-form notes under a plain section heading are notes too."),
    ]

    decision = eps["2026-01-05.md:4"]
    assert (decision.kind, decision.importance, decision.text) == (
        "decision",
        0.9,
        "Move the weekly sync to Thursdays.",
    )
    assert decision.ts == datetime(2026, 1, 5, 0, 0, 4)
    assert (decision.speaker, decision.role, decision.format) == (BEING, "assistant", "daily-md")
    # A bullet's id follows its day and text, not its line (the time keeps the order).
    assert decision.episode_id == episode_hash_id(BEING, datetime(2026, 1, 5), BEING, decision.text)

    fact = eps["2026-01-05.md:5"]
    assert (fact.kind, fact.importance, fact.ts) == ("fact", None, datetime(2026, 1, 5, 0, 0, 5))
    ramen = eps["2026-01-05.md:6"]
    assert (ramen.kind, ramen.importance) == ("message", 0.3)

    ship = eps["2026-01-05.md:10"]
    assert ship.ts == datetime(2026, 1, 5, 14, 30)
    assert ship.kind == "decision"
    assert ship.confidence == 0.9
    assert ship.tags == ("work", "planning")
    assert ship.text == "We decided to ship v2 on Friday.\nRisk: the migration."

    run = eps["2026-01-05.md:14"]
    assert (run.kind, run.importance, run.confidence, run.tags) == ("preference", 0.8, 0.5, ("health",))
    assert run.ts == datetime(2026, 1, 5, 9, 15)

    gym = eps["2026-01-05.md:16"]
    # The being's own notes: triggers come only from the user's turns.
    assert (gym.kind, gym.text, gym.trigger) == ("message", "Remember that the gym closes at 9.", None)
    assert eps["2026-01-05.md:18"].kind == "task"


def test_daily_md_confidence_words():
    text = "## 08:00 | confidence:medium\nA.\n## 08:05 | confidence:low\nB.\n## 08:10 | i=0.2\nC.\n"
    result = parse_bytes(text.encode(), "2026-01-05.md", BEING, "daily-md")
    assert [(e.confidence, e.importance) for e in result.episodes] == [(0.6, None), (0.3, None), (None, 0.2)]


def test_daily_md_quarantine_reasons_keep_good_lines():
    text = "\n".join(
        [
            "# 2026-01-05",  # 1
            "- [gossip] Heard a rumour.",  # 2
            "- [decision|i=1.7] Too important.",  # 3
            "- [fact] Good bullet.",  # 4
            "## 25:99 | decision",  # 5
            "This body belongs to a rejected heading.",  # 6
            "## 10:00 | fact",  # 7
            "",  # 8
            "## 11:00 | fact | confidence:sure",  # 9
            "Body.",  # 10
            "## 12:00 | mood:happy",  # 11
            "Body.",  # 12
            "- [fact|decision] Two kinds.",  # 13
            "- [fact]   ",  # 14
            "## 13:00 | event",  # 15
            "Good headed entry.",  # 16
        ]
    )
    result = parse_bytes(text.encode(), "2026-01-05.md", BEING, "daily-md")
    assert reasons(result) == [
        (3, "importance out of range: 1.7"),
        (5, "invalid time: 25:99"),
        (7, "empty body"),
        (9, "confidence out of range: sure"),
        (13, "more than one kind: fact, decision"),
        (14, "missing text"),
    ]
    # Tag words that are not memory types are tags on a message, never a lost line.
    assert [(e.source_ref, e.kind, e.tags, e.text) for e in result.episodes] == [
        ("2026-01-05.md:2", "message", ("gossip",), "Heard a rumour."),
        ("2026-01-05.md:4", "fact", (), "Good bullet."),
        ("2026-01-05.md:11", "message", ("mood:happy",), "Body."),
        ("2026-01-05.md:15", "event", (), "Good headed entry."),
    ]
    assert result.quarantined[1].raw == "## 25:99 | decision"


def test_daily_md_invalid_utf8_and_heartbeats(tmp_path):
    path = tmp_path / "2026-01-05.md"
    path.write_bytes(
        b"- [fact] First.\n"
        b"- [fact] Caf\xe9 is broken.\n"
        b"## 07:00 | event\n"
        b"Went for a run.\n"
        b"\xff\xfe garbage inside a body\n"
        b"Felt great.\n"
        b"- [i=0.1] HEARTBEAT_OK\n"
        b"## 07:30\n"
        b"ping\n"
    )
    result = parse_file(path, BEING)
    assert [(q.line, q.reason.split(":")[0]) for q in result.quarantined] == [
        (2, "invalid UTF-8"),
        (5, "invalid UTF-8"),
    ]
    assert result.quarantined[0].raw == "- [fact] Caf\ufffd is broken."
    assert [e.text for e in result.episodes] == ["First.", "Went for a run.\nFelt great."]
    assert result.heartbeats == 2


def test_daily_md_needs_a_date_file_name():
    with pytest.raises(MindflowError, match="YYYY-MM-DD|2026-01-05.md"):
        parse_bytes(b"- [fact] x\n", "notes.md", BEING, "daily-md")
    with pytest.raises(MindflowError):
        parse_bytes(b"- [fact] x\n", "2026-02-30.md", BEING, "daily-md")


# --------------------------------------------------------------------------- heartbeats


@pytest.mark.parametrize(
    "text",
    [
        "HEARTBEAT_OK",
        "  HEARTBEAT_OK\n",
        "Nothing to report. HEARTBEAT_OK",
        PROBE,
        "NO_REPLY",
        "ping",
        "PONG",
        "Ping!",
        "[probe] liveness check",
        "[PROBE]",
    ],
)
def test_is_heartbeat_true(text):
    assert is_heartbeat(text)


@pytest.mark.parametrize(
    "text",
    [
        "ping me tomorrow about the invoice",
        "HEARTBEAT_OK is the token the agent sends",
        "I edited HEARTBEAT.md to add a check",
        "NO_REPLY needed? I think we should answer",
        "the probe found nothing",
        "",
    ],
)
def test_is_heartbeat_false(text):
    assert not is_heartbeat(text)


# --------------------------------------------------------------------------- triggers


@pytest.mark.parametrize(
    "text, expected",
    [
        ("Remember that I'm vegan.", "remember"),
        ("remember this: the wifi password is on the fridge", "remember"),
        ("Please remember my birthday is May 3", "remember"),
        ("Could you please remember that I moved?", "remember"),
        ("Don't forget the dentist on Friday", "remember"),
        ("don’t forget about the dentist", "remember"),
        ("Note to self: renew passport", "remember"),
        ("Keep in mind I hate cilantro", "remember"),
        ("Remember: standup is at 9", "remember"),
        ("Mia, remember this for me.", "remember"),
        ("OK so, remember that the code is 4411", "remember"),
        ("Forget that I said that.", "forget"),
        ("forget about the old plan", "forget"),
        ("Please forget my old address", "forget"),
        ("Don't remember this password", "forget"),
        ("please do not remember my address", "forget"),
        # Seed 001's other forget phrases: each only opens a proposal a person confirms.
        ("Forget it, never mind", "forget"),
        ("Scratch that.", "forget"),
        ("Disregard the last message", "forget"),
        ("Ignore what I said about Bob", "forget"),
        ("Please remove this from memory: my PIN", "forget"),
        ("Delete the memory of the trip", "forget"),
        ("No longer relevant: the Tuesday standup", "forget"),
        ("Reflect on how the week went", "reflect"),
        ("Let's reflect on the launch", "reflect"),
        ("let us reflect", "reflect"),
        ("Think back on what went wrong", "reflect"),
        # With two instructions the first one wins.
        ("Forget about the old address. Remember that I live in Oslo.", "forget"),
        ("Remember that I live in Oslo. Forget about the old address.", "remember"),
    ],
)
def test_detect_trigger(text, expected):
    assert detect_trigger(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        "I remember when we went to Paris",
        "I remember that day well",
        "Remember when we went to Paris?",
        "Remember that time in Paris?",
        "Do you remember that trip?",
        "I don't remember where I parked",
        "I never forget a face",
        "I forget about this stuff all the time",
        "I never mind the rain",
        "the memory of him stays",
        "I'll keep in mind what you said",
        "I often reflect on things",
        "Remembering is hard",
        "the reminder app",
        "",
    ],
)
def test_detect_trigger_negatives(text):
    assert detect_trigger(text) is None


def test_dont_remember_is_never_a_remember_trigger():
    for text in ["Don't remember this", "I don't remember", "please don't remember it"]:
        assert detect_trigger(text) != "remember"


# --------------------------------------------------------------------------- timestamps


@pytest.mark.parametrize(
    "value, expected",
    [
        ("2026-01-05T09:00:00Z", datetime(2026, 1, 5, 9, 0, 0)),
        ("2026-01-05T09:00:03.120Z", datetime(2026, 1, 5, 9, 0, 3, 120000)),
        ("2026-01-05T10:30:00+01:30", datetime(2026, 1, 5, 9, 0, 0)),
        ("2026-01-05T01:00:00-08:00", datetime(2026, 1, 5, 9, 0, 0)),
        ("2026-01-05T09:00:00", datetime(2026, 1, 5, 9, 0, 0)),
        ("2026-01-05 09:00:00", datetime(2026, 1, 5, 9, 0, 0)),
        (1767603600, datetime(2026, 1, 5, 9, 0, 0)),
        (1767603600.5, datetime(2026, 1, 5, 9, 0, 0, 500000)),
        (1767603600123, datetime(2026, 1, 5, 9, 0, 0, 123000)),
        (0, datetime(1970, 1, 1)),
        ("1969-12-31T23:00:00-02:00", datetime(1970, 1, 1, 1, 0, 0)),
    ],
)
def test_parse_timestamp_valid(value, expected):
    got = parse_timestamp(value)
    assert got == expected
    assert got.tzinfo is None


@pytest.mark.parametrize(
    "value",
    [
        "garbage",
        "",
        "2026-13-01T00:00:00Z",
        "1969-07-20T20:17:00Z",
        "2101-01-01T00:00:00Z",
        -1,
        1e30,
        float("nan"),
        float("inf"),
        True,
        None,
        [2026, 1, 5],
        {"ts": 1},
    ],
)
def test_parse_timestamp_invalid(value):
    with pytest.raises(ValueError):
        parse_timestamp(value)


# --------------------------------------------------------------------------- ids


def test_ids_are_deterministic(tmp_path):
    jsonl = write_lines(
        tmp_path / "inbox.jsonl",
        [{"ts": "2026-01-05T09:00:00Z", "text": "a"}, {"id": 7, "ts": "2026-01-05T09:00:01Z", "text": "b"}],
    )
    oc = write_lines(tmp_path / "s.jsonl", openclaw_session())
    md = tmp_path / "2026-01-05.md"
    md.write_text(DAILY, encoding="utf-8")
    for path in (jsonl, oc, md):
        first = [e.episode_id for e in parse_file(path, BEING).episodes]
        second = [e.episode_id for e in parse_file(path, BEING).episodes]
        assert first == second
        assert len(set(first)) == len(first)
    assert [e.episode_id for e in parse_file(jsonl, BEING).episodes][1] == "7"


def test_client_id_is_kept_across_beings_but_hash_ids_differ(tmp_path):
    path = write_lines(
        tmp_path / "inbox.jsonl",
        [
            {"id": "c-1", "ts": "2026-01-05T09:00:00Z", "text": "a"},
            {"ts": "2026-01-05T09:00:00Z", "text": "a"},
        ],
    )
    mia = parse_file(path, "mia").episodes
    leo = parse_file(path, "leo").episodes
    assert mia[0].episode_id == leo[0].episode_id == "c-1"
    assert (mia[0].being_id, leo[0].being_id) == ("mia", "leo")
    assert mia[1].episode_id != leo[1].episode_id
    assert mia[1].episode_id.startswith("h-")


# --------------------------------------------------------------------------- detect_format / entry points


def test_detect_format_each_case(tmp_path):
    assert FORMATS == ("jsonl", "openclaw", "daily-md")
    inbox = write_lines(tmp_path / "inbox.jsonl", [{"ts": 1767603600, "text": "hi"}])
    assert detect_format(inbox) == "jsonl"
    # The first *parseable* line decides: garbage and blank lines are passed over.
    header_late = tmp_path / "late.jsonl"
    header_late.write_bytes(
        b"\n{oops\n\xff\xfe\n" + json.dumps({"type": "session", "id": "s"}).encode() + b"\n"
    )
    assert detect_format(header_late) == "openclaw"
    msg_only = write_lines(tmp_path / "m.jsonl", [{"message": {"role": "user", "content": "x"}}])
    assert detect_format(msg_only) == "openclaw"
    custom = write_lines(tmp_path / "c.jsonl", [{"type": "custom", "data": {}}])
    assert detect_format(custom) == "openclaw"
    other_type = write_lines(tmp_path / "o.jsonl", [{"type": "note", "ts": 1, "text": "x"}])
    assert detect_format(other_type) == "jsonl"
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert detect_format(empty) == "jsonl"
    assert detect_format(tmp_path / "2026-01-05.md") == "daily-md"


@pytest.mark.parametrize("name", ["notes.txt", "random.md", "2026-1-5.md", "2026-02-30.md", "data.json"])
def test_detect_format_rejects_other_names(tmp_path, name):
    path = tmp_path / name
    path.write_text("x", encoding="utf-8")
    with pytest.raises(MindflowError) as err:
        detect_format(path)
    if name.endswith((".txt", ".json")):
        message = str(err.value)
        assert name in message
        assert "jsonl" in message and "daily-md" in message and "YYYY-MM-DD.md" in message


def test_parse_file_errors_are_mindflow_errors(tmp_path):
    with pytest.raises(MindflowError):
        parse_file(tmp_path / "missing.jsonl", BEING)
    with pytest.raises(MindflowError):
        parse_file(tmp_path / "missing.jsonl", BEING, "jsonl")
    path = write_lines(tmp_path / "inbox.jsonl", [{"ts": 1767603600, "text": "hi"}])
    with pytest.raises(MindflowError, match="csv"):
        parse_file(path, BEING, "csv")


def test_explicit_format_overrides_detection(tmp_path):
    # Simple role/content lines are not detected as OpenClaw; naming the format works.
    path = write_lines(
        tmp_path / "chat.jsonl", [{"role": "user", "content": "hello", "timestamp": 1767603600}]
    )
    assert detect_format(path) == "jsonl"
    assert reasons(parse_file(path, BEING)) == [(1, "missing text")]
    (ep,) = parse_file(path, BEING, "openclaw").episodes
    assert (ep.text, ep.session_id, ep.format) == ("hello", "chat", "openclaw")


def test_openclaw_quarantines_message_records_it_cannot_read(tmp_path):
    lines = [
        {"type": "session", "id": "s9", "timestamp": "2026-01-05T09:00:00Z"},
        oc_message("m1", "2026-01-05T09:00:01Z", "user", "kept"),
        {"type": "message", "id": "m2", "timestamp": "2026-01-05T09:00:02Z", "message": "notadict"},  # 3
        {"type": "message", "id": "m3", "timestamp": "2026-01-05T09:00:03Z", "content": "who said it?"},  # 4
        oc_message("m4", "2026-01-05T09:00:04Z", "user", 42),  # 5
        oc_message("m5", "2026-01-05T09:00:05Z", "toolResult", "a tool's output"),  # dropped, as before
    ]
    result = parse_file(write_lines(tmp_path / "s9.jsonl", lines), BEING, "openclaw")
    assert [e.episode_id for e in result.episodes] == ["m1"]
    assert reasons(result) == [
        (3, "a message record whose `message` is not an object: notadict"),
        (4, "a message record without a `role`"),
        (5, "`content` is neither text nor a list of parts: 42"),
    ]
