"""Reflection with human approval: proposals in review mode, decisions, applying exactly what was approved.

Real DuckDB and the real MiniLM in tmp_path; the model parts run against the loopback model
server with valid, partial and broken answers.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import numpy as np
import pytest
from test_patrol import NOW, episode, insert_episodes, make_nodes

from mindflow import lance
from mindflow.config import load_settings
from mindflow.core_memory import build_core_memory
from mindflow.errors import Conflict, MindflowError
from mindflow.loop.proposals import ProposalStore
from mindflow.reflection import procedures
from mindflow.reflection.apply import apply_approved
from mindflow.reflection.cycle import reflect
from mindflow.reflection.decide import Edit, decide, decide_many
from mindflow.reflection.items import pending_items, stale_proposals
from mindflow.reflection.modes import approval_mode

BEING = "ada"
MISO = "Lena's cat Miso is allergic to chicken"
MISO_AGAIN = "Lena's cat Miso is allergic to chicken!"
OTHER = ["Lena runs the Porto half marathon in March", "Lena's sister Ines marries Rui in Porto"]


def _settings(monkeypatch, mode: str = "review", **env):
    monkeypatch.setenv("MINDFLOW_APPROVAL_MODES", f"{BEING}={mode}")
    for name, value in env.items():
        monkeypatch.setenv(name, str(value))
    return load_settings()


def _world(con, settings, embedder) -> dict[str, str]:
    """Two near-duplicate memories of one cluster, two others, one dormant, two contradicting facts."""
    refs = make_nodes(con, embedder, BEING, [MISO, MISO_AGAIN, *OTHER])
    # The roots split these texts at random; the near-duplicates are put in one cluster.
    con.execute(
        "UPDATE nodes SET cluster_id = (SELECT cluster_id FROM nodes WHERE node_id = $1) WHERE node_id = $2",
        [refs[MISO], refs[MISO_AGAIN]],
    )
    cluster = con.execute(
        "SELECT count(DISTINCT cluster_id) FROM nodes WHERE node_id IN (?, ?)", [refs[MISO], refs[MISO_AGAIN]]
    ).fetchone()[0]
    a, b = (np.asarray(v) for (v,) in con.execute(
        "SELECT vector FROM nodes WHERE node_id IN (?, ?) ORDER BY node_id", [refs[MISO], refs[MISO_AGAIN]]
    ).fetchall())  # fmt: skip
    assert cluster == 1 and float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) > 0.9  # preconditions
    con.execute(
        "INSERT INTO decay_scores (memory_ref, being_id, store, kind, base_relevance, created_at, last_accessed, "
        "type_weight, score, status) VALUES (?, ?, 'nodes', 'message', 0.5, ?, ?, 0.8, 0.02, 'dormant')",
        [refs[OTHER[0]], BEING, NOW, NOW],
    )
    for fact_id, value, day in (("f-old", "Lisbon", 1), ("f-new", "Porto", 3)):
        con.execute(
            "INSERT INTO facts (fact_id, being_id, entity, key, value, source_episode_ids, valid_at, created_at) "
            "VALUES (?, ?, 'Lena', 'lives in', ?, ['e0'], ?, ?)",
            [fact_id, BEING, value, datetime(2026, 1, day), NOW],
        )
    build_core_memory(con, settings, BEING, review=False)  # the MEMORY.md a person has today
    # Since then a memory was pinned: the stores call for a new MEMORY.md.
    con.execute("UPDATE nodes SET pinned = TRUE WHERE node_id = ?", [refs[OTHER[1]]])
    return refs


def _snapshot(con, settings) -> tuple:
    nodes = con.execute(
        "SELECT node_id, status, importance, absorbed_into, source_episode_ids FROM nodes ORDER BY node_id"
    ).fetchall()
    facts = con.execute("SELECT fact_id, value, invalid_at FROM facts ORDER BY fact_id").fetchall()
    return nodes, facts, (settings.workspace / BEING / "MEMORY.md").read_text()


def _by_kind(settings) -> dict[str, list]:
    found: dict[str, list] = {}
    for p in ProposalStore(settings.proposals).list(BEING, status="pending"):
        found.setdefault(p.kind, []).append(p)
    return found


def test_review_mode_proposes_everything_and_changes_nothing(monkeypatch, settings, con, embedder):
    settings = _settings(monkeypatch)
    assert approval_mode(settings, BEING) == "review" and approval_mode(settings, "bram") == "auto"
    refs = _world(con, settings, embedder)
    before = _snapshot(con, settings)

    report = reflect(con, settings, BEING, run_id="run-1")

    assert report.mode == "review" and report.number == 1 and report.applied is None
    assert report.proposed == {"merge": 1, "archive": 1, "contradiction": 1, "core": 1}, report.proposed
    after = _snapshot(con, settings)
    assert after[1:] == before[1:]  # facts and MEMORY.md
    assert [r[:4] for r in after[0]] == [r[:4] for r in before[0]]  # no node merged or archived
    kinds = _by_kind(settings)
    merge = kinds["merge"][0].payload
    assert {merge["survivor"], *merge["absorbed"]} == {refs[MISO], refs[MISO_AGAIN]}
    assert kinds["archive"][0].payload["refs"] == [refs[OTHER[0]]]
    contradiction = kinds["contradiction"][0].payload
    assert contradiction["key"] == "lives in" and contradiction["keep"] == "f-new"
    assert "+" in kinds["core"][0].payload["diff"]

    pending = (settings.workspace / BEING / "reflection" / "pending-reflection.md").read_text()
    items = pending_items(ProposalStore(settings.proposals), BEING)
    assert len(items) == 4
    for item in items:  # one numbered item per proposal, in the order `mindflow review` numbers them
        assert f"{item.number}. **[{item.tag}]**" in pending and item.proposal_id in pending
    assert "'Lisbon' vs 'Porto'" in pending
    log = (settings.workspace / BEING / "reflection" / "reflection-log.md").read_text()
    assert "## Reflection 1" in log and "proposed: archive 1, contradiction 1, core 1, merge 1" in log
    row = con.execute("SELECT number, mode, proposals, applied, finished_at FROM reflections").fetchall()
    assert row[0][:4] == (1, "review", 4, 0) and row[0][4] is not None

    # The next cycle finds the same things: nothing is proposed twice.
    again = reflect(con, settings, BEING)
    assert again.number == 2 and again.total == 0 and again.skipped == 3
    assert len(ProposalStore(settings.proposals).list(BEING, status="pending")) == 4


def test_partial_decision_applies_exactly_what_was_approved(monkeypatch, settings, con, embedder):
    settings = _settings(monkeypatch)
    refs = _world(con, settings, embedder)
    reflect(con, settings, BEING, run_id="run-1")
    kinds = _by_kind(settings)
    merge, archive = kinds["merge"][0], kinds["archive"][0]
    contradiction, core = kinds["contradiction"][0], kinds["core"][0]
    edited_core = core.payload["text"].replace("## Persona", "## Persona\n- Lena likes short answers", 1)

    with pytest.raises(MindflowError, match="survivor must be one of"):
        decide_many(settings, BEING, {merge.proposal_id: "approve"}, decided_by="lena",
                    edits={merge.proposal_id: Edit(target="n-nope")})  # fmt: skip
    report = decide_many(
        settings,
        BEING,
        {
            merge.proposal_id: "approve",
            core.proposal_id: "approve",
            contradiction.proposal_id: "reject",
            archive.proposal_id: "defer",
        },
        decided_by="lena",
        edits={core.proposal_id: Edit(text=edited_core), merge.proposal_id: Edit(target=refs[MISO_AGAIN])},
    )
    assert report.approval == "partial" and report.count("approved") == 2
    # Decided, not yet applied: the stores still hold what they held.
    assert con.execute("SELECT count(*) FROM nodes WHERE status = 'dead'").fetchone()[0] == 0

    applied = apply_approved(con, settings, BEING, run_id="run-2")
    assert applied.applied == {"merge": 1, "core": 1} and not applied.failed
    dead = con.execute("SELECT node_id, absorbed_into FROM nodes WHERE status = 'dead'").fetchall()
    assert dead == [(refs[MISO], refs[MISO_AGAIN])]  # the edited target survived
    assert con.execute("SELECT count(*) FROM facts WHERE invalid_at IS NOT NULL").fetchone()[0] == 0
    assert (settings.workspace / BEING / "MEMORY.md").read_text() == edited_core
    assert con.execute("SELECT count(*) FROM nodes WHERE status <> 'active'").fetchone()[0] == 1  # no archive

    audit = con.execute(
        "SELECT action, target, actor, approval, summary FROM audit_log WHERE summary LIKE '%[p-%' ORDER BY ts"
    ).fetchall()
    reflection_id = merge.payload["reflection_id"]
    assert {(a, actor, approval) for a, _, actor, approval, _ in audit} == {
        ("MERGE", f"reflection:{reflection_id}", "partial"),
        ("EDIT", f"reflection:{reflection_id}", "partial"),
    }
    assert any(merge.proposal_id in s and "(edited)" in s for *_, s in audit)
    store = ProposalStore(settings.proposals)
    assert store.get(BEING, merge.proposal_id).applied_at is not None
    assert store.get(BEING, contradiction.proposal_id).applied_at is None

    # Applying again changes nothing and writes no second commit; a decided proposal stays decided.
    assert apply_approved(con, settings, BEING).total == 0
    assert con.execute("SELECT count(*) FROM audit_log WHERE summary LIKE '%[p-%'").fetchone()[0] == 2
    with pytest.raises(Conflict):
        decide(settings, BEING, contradiction.proposal_id, "approve", decided_by="lena")
    # The deferred archive is still waiting; approved now, it is applied by itself.
    decide(settings, BEING, archive.proposal_id, "approve", decided_by="lena")
    assert apply_approved(con, settings, BEING).applied == {"archive": 1}
    assert con.execute("SELECT status FROM nodes WHERE node_id = ?", [refs[OTHER[0]]]).fetchone()[0] == "dead"
    log = (settings.workspace / BEING / "reflection" / "reflection-log.md").read_text()
    assert f"merge `{merge.proposal_id}` (partial): 1 changed" in log


def test_an_applied_archive_and_merge_are_history_rows_of_their_run_that_say_what_became(
    monkeypatch, settings, con, embedder
):
    """The archival a person approved makes the memory dead: its row reads `dead`, from the status it
    had, like the patrol's; it and the merge's rows carry the approvals run's id."""
    settings = _settings(monkeypatch)
    refs = _world(con, settings, embedder)
    reflect(con, settings, BEING, run_id="run-1")
    kinds = _by_kind(settings)
    decide_many(
        settings,
        BEING,
        {kinds["archive"][0].proposal_id: "approve", kinds["merge"][0].proposal_id: "approve"},
        decided_by="lena",
    )
    assert apply_approved(con, settings, BEING, run_id="run-2").applied == {"archive": 1, "merge": 1}
    rows = con.execute(
        "SELECT memory_ref, operation, before::VARCHAR, after->>'status', actor, run_id FROM history "
        "WHERE ts = (SELECT max(ts) FROM history) ORDER BY rowid"
    ).fetchall()
    archived = [r for r in rows if r[0] == refs[OTHER[0]]]
    actor = f"reflection:{kinds['archive'][0].payload['reflection_id']}"
    assert archived == [(refs[OTHER[0]], "dead", '{"status":"active"}', "dead", actor, "run-2")]
    status = con.execute("SELECT status FROM nodes WHERE node_id = ?", [refs[OTHER[0]]]).fetchone()[0]
    assert status == "dead"  # what the row says it became
    merged = [r for r in rows if r[1] in ("merged", "absorbed")]
    assert len(merged) == 2 and {r[5] for r in merged} == {"run-2"}


