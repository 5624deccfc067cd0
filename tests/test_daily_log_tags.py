"""Gandalf's importance-tagged daily logs: any tag word is kept, and line ids follow content.

Real parsing and ingestion into DuckDB from files dropped in the inbox.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import date

from mindflow import store
from mindflow.inbox import DONE, episodes_table, ingest
from mindflow.ingest import episode_hash_id, parse_bytes
from mindflow.loop.erase import EraseReport, erase_inbox, make_plan
from mindflow.loop.proposals import ProposalStore

DAY = "2026-03-02.md"
LOG = """# 2026-03-02
- [lesson|i=0.7] Small commits make reviews fast.
- [context|i=0.3] The team moved to the new office this week.
## 14:02 | insight | i=0.8
Latency came from the cold index, not the network.
- [rumour] Heard the cafeteria closes in May.
- [todo|tags=office] Order a second monitor.
## 16:30 | context | i=0.3
The build server moved to the basement.
"""
# Only the kinds every version knew, so the test is about ids alone.
PLAIN = """# 2026-03-02
- [fact|i=0.7] Small commits make reviews fast.
- [event|i=0.3] The team moved to the new office this week.
## 14:02 | fact | i=0.8
Latency came from the cold index, not the network.
- [message] Heard the cafeteria closes in May.
- [task] Order a second monitor.
"""


def test_the_seeds_tag_words_are_accepted_with_their_importance():
    result = parse_bytes(LOG.encode(), DAY, "gandalf", "daily-md")
    assert result.quarantined == []
    got = [(e.kind, e.importance, e.tags, e.text) for e in result.episodes]
    assert got == [
        ("fact", 0.7, ("lesson",), "Small commits make reviews fast."),
        ("event", 0.3, ("context",), "The team moved to the new office this week."),
        ("fact", 0.8, ("insight",), "Latency came from the cold index, not the network."),
        ("message", None, ("rumour",), "Heard the cafeteria closes in May."),  # unknown: a tag
        ("task", None, ("todo", "office"), "Order a second monitor."),
        ("event", 0.3, ("context",), "The build server moved to the basement."),
    ]


def test_a_line_written_above_others_adds_one_episode_and_renames_none(settings):
    inbox = settings.inbox / "gandalf"
    inbox.mkdir(parents=True)
    (inbox / DAY).write_text(PLAIN)
    with store.connect(settings.duckdb_path) as con:
        ingest(con, settings.inbox, date(2026, 3, 1), date(2026, 3, 31))
        before = dict(con.execute("SELECT text, episode_id FROM episodes").fetchall())
        assert len(before) == 5

        # The same day's log, edited: a new first bullet, and a repeat of an existing line.
        edited = (
            PLAIN.replace(
                "# 2026-03-02\n", "# 2026-03-02\n- [decision|i=0.9] Ship on Thursdays from now on.\n"
            )
            + "- [fact|i=0.7] Small commits make reviews fast.\n"
        )
        (inbox / DAY).write_text(edited)
        ingest(con, settings.inbox, date(2026, 3, 1), date(2026, 3, 31))
        after = con.execute("SELECT text, episode_id FROM episodes ORDER BY ts").fetchall()

    assert len(after) == 7
    for text, episode_id in after:
        if text in before:
            assert before[text] == episode_id or text == "Small commits make reviews fast."
    assert [t for t, _ in after].count("Small commits make reviews fast.") == 2
    ids = {i for _, i in after}
    assert set(before.values()) <= ids


def test_notes_stored_by_an_earlier_version_are_not_ingested_again(settings):
    # Earlier versions gave a bullet the id of its time, midnight + its line number in seconds.
    legacy = [
        replace(e, episode_id=episode_hash_id("gandalf", e.ts, "gandalf", e.text))
        for e in parse_bytes(PLAIN.encode(), DAY, "gandalf", "daily-md").episodes
    ]
    inbox = settings.inbox / "gandalf"
    inbox.mkdir(parents=True)
    with store.connect(settings.duckdb_path) as con:
        with store.registered(con, "legacy", episodes_table(legacy)):
            con.execute("INSERT INTO episodes SELECT *, now()::TIMESTAMP FROM legacy")
        old_ids = {i for (i,) in con.execute("SELECT episode_id FROM episodes").fetchall()}

        # The same log landed again, then edited: a line above the others and a repeat below.
        (inbox / DAY).write_text(PLAIN)
        again = ingest(con, settings.inbox, date(2026, 3, 1), date(2026, 3, 31))
        edited = PLAIN.replace("# 2026-03-02\n", "# 2026-03-02\n- [decision] Ship on Thursdays.\n")
        (inbox / DAY).write_text(edited + "- [fact|i=0.7] Small commits make reviews fast.\n")
        later = ingest(con, settings.inbox, date(2026, 3, 1), date(2026, 3, 31))
        rows = con.execute("SELECT episode_id, text FROM episodes").fetchall()

    assert (again.new, again.duplicates) == (0, 5)
    assert later.new == 2
    assert old_ids <= {i for i, _ in rows} and len(rows) == 7
    assert sorted(t for i, t in rows if i not in old_ids) == [
        "Ship on Thursdays.",
        "Small commits make reviews fast.",
    ]


def test_a_permanent_forget_blanks_a_note_stored_under_its_earlier_id(settings):
    legacy = [
        replace(e, episode_id=episode_hash_id("gandalf", e.ts, "gandalf", e.text))
        for e in parse_bytes(PLAIN.encode(), DAY, "gandalf", "daily-md").episodes
    ]
    rumour = next(e for e in legacy if e.text == "Heard the cafeteria closes in May.")
    (settings.inbox / "gandalf").mkdir(parents=True)
    (settings.inbox / "gandalf" / DAY).write_text(PLAIN)
    with store.connect(settings.duckdb_path) as con:
        with store.registered(con, "legacy", episodes_table(legacy)):
            con.execute("INSERT INTO episodes SELECT *, now()::TIMESTAMP FROM legacy")
        ingest(con, settings.inbox, date(2026, 3, 1), date(2026, 3, 31))  # to inbox/.done, nothing new
        delete = ProposalStore(settings.proposals).create(
            "gandalf", "forget", {"confirmed_refs": [], "confirmed_episode_ids": [rumour.episode_id]}, "user"
        )
        erase_inbox(con, settings, make_plan(con, "gandalf", [delete]), EraseReport())
    done = (settings.inbox / DONE / "gandalf" / DAY).read_text()
    assert "cafeteria" not in done
    assert done.splitlines() == [("" if "cafeteria" in line else line) for line in PLAIN.splitlines()]


# Prose and untagged bullets, as people write daily logs: none of it may be lost.
PROSE = """# 2026-03-02
Slept badly; the neighbours' party went on until three.
Coffee helped.

