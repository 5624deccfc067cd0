"""Seed 001's trigger phrases: every one recognised in a user's turn, none from anyone else.

Through the real parsers (JSONL, OpenClaw transcripts, daily notes) and, for "forget", the
real ingestion into DuckDB and the proposals it opens, and over HTTP (POST episodes).
"""

from __future__ import annotations

import json
from datetime import date, datetime

import httpx
import pytest

from mindflow import store
from mindflow.api import create_app
from mindflow.api.server import BackgroundServer
from mindflow.inbox import ingest
from mindflow.ingest import detect_trigger, parse_bytes
from mindflow.loop.forget import propose_ingested
from mindflow.loop.proposals import ProposalStore

# Seed 001's three lists, each phrase in a turn as a user would say it.
REMEMBER = [
    "Remember this: the wifi password is on the fridge",
    "Remember that I am vegan",
    "Don't forget the dentist on Friday",
    "Keep in mind I hate cilantro",
    "Note to self: renew the passport",
    "Please remember my birthday is May 3",
    "Note that the staging server moved to Frankfurt",
    "Important: the client demo is on Thursday",
    "For future reference, my shoe size is 43",
    "Save this: the door code is 4411",
    "Save this for later, the gate opens with 1907",
    "FYI for later, Tom is allergic to nuts",
]
FORGET = [
    "Never mind",
    "Disregard the last message",
    "The Tuesday standup is no longer relevant",
    "Scratch that.",
    "Ignore what I said about Bob",
    "Please remove this from memory: my PIN",
    "Delete the memory of the trip",
    "Forget that I said that",
    "Forget about the old plan",
]
REFLECT = [
    "Consolidate",
    "Consolidate your memories",
    "Review",
    "Please review your memory of this week",
    "Clean up",
    "Clean up your notes",
    "clean up memory",
    "Consolidate memories from last week",
    "Ok, review all your memories of March.",
    "Review what you know about Bob",
    "What do you remember about the Lisbon trip?",
    "Reflect on how the week went",
]


# The lists' phrases exactly as seed 001 gives them, each said alone.
SEED_PHRASES = {
    "remember": [
        "remember this", "remember that", "don't forget", "keep in mind", "note to self", "please remember",
        "note that", "important:", "for future reference", "save this", "FYI for later",
    ],
    "forget": [
        "never mind", "disregard", "no longer relevant", "scratch that", "ignore what I said about",
        "remove from memory", "delete the memory", "forget that", "forget this", "forget about",
    ],
    "reflect": ["consolidate", "review", "clean up", "what do you remember about"],
}  # fmt: skip


@pytest.mark.parametrize(
    "text, expected",
    [(t, "remember") for t in REMEMBER] + [(t, "forget") for t in FORGET] + [(t, "reflect") for t in REFLECT],
)
def test_every_phrase_of_the_three_lists_in_a_user_turn(text, expected):
    line = json.dumps({"ts": "2026-03-02T10:00:00Z", "role": "user", "speaker": "Lena", "text": text})
    result = parse_bytes(line.encode(), "turns.jsonl", "ada", "jsonl")
    assert [e.trigger for e in result.episodes] == [expected]


@pytest.mark.parametrize(
    "text, expected", [(phrase, trigger) for trigger, phrases in SEED_PHRASES.items() for phrase in phrases]
)
def test_every_phrase_as_the_seed_gives_it(text, expected):
    # Any case and any spacing between the words: the word prefilter must not drop them.
    for said in (text, text.upper(), text.capitalize() + ".", text.replace(" ", "\n  ")):
        line = json.dumps({"ts": "2026-03-02T10:00:00Z", "speaker": "Lena", "text": said})  # no role: user
        episodes = parse_bytes(line.encode(), "t.jsonl", "ada", "jsonl").episodes
        assert [e.trigger for e in episodes] == [expected], said


def test_important_colon_is_an_instruction_only_at_the_start_of_a_clause():
    assert detect_trigger("Important: the client demo is on Thursday") == "remember"
    assert detect_trigger("Ok, important: bring the badge") == "remember"
    # Said about something, it is part of the conversation.
    assert detect_trigger("It's important: the demo went well") is None
    assert detect_trigger("The most important: nobody got hurt") is None


@pytest.mark.parametrize(
    "text",
    [
        "Please review my pull request",  # an everyday review, not of memory
        "Review my notes for the talk",  # the user's own notes
        "Clean up the memory leak in the parser",  # memory as a thing
        "Please review the memory usage of the worker",
        "Save this file before you close it",  # keeps a file, not a memory
        "Please save this as a PDF",
        "We should clean up the garage",
        "Let's consolidate the two invoices",
        "It is important to sleep",
        "I save this kind of thing for later",
        "I remember when we went to Paris",
    ],
)
def test_everyday_uses_of_the_words_are_not_instructions(text):
    assert detect_trigger(text) is None