def test_a_crash_between_the_change_and_its_mark_applies_once(monkeypatch, settings, con, embedder):
    settings = _settings(monkeypatch)
    _world(con, settings, embedder)
    reflect(con, settings, BEING)
    contradiction = _by_kind(settings)["contradiction"][0]
    decide(settings, BEING, contradiction.proposal_id, "approve", decided_by="lena")

    def killed(*args, **kwargs):
        raise KeyboardInterrupt  # the run dies after the change and its audit commit

    with monkeypatch.context() as patched:
        patched.setattr(ProposalStore, "mark_applied", killed)
        with pytest.raises(KeyboardInterrupt):
            apply_approved(con, settings, BEING)
    assert apply_approved(con, settings, BEING).applied == {"contradiction": 1}
    assert con.execute("SELECT fact_id FROM facts WHERE invalid_at IS NOT NULL").fetchall() == [("f-old",)]
    assert con.execute("SELECT count(*) FROM history WHERE operation = 'superseded'").fetchone()[0] == 1
    assert con.execute("SELECT count(*) FROM audit_log WHERE summary LIKE '%[p-%'").fetchone()[0] == 1


def test_auto_mode_applies_its_own_proposals(monkeypatch, settings, con, embedder):
    settings = _settings(monkeypatch, "auto")
    refs = _world(con, settings, embedder)
    report = reflect(con, settings, BEING, run_id="run-1")
    assert report.mode == "auto" and report.applied.total == 4 and report.pending == 0
    assert (
        con.execute("SELECT count(*) FROM nodes WHERE status = 'dead'").fetchone()[0] == 2
    )  # merge + archive
    assert con.execute("SELECT fact_id FROM facts WHERE invalid_at IS NOT NULL").fetchall() == [("f-old",)]
    approvals = {
        r[0] for r in con.execute("SELECT approval FROM audit_log WHERE summary LIKE '%[p-%'").fetchall()
    }
    assert approvals == {"auto"}
    log = (settings.workspace / BEING / "reflection" / "reflection-log.md").read_text()
    assert (
        all(f"- {kind} `" in log for kind in ("merge", "archive", "contradiction", "core"))
        and "(auto)" in log
    )
    assert con.execute("SELECT absorbed_into FROM nodes WHERE status = 'dead' AND absorbed_into IS NOT NULL"
                       ).fetchone()[0] in (refs[MISO], refs[MISO_AGAIN])  # fmt: skip


