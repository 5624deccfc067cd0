"""MEMORY.md: four blocks, the hard 3,000-token cap, pinned and vault memories always kept."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import git
import pytest
from test_narrative import insert

from mindflow import core_memory
from mindflow.config import load_settings
from mindflow.errors import MindflowError
from mindflow.llm import estimate_tokens
from mindflow.models import Episode

T0 = datetime(2026, 10, 12, 8, 0)


def ep(n, text, *, kind="message", importance=0.5, trigger=None, being="bram"):
    return Episode(
        episode_id=f"e{n:05d}",
        being_id=being,
        ts=T0 + timedelta(minutes=n),
        speaker="Tomas",
        role="user",
        text=text,
        kind=kind,
        importance=importance,
        trigger=trigger,
    )


def add_node(con, n, text, *, pinned=False, trigger=None, kind="fact", importance=0.6, being="bram"):
    con.execute(
        """
        INSERT INTO nodes (node_id, being_id, scene, importance, kind, trigger, pinned, source_episode_ids,
            episode_ts, created_at, updated_at)
        VALUES (?, ?, {'action': ?, 'actors': [], 'when': [], 'setting': NULL, 'dialogue': NULL,
                'sensory': NULL}, ?, ?, ?, ?, [?], ?, now()::TIMESTAMP, now()::TIMESTAMP)
        """,
        [f"n{n:05d}", being, text, importance, kind, trigger, pinned, f"e{n:05d}", T0 + timedelta(minutes=n)],
    )


def blocks_of(text: str) -> dict[str, list[str]]:
    parts = re.split(r"^## (.+)$", text, flags=re.MULTILINE)
    return {
        parts[i]: [x[2:] for x in parts[i + 1].strip().splitlines() if x.startswith("- ")]
        for i in range(1, len(parts), 2)
    }


def soul(settings):
    path = settings.workspace / "bram" / "SOUL.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("# SOUL.md — bram\n\n## Who I am\nI am bram, a warm companion for Tomas.\n")


def test_four_blocks_mechanical_with_identity_and_vault(settings, con):
    soul(settings)
    insert(
        con,
        [
            ep(1, "Tomas prefers short voice notes before 9am", kind="preference"),
            ep(2, "Book the Porto flights for 11 March", kind="task", importance=0.8),
            ep(3, "Remember this: Miso is allergic to chicken.", trigger="remember", importance=0.9),
        ],
    )
    add_node(con, 3, "Remember this: Miso is allergic to chicken.", trigger="remember")
    add_node(con, 4, "Inês marries Rui on 13 March in Porto.", pinned=True)
    add_node(con, 5, "The half marathon is on 14 March.", kind="fact", importance=0.9)
    report = core_memory.build_core_memory(con, settings, "bram", run_id="run-1")
    text = (settings.workspace / "bram/MEMORY.md").read_text()
    blocks = blocks_of(text)
    assert list(blocks) == ["Identity", "Active Context", "Persona", "Critical Facts"]
    assert blocks["Identity"] == ["I am bram, a warm companion for Tomas."]
    assert any("Porto flights" in x for x in blocks["Active Context"])
    assert blocks["Persona"] == ["Tomas prefers short voice notes before 9am"]
    critical = blocks["Critical Facts"]
    assert critical[0].startswith("Inês marries Rui") and critical[1].startswith("Remember this: Miso")
    assert any("half marathon" in x for x in critical[2:])
    assert report.mode == "mechanical" and report.pinned == 2 and report.tokens <= core_memory.MAX_TOKENS
    head = git.Repo(settings.workspace).head.commit
    assert head.message.startswith("[CREATE] bram/MEMORY.md — core memory (mechanical)")
    assert "Run: run-1" in head.message
    # Unchanged memory: no new commit.
    assert not core_memory.build_core_memory(con, settings, "bram").changed


def test_hard_cap_holds_with_a_flood_of_memories_and_every_pinned_kept(settings, con):
    soul(settings)
    filler = " ".join(["reconciliation"] * 30)
    insert(
        con,
        [ep(i, f"Task {i}: {filler}", kind="task") for i in range(400)]
        + [ep(1000 + i, f"Preference {i}: {filler}", kind="preference") for i in range(200)],
    )
    for i in range(300):
        add_node(con, 2000 + i, f"Fact {i}: {filler}", kind="fact", importance=0.9)
    pinned = [f"Pinned {i}: the vault keeps this" for i in range(25)]
    for i, text in enumerate(pinned):
        add_node(con, 5000 + i, text, pinned=True)
    report = core_memory.build_core_memory(con, settings, "bram")
    text = (settings.workspace / "bram/MEMORY.md").read_text()
    assert estimate_tokens(text) <= 3_000 and report.tokens <= 3_000
    assert report.dropped > 0
    critical = blocks_of(text)["Critical Facts"]
    for p in pinned:
        assert any(line.startswith(p) for line in critical), p
    # Every block still gets a share: none is starved by the others.
    assert all(len(lines) >= 3 for name, lines in blocks_of(text).items() if name != "Identity")


def test_too_many_pinned_is_a_clear_error(settings, con):
    long = " ".join(["essential"] * 50)
    for i in range(400):
        add_node(con, i, f"Pinned {i} {long}", pinned=True)
    with pytest.raises(MindflowError, match="more than fit in MEMORY.md"):
        core_memory.build_core_memory(con, settings, "bram")
    assert not (settings.workspace / "bram/MEMORY.md").exists()


def test_llm_rewrite_keeps_pinned_and_the_cap(settings, con, llm_server):
    from mindflow import llm

    soul(settings)
    llm_server.configure(MINDFLOW_LLM_MAX_RETRIES="0")
    model = llm.resolve(load_settings(), "narrative")
    insert(con, [ep(1, "Book the Porto flights", kind="task")])
    add_node(con, 2, "Inês marries Rui on 13 March in Porto.", pinned=True)
    llm_server.script(
        [
            {
                "identity": "I am bram, Tomas's companion.",
                "active_context": ["Porto flights still to book"],
                "persona": ["Warm, brief"],
                "critical_facts": ["Miso must not eat chicken"],  # the model dropped the pinned fact
            }
        ]
    )
    report = core_memory.build_core_memory(con, settings, "bram", llm=model)
    assert report.mode == "llm"
    text = (settings.workspace / "bram/MEMORY.md").read_text()
    blocks = blocks_of(text)
    assert blocks["Identity"] == ["I am bram, Tomas's companion."]
    assert blocks["Critical Facts"][0].startswith("Inês marries Rui") and "Miso must not eat chicken" in text
    assert "Book the Porto flights" in llm_server.requests[-1].prompt_text  # the draft was sent
    assert report.tokens <= 3_000

    # An invalid answer: the mechanical version is written instead, the run does not fail.
    llm_server.script(["not json at all"])
    fallback = core_memory.build_core_memory(con, settings, "bram", llm=model)
    assert fallback.mode == "mechanical (llm failed)" and fallback.error
    assert "core memory (mechanical)" in (settings.workspace / "bram/MEMORY.md").read_text()
