"""decay_scores against the formula, its statuses, cap, pinning, retention and backfills.

relevance = base * exp(-0.03 * days since last access) * log2(access_count + 1) * type_weight,
capped at 1.5 * type_weight; pinned rows score base * type_weight and stay active.
Expected values are computed here with math / numpy, never with the library's own code.
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime, timedelta

import duckdb
import numpy as np
import pyarrow as pa
import pytest

from mindflow.decay import DecayParams, compute_scores, register_nodes, run_decay
from mindflow.inbox import ingest
from mindflow.patrol import run_patrol

AS_OF = datetime(2026, 3, 1, 12, 0, 0)
BEING = "ada"
WEIGHT = {"core": 1.5, "episodic": 0.8, "semantic": 1.2, "procedural": 1.0}


# --------------------------------------------------------------------------- helpers


def add_row(
    con,
    ref,
    *,
    base,
    weight,
    last,
    created=None,
    access=1,
    pinned=False,
    retention_from=None,
    retention_days=None,
    status="active",
    kind="message",
):
    con.execute(
        "INSERT INTO decay_scores (memory_ref, being_id, store, kind, base_relevance, created_at, "
        "last_accessed, access_count, type_weight, score, status, pinned, "
        "retention_from, retention_days, as_of) "
        "VALUES (?, ?, 'nodes', ?, ?, ?, ?, ?, ?, NULL, ?, ?, ?, ?, NULL)",
        [
            ref,
            BEING,
            kind,
            base,
            created or last,
            last,
            access,
            weight,
            status,
            pinned,
            retention_from,
            retention_days,
        ],
    )


def row(con, ref):
    names = [
        "score",
        "status",
        "as_of",
        "base_relevance",
        "type_weight",
        "access_count",
        "created_at",
        "last_accessed",
        "retention_from",
        "retention_days",
        "kind",
        "pinned",
        "store",
        "being_id",
    ]
    values = con.execute(
        f"SELECT {', '.join(names)} FROM decay_scores WHERE memory_ref = ?", [ref]
    ).fetchall()[0]
    return dict(zip(names, values, strict=True))


def expected(base, weight, days, access, cap=1.5):
    return min(cap * weight, base * math.exp(-0.03 * days) * math.log2(access + 1) * weight)


def status_of(score):
    if score >= 0.5:
        return "active"
    if score >= 0.2:
        return "fading"
    if score >= 0.05:
        return "dormant"
    return "archived"


# --------------------------------------------------------------------------- the formula


CASES = [
    # ref, base, weight, days since last access, access_count
    ("fresh", 0.8, WEIGHT["episodic"], 0.0, 1),
    ("day-and-a-half", 0.6, WEIGHT["semantic"], 1.5, 2),
    ("ten-days", 0.9, WEIGHT["procedural"], 10.0, 3),
    ("odd-hours", 0.7, WEIGHT["core"], 45.25, 1),
    ("old-but-used", 0.4, WEIGHT["episodic"], 200.0, 7),
    ("to-the-second", 0.55, WEIGHT["semantic"], 3 + 17 / 86400, 4),
]


def test_score_follows_the_formula(con):
    for ref, base, weight, days, access in CASES:
        # Created long before the last access: decay runs from the last access.
        last = AS_OF - timedelta(days=days)
        add_row(
            con, ref, base=base, weight=weight, last=last, created=last - timedelta(days=90), access=access
        )

    assert compute_scores(con, AS_OF) == len(CASES)

    for ref, base, weight, days, access in CASES:
        got = row(con, ref)
        want = expected(base, weight, days, access)
        assert got["score"] == pytest.approx(want, rel=1e-12, abs=1e-15), ref
        assert got["status"] == status_of(want), ref
        assert got["as_of"] == AS_OF
    # Hand-checked anchors, in case the helper and the code were ever wrong the same way.
    assert row(con, "fresh")["score"] == pytest.approx(0.64)
    assert row(con, "ten-days")["score"] == pytest.approx(0.9 * math.exp(-0.3) * 2.0)
    assert row(con, "odd-hours")["score"] == pytest.approx(0.27016839321115)
    assert row(con, "odd-hours")["status"] == "fading"
    assert row(con, "old-but-used")["status"] == "archived"  # 0.4 * e^-6 * 3 * 0.8 = 0.0024


SMALLER = float(np.nextafter(1.0, 0.0))  # the largest double below 1


@pytest.mark.parametrize(
    "base, weight, boundary, on_it, status",
    [
        (0.5, WEIGHT["procedural"], 0.5, True, "active"),
        (0.625, WEIGHT["episodic"], 0.5, True, "active"),  # 0.625 * 0.8 == 0.5 exactly
        (0.5 * SMALLER, WEIGHT["procedural"], 0.5, False, "fading"),
        (0.2, WEIGHT["procedural"], 0.2, True, "fading"),
        (0.25, WEIGHT["episodic"], 0.2, True, "fading"),  # == 0.2 exactly
        (0.2 * SMALLER, WEIGHT["procedural"], 0.2, False, "dormant"),
        (0.05, WEIGHT["procedural"], 0.05, True, "dormant"),
        (0.0625, WEIGHT["episodic"], 0.05, True, "dormant"),  # == 0.05 exactly
        (0.05 * SMALLER, WEIGHT["procedural"], 0.05, False, "archived"),
        (0.0, WEIGHT["semantic"], 0.05, False, "archived"),
    ],
)
def test_status_boundaries(con, base, weight, boundary, on_it, status):
    score = base * weight  # access 1 (log2 2 = 1), accessed at as_of (exp 0 = 1)
    if on_it:
        assert score == boundary
    else:
        assert score < boundary
    add_row(con, "m", base=base, weight=weight, last=AS_OF)

    compute_scores(con, AS_OF)

    got = row(con, "m")
    assert got["score"] == score
    assert got["status"] == status


def test_score_is_capped_at_one_and_a_half_type_weights(con):
    add_row(con, "daily-recall", base=1.0, weight=WEIGHT["episodic"], last=AS_OF, access=1000)
    add_row(con, "core-thrice", base=1.0, weight=WEIGHT["core"], last=AS_OF, access=3)
    add_row(con, "just-under", base=0.7, weight=WEIGHT["procedural"], last=AS_OF, access=3)
    add_row(
        con,
        "old-and-frequent",
        base=1.0,
        weight=WEIGHT["semantic"],
        last=AS_OF - timedelta(days=20),
        access=63,
    )

    compute_scores(con, AS_OF)

    assert row(con, "daily-recall")["score"] == pytest.approx(1.5 * 0.8)  # raw 7.97
    assert row(con, "core-thrice")["score"] == pytest.approx(1.5 * 1.5)  # raw 3.0
    assert row(con, "just-under")["score"] == pytest.approx(1.4)  # 0.7 * 2, below the cap of 1.5
    raw = 1.0 * math.exp(-0.6) * 6.0 * 1.2  # 3.95
    assert raw > 1.8
    assert row(con, "old-and-frequent")["score"] == pytest.approx(1.8)
    assert {row(con, r)["status"] for r in ("daily-recall", "core-thrice", "just-under")} == {"active"}


def test_pinned_never_decays(con):
    long_ago = AS_OF - timedelta(days=400)
    add_row(con, "pinned", base=0.6, weight=WEIGHT["core"], last=long_ago, pinned=True)
    add_row(con, "pinned-faint", base=0.02, weight=WEIGHT["core"], last=long_ago, pinned=True)
    add_row(con, "pinned-used", base=0.5, weight=WEIGHT["core"], last=long_ago, access=1000, pinned=True)
    add_row(
        con,
        "pinned-expired",
        base=0.3,
        weight=WEIGHT["core"],
        last=long_ago,
        pinned=True,
        retention_from=long_ago,
        retention_days=7,
    )
    add_row(con, "twin", base=0.6, weight=WEIGHT["core"], last=long_ago)

    compute_scores(con, AS_OF)

    assert row(con, "pinned")["score"] == pytest.approx(0.9)
    assert row(con, "pinned-faint")["score"] == pytest.approx(0.03)
    assert row(con, "pinned-used")["score"] == pytest.approx(0.75)
    assert row(con, "pinned-expired")["score"] == pytest.approx(0.45)
    for ref in ("pinned", "pinned-faint", "pinned-used", "pinned-expired"):
        assert row(con, ref)["status"] == "active", ref
    # The same memory unpinned has all but vanished.
    assert row(con, "twin")["score"] == pytest.approx(0.6 * math.exp(-12) * 1.5)
    assert row(con, "twin")["status"] == "archived"


def test_backfill_leaves_rows_created_later_untouched(con):
    day0 = datetime(2026, 1, 1)
    add_row(con, "early", base=0.8, weight=WEIGHT["procedural"], last=day0)
    add_row(con, "late", base=0.8, weight=WEIGHT["procedural"], last=day0 + timedelta(days=20))

    assert compute_scores(con, day0 + timedelta(days=10)) == 1
    late = row(con, "late")
    assert (late["score"], late["status"], late["as_of"]) == (None, "active", None)
    assert row(con, "early")["score"] == pytest.approx(0.8 * math.exp(-0.3))

    assert compute_scores(con, day0 + timedelta(days=40)) == 2
    assert row(con, "early")["score"] == pytest.approx(0.8 * math.exp(-1.2))
    assert row(con, "late")["score"] == pytest.approx(0.8 * math.exp(-0.6))

    # Re-running an earlier day (a backfill) gives that day's numbers again for the rows that
    # existed then, and leaves the later row as the later run left it.
    assert compute_scores(con, day0 + timedelta(days=10)) == 1
    assert row(con, "early")["score"] == pytest.approx(0.8 * math.exp(-0.3))
    assert row(con, "early")["as_of"] == day0 + timedelta(days=10)
    assert row(con, "late")["score"] == pytest.approx(0.8 * math.exp(-0.6))
    assert row(con, "late")["as_of"] == day0 + timedelta(days=40)
    # A row created exactly at as_of is included (decayed by zero days).
    assert compute_scores(con, day0 + timedelta(days=20)) == 2
    assert row(con, "late")["score"] == pytest.approx(0.8)


@pytest.mark.parametrize(
    "days, after, archived",
    [
        (7, timedelta(0), False),  # exactly 7 days after the episode: still kept
        (7, timedelta(microseconds=1), True),  # the window is closed: strictly after archives
        (7, timedelta(days=1), True),  # day 8
        (30, timedelta(0), False),
        (30, timedelta(microseconds=1), True),
        (30, timedelta(days=1), True),  # day 31
        (None, timedelta(days=60), False),  # important enough: no retention window at all
    ],
)
def test_retention_window_edges(con, days, after, archived):
    episode_ts = datetime(2026, 1, 10, 8, 30, 0)
    as_of = episode_ts + timedelta(days=days or 0) + after
    # Recalled often and recently, so the score alone would keep it active.
    add_row(
        con,
        "entry",
        base=1.0,
        weight=WEIGHT["episodic"],
        last=as_of - timedelta(hours=1),
        created=episode_ts,
        access=100,
        retention_from=episode_ts,
        retention_days=days,
    )

    compute_scores(con, as_of)

    got = row(con, "entry")
    assert got["score"] == pytest.approx(1.2)
    assert got["status"] == ("archived" if archived else "active")


# --------------------------------------------------------------------------- from real nodes


def write_inbox(settings, name, text):
    folder = settings.inbox / BEING
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text, encoding="utf-8")


def test_register_nodes_made_by_the_patrol(con, settings, embedder):
    created = datetime(2026, 3, 1, 6, 0, 0)
    year_ago = "2025-03-01T10:00:00Z"
    lines = [
        {
            "id": "fact",
            "ts": "2026-02-28T10:00:00Z",
            "kind": "fact",
            "importance": 0.7,
            "text": "My passport expires in October.",
        },
        {
            "id": "decision",
            "ts": "2026-02-28T11:00:00Z",
            "kind": "decision",
            "importance": 0.6,
            "text": "We decided to use Postgres for the billing service.",
        },
        {
            "id": "remember",
            "ts": "2026-02-28T12:00:00Z",
            "importance": 0.2,
            "text": "Please remember that my sister's birthday is on May 3.",
        },
        {"id": "old", "ts": year_ago, "text": "We adopted a cat named Miso."},
        {
            "id": "pinned",
            "ts": "2026-02-28T13:00:00Z",
            "kind": "preference",
            "importance": 0.4,
            "text": "I prefer window seats on trains.",
        },
    ]
    write_inbox(settings, "chat.jsonl", "\n".join(json.dumps(x) for x in lines) + "\n")
    assert ingest(con, settings.inbox, date(2025, 1, 1), date(2026, 3, 1), now=created).new == 5
    assert con.execute("SELECT trigger FROM episodes WHERE episode_id = 'remember'").fetchall() == [
        ("remember",)
    ]
    run_patrol(con, BEING, embedder, now=created)
    node_of = dict(con.execute("SELECT source_episode_ids[1], node_id FROM nodes").fetchall())
    con.execute("UPDATE nodes SET pinned = TRUE WHERE node_id = ?", [node_of["pinned"]])
    # A node formed after as_of is not registered yet.
    write_inbox(
        settings,
        "later.jsonl",
        json.dumps({"id": "later", "ts": "2026-03-01T20:00:00Z", "text": "Bought a new kettle."}) + "\n",
    )
    ingest(con, settings.inbox, date(2026, 3, 1), date(2026, 3, 1), now=created)
    run_patrol(con, BEING, embedder, now=created + timedelta(days=1))

    assert len(register_nodes(con, created, DecayParams())) == 5
    assert register_nodes(con, created, DecayParams()) == []

    refs = {eid: row(con, node_of[eid]) for eid in ("fact", "decision", "remember", "old", "pinned")}
    assert con.execute("SELECT count(*) FROM decay_scores").fetchall()[0][0] == 5
    assert {e: (r["kind"], r["base_relevance"], r["type_weight"]) for e, r in refs.items()} == {
        "fact": ("fact", 0.7, 1.2),
        "decision": ("decision", 0.6, 1.0),
        "remember": ("message", 1.0, 0.8),  # explicit "remember": full base relevance
        "old": ("message", 0.5, 0.8),  # no importance given: 0.5
        "pinned": ("preference", 0.4, 1.5),  # pinned counts as core
    }
    for eid, r in refs.items():
        # Creation is the first access: not the episode's own date.
        assert (r["access_count"], r["created_at"], r["last_accessed"]) == (1, created, created), eid
        assert (r["store"], r["being_id"], r["status"], r["score"]) == ("nodes", BEING, "active", None)
        assert r["pinned"] == (eid == "pinned")
        assert (r["retention_from"], r["retention_days"]) == (None, None)  # not a daily log

    # The year-old memory arrives as a fresh one: 0.5 * 1 * log2(2) * 0.8 = 0.4, fading, not archived.
    compute_scores(con, created)
    assert row(con, node_of["old"])["score"] == pytest.approx(0.4)
    assert row(con, node_of["old"])["status"] == "fading"
    assert row(con, node_of["remember"])["score"] == pytest.approx(0.8)
    assert row(con, node_of["remember"])["status"] == "active"
    # Ten days later it has decayed for ten days, counted from its creation.
    report = run_decay(con, created + timedelta(days=10))
    assert report.registered == 1  # the later node
    assert row(con, node_of["old"])["score"] == pytest.approx(0.4 * math.exp(-0.3))
    assert row(con, node_of["pinned"])["score"] == pytest.approx(0.4 * 1.5)
    assert row(con, node_of["fact"])["score"] == pytest.approx(0.7 * math.exp(-0.3) * 1.2)


def test_daily_log_retention_from_episode_time(con, settings, embedder):
    day = date(2026, 1, 5)
    midnight = datetime(2026, 1, 5)
    entries = [
        ("keep", "fact|i=0.9", "The office moved to the fourth floor."),
        ("keep-edge", "i=0.8", "Signed the lease for the new flat."),
        ("medium", "i=0.5", "Lunch with Priya at the noodle bar."),
        ("medium-edge", "i=0.4", "Watered the plants on the balcony."),
        ("short-edge", "i=0.39", "The bus was five minutes late."),
        ("short", "i=0.3", "It rained a little in the afternoon."),
        ("untagged", "message", "Listened to a podcast about volcanoes."),
    ]
    body = "# 2026-01-05\n" + "".join(f"- [{tag}] {text}\n" for _, tag, text in entries)
    write_inbox(settings, "2026-01-05.md", body)
    assert ingest(con, settings.inbox, day, day, now=midnight + timedelta(hours=20)).new == 7
    run_patrol(con, BEING, embedder, now=midnight + timedelta(hours=20))
    by_text = dict(
        con.execute(
            "SELECT e.text, n.node_id FROM nodes n JOIN episodes e ON e.episode_id = n.source_episode_ids[1]"
        ).fetchall()
    )
    ref = {name: by_text[text] for name, _, text in entries}
    ts = dict(con.execute("SELECT text, ts FROM episodes").fetchall())

    run_decay(con, midnight + timedelta(days=1))
    windows = {name: row(con, ref[name])["retention_days"] for name, _, _ in entries}
    assert windows == {
        "keep": None,
        "keep-edge": None,
        "medium": 30,
        "medium-edge": 30,
        "short-edge": 7,
        "short": 7,
        "untagged": None,
    }
    for name, _, text in entries:
        r = row(con, ref[name])
        # Measured from the episode's own time, while decay runs from the node's creation.
        assert r["retention_from"] == (None if name == "untagged" else ts[text])
        assert r["last_accessed"] == midnight + timedelta(hours=20)

    def archived(as_of):
        run_decay(con, as_of)
        return {name for name, _, _ in entries if row(con, ref[name])["status"] == "archived"}

    # Bullets are stamped midnight + their line number in seconds: day 7 is still inside.
    assert archived(midnight + timedelta(days=7)) == set()
    assert archived(midnight + timedelta(days=8)) == {"short", "short-edge"}
    assert archived(midnight + timedelta(days=30)) == {"short", "short-edge"}
    assert archived(midnight + timedelta(days=31)) == {"short", "short-edge", "medium", "medium-edge"}
    # The important ones are judged by their score alone: still fading, a month on.
    assert row(con, ref["keep"])["status"] == "fading"  # 0.9 * e^-0.9 * 1.2 = 0.49
    assert row(con, ref["keep-edge"])["status"] == "fading"  # 0.8 * e^-0.9 * 0.8 = 0.26


# --------------------------------------------------------------------------- run_decay


def statuses(con):
    return dict(con.execute("SELECT memory_ref, status FROM decay_scores").fetchall())


def test_run_decay_moves_statuses_and_reports_net_changes(con, settings, embedder):
    day0 = datetime(2026, 2, 1)
    add_row(con, "strong", base=1.0, weight=WEIGHT["procedural"], last=day0)  # 1.0 -> 0.41
    add_row(con, "medium", base=0.3, weight=WEIGHT["procedural"], last=day0)  # 0.3 -> 0.12
    add_row(con, "weak", base=0.1, weight=WEIGHT["procedural"], last=day0)  # 0.1 -> 0.04
    add_row(con, "used", base=1.0, weight=WEIGHT["procedural"], last=day0, access=3)  # 1.5 -> 0.81

    first = run_decay(con, day0)
    assert (first.registered, first.scored) == (0, 4)
    assert statuses(con) == {"strong": "active", "medium": "fading", "weak": "dormant", "used": "active"}
    assert first.statuses == {"active": 2, "fading": 1, "dormant": 1, "archived": 0}
    # Rows start active, so the first scoring moves two of them out of 'active'.
    assert first.changes == {"active": -2, "fading": 1, "dormant": 1, "archived": 0}

    second = run_decay(con, day0 + timedelta(days=30))
    assert statuses(con) == {"strong": "fading", "medium": "dormant", "weak": "archived", "used": "active"}
    assert second.statuses == {"active": 1, "fading": 1, "dormant": 1, "archived": 1}
    assert second.changes == {"active": -1, "fading": 0, "dormant": 0, "archived": 1}

    # The same day again: nothing moves.
    again = run_decay(con, day0 + timedelta(days=30))
    assert again.changes == {s: 0 for s in ("active", "fading", "dormant", "archived")}
    assert again.statuses == second.statuses

    # Memories formed since then are reported as new, arriving as 'active'; the changes are
    # what scoring moved: one new memory (0.5 * 0.8 = 0.4) goes straight on to 'fading'.
    write_inbox(
        settings,
        "new.jsonl",
        "\n".join(
            json.dumps({"id": i, "ts": "2026-03-05T09:00:00Z", "text": t, "importance": imp})
            for i, t, imp in (("n1", "Bought a new kettle.", 0.9), ("n2", "The kettle whistles.", 0.5))
        )
        + "\n",
    )
    ingest(con, settings.inbox, date(2026, 3, 5), date(2026, 3, 5), now=datetime(2026, 3, 5, 10))
    run_patrol(con, BEING, embedder, now=datetime(2026, 3, 5, 10))
    later = run_decay(con, datetime(2026, 3, 5, 10))
    assert later.registered == 2
    # 'used' decays from 0.81 to 0.76, still active; 'strong' and 'medium' stay where they were.
    assert later.statuses == {"active": 2, "fading": 2, "dormant": 1, "archived": 1}
    assert later.changes == {"active": -1, "fading": 1, "dormant": 0, "archived": 0}
    for report in (first, second, again, later):
        assert sum(report.changes.values()) == 0


def decay_history(con) -> list[tuple[str, str, str]]:
    return con.execute(
        "SELECT memory_ref, before ->> 'decay_status', after ->> 'decay_status' FROM history "
        "WHERE operation = 'decay_status' ORDER BY memory_ref, ts"
    ).fetchall()


def test_a_failed_status_update_leaves_no_history_and_its_retry_writes_each_change_once(con):
    day0 = datetime(2026, 2, 1)
    add_row(con, "strong", base=1.0, weight=WEIGHT["procedural"], last=day0)  # active, then fading
    add_row(con, "weak", base=0.1, weight=WEIGHT["procedural"], last=day0)  # dormant, then archived
    run_decay(con, day0)
    before = decay_history(con)
    assert before == [("weak", "active", "dormant")]

    # Another writer holds an uncommitted change of 'weak''s status (DuckDB versions updates by
    # column): the status UPDATE of a run meets a write-write conflict after its history rows
    # were written, as a kill between the two statements would.
    other = con.cursor()
    other.execute("BEGIN TRANSACTION")
    other.execute("UPDATE decay_scores SET status = 'archived' WHERE memory_ref = 'weak'")
    later = day0 + timedelta(days=30)
    with pytest.raises(duckdb.TransactionException):
        run_decay(con, later)
    other.execute("ROLLBACK")
    other.close()
    assert decay_history(con) == before
    assert statuses(con) == {"strong": "active", "weak": "dormant"}

    run_decay(con, later)
    assert statuses(con) == {"strong": "fading", "weak": "archived"}
    assert decay_history(con) == [
        ("strong", "active", "fading"),
        ("weak", "active", "dormant"),
        ("weak", "dormant", "archived"),
    ]


# --------------------------------------------------------------------------- vectorised


def test_twenty_thousand_rows_match_numpy(con):
    n = 20_000
    rng = np.random.default_rng(20260301)
    as_of = np.datetime64("2026-03-01T12:00:00", "us")
    day_us = np.int64(86_400_000_000)
    created = as_of - (rng.uniform(-30, 400, n) * day_us).astype("timedelta64[us]")
    since_access = (rng.uniform(0, 1, n) * (as_of - created).astype(np.int64)).astype("timedelta64[us]")
    last = np.where(created <= as_of, as_of - since_access, created)
    base = rng.uniform(0, 1, n)
    base[rng.uniform(size=n) < 0.05] = 1.0
    access = rng.integers(1, 200, n)
    weight = rng.choice(list(WEIGHT.values()), n)
    pinned = rng.uniform(size=n) < 0.03
    has_window = rng.uniform(size=n) < 0.2
    retention_from = as_of - (rng.uniform(0, 60, n) * day_us).astype("timedelta64[us]")
    retention_days = rng.choice([7, 30], n)
    table = pa.table(
        {
            "memory_ref": [f"m{i:05d}" for i in range(n)],
            "being_id": [BEING] * n,
            "store": ["nodes"] * n,
            "kind": ["message"] * n,
            "base_relevance": base,
            "created_at": pa.array(created, pa.timestamp("us")),
            "last_accessed": pa.array(last, pa.timestamp("us")),
            "access_count": pa.array(access, pa.int32()),
            "type_weight": weight,
            "score": pa.nulls(n, pa.float64()),
            "status": ["active"] * n,
            "pinned": pinned,
            "retention_from": pa.array(
                np.where(has_window, retention_from, np.datetime64("NaT")), pa.timestamp("us")
            ),
            "retention_days": pa.array(np.where(has_window, retention_days, 0), pa.int32(), mask=~has_window),
            "as_of": pa.nulls(n, pa.timestamp("us")),
        }
    )
    con.register("synthetic", table)
    con.execute("INSERT INTO decay_scores BY NAME SELECT * FROM synthetic")
    con.unregister("synthetic")

    formed = created <= as_of
    assert compute_scores(con, as_of.astype(datetime)) == int(formed.sum())

    days = (as_of - last).astype(np.int64) / 86_400e6
    score = np.minimum(1.5 * weight, base * np.exp(-0.03 * days) * np.log2(access + 1) * weight)
    score = np.where(pinned, base * weight, score)
    # i >= 0.8 is permanent: dormant at worst.
    status = np.select(
        [score >= 0.5, score >= 0.2, score >= 0.05, base >= 0.8],
        ["active", "fading", "dormant", "dormant"],
        "archived",
    )
    expired = has_window & (retention_from + retention_days.astype("timedelta64[D]") < as_of)
    status = np.where(expired, "archived", status)
    status = np.where(pinned, "active", status)

    got = con.execute("SELECT score, status FROM decay_scores ORDER BY memory_ref").fetchall()
    got_score = np.asarray([np.nan if r[0] is None else r[0] for r in got], dtype=np.float64)
    got_status = np.asarray([r[1] for r in got])
    # Every formed row matches the formula; rows formed after as_of were not touched.
    assert np.allclose(got_score[formed], score[formed], rtol=1e-12, atol=0)
    assert (got_status[formed] == status[formed]).all()
    assert (~formed).sum() > 100 and np.isnan(got_score[~formed]).all()
    assert (got_status[~formed] == "active").all()
    # The sample reaches every status, the cap, pins and closed windows.
    assert set(status[formed]) == {"active", "fading", "dormant", "archived"}
    assert (score[formed & ~pinned] == 1.5 * weight[formed & ~pinned]).any()
    assert (formed & expired & ~pinned).sum() > 100


def test_the_decay_benchmark_runs_on_the_tables_of_today(tmp_path, capsys, monkeypatch):
    """bench/bench_decay.py writes its synthetic rows straight into decay_scores: run small here,
    so a migration that changes the table breaks this test, not a later `make bench`."""
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parent.parent / "bench"))
    import bench_decay

    assert bench_decay.main(rows=5_000, folder=tmp_path) == 0
    printed = capsys.readouterr().out
    assert "decay over 5,000 rows" in printed and "compute_scores" in printed