def test_review_mode_gates_memory_md_of_the_narrative_and_obeys_forget(monkeypatch, settings, con, embedder):
    settings = _settings(monkeypatch)
    _world(con, settings, embedder)
    current = (settings.workspace / BEING / "MEMORY.md").read_text()
    report = build_core_memory(con, settings, BEING, trigger="narrative job")
    assert report.proposal_id and (settings.workspace / BEING / "MEMORY.md").read_text() == current
    # A newer rewrite replaces the pending one: one MEMORY.md diff waits at a time.
    con.execute("UPDATE nodes SET pinned = TRUE WHERE scene.action = ?", [OTHER[0]])
    newer = build_core_memory(con, settings, BEING, trigger="narrative job")
    store = ProposalStore(settings.proposals)
    assert [p.proposal_id for p in store.list(BEING, status="pending", kind="core")] == [newer.proposal_id]
    assert store.get(BEING, report.proposal_id).payload["superseded_by"] == newer.proposal_id


def test_stale_proposals_are_flagged(monkeypatch, settings, con, embedder):
    settings = _settings(monkeypatch)
    _world(con, settings, embedder)
    reflect(con, settings, BEING)
    store = ProposalStore(settings.proposals)
    assert stale_proposals(store, BEING) == []
    later = datetime.now() + timedelta(hours=25)
    assert len(stale_proposals(store, BEING, now=later)) == 4


