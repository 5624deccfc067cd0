"""Overhead of the LLM path per 1,000 episodes, beside the mechanical path on the same episodes.

A loopback server (tests/llm_server.py) answers every request at once with a valid
answer derived from the request, through the real openai SDK, so what is measured is
mindflow's own cost: batching, HTTP, validation and the DuckDB writes. Prints the
number of extraction calls for a small local model (8k context) and a large hosted one
(200k): the target is one call per batch sized to the context, never one per episode.
The loopback's scenes carry keyphrases, so the last table prices publishing them as keys.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import locomo  # noqa: E402

EPISODES = 2_000
BEING = "bench"


def episodes() -> list:
    from mindflow.models import Episode

    if locomo.DATASET.is_dir():
        turns = [t for p in locomo.conversations() for t in locomo.turns(p)][:EPISODES]
        source = f"LoCoMo ({len(turns)} turns)"
        rows = [
            Episode(episode_id=t["id"].replace(":", "-") + f"-{i}", being_id=BEING,
                    ts=datetime.fromisoformat(t["ts"].rstrip("Z")), speaker=t["speaker"], role="user",
                    text=t["text"])
            for i, t in enumerate(turns)
        ]  # fmt: skip
    else:
        source = f"synthetic ({EPISODES} messages)"
        start = datetime(2026, 1, 1, 9)
        rows = [
            Episode(episode_id=f"e{i}", being_id=BEING, ts=start + timedelta(minutes=i), speaker="ada",
                    role="user", text=f"Message {i}: worked on the billing service and talked to Bram.")
            for i in range(EPISODES)
        ]  # fmt: skip
    return rows, source


@contextlib.contextmanager
def fresh_db(folder: Path, name: str, rows):
    from mindflow import store
    from mindflow.inbox import episodes_table

    with store.connect(folder / f"{name}.duckdb") as con:
        con.register("bench_episodes", episodes_table(rows))
        con.execute("INSERT INTO episodes SELECT *, now()::TIMESTAMP FROM bench_episodes")
        con.unregister("bench_episodes")
        yield con


def with_keyphrases(received):
    """The loopback model's answer, with two keyphrases per scene as a model would give them
    (the scene's own words here: what is measured is their cost, not their quality)."""
    from llm_server import fake_model

    answer = fake_model(received)
    if isinstance(answer, dict) and answer.get("scenes"):
        for scene in answer["scenes"]:
            words = scene["action"].split()
            scene["keyphrases"] = [" ".join(words[:2]) or "nothing", " ".join(words[2:5]) or "said"]
    return answer


def publish_costs(con, folder: Path) -> dict[str, tuple[float, int, int]]:
    """Seconds, memories and memories holding keys, for a publish without and with each kind of key."""
    from mindflow import lance, memories

    out = {}
    for label, fact_keys, keyphrase_keys in (
        ("text alone", False, False),
        ("text + the memory's facts", True, False),
        ("text + facts + keyphrases", True, True),
    ):
        db = lance.connect(folder / f"lance-keys-{fact_keys}-{keyphrase_keys}")
        con.execute("DELETE FROM published_memories")
        t0 = time.perf_counter()
        report = memories.publish(con, db, fact_keys=fact_keys, keyphrase_keys=keyphrase_keys)
        seconds = time.perf_counter() - t0
        rows = db.open_table(memories.TABLE).to_arrow()
        texts = zip(rows["search_text"].to_pylist(), rows["text"].to_pylist(), strict=True)
        with_keys = sum(s != t for s, t in texts)
        out[label] = (seconds, report.upserted, with_keys)
    return out


def main() -> int:
    import openai  # noqa: F401  (the SDK's one-time import, ~1.5 s, is not per-episode work)
    from llm_server import LLMServer

    from mindflow import extraction, patrol
    from mindflow.config import load_settings
    from mindflow.embeddings import Embedder
    from mindflow.llm import resolve
    from mindflow.models import utcnow

    rows, source = episodes()
    n = len(rows)
    per_k = 1000 / n
    folder = Path(tempfile.mkdtemp(prefix="mindflow-bench-llm-"))
    server = LLMServer()
    server.responder = with_keyphrases
    os.environ.update(
        MINDFLOW_HOME=str(folder / "home"),
        MINDFLOW_LLM_BASE_URL=server.url,
        OPENAI_API_KEY="bench-key",
        MINDFLOW_LLM_BUDGET_CALLS="100000",
        MINDFLOW_LLM_BUDGET_TOKENS="1000000000",
    )
    print(f"episodes: {source}; loopback model answers instantly (openai SDK over HTTP)\n")

    # 1. Scenes: mechanical step vs LLM extraction (scenes + facts + relations), per context size.
    with fresh_db(folder, "mechanical", rows) as con:
        t0 = time.perf_counter()
        patrol.step_scenes(con, BEING, utcnow())
        mechanical = time.perf_counter() - t0
    print(f"{'path':<44}{'s / 1k episodes':>16}{'calls':>8}{'episodes/call':>15}")
    print(f"{'mechanical scenes (1 per episode)':<44}{mechanical * per_k:>16.3f}{0:>8}{'-':>15}")
    for label, model, context in (
        ("LLM extraction, 8k-context local model", "openai-compatible:llama3.1", "8192"),
        ("LLM extraction, 200k-context hosted model", "openai:gpt-4o-mini", "200000"),
    ):
        os.environ["MINDFLOW_LLM"] = model
        os.environ["MINDFLOW_LLM_CONTEXT_TOKENS"] = context
        server.requests.clear()
        llm = resolve(load_settings(), "extraction")
        with fresh_db(folder, f"llm-{context}", rows) as con:
            t0 = time.perf_counter()
            report = extraction.extract(con, BEING, llm, utcnow())
            elapsed = time.perf_counter() - t0
        calls = llm.usage.calls
        print(f"{label:<44}{elapsed * per_k:>16.3f}{calls:>8}{n / max(calls, 1):>15.0f}")
        if report.pending or report.parse_failed:
            print(f"  unexpected: {report.counts()} {report.errors[:2]}")
    print(f"\n(naive per-episode extraction would send {n} calls for these {n} episodes)")

    # 2. The whole patrol on the same episodes: mechanical vs every LLM step.
    embedder = Embedder()
    embedder.encode(["warm up the model"])
    os.environ["MINDFLOW_LLM"] = "openai-compatible:llama3.1"
    os.environ["MINDFLOW_LLM_CONTEXT_TOKENS"] = "8192"
    print(f"\n{'whole patrol':<44}{'s / 1k episodes':>16}{'calls':>8}")
    for label, with_llm in (("mechanical", False), ("with LLM (extraction + ❹ ❻ roots diary)", True)):
        settings = load_settings()
        llm = resolve(settings, "patrol") if with_llm else None
        ext = resolve(settings, "extraction") if with_llm else None
        with fresh_db(folder, f"patrol-{with_llm}", rows) as con:
            t0 = time.perf_counter()
            reports = patrol.run_patrol(con, BEING, embedder, llm=llm, extraction_llm=ext, settings=settings)
            elapsed = time.perf_counter() - t0
            if with_llm:
                keys = publish_costs(con, folder)
        calls = (llm.usage.calls + ext.usage.calls) if with_llm else 0
        print(f"{label:<44}{elapsed * per_k:>16.3f}{calls:>8}")
        if with_llm:
            steps = {r.step: r.counts for r in reports}
            print(f"  ❹ {steps['❹ consolidation']}  ❻ {steps['❻ split']}")
    print(
        "\n(the whole patrol is dominated by embedding node texts; the LLM path embeds fewer, merged scenes)"
    )
    # 3. Facts and keyphrases as full-text keys of their memories (mindflow/recall/keys.py): the
    # publish of the LLM patrol's memories without and with them, each into an empty LanceDB folder.
    header = f"{'publish of the memories (keys)':<44}{'s / 1k episodes':>16}{'memories':>10}"
    print(f"\n{header}{'with keys':>11}")
    for label, (seconds, memories, with_keys) in keys.items():
        print(f"{label:<44}{seconds * per_k:>16.3f}{memories:>10}{with_keys:>11}")
    server.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
