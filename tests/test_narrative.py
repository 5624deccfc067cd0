"""STORY.md: the anchor, batches, the lock, the mechanical chronicle and the LLM path on a loopback server."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta
from pathlib import Path

import git
import pytest

from mindflow import narrative, store
from mindflow.config import load_settings
from mindflow.errors import MindflowError
from mindflow.inbox import episodes_table
from mindflow.models import Episode

REPO = Path(__file__).resolve().parent.parent
T0 = datetime(2026, 10, 12, 8, 0)
CHAPTER_LINE = re.compile(r"^### \[\d{4}-\d{2}-\d{2} \d{2}:\d{2}\] \S.*$")


def insert(con, episodes):
    with store.registered(con, "new_eps", episodes_table(episodes)):
        con.execute("INSERT INTO episodes SELECT *, now()::TIMESTAMP FROM new_eps")


def ep(
    n,
    text,
    *,
    ts=None,
    being="ada",
    speaker="Lena",
    role="user",
    importance=None,
    kind="message",
    trigger=None,
    tags=(),
):
    return Episode(
        episode_id=f"e{n:04d}",
        being_id=being,
        ts=ts or T0 + timedelta(minutes=n),
        speaker=speaker,
        role=role,
        text=text,
        kind=kind,
        importance=importance,
        trigger=trigger,
        tags=tuple(tags),
    )


def story_text(settings, being="ada"):
    return narrative.story_path(settings, being).read_text()


def chapters_answer(*chapters):
    return {"chapters": [{"when": w, "title": t, "text": x} for w, t, x in chapters]}


# ---- mechanical chronicle -------------------------------------------------------------------


def test_mechanical_chronicle_dated_chapters_anchor_and_no_repeats(settings, con):
    day2 = T0 + timedelta(days=1)
    insert(
        con,
        [
            ep(1, "We chose Keycloak 24 for the ledgerline login.", importance=0.9, kind="decision"),
            ep(2, "HEARTBEAT_OK"),
            ep(3, "[probe] are you there", role="user"),
            ep(4, "tool output: 200 OK", role="tool"),
            ep(5, "Small talk about coffee.", importance=0.1),
            ep(6, "Remember that the deploy window is Tuesday 14:00.", importance=0.2, trigger="remember"),
            ep(7, "The release is on Friday.", ts=day2, importance=0.7),
        ],
    )
    report = narrative.narrate(con, settings, "ada", run_id="run-1")
    assert report.mode == "mechanical"
    assert (report.items, report.skipped_technical, report.chapters_added) == (4, 3, 2)
    text = story_text(settings)
    assert text.startswith(f"<!-- LAST_PROCESSED: {day2.isoformat()}Z -->\n")
    assert narrative.MECHANICAL_MARK in text and "Mechanical chronicle" in text
    headings = [line for line in text.splitlines() if line.startswith("### ")]
    assert len(headings) == 2 and all(CHAPTER_LINE.match(h) for h in headings)
    assert headings[0].startswith("### [2026-10-12 08:01]") and headings[1].startswith(
        "### [2026-10-13 08:00]"
    )
    assert "Keycloak 24" in text and "(asked to remember): Remember that the deploy window" in text
    assert "HEARTBEAT" not in text and "probe" not in text and "tool output" not in text

    # Nothing new: nothing written. New episodes: only they are narrated, in a new chapter.
    assert narrative.narrate(con, settings, "ada").items == 0
    assert story_text(settings) == text
    insert(con, [ep(8, "Friday release went out cleanly.", ts=day2 + timedelta(days=1), importance=0.8)])
    third = narrative.narrate(con, settings, "ada", run_id="run-2")
    assert third.items == 1 and third.chapters_added == 1
    updated = story_text(settings)
    assert (
        updated.count("Lena: We chose Keycloak 24") == 1
        and updated.count("Lena: Friday release went out") == 1
    )
    commits = list(git.Repo(settings.workspace).iter_commits(paths="ada/STORY.md"))
    assert [c.message.splitlines()[0].split(" — ")[0] for c in commits] == [
        "[APPEND] ada/STORY.md",
        "[CREATE] ada/STORY.md",
    ]
    assert "Run: run-2" in commits[0].message


def test_chapter_picks_the_days_most_important_and_every_remember(settings, con):
    eps = [ep(i, f"routine note number {i}", importance=0.1) for i in range(1, 30)]
    eps += [
        ep(40, "Lena got promoted to staff engineer.", importance=0.95),
        ep(41, "Remember: Lena's sister is called Mia.", importance=0.05, trigger="remember"),
    ]
    insert(con, eps)
    narrative.narrate(con, settings, "ada")
    text = story_text(settings)
    assert "promoted to staff engineer" in text and "sister is called Mia" in text
    assert text.count("routine note number") <= 5 and "more moments that day" in text
    heading = next(line for line in text.splitlines() if line.startswith("### "))
    assert "Lena got promoted to staff engineer" in heading


def test_word_cap_condenses_older_chapters(settings, con, monkeypatch):
    monkeypatch.setenv("MINDFLOW_NARRATIVE_MAX_WORDS", "400")
    settings = load_settings()
    words = " ".join(["ledger"] * 25)
    insert(
        con, [ep(d, f"Day {d} note: {words}.", ts=T0 + timedelta(days=d), importance=0.5) for d in range(20)]
    )
    report = narrative.narrate(con, settings, "ada")
    text = story_text(settings)
    story = narrative.parse_story(text)
    assert report.summarised > 0
    assert narrative.word_count(story.body) <= 400
    titles = [t for _, t in story.chapters]
    assert titles[0] == narrative.SUMMARY_TITLE
    assert "Day 19 note" in text  # the newest chapters stay verbatim
    assert all(CHAPTER_LINE.match(line) for line in text.splitlines() if line.startswith("### "))
    assert story.anchor == T0 + timedelta(days=19)


def test_batches_never_split_equal_timestamps():
    same = T0 + timedelta(minutes=5)
    items = [narrative.Item(T0 + timedelta(minutes=i), "a", "message", "x" * 400, 0.5) for i in range(5)]
    items += [narrative.Item(same, "a", "message", "y" * 400, 0.5, ref=str(i)) for i in range(3)]
    plan = narrative.batches(items, limit=250)
    assert sum(len(b) for b in plan) == len(items)
    assert len(plan) > 2 and sum(1 for b in plan if any(i.ts == same for i in b)) == 1
    for a, b in zip(plan, plan[1:], strict=False):
        assert a[-1].ts < b[0].ts


def test_malformed_anchor_is_an_error_not_a_reset(settings, con):
    path = narrative.story_path(settings, "ada")
    path.parent.mkdir(parents=True)
    path.write_text("<!-- LAST_PROCESSED: yesterday -->\n# story\n")
    insert(con, [ep(1, "hello")])
    with pytest.raises(MindflowError, match="unreadable anchor"):
        narrative.narrate(con, settings, "ada")
    assert path.read_text() == "<!-- LAST_PROCESSED: yesterday -->\n# story\n"


def test_legacy_daily_logs_are_narrated_once_on_first_run(settings, con):
    memory = settings.workspace / "bram" / "memory"
    memory.mkdir(parents=True)
    shutil.copy(REPO / "data/samples/inbox/bram/2026-10-20.md", memory / "2026-10-20.md")
    insert(
        con, [ep(1, "New job starts in February.", ts=datetime(2026, 11, 2, 9), being="bram", importance=0.8)]
    )
    report = narrative.narrate(con, settings, "bram")
    assert report.legacy_entries == 12 and report.items == 13
    text = story_text(settings, "bram")
    assert "### [2026-10-20" in text and "Porto half marathon" in text and "New job starts" in text
    again = narrative.narrate(con, settings, "bram")
    assert again.items == 0 and story_text(settings, "bram") == text


# ---- two writers ----------------------------------------------------------------------------

WRITER = textwrap.dedent(
    """
    import sys, time, duckdb
    sys.path.insert(0, {repo!r})
    from mindflow import narrative
    from mindflow.config import load_settings
    from pathlib import Path
    settings = load_settings()
    con = duckdb.connect(sys.argv[1])
    # Writing takes a while (inside the lock), so the other writer surely arrives meanwhile.
    write = narrative._write
    def slow_write(*args, **kwargs):
        time.sleep(1.0)
        write(*args, **kwargs)
    narrative._write = slow_write
    # A barrier: both processes are ready before either starts narrating.
    barrier = Path(sys.argv[3])
    (barrier / sys.argv[2]).touch()
    deadline = time.time() + 60
    while len(list(barrier.iterdir())) < 2 and time.time() < deadline:
        time.sleep(0.01)
    print("start", time.time(), flush=True)
    report = narrative.narrate(con, settings, "ada", run_id=sys.argv[2])
    print("done", report.items, time.time(), flush=True)
    """
)


def test_two_processes_narrating_at_once_write_each_chapter_once(settings, con, tmp_path, home):
    insert(
        con,
        [
            ep(i, f"moment {i} of the day", ts=T0 + timedelta(days=i // 50, minutes=i), importance=0.5)
            for i in range(400)
        ],
    )
    con.execute("CHECKPOINT")
    # Each writer reads its own copy of the stores: the workspace (and STORY.md.lock) is what they share.
    copies = []
    for n in range(2):
        copy = tmp_path / f"copy{n}.duckdb"
        shutil.copy(settings.duckdb_path, copy)
        copies.append(copy)
    script = tmp_path / "writer.py"
    script.write_text(WRITER.format(repo=str(REPO)))
    env = {"MINDFLOW_HOME": str(home), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(c), f"w{n}", str(barrier)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n, c in enumerate(copies)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    starts = [float(out.split("start ")[1].split()[0]) for out, _ in outs]
    dones = [float(out.split("done ")[1].split()[1]) for out, _ in outs]
    # They overlapped: both had started narrating before either finished (the write alone takes 1 s).
    assert max(starts) < min(dones), (starts, dones)
    narrated = sorted(int(out.split("done ")[1].split()[0]) for out, _ in outs)
    assert narrated == [0, 400]  # the second writer waited, then found nothing past the anchor
    text = story_text(settings)
    story = narrative.parse_story(text)
    assert len(story.chapters) == 8 and len({w for w, _ in story.chapters}) == 8
    assert story.anchor == T0 + timedelta(days=7, minutes=399)
    commits = list(git.Repo(settings.workspace).iter_commits(paths="ada/STORY.md"))
    assert len(commits) == 1
    assert not list(narrative.story_path(settings, "ada").parent.glob(".tmp-*"))


def test_a_held_lock_makes_a_second_writer_fail_cleanly(settings, con, monkeypatch):
    monkeypatch.setenv("MINDFLOW_NARRATIVE_LOCK_TIMEOUT_S", "0.5")
    settings = load_settings()
    insert(con, [ep(1, "hello there")])
    with narrative.StoryLock(settings, "ada"):
        with pytest.raises(MindflowError, match="being written by another narrative run"):
            narrative.narrate(con, settings, "ada")
    assert not narrative.story_path(settings, "ada").exists()
    assert narrative.narrate(con, settings, "ada").items == 1


# ---- with a model (loopback server) --------------------------------------------------------


def soul(settings, being="ada"):
    path = settings.workspace / being / "SOUL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# SOUL.md\nI am ada, a careful coding assistant for Lena.\n")


def llm(llm_server, **env):
    from mindflow import llm as llm_mod

    llm_server.configure(MINDFLOW_LLM_MAX_RETRIES="0", **env)
    return llm_mod.resolve(load_settings(), "narrative")


def test_llm_bootstrap_then_incremental(settings, con, llm_server):
    soul(settings)
    model = llm(llm_server)
    insert(con, [ep(1, "Switch ledgerline login to OAuth PKCE.", importance=0.8), ep(2, "HEARTBEAT_OK")])
    llm_server.script(
        [
            chapters_answer(
                (
                    "2026-10-12 08:01",
                    "The secret comes out",
                    "I helped Lena replace the hardcoded secret with PKCE.",
                ),
            )
        ]
    )
    report = narrative.narrate(con, settings, "ada", llm=model, run_id="r1")
    assert (report.mode, report.items, report.chapters_added, report.failed_batches) == ("llm", 1, 1, 0)
    first = llm_server.requests[-1].prompt_text
    assert "There is no story yet" in first and "OAuth PKCE" in first and "HEARTBEAT" not in first
    assert "I am ada, a careful coding assistant" in first  # identity context for the prompt
    text = story_text(settings)
    assert "### [2026-10-12 08:01] The secret comes out" in text
    assert narrative.MECHANICAL_MARK not in text

    insert(con, [ep(3, "PR merged after review.", importance=0.6)])
    llm_server.script([chapters_answer(("2026-10-12 08:03", "Merged", "Marco approved and we merged."))])
    narrative.narrate(con, settings, "ada", llm=model, run_id="r2")
    second = llm_server.requests[-1].prompt_text
    assert "The story so far" in second and "The secret comes out" in second
    assert "PR merged" in second and "OAuth PKCE." not in second.split("What happened since")[1]
    story = narrative.parse_story(story_text(settings))
    assert [t for _, t in story.chapters] == ["The secret comes out", "Merged"]
    assert story.anchor == T0 + timedelta(minutes=3)


def test_llm_failure_midway_keeps_the_anchor_and_a_retry_narrates_each_episode_once(
    settings, con, llm_server, monkeypatch
):
    model = llm(llm_server, MINDFLOW_NARRATIVE_BATCH_TOKENS="3550")
    settings = load_settings()
    # ~2,100 estimated tokens of episodes; 3,550 less the answer (2,048 of an 8,192 context) and
    # ~400 of instructions leaves ~1,100 tokens a batch: two batches.
    insert(con, [ep(i, f"Episode {i}: " + "details " * 80, importance=0.5) for i in range(1, 13)])
    llm_server.script(
        [
            chapters_answer(("2026-10-12 08:01", "First half", "I lived the first half.")),
            500,  # the second batch's call fails (no retries, no fallback)
        ]
    )
    first = narrative.narrate(con, settings, "ada", llm=model, run_id="r1")
    assert first.batches == 2 and first.failed_batches == 1 and first.errors
    assert len(narrative.batches(narrative.pending_items(con, settings, "ada", None)[0], 1100)) == 2
    after_failure = story_text(settings)
    anchor = narrative.parse_story(after_failure).anchor
    narrated_first = first.items
    assert 0 < narrated_first < 12 and anchor == T0 + timedelta(minutes=narrated_first)

    # An invalid answer (no chapters) changes nothing either.
    llm_server.script(["this is not json"])
    bad = narrative.narrate(con, settings, "ada", llm=model, run_id="r2")
    assert bad.failed_batches == 1 and story_text(settings) == after_failure

    llm_server.reset()
    llm_server.script([chapters_answer(("2026-10-12 08:07", "Second half", "And then the rest."))])
    monkeypatch.setenv("MINDFLOW_NARRATIVE_BATCH_TOKENS", "50000")  # the retry fits in one batch
    retry = narrative.narrate(con, load_settings(), "ada", llm=model, run_id="r3")
    assert retry.failed_batches == 0 and retry.items == 12 - narrated_first
    sent = llm_server.requests[-1].prompt_text.split("What happened since")[1]
    for i in range(1, 13):
        assert (f"Episode {i}:" in sent) == (i > narrated_first)
    story = narrative.parse_story(story_text(settings))
    assert [t for _, t in story.chapters] == ["First half", "Second half"]
    assert story.anchor == T0 + timedelta(minutes=12)


def test_llm_output_never_copies_the_soul(settings, con, llm_server):
    soul(settings)
    model = llm(llm_server)
    insert(con, [ep(1, "Lena fixed the trailing slash bug.")])
    llm_server.script(
        [
            chapters_answer(
                (
                    "2026-10-12 08:01",
                    "Slash",
                    "## Who I am\nI am ada, a careful coding assistant for Lena.\nLena found the trailing slash bug.",
                )
            )
        ]
    )
    narrative.narrate(con, settings, "ada", llm=model)
    text = story_text(settings)
    assert "careful coding assistant" not in text and "## Who I am" not in text
    assert "trailing slash bug" in text


def test_llm_summarises_older_chapters_near_the_word_cap(settings, con, llm_server, monkeypatch):
    monkeypatch.setenv("MINDFLOW_NARRATIVE_MAX_WORDS", "300")
    model = llm(llm_server)
    settings = load_settings()
    long = " ".join(["remembered"] * 60)
    path = narrative.story_path(settings, "ada")
    path.parent.mkdir(parents=True)
    chapters = "\n".join(
        narrative.render_chapter(f"2026-10-0{d} 09:00", f"Day {d}", long) for d in range(1, 6)
    )
    path.write_text(f"<!-- LAST_PROCESSED: 2026-10-06T00:00:00Z -->\n# The story of ada\n\n{chapters}")
    insert(con, [ep(1, "A new day.")])
    llm_server.script(
        [
            chapters_answer(("2026-10-12 08:01", "New day", "Something new happened today.")),
            {"title": "Early October", "text": "In early October I remembered a great deal."},
        ]
    )
    report = narrative.narrate(con, settings, "ada", llm=model)
    assert report.summarised == 3
    condensed = llm_server.requests[-1].prompt_text
    assert "Day 1" in condensed and "Day 3" in condensed and "Day 5" not in condensed
    story = narrative.parse_story(story_text(settings))
    assert [t for _, t in story.chapters] == ["Early October", "Day 4", "Day 5", "New day"]
    assert narrative.word_count(story.body) <= 300


def test_a_model_continuing_a_mechanical_chronicle_says_which_chapters_are_which(settings, con, llm_server):
    insert(con, [ep(1, "Mechanical times.")])
    narrative.narrate(con, settings, "ada")
    assert "Mechanical chronicle: written without a language model" in story_text(settings)
    model = llm(llm_server)
    insert(con, [ep(2, "A model arrives.", ts=T0 + timedelta(days=1))])
    llm_server.script([chapters_answer(("2026-10-13 08:00", "A new voice", "I can tell my own story now."))])
    narrative.narrate(con, settings, "ada", llm=model)
    text = story_text(settings)
    assert "Mechanical chronicle: written" not in text
    assert "The chapters before 2026-10-13 08:00 are a mechanical chronicle" in text
    assert [t for _, t in narrative.parse_story(text).chapters] == ["Mechanical times", "A new voice"]


def test_a_chapter_dated_outside_its_batch_is_dated_at_the_batch(settings, con, llm_server):
    model = llm(llm_server)
    insert(con, [ep(1, "Lena shipped the importer.")])
    llm_server.script([chapters_answer(("1999-01-01 00:00", "Shipped", "The importer went out."))])
    narrative.narrate(con, settings, "ada", llm=model)
    assert "### [2026-10-12 08:01] Shipped" in story_text(settings)


def test_a_small_context_model_gets_prompts_that_fit_and_older_chapters_condensed(settings, con, llm_server):
    """Each prompt, answer included, fits a 2,400-token context although the story keeps growing."""
    soul(settings)
    model = llm(llm_server, MINDFLOW_LLM_CONTEXT_TOKENS="2400")
    assert model.context_tokens() == 2400
    episodes = [
        ep(i, f"Episode {i}: Lena and I " + "worked on the importer " * 25, importance=0.5)
        for i in range(1, 31)
    ]
    episodes.append(ep(31, "A pasted log: " + "stacktrace line " * 1500))  # ~6,000 tokens alone
    insert(con, episodes)
    prose = " ".join(["We kept going and the importer got better every hour."] * 16)  # ~220 tokens a chapter

    def answer(request):
        if "condensing the older chapters" in request.prompt_text:
            return {"title": "Earlier days", "text": "Lena and I worked on the importer for many hours."}
        return chapters_answer(("2026-10-12 08:00", "Importer work", prose))

    llm_server.responder = answer
    report = narrative.narrate(con, settings, "ada", llm=model, run_id="r1")
    assert report.failed_batches == 0 and report.items == 31 and report.batches >= 5, report
    assert report.summarised > 0
    story = narrative.parse_story(story_text(settings))
    assert story.anchor == T0 + timedelta(minutes=31)
    assert any(t == "Earlier days" for _, t in story.chapters)
    narrate_requests = [r for r in llm_server.requests if "condensing the older" not in r.prompt_text]
    assert len(narrate_requests) == report.batches
    for request in llm_server.requests:
        answer_room = request.body.get("max_tokens") or request.body.get("max_completion_tokens")
        assert narrative.estimate_tokens(request.prompt_text) + answer_room <= 2400
    # The over-long episode was cut to fit, and said so.
    assert any("A pasted log" in r.prompt_text and "…[truncated]" in r.prompt_text for r in narrate_requests)


def test_mechanical_chapters_after_model_chapters_are_marked_and_the_summary_says_mixed(
    settings, con, llm_server
):
    model = llm(llm_server)
    insert(con, [ep(1, "The model era begins.")])
    llm_server.script([chapters_answer(("2026-10-12 08:01", "Model one", "I wrote this myself."))])
    narrative.narrate(con, settings, "ada", llm=model)
    assert narrative.workspace_summary(settings).count("(narrative)") == 1

    # No usable model the next day: the chronicle's chapters are marked where they start.
    insert(
        con, [ep(2, "Decided to ship the importer on Friday.", ts=T0 + timedelta(days=1), kind="decision")]
    )
    narrative.narrate(con, settings, "ada")
    text = story_text(settings)
    assert narrative.MECHANICAL_MARK not in text  # the story did not start as a chronicle
    head, tail = text.split(narrative.MECHANICAL_FROM_MARK)
    assert "Model one" in head and "ship the importer" in tail
    assert narrative.MECHANICAL_FROM_NOTE.splitlines()[0] in tail
    summary = narrative.workspace_summary(settings)
    assert "(narrative and mechanical chronicle)" in summary and "(mechanical chronicle)" not in summary

    # The model is back: marked again, once.
    insert(con, [ep(3, "Shipped.", ts=T0 + timedelta(days=2))])
    llm_server.script([chapters_answer(("2026-10-14 08:00", "Model two", "It shipped."))])
    narrative.narrate(con, settings, "ada", llm=model)
    text = story_text(settings)
    assert text.count(narrative.MODEL_FROM_MARK) == 1 and text.count(narrative.MECHANICAL_FROM_MARK) == 1
    assert (
        text.index(narrative.MECHANICAL_FROM_MARK)
        < text.index(narrative.MODEL_FROM_MARK)
        < text.index("Model two")
    )
    assert [t for _, t in narrative.parse_story(text).chapters][::2] == ["Model one", "Model two"]


def test_a_mechanical_chronicle_continued_by_a_model_is_summarised_as_mixed(settings, con, llm_server):
    insert(con, [ep(1, "Mechanical times.")])
    narrative.narrate(con, settings, "ada")
    assert "(mechanical chronicle)" in narrative.workspace_summary(settings)
    model = llm(llm_server)
    insert(con, [ep(2, "A model arrives.", ts=T0 + timedelta(days=1))])
    llm_server.script([chapters_answer(("2026-10-13 08:00", "A new voice", "I can tell my own story now."))])
    narrative.narrate(con, settings, "ada", llm=model)
    summary = narrative.workspace_summary(settings)
    assert "(narrative and mechanical chronicle)" in summary and "(mechanical chronicle)" not in summary
    # Mechanical again: marked, since the newest chapters were the model's.
    insert(con, [ep(3, "Back to basics.", ts=T0 + timedelta(days=2))])
    narrative.narrate(con, settings, "ada")
    text = story_text(settings)
    assert (
        text.index("A new voice") < text.index(narrative.MECHANICAL_FROM_MARK) < text.index("Back to basics")
    )


def test_placed_personas_are_audit_rows_in_duckdb_too(settings, con):
    placed = narrative.place_personas(settings, REPO / "data" / "samples" / "workspace", con=con)
    assert placed == ["ada/SOUL.md", "bram/SOUL.md"]
    rows = con.execute("SELECT action, target, actor FROM audit_log ORDER BY target").fetchall()
    assert rows == [("CREATE", "ada/SOUL.md", "demo"), ("CREATE", "bram/SOUL.md", "demo")]
    assert narrative.place_personas(settings, REPO / "data" / "samples" / "workspace", con=con) == []