# --------------------------------------------------------------------------- with a model


def _answers(valid: bool = True):
    """A responder for the loopback server: each reflection prompt gets its own answer."""

    def respond(received):
        text = received.prompt_text
        if "reflection log" in text.lower():
            return {"insights": ["Merges of near-duplicates were approved; archivals deferred."]}
        if "You consolidate" in text:
            return {"verdicts": [{"group": 1, "same": True, "reason": "both say the same"}]} if valid else "{"
        if "procedures" in text and "Decisions and tasks" in text:
            if not valid:
                return {"procedures": [{"name": "x", "trigger": "y", "steps": ["z"], "learned_from": ["e9"],
                                        "confidence": 0.9}, {"name": "broken"}]}  # fmt: skip
            return {
                "procedures": [
                    {
                        "name": "Weekly vet check",
                        "trigger": "Miso's weekly check-up is due",
                        "steps": ["Book the vet on Monday", "Bring the chicken-free food", "Log the weight"],
                        "learned_from": ["p0", "p1"],
                        "confidence": 0.8,
                    }
                ]
            }
        if "core memory" in text:
            return {
                "identity": "I am ada, Lena's companion.",
                "active_context": ["Porto half marathon in March"],
                "persona": ["Lena likes short answers"],
                "critical_facts": ["Miso must never eat chicken"],
            }
        return 500

    return respond