- [decision|i=0.9] Ship on Thursdays from now on.
  because Friday deploys kept spilling into the weekend
## Notes
Lena's new number ends in 4471.
---
- call the plumber about the kitchen tap
- [ ] renew the passport
### Later
Finished the Graz train booking.
"""


def test_daily_log_prose_and_untagged_bullets_are_notes_not_lost(settings):
    """Prose outside a timed entry (a paragraph: lines up to a blank line, bullet or heading) and
    untagged bullets become `message` notes, stored and blanked like tagged bullets; section
    headings and rules are structure. A forget of a bullet leaves the next note's lines alone."""
    inbox = settings.inbox / "gandalf"
    inbox.mkdir(parents=True)
    (inbox / DAY).write_text(PROSE)
    with store.connect(settings.duckdb_path) as con:
        report = ingest(con, settings.inbox, date(2026, 3, 1), date(2026, 3, 31))
        rows = con.execute("SELECT episode_id, text, kind, source_ref FROM episodes ORDER BY ts").fetchall()
        assert report.quarantined == 0
        assert [(t, k, r) for _, t, k, r in rows] == [
            (
                "Slept badly; the neighbours' party went on until three.\nCoffee helped.",
                "message",
                f"{DAY}:2",
            ),
            ("Ship on Thursdays from now on.", "decision", f"{DAY}:5"),
            ("because Friday deploys kept spilling into the weekend", "message", f"{DAY}:6"),
            ("Lena's new number ends in 4471.", "message", f"{DAY}:8"),
            ("call the plumber about the kitchen tap", "message", f"{DAY}:10"),
            ("[ ] renew the passport", "message", f"{DAY}:11"),
            ("Finished the Graz train booking.", "message", f"{DAY}:13"),
        ]
        # Landed again: the same notes, nothing new (ids follow the day and text, as bullets' do).
        (inbox / DAY).write_text(PROSE)
        again = ingest(con, settings.inbox, date(2026, 3, 1), date(2026, 3, 31))
        assert (again.new, again.duplicates) == (0, 7)
        ship = next(i for i, t, _, _ in rows if t.startswith("Ship"))
        delete = ProposalStore(settings.proposals).create(
            "gandalf", "forget", {"confirmed_refs": [], "confirmed_episode_ids": [ship]}, "user"
        )
        erase_inbox(con, settings, make_plan(con, "gandalf", [delete]), EraseReport())
    done = (settings.inbox / DONE / "gandalf" / DAY).read_text()
    assert done.splitlines() == [("" if "Ship on" in line else line) for line in PROSE.splitlines()]


def test_an_over_long_paragraph_is_quarantined_whole():
    text = "# 2026-03-02\nFirst line of a long paragraph.\n" + "x" * 50 + "\n- [fact] Kept.\n"
    result = parse_bytes(text.encode(), DAY, "gandalf", "daily-md", max_chars=40)
    assert [(q.line, q.reason.split(",")[0], q.raw) for q in result.quarantined] == [
        (2, "text is 82 characters", "First line of a long paragraph.\n" + "x" * 50)
    ]
    assert [e.text for e in result.episodes] == ["Kept."]