@pytest.mark.parametrize("text", REMEMBER[:7] + FORGET[:4] + REFLECT[:3])
def test_an_assistant_turn_is_never_an_instruction(text):
    line = json.dumps({"ts": "2026-03-02T10:00:00Z", "role": "assistant", "speaker": "Mia", "text": text})
    assert [e.trigger for e in parse_bytes(line.encode(), "turns.jsonl", "ada", "jsonl").episodes] == [None]
    transcript = "\n".join(
        json.dumps(r)
        for r in (
            {"type": "session", "id": "s1", "timestamp": "2026-03-02T09:59:00Z"},
            {"type": "message", "id": "m1", "timestamp": "2026-03-02T10:00:00Z",
             "message": {"role": "assistant", "content": [{"type": "text", "text": text}]}},
            {"type": "message", "id": "m2", "timestamp": "2026-03-02T10:01:00Z",
             "message": {"role": "user", "content": [{"type": "text", "text": text}]}},
        )
    )  # fmt: skip
    episodes = parse_bytes(transcript.encode(), "s1.jsonl", "ada", "openclaw").episodes
    assert [(e.role, e.trigger is None) for e in episodes] == [("assistant", True), ("user", False)]
    # The being's own daily notes are not the user's turns either.
    notes = parse_bytes(f"- [fact] {text}\n".encode(), "2026-03-02.md", "ada", "daily-md").episodes
    assert [e.trigger for e in notes] == [None]


def test_an_assistant_saying_please_remember_or_forget_does_nothing(settings):
    path = settings.inbox / "ada" / "chat.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    turns = [
        ("t1", "user", "Lena", "My locker code at the gym is 4471."),
        ("t2", "assistant", "Mia", "Please remember to bring your gym card."),
        ("t3", "assistant", "Mia", "Never mind, scratch that."),
        ("t4", "user", "Lena", "Please remember that I train on Mondays."),
        ("t5", "User", "Lena", "Keep in mind: Wednesdays are swimming."),  # any case
    ]
    path.write_text(
        "\n".join(
            json.dumps({"id": i, "ts": f"2026-03-02T10:0{n}:00Z", "role": r, "speaker": s, "text": t})
            for n, (i, r, s, t) in enumerate(turns)
        )
        + "\n"
    )
    with store.connect(settings.duckdb_path) as con:
        since = datetime.now().replace(microsecond=0)
        ingest(con, settings.inbox, date(2026, 1, 1), date(2026, 12, 31))
        triggers = dict(con.execute("SELECT episode_id, trigger FROM episodes ORDER BY 1").fetchall())
        proposals = propose_ingested(con, settings, since)
    assert triggers == {"t1": None, "t2": None, "t3": None, "t4": "remember", "t5": "remember"}
    assert proposals == [] and ProposalStore(settings.proposals).list("ada") == []


def test_episodes_posted_by_an_assistant_open_no_proposal_over_http(settings):
    token = "tok-triggers-0001"

    def turn(minute: int, role: str, text: str) -> dict:
        return {"ts": f"2026-03-02T10:0{minute}:00Z", "role": role, "text": text}

    forget = "Please forget about the locker code."
    remember = "Please remember the gym card."
    with (
        BackgroundServer(create_app(settings, tokens={token: "*"})) as server,
        httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {token}"}, timeout=60) as http,
    ):
        code = http.post(
            "/v1/beings/ada/episodes", json={"episodes": [turn(0, "user", "My locker code is 4471.")]}
        )
        assistant = http.post(
            "/v1/beings/ada/episodes",
            json={"episodes": [turn(1, "assistant", forget), turn(2, "assistant", remember)]},
        )
        listed = http.get("/v1/beings/ada/proposals").json()["proposals"]
        user = http.post("/v1/beings/ada/episodes", json={"episodes": [turn(3, "user", forget)]})
        recalled = http.post("/v1/beings/ada/recall", json={"query": "locker code gym card", "k": 10})
    assert code.status_code == assistant.status_code == user.status_code == 200, assistant.text
    assert assistant.json()["forget_proposals"] == [] and listed == []
    (proposal,) = user.json()["forget_proposals"]
    candidates = ProposalStore(settings.proposals).get("ada", proposal).payload["candidates"]
    assert "My locker code is 4471." in [c["text"] for c in candidates]
    # The memories served at once from the inbox: only the user's turn carries an instruction.
    triggers = {m["source_episode_ids"][0]: m["trigger"] for m in recalled.json()["memories"]}
    assert triggers == {
        code.json()["ids"][0]: None,
        assistant.json()["ids"][0]: None,
        assistant.json()["ids"][1]: None,
        user.json()["ids"][0]: "forget",
    }