def _with_decisions(con):
    insert_episodes(
        con,
        [
            episode(BEING, f"p{i}", text, kind="task", ts=NOW + timedelta(minutes=i))
            for i, text in enumerate(
                [
                    "Booked the vet for Miso on Monday and packed the chicken-free food",
                    "Booked the vet again on Monday, chicken-free food packed, weight logged",
                ]
            )
        ],
    )


def test_model_path_valid_answers(monkeypatch, settings, con, embedder, llm_server):
    llm_server.configure(MINDFLOW_LLM_MAX_RETRIES="0")
    settings = _settings(monkeypatch)
    _world(con, settings, embedder)
    _with_decisions(con)
    notes_dir = settings.workspace / BEING / "reflection"
    llm_server.responder = _answers()
    from mindflow import llm as llm_module

    model = llm_module.resolve(settings, "reflection")
    first = reflect(con, settings, BEING, llm=model)
    assert first.proposed.get("procedure") == 1 and not first.errors, first.errors
    assert first.insights == []  # nothing to meta-reflect on in the first cycle
    core = _by_kind(settings)["core"][0].payload
    assert "I am ada, Lena's companion." in core["text"] and core["mode"] == "llm"
    assert first.output_tokens <= settings.reflection_budget_tokens
    assert "## Reflection 1" in (notes_dir / "reflection-log.md").read_text()

    second = reflect(con, settings, BEING, llm=model)  # the log exists now: phase 2 runs
    assert second.insights == ["Merges of near-duplicates were approved; archivals deferred."]
    assert "## Meta-reflection" in (notes_dir / "pending-reflection.md").read_text()

    procedure = _by_kind(settings)["procedure"][0]
    decide(settings, BEING, procedure.proposal_id, "approve", decided_by="lena")
    assert apply_approved(con, settings, BEING).applied == {"procedure": 1}
    saved = procedures.current(con, BEING)
    assert [(p["name"], p["version"], list(p["learned_from"])) for p in saved] == [
        ("Weekly vet check", 1, ["p0", "p1"])
    ]


def test_model_path_partial_and_broken_answers_leave_memory_as_it_was(
    monkeypatch, settings, con, embedder, llm_server
):
    llm_server.configure(MINDFLOW_LLM_MAX_RETRIES="0")
    settings = _settings(monkeypatch)
    _world(con, settings, embedder)
    _with_decisions(con)
    before = _snapshot(con, settings)
    from mindflow import llm as llm_module

    # Partial: the procedures answer holds one procedure citing an unshown episode and one broken.
    llm_server.responder = _answers(valid=False)
    report = reflect(con, settings, BEING, llm=llm_module.resolve(settings, "reflection"))
    assert "procedure" not in report.proposed and report.errors
    assert {"merge", "archive", "contradiction", "core"} <= set(report.proposed)  # the mechanical part stands
    assert _snapshot(con, settings) == before

    # Broken: every model call fails; the cycle still proposes the mechanical findings.
    for p in ProposalStore(settings.proposals).list(BEING, status="pending"):
        decide(settings, BEING, p.proposal_id, "reject", decided_by="lena")
    llm_server.responder = lambda received: "not json at all"
    broken = reflect(con, settings, BEING, llm=llm_module.resolve(settings, "reflection"))
    assert broken.errors and any("core rewrite" in e for e in broken.errors), broken.errors
    assert broken.proposed == {"core": 1}  # the mechanical MEMORY.md (rejected ones are not proposed again)
    assert _by_kind(settings)["core"][0].payload["mode"] == "mechanical (llm failed)"
    assert _snapshot(con, settings) == before


def test_the_output_budget_stops_model_calls(monkeypatch, settings, con, embedder, llm_server):
    from llm_server import Reply

    from mindflow import llm as llm_module

    llm_server.configure(MINDFLOW_LLM_MAX_RETRIES="0")
    settings = _settings(monkeypatch, MINDFLOW_REFLECTION_BUDGET_TOKENS=4_000)
    _world(con, settings, embedder)
    _with_decisions(con)
    respond = _answers()
    llm_server.responder = lambda received: Reply(text=json.dumps(respond(received)), output_tokens=1_900)
    report = reflect(con, settings, BEING, llm=llm_module.resolve(settings, "reflection"))
    # Each answer spends 1,900 of the 4,000 tokens: what is left cannot hold a MEMORY.md (3,000),
    # which is rebuilt mechanically, and at most two calls were made.
    assert 1 <= len(llm_server.requests) <= 2, [r.prompt_text[:60] for r in llm_server.requests]
    assert _by_kind(settings)["core"][0].payload["mode"] == "mechanical"
    assert report.output_tokens >= 1_900


# --------------------------------------------------------------------------- procedures


def test_procedures_version_never_overwrite_and_search(settings, con, embedder, tmp_path):
    first = procedures.ProcedureIn(
        "Weekly vet check", "Miso's check-up is due", ["Book the vet", "Log weight"]
    )
    saved = procedures.save(con, BEING, first, source="cli")
    assert (saved.version, saved.created) == (1, True)
    assert procedures.save(con, BEING, first, source="cli").created is False  # same content: no version
    second = procedures.ProcedureIn(
        "weekly  vet check",
        "Miso's check-up is due",
        ["Book the vet", "Pack chicken-free food", "Log weight"],
    )
    assert procedures.save(con, BEING, second, source="api").version == 2
    history = procedures.versions(con, BEING, "Weekly vet check")
    assert [v["version"] for v in history] == [1, 2] and history[0]["superseded_at"] is not None
    assert history[0]["steps"] == ["Book the vet", "Log weight"]  # version 1 kept as it was
    decay = con.execute("SELECT store, type_weight, access_count FROM decay_scores").fetchall()
    assert decay == [("procedures", 1.0, 2)]
    procedures.save(con, BEING, procedures.ProcedureIn("Release the app", "a release is due", ["Tag", "Ship"]),
                    source="cli")  # fmt: skip
    procedures.save(con, "bram", procedures.ProcedureIn("Bram's own", "never for ada", ["x"]), source="cli")
    with pytest.raises(MindflowError, match="needs a name"):
        procedures.ProcedureIn.from_payload({"name": "", "trigger": "t", "steps": ["s"]})

    db = lance.connect(settings.lance_path)
    assert procedures.publish(con, db, embedder, [BEING, "bram"]) == 3
    table = lance.open_table(db, procedures.TABLE)
    found = procedures.search(table, BEING, embedder.encode(["what to do when the cat sees the vet"])[0], k=2)
    assert found[0]["name"] == "weekly  vet check" and found[0]["version"] == 2
    assert {r["being_id"] for r in found} == {BEING}
    assert [r["name"] for r in procedures.search(table, BEING, None, k=10)] == [
        "Release the app",
        "weekly  vet check",
    ]


def test_evolution_records_a_milestone_at_reflection_10(monkeypatch, settings, con, embedder):
    settings = _settings(monkeypatch)
    _world(con, settings, embedder)
    evolution = settings.workspace / BEING / "reflection" / "evolution.md"
    milestones = []
    for _ in range(10):
        milestones.append(reflect(con, settings, BEING).milestone)
    assert milestones == [False] * 9 + [True]
    text = evolution.read_text()
    assert "## Milestone: reflection 10" in text and "- reflections: 10; proposals made: 4" in text
    assert "- memories: active 4" in text and "current facts: 2; procedures: 0" in text
    log = (settings.workspace / BEING / "reflection" / "reflection-log.md").read_text()
    assert log.count("## Reflection ") == 10
