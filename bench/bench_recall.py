"""Recall quality on LoCoMo through the real pipeline: hit@1/5/10 of mindflow's recall.

Each conversation of ../shared/datasets/locomo-dev (or of `--dataset PATH`: any folder of
LoCoMo-format `conv-*.json` files, or one JSON file holding a list of them as the data set's
release does; `--held-out` leaves out those of the tuning set) becomes one being (bench/locomo.py),
runs through ingest, patrol and decay in Dagster, and then every question of
categories 1-4 is asked; a hit at k when any evidence dia_id is among the
`source_episode_ids` of the top k memories. Recency is measured in the
conversation's own time: `now` = its last turn + 1 day.

Over the same memories, in the same run: full-text only, vector only, the default
without context, the previous default, plain BM25 / cosine / RRF (the dataset
README's baselines, measured here), and the similarity floor's effect. The
default is also asked through `mindflow serve` and the HTTP client; the printed
figures say which path they come from.
"""

from __future__ import annotations

import argparse
import inspect
import os
import sys
import tempfile
import time
from collections.abc import Collection
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, fields, replace
from datetime import datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import locomo  # noqa: E402
import loo  # noqa: E402
import numpy as np  # noqa: E402

KS = (1, 5, 10)
CATEGORIES = (1, 2, 3, 4)  # 5 is adversarial: no evidence to find
CATEGORY_NAMES = {1: "multi-hop", 2: "temporal", 3: "open-domain", 4: "single-hop"}  # the dataset README's
README_BASELINES = {  # ../shared/datasets/README.md, hit@5 / hit@10
    "README: BM25": (0.49, 0.58),
    "README: all-MiniLM-L6-v2 cosine": (0.46, 0.57),
    "README: RRF of the two": (0.54, 0.64),
}
TARGET = {5: 0.65, 10: 0.75}
# Extraction runs again while it leaves episodes and makes progress: a run stops asking the
# model past its budget (MINDFLOW_LLM_RUN_BUDGET_S) and leaves the rest for the next.
EXTRACTION_ROUNDS = 5
WORKERS = 4
FULL_TEXT = "full-text only (default pipeline, vector weight 0)"
VECTOR = "vector only (default pipeline, text weight 0)"
LANCE_TEXT = "default, full text from LanceDB (no hot index: every being's statistics)"
OFF_TOPIC_EVERY = 3  # every third question of the next conversation
# Questions no personal chat answers: what the floor exists to silence.
OFF_DOMAIN = [
    "quantum chromodynamics lattice gauge theory",
    "kubernetes pod eviction policy",
    "postgres vacuum freeze wraparound",
    "interest rate swap valuation",
    "compile the linux kernel with clang",
    "tax deduction for mortgage interest",
    "ok thanks",
    "SELECT * FROM orders WHERE id = -100123:45",
]


@dataclass
class Conversation:
    being: str
    questions: list[dict]
    now: datetime  # the last turn + 1 day
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))


@dataclass
class Score:
    """Hits per k and results returned, per conversation."""

    hits: dict[str, dict[int, int]] = field(default_factory=dict)
    asked: dict[str, int] = field(default_factory=dict)
    returned: dict[str, int] = field(default_factory=dict)
    missed: set[tuple[str, int]] = field(default_factory=set)  # (being, question index) not in top 10
    ranks: dict[str, dict[int, int | None]] = field(default_factory=dict)  # being -> question -> first hit

    def ranks_of(self, being: str) -> list[int | None]:
        return [r for _, r in sorted(self.ranks[being].items())]

    def add(self, being: str, index: int, evidence: set[str], sources: list[list[str]]) -> None:
        first = next((i for i, s in enumerate(sources) if evidence & set(s)), None)
        hits = self.hits.setdefault(being, dict.fromkeys(KS, 0))
        for k in KS:
            hits[k] += first is not None and first < k
        self.asked[being] = self.asked.get(being, 0) + 1
        self.ranks.setdefault(being, {})[index] = first
        self.returned[being] = self.returned.get(being, 0) + len(sources)
        if first is None or first >= max(KS):
            self.missed.add((being, index))

    def rate(self, k: int, being: str | None = None) -> float:
        beings = [being] if being else list(self.asked)
        return sum(self.hits[b][k] for b in beings) / sum(self.asked[b] for b in beings)

    def mean_returned(self) -> float:
        return sum(self.returned.values()) / sum(self.asked.values())


def conversation(source: locomo.Source) -> Conversation:
    """One LoCoMo conversation: its being, its questions of categories 1-4, and `now`."""
    turns = locomo.turns(source)
    if not turns:
        raise ValueError("it has no turns")
    last = max(datetime.fromisoformat(t["ts"].rstrip("Z")) for t in turns)
    questions = [q for q in source.data()["qa"] if q["category"] in CATEGORIES]
    return Conversation(locomo.being_id(source), questions, last + timedelta(days=1))


def conversations(location: Path = locomo.DATASET, leave_out: Collection[str] = ()) -> list[Conversation]:
    return [conversation(source) for source in locomo.conversations(location, leave_out)]


def embed_questions(embedder, convs: list[Conversation]) -> None:
    """Each conversation's question vectors (`Conversation.vectors`), all embedded in one batch."""
    vectors = embedder.encode([q["question"] for c in convs for q in c.questions])
    start = 0
    for conv in convs:
        conv.vectors, start = vectors[start : start + len(conv.questions)], start + len(conv.questions)


def _asked(convs: list[Conversation], ask) -> Score:
    """Ask every question (4 at a time: most of a recall is spent waiting on LanceDB) and score it."""
    jobs = [
        (conv, i, q, v)
        for conv in convs
        for i, (q, v) in enumerate(zip(conv.questions, conv.vectors, strict=True))
    ]
    with ThreadPoolExecutor(WORKERS) as pool:
        answers = list(pool.map(lambda job: ask(*job), jobs))
    score = Score()
    for (conv, i, q, _), sources in zip(jobs, answers, strict=True):
        score.add(conv.being, i, set(q["evidence"]), sources)
    return score


# Each being's hot index, as `mindflow serve` holds it (filled once the pipeline has run): the
# figures are those of the server's path, where full text is scored over the being's memories.
HOT: dict = {}


def hot_indexes(table, convs: list[Conversation]) -> dict:
    from mindflow.recall import BeingIndex, hot, primitives

    version = table.version
    columns = hot.index_columns(table.schema.names)  # the server's: with each memory's session
    return {
        c.being: BeingIndex(
            c.being, version,
            primitives.filtered_rows(
                table, primitives.memory_filter(c.being, statuses=primitives.RECALLABLE), None, columns
            ),
            table,
        )
        for c in convs
    }  # fmt: skip


def ask_in_process(
    table,
    convs: list[Conversation],
    config,
    *,
    now_of=lambda c: c.now,
    hot: bool = True,
    indexes: dict | None = None,
) -> Score:
    """Every question asked of `table` by in-process recall(), from each being's hot index in
    `indexes` (by default `HOT`, those of the pipeline's table), or from LanceDB if not `hot`."""
    from mindflow.recall import recall

    indexes = HOT if indexes is None else indexes

    def ask(conv, i, q, vector):
        index = indexes.get(conv.being) if hot else None
        found = recall(
            table, conv.being, q["question"], vector, k=max(KS), config=config, now=now_of(conv), index=index
        )
        return [m.source_episode_ids for m in found]

    return _asked(convs, ask)


def ask_http(url: str, convs: list[Conversation], with_now: bool) -> Score:
    from mindflow.client import MindflowClient

    with MindflowClient(url) as client:

        def ask(conv, i, q, vector):
            extra = {"now": conv.now} if with_now else {}
            found = client.recall(conv.being, q["question"], k=max(KS), **extra).memories
            return [m.source_episode_ids for m in found]

        return _asked(convs, ask)


def off_topic(table, convs: list[Conversation], config) -> float:
    """Mean memories returned (k=10) when each being is asked another conversation's questions."""
    from mindflow.recall import recall

    jobs = [
        (conv, q, vector)
        for conv, other in zip(convs, convs[1:] + convs[:1], strict=True)
        for q, vector in list(zip(other.questions, other.vectors, strict=True))[::OFF_TOPIC_EVERY]
    ]

    def ask(job) -> int:
        conv, q, vector = job
        index = HOT.get(conv.being)
        found = recall(
            table, conv.being, q["question"], vector, k=10, config=config, now=conv.now, index=index
        )
        return len(found)

    with ThreadPoolExecutor(WORKERS) as pool:
        return sum(pool.map(ask, jobs)) / len(jobs)


def off_domain(table, convs: list[Conversation], config, vectors: np.ndarray) -> float:
    """Mean memories returned (k=10) for OFF_DOMAIN questions, over every being."""
    from mindflow.recall import recall

    returned = [
        len(recall(table, conv.being, q, v, k=10, config=config, now=conv.now, index=HOT.get(conv.being)))
        for conv in convs
        for q, v in zip(OFF_DOMAIN, vectors, strict=True)
    ]
    return sum(returned) / len(returned)


# Today's knobs, each one step either side of its default.
TUNED = (
    "today's knobs tuned (text weight -/+0.1, context weight -/+0.15, time and speaker weights"
    " 0 or -/+0.1, time slack 1/7 days, MMR lambda -/+0.1, re-order weight 0, half or double,"
    " its window 2; one at a time)"
)


def lever_grids(default) -> tuple[list, dict[str, list]]:
    """The settings leave-one-out chooses among: today's knobs one at a time around the default,
    and each ranking lever's values (mindflow/recall/config.py) beside the default."""
    knobs = [
        default,
        *(
            replace(default, text_weight=t, vector_weight=1 - t)
            for t in (default.text_weight - 0.1, default.text_weight + 0.1)
        ),
        *(
            replace(default, context_weight=c)
            for c in (default.context_weight - 0.15, default.context_weight + 0.15)
        ),
        *(
            replace(default, time_weight=w)
            for w in (0.0, default.time_weight - 0.1, default.time_weight + 0.1)
        ),
        *(replace(default, time_slack_days=d) for d in (1.0, 7.0)),
        *(
            replace(default, speaker_weight=w)
            for w in (0.0, default.speaker_weight - 0.1, default.speaker_weight + 0.1)
        ),
        *(replace(default, mmr_lambda=m) for m in (default.mmr_lambda - 0.1, default.mmr_lambda + 0.1)),
        *(
            replace(default, reorder_weight=w)
            for w in (0.0, default.reorder_weight / 2, default.reorder_weight * 2)
        ),
        replace(default, reorder_window=default.reorder_window + 1),
    ]
    levers = {
        "pseudo-relevance feedback (prf_terms=6, prf_weight 0.05|0.1)": [
            replace(default, prf_terms=6, prf_weight=w) for w in (0.05, 0.1)
        ],
        "session score (session_weight 0.1|0.2)": [replace(default, session_weight=w) for w in (0.1, 0.2)],
        "session document (session_doc_weight 0.1|0.2|0.3)": [
            replace(default, session_doc_weight=w) for w in (0.1, 0.2, 0.3)
        ],
        "re-score of the top 30 by their own BM25 (rescore_weight 0.05|0.1)": [
            replace(default, rescore_weight=w) for w in (0.05, 0.1)
        ],
    }
    return knobs, levers


def leave_one_out_report(
    table,
    convs: list[Conversation],
    default,
    scores: dict[str, Score],
    *,
    tuning_set: bool = True,
    overlap: list[str] | None = None,
) -> None:
    """Each configuration asked once; every leave-one-out figure is bookkeeping over its hit ranks.

    A lever is kept when its leave-one-out hit@10 beats today's defaults and its hit@5 does not fall.
    `tuning_set`: these are the conversations today's defaults were set on (locomo-dev); `overlap`:
    those of them among other conversations.
    """
    knobs, levers = lever_grids(default)
    seen: dict = {default: scores["mindflow default (hybrid + context)"]}
    timing: dict = {}

    def ranks(config) -> dict[str, list[int | None]]:
        if config not in seen:
            t0 = time.perf_counter()
            seen[config] = ask_in_process(table, convs, config)
            timing[config] = time.perf_counter() - t0
        return {c.being: seen[config].ranks_of(c.being) for c in convs}

    def of(configs) -> loo.LeaveOneOut:
        return loo.leave_one_out({config: ranks(config) for config in configs})

    def fixed(score: Score) -> list[float]:
        return [sum(score.rate(k, c.being) for c in convs) / len(convs) for k in KS]

    today = of([default])
    results = {
        "today's defaults (nothing chosen)": today,
        TUNED: of(knobs),
    }
    for name, values in levers.items():
        results[f"+ {name}"] = of([default, *values])
    results["+ every lever above (one chosen per fold)"] = of(
        [default, *(v for vs in levers.values() for v in vs)]
    )
    kept = [
        name
        for name in levers
        if results[f"+ {name}"].loo[10] > today.loo[10] and results[f"+ {name}"].loo[5] >= today.loo[5]
    ]
    final = of([default, *(v for name in kept for v in levers[name])])
    results["kept: " + (" + ".join(kept) if kept else "none (the defaults stay)")] = final

    n = len(convs)
    print(
        f"\n## leave-one-conversation-out (LOO): settings chosen on {n - 1} conversations, scored on the"
        " one left out"
    )
    print(
        f"each figure is the mean over the {n} conversations of their own hit@k (the table above pools"
        f" questions); settings chosen by mean hit@10 (tie-break hit@5); in-sample = chosen on all {n}"
    )
    print(f"| {'method':75s} | hit@1  | hit@5  | hit@10 | in-sample@10 | in - LOO |")
    print(f"|{'-' * 77}|--------|--------|--------|--------------|----------|")
    for name in ("plain BM25 (LanceDB FTS)", "plain cosine (MiniLM)", "plain RRF of the two (k=60)"):
        print(row(name + " (nothing chosen)", fixed(scores[name]), width=75))
    for name, result in results.items():
        print(
            row(name, [result.loo[k] for k in KS], width=75)
            + f" {result.in_sample[10]:12.3f} | {result.gap:8.3f} |"
        )
    print(
        f"LOO target hit@5 >= {TARGET[5]} and hit@10 >= {TARGET[10]}, in-sample - LOO < 0.03: "
        + (
            "met"
            if final.loo[5] >= TARGET[5] and final.loo[10] >= TARGET[10] and abs(final.gap) < 0.03
            else "NOT met"
        )
        + (
            " (today's defaults were set on these five conversations before: their row is not out of"
            " sample; the tuned rows are)"
            if tuning_set
            else f" (today's defaults were set on {', '.join(overlap)} before: rows over them are not out"
            " of sample)"
            if overlap
            else " (today's defaults were not set on these conversations: every row is out of sample)"
        )
    )
    tuned = results[TUNED]

    def knobs_of(config) -> str:
        return changed(config, default)

    print(
        "knobs chosen per held-out conversation: "
        + "; ".join(f"{held}: {knobs_of(config)}" for held, config in tuned.chosen.items())
        + f"; on all {n}: {knobs_of(tuned.in_sample_config)}"
        + (
            " (LOO hit@10 and hit@5 above the defaults' by the rule above)"
            if tuned.loo[10] > today.loo[10] and tuned.loo[5] >= today.loo[5]
            else ""
        )
    )
    for name in levers:
        result = results[f"+ {name}"]
        print(
            f"{name}: chosen per held-out conversation: "
            + "; ".join(f"{held}: {changed(config, default)}" for held, config in result.chosen.items())
            + f"; on all {n}: {changed(result.in_sample_config, default)}"
        )
    slowest = max(timing.values(), default=0.0)
    print(
        f"{len(seen)} configurations asked once each ({sum(timing.values()):.0f} s beyond the table above;"
        f" slowest {slowest:.0f} s for {sum(len(c.questions) for c in convs)} questions)"
    )


def changed(config, default) -> str:
    """The fields where `config` differs from `default`, or "defaults"."""
    diff = [
        f"{f.name}={getattr(config, f.name):g}"
        for f in fields(config)
        if getattr(config, f.name) != getattr(default, f.name)
    ]
    return " ".join(diff) or "defaults"


def row(name: str, values: list[float | None], extra: str = "", width: int = 60) -> str:
    cells = " | ".join(f"{v:6.3f}" if v is not None else "     -" for v in values)
    return f"| {name:{width}s} | {cells} |{extra}"


def grouped(score: Score, convs: list[Conversation], group_of) -> dict:
    """Per group of questions, `group_of(conversation, question index)`: (questions asked, hit@k
    for each k), over every conversation."""
    ranks: dict = {}
    for conv in convs:
        for index in range(len(conv.questions)):
            ranks.setdefault(group_of(conv, index), []).append(score.ranks[conv.being][index])
    return {
        group: (len(found), {k: loo.hit_rate(found, k) for k in KS}) for group, found in sorted(ranks.items())
    }


def by_category(score: Score, convs: list[Conversation]) -> dict[int, tuple[int, dict[int, float]]]:
    """Per question category: (questions asked, hit@k for each k), over every conversation."""
    return grouped(score, convs, lambda conv, index: conv.questions[index]["category"])


def by_baselines(
    score: Score, convs: list[Conversation], bm25: Score, cosine: Score, k: int = 10
) -> dict[tuple[bool, bool], tuple[int, dict[int, float]]]:
    """Per group of questions by whether plain BM25 and plain cosine find an evidence turn in
    their top `k`: (questions asked, hit@k for each k). Conversations where those baselines
    score lower hold more of the questions they miss; a method's figure there is near the
    mean of its figures per group, weighted by that set's share of each group."""

    def found(baseline: Score, conv: Conversation, index: int) -> bool:
        rank = baseline.ranks[conv.being][index]
        return rank is not None and rank < k

    return grouped(score, convs, lambda conv, index: (found(bm25, conv, index), found(cosine, conv, index)))


def extraction_model(settings) -> str | None:
    """The extraction model (MINDFLOW_LLM_EXTRACTION, else MINDFLOW_LLM), or None: mechanical."""
    from mindflow.llm.chain import chain_for

    specs = chain_for(settings, "extraction")
    return str(specs[0]) if specs else None


def unextracted(settings) -> int:
    """Episodes no model has made a scene of."""
    from mindflow import store

    with store.connect(settings.duckdb_path, read_only=True) as con:
        return con.execute(f"SELECT count(*) FROM episodes e WHERE {store.WITHOUT_SCENE}").fetchone()[0]


def run_pipeline(settings, model: str | None) -> int:
    """Ingest; with a model, extraction until it leaves no episode or stops making progress (a
    run stops asking past its budget and leaves the rest for the next); then patrol and decay
    (as of today, so the table holds real decay scores). Returns the episodes the model left
    unextracted (0 without one); a job that fails stops the benchmark."""
    from mindflow.runner import run_job

    def run(job: str) -> None:
        failed = [summary.run_id for summary in run_job(settings, job) if not summary.success]
        if failed:
            raise SystemExit(f"bench_recall: the {job} job failed (Dagster runs {', '.join(failed)})")

    run("ingest")
    left = 0
    if model:
        left = unextracted(settings)
        for _ in range(EXTRACTION_ROUNDS):
            run("extraction")
            before, left = left, unextracted(settings)
            if left == 0 or left >= before:
                break
    run("patrol")
    run("decay")
    return left


@dataclass
class KeysReport:
    """The default over the pipeline's memories published with their keys and with their text alone."""

    memories: int  # the conversations' recallable memories
    keyed: int  # of them, those whose full-text document holds keys beside the text
    fact_keyed: int  # memories that have fact keys (mindflow.recall.keys), recallable or not
    phrase_keyed: int  # memories that have keyphrase keys
    with_keys: Score
    text_alone: Score
    choice: loo.LeaveOneOut  # "keys" or "text alone", chosen per held-out conversation


def keys_report(settings, table, convs: list[Conversation], config, with_keys: Score) -> KeysReport:
    """Publish the pipeline's memories again with their text alone, from a copy of the DuckDB file
    into a Lance folder of its own (the home's publish state stays as it is), ask `config` of
    them, and let leave-one-out choose between the two (text alone listed first: a tie keeps
    the text alone). `with_keys` is `config` asked of `table`, the home's own publish."""
    import shutil

    from mindflow import lance, memories, store
    from mindflow.recall import keys, open_memories, primitives

    folder = settings.duckdb_path.parent / "text-alone"
    folder.mkdir()
    copy = folder / settings.duckdb_path.name
    with store.connect(settings.duckdb_path) as con:
        con.execute("CHECKPOINT")  # every change in the file itself, none left in its log
        # The memories that have keys of each kind, by the query that publishes them.
        fact_keyed, phrase_keyed = (
            con.execute(f"SELECT count(*) FROM ({keys.keys_sql(facts=f, keyphrases=not f)})").fetchone()[0]
            for f in (True, False)
        )
        shutil.copyfile(settings.duckdb_path, copy)
    with store.connect(copy) as con:
        memories.publish(con, lance.connect(folder / "lance"), fact_keys=False, keyphrase_keys=False)
    alone = open_memories(folder / "lance")
    text_alone = ask_in_process(alone, convs, config, indexes=hot_indexes(alone, convs))
    columns = ["text", "search_text"]
    recallable = [primitives.memory_filter(c.being, statuses=primitives.RECALLABLE) for c in convs]
    documents = [primitives.filtered_rows(table, where, None, columns) for where in recallable]
    keyed = sum(
        text != document
        for rows in documents
        for text, document in zip(*(rows.column(c).to_pylist() for c in columns), strict=True)
    )
    choice = loo.leave_one_out(
        {
            "text alone": {c.being: text_alone.ranks_of(c.being) for c in convs},
            "keys": {c.being: with_keys.ranks_of(c.being) for c in convs},
        }
    )
    memories_count = sum(rows.num_rows for rows in documents)
    return KeysReport(memories_count, keyed, fact_keyed, phrase_keyed, with_keys, text_alone, choice)


def print_keys(model: str | None, left: int, report: KeysReport | None) -> None:
    if report is None:
        print(
            "\nfacts and keyphrases as full-text keys: not measured, no extraction model is configured"
            " (MINDFLOW_LLM or MINDFLOW_LLM_EXTRACTION; README: LLM models). Without one a memory's"
            " full text is its text alone, so every figure above is of the text alone."
        )
        return
    print(f"\n## facts and keyphrases as full-text keys (extraction model {model})")
    print(
        f"{report.keyed} of {report.memories} memories hold keys beside their text"
        f" ({report.fact_keyed} with facts, {report.phrase_keyed} with keyphrases;"
        f" {left} episodes left unextracted)"
    )
    print(f"| {'default (pooled)':60s} | hit@1  | hit@5  | hit@10 |")
    print(f"|{'-' * 62}|--------|--------|--------|")
    print(row("text and keys (the table above)", [report.with_keys.rate(k) for k in KS]))
    print(row("the same memories, text alone", [report.text_alone.rate(k) for k in KS]))
    choice = report.choice
    print(
        "leave-one-out, keys or text alone chosen on the other conversations: "
        + "/".join(f"{choice.loo[k]:.3f}" for k in KS)
        + "; chosen: "
        + "; ".join(f"{being}: {chosen}" for being, chosen in choice.chosen.items())
        + f"; on all: {choice.in_sample_config}"
    )


def arguments(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dataset",
        type=Path,
        metavar="PATH",
        help="LoCoMo-format conversations to measure instead of"
        f" {locomo.DATASET}: a folder of conv-*.json files, or one JSON file holding a list of"
        " them as the data set's release does (data/locomo10.json); at least two, for leave-one-out",
    )
    parser.add_argument(
        "--held-out",
        action="store_true",
        help="leave out the conversations of the tuning set (by name), so that every figure is out of"
        " sample: for the release's file, which holds them too",
    )
    return parser.parse_args(argv)


def dataset_error(location: Path, leave_out: Collection[str] = ()) -> str | None:
    """Why `location` cannot be measured, or None: it must hold two or more readable LoCoMo
    conversations (but those of `leave_out`) with distinct names, each with a question of
    categories 1-4."""
    if not location.exists():
        return f"{location} is not a folder or a file"
    try:
        sources = locomo.conversations(location, leave_out)
    except (OSError, ValueError) as exc:
        return f"{location} is not a LoCoMo file ({exc.__class__.__name__}: {exc})"
    if len(sources) < 2:
        found = "conv-*.json file(s)" if location.is_dir() else "conversation(s)"
        but = " outside the tuning set" if leave_out else ""
        return f"{location} holds {len(sources)} {found}{but}; leave-one-out needs at least two"
    names = [s.name.lower() for s in sources]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        return f"{location} names {', '.join(twice)} more than once; each conversation becomes one being"
    for source in sources:
        try:
            questions = conversation(source).questions
        except (OSError, ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
            return f"{source} is not a LoCoMo conversation ({exc.__class__.__name__}: {exc})"
        if not questions:
            return f"{source} has {len(locomo.turns(source))} turns and 0 questions of categories 1-4"
    return None


def tuning_overlap(location: Path) -> list[str]:
    """The conversations of `location` that are also in the tuning set (by name), when it is not
    the tuning set itself: their figures are not out of sample."""
    if not locomo.DATASET.is_dir() or location.resolve() == locomo.DATASET.resolve():
        return []
    tuned = {s.name.lower() for s in locomo.conversations(locomo.DATASET)}
    return [s.name for s in locomo.conversations(location) if s.name.lower() in tuned]


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    location = args.dataset or locomo.DATASET
    if args.dataset is None and not location.is_dir():
        print(f"skipped: {location} not found")
        return 0
    tuning_set = location.resolve() == locomo.DATASET.resolve()
    if args.held_out and tuning_set:
        print(f"bench_recall: {location} is the tuning set; --held-out would leave nothing", file=sys.stderr)
        return 2
    try:  # what --held-out leaves out, or else names
        overlap = tuning_overlap(location)
    except (OSError, ValueError):  # unreadable: dataset_error says why
        overlap = []
    leave_out, overlap = (overlap, []) if args.held_out else ([], overlap)
    if error := dataset_error(location, leave_out):
        print(f"bench_recall: {error}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    home = Path(tempfile.mkdtemp(prefix="mindflow-recall-"))
    os.environ["MINDFLOW_HOME"] = str(home)
    os.environ["DAGSTER_HOME"] = str(home / "dagster")
    from mindflow.config import load_settings
    from mindflow.embeddings import Embedder
    from mindflow.recall import RecallConfig, open_memories

    settings = load_settings()
    model = extraction_model(settings)
    counts = locomo.write_inbox(settings.inbox, location, leave_out)
    t0 = time.perf_counter()
    left = run_pipeline(settings, model)
    pipeline = time.perf_counter() - t0
    convs = conversations(location, leave_out)
    embedder = Embedder.for_settings(settings)  # the encoder the pipeline and the server use
    embed_questions(embedder, convs)
    table = open_memories(settings.lance_path)
    HOT.update(hot_indexes(table, convs))
    n_questions = sum(len(c.questions) for c in convs)
    print(
        f"LoCoMo ({location}): {len(convs)} conversations, {sum(counts.values())} turns,"
        f" {n_questions} questions (categories 1-4);"
        f" {'ingest + extraction' if model else 'ingest'} + patrol + decay through Dagster"
        f" in {pipeline:.0f} s"
        + (f"; scenes and facts by {model}" if model else "; mechanical scenes (no model)")
    )
    if leave_out:
        print(f"left out (--held-out): {', '.join(leave_out)}, conversations of the tuning set")
    elif overlap:
        print(
            f"note: {', '.join(overlap)} are conversations of the tuning set ({locomo.DATASET.name});"
            " --held-out leaves them out"
        )

    default = RecallConfig.for_model(settings.embedding_model)
    # mindflow's lifts (the context, the time and the speaker a query names, the re-order of the
    # first ten), off in every baseline
    no_lifts = dict(context_window=0, time_weight=0.0, speaker_weight=0.0, reorder_weight=0.0)
    plain = dict(
        **no_lifts,
        recency_floor=1.0,
        decay_exponent=0.0,
        mmr_lambda=1.0,
        min_similarity=-1.0,
    )
    methods = {
        "mindflow default (hybrid + context)": default,
        FULL_TEXT: replace(default, vector_weight=0.0, text_weight=1.0),
        VECTOR: replace(default, vector_weight=1.0, text_weight=0.0),
        "default without context (context_window=0)": replace(default, context_window=0),
        "default without the time the query names (time_weight=0)": replace(default, time_weight=0.0),
        "default without the speaker the query names (speaker_weight=0)": replace(
            default, speaker_weight=0.0
        ),
        "previous default (RRF 0.7/0.3 k=60, recency floor 0.5)": replace(
            default,
            fusion="rrf",
            vector_weight=0.7,
            text_weight=0.3,
            candidates=50,
            vector_candidates=50,
            **no_lifts,
            recency_floor=0.5,
            min_similarity=0.15,
        ),
        "plain BM25 (LanceDB FTS)": replace(default, vector_weight=0.0, text_weight=1.0, **plain),
        "plain cosine (MiniLM)": replace(default, vector_weight=1.0, text_weight=0.0, **plain),
        "plain RRF of the two (k=60)": replace(
            default, fusion="rrf", vector_weight=1.0, text_weight=1.0, rrf_k=60, **plain
        ),
    }
    scores: dict[str, Score] = {}
    timings: dict[str, float] = {}
    for name, config in methods.items():
        t0 = time.perf_counter()
        # The plain baselines are LanceDB's own search, without the server's hot index.
        scores[name] = ask_in_process(table, convs, config, hot=not name.startswith("plain"))
        timings[name] = time.perf_counter() - t0
    # The default without the hot index: full text from LanceDB's index, whose statistics are
    # the whole table's (every being's), as recall() answers without a server.
    t0 = time.perf_counter()
    scores[LANCE_TEXT] = ask_in_process(table, convs, default, hot=False)
    timings[LANCE_TEXT] = time.perf_counter() - t0

    # The default through the HTTP API: the same memories, the same ranking.
    http_note = "HTTP API not available: figures are in-process recall()"
    path = "in-process recall()"
    try:
        from bench_latency import Server

        from mindflow.client import MindflowClient

        with_now = "now" in inspect.signature(MindflowClient.recall).parameters
        with Server(home, 1) as server:
            # The first pass is what a new server answers each question asked once: a being
            # over MINDFLOW_API_HOT_INDEX_SMALL memories is answered from LanceDB while its hot
            # index is built. The second is the one compared.
            t0 = time.perf_counter()
            first = ask_http(server.url, convs, with_now)
            first_seconds = time.perf_counter() - t0
            time.sleep(5)
            t0 = time.perf_counter()
            over_http = ask_http(server.url, convs, with_now)
            http_seconds = time.perf_counter() - t0
        # Without `now` in the request the server measures recency from its own clock.
        reference = (
            scores["mindflow default (hybrid + context)"]
            if with_now
            else ask_in_process(table, convs, default, now_of=lambda c: None)
        )
        same = over_http.hits == reference.hits and over_http.missed == reference.missed
        figures = "/".join(f"{over_http.rate(k):.3f}" for k in KS)
        if with_now and same:
            path = "HTTP (MindflowClient -> mindflow serve)"
        http_note = (
            f"HTTP check: the default through MindflowClient -> `mindflow serve` on 127.0.0.1"
            f" ({n_questions} requests, {http_seconds:.0f} s): hit@1/5/10 = {figures};"
            f" {'identical to' if same else 'DIFFERENT from'} in-process recall()"
            + (
                " with the same `now`"
                if with_now
                else " with now = the server's clock (POST recall takes no `now` yet,"
                " so the table's figures are in-process with now = last turn + 1 day)"
            )
            + f". A first pass of the same requests to the new server ({first_seconds:.0f} s): "
            + "/".join(f"{first.rate(k):.3f}" for k in KS)
        )
    except Exception as exc:  # noqa: BLE001 - the API is optional for this benchmark
        http_note = f"HTTP API not usable ({exc.__class__.__name__}: {exc}); figures are in-process recall()"

    print(f"\n## hit@k over all {n_questions} questions (default row: {path}; others: in-process recall())")
    print(f"| {'method':60s} | hit@1  | hit@5  | hit@10 |")
    print(f"|{'-' * 62}|--------|--------|--------|")
    for name, score in scores.items():
        print(row(name, [score.rate(k) for k in KS], f"  {timings[name]:4.0f} s"))
    if tuning_set:  # the dataset README's figures are of locomo-dev
        for name, (h5, h10) in README_BASELINES.items():
            print(row(name, [None, h5, h10]))
    best = scores["mindflow default (hybrid + context)"]
    print(
        f"target hit@5 >= {TARGET[5]} and hit@10 >= {TARGET[10]}: "
        + ("met" if best.rate(5) >= TARGET[5] and best.rate(10) >= TARGET[10] else "NOT met")
    )
    print(http_note)

    leave_one_out_report(table, convs, default, scores, tuning_set=tuning_set, overlap=overlap)
    with_keys = scores["mindflow default (hybrid + context)"]
    print_keys(model, left, keys_report(settings, table, convs, default, with_keys) if model else None)

    print("\n## per conversation: default | full-text only | vector only")
    print(f"| {'being':16s} | qs  | def@1  | def@5  | def@10 | fts@5  | fts@10 | vec@5  | vec@10 |")
    print(f"|{'-' * 18}|-----|--------|--------|--------|--------|--------|--------|--------|")
    fts, vec = scores[FULL_TEXT], scores[VECTOR]
    for conv in convs:
        b = conv.being
        cells = [best.rate(k, b) for k in KS] + [
            fts.rate(5, b),
            fts.rate(10, b),
            vec.rate(5, b),
            vec.rate(10, b),
        ]
        print(f"| {b:16s} | {best.asked[b]:3d} | " + " | ".join(f"{v:6.3f}" for v in cells) + " |")

    print("\n## per question category: default | full-text only | vector only")
    print(f"| {'category':16s} | qs  | def@1  | def@5  | def@10 | fts@5  | fts@10 | vec@5  | vec@10 |")
    print(f"|{'-' * 18}|-----|--------|--------|--------|--------|--------|--------|--------|")
    fts_of, vec_of = by_category(fts, convs), by_category(vec, convs)
    for category, (asked, rates) in by_category(best, convs).items():
        cells = [rates[k] for k in KS] + [fts_of[category][1][k] for k in (5, 10)]
        cells += [vec_of[category][1][k] for k in (5, 10)]
        name = f"{category} {CATEGORY_NAMES.get(category, '')}"
        print(f"| {name:16s} | {asked:3d} | " + " | ".join(f"{v:6.3f}" for v in cells) + " |")

    print(
        "\n## where plain retrieval fails: default | full-text only | vector only, by whether plain"
        " BM25 and plain cosine find an evidence turn in their top 10"
    )
    print(
        "| plain BM25 | plain cosine | qs  | def@1  | def@5  | def@10 | fts@5  | fts@10 | vec@5  | vec@10 |"
    )
    print(
        "|------------|--------------|-----|--------|--------|--------|--------|--------|--------|--------|"
    )
    plain_bm25, plain_cosine = scores["plain BM25 (LanceDB FTS)"], scores["plain cosine (MiniLM)"]
    fts_of, vec_of = (by_baselines(s, convs, plain_bm25, plain_cosine) for s in (fts, vec))
    for (by_bm25, by_cosine), (asked, rates) in sorted(
        by_baselines(best, convs, plain_bm25, plain_cosine).items(), reverse=True
    ):
        cells = [rates[k] for k in KS] + [fts_of[by_bm25, by_cosine][1][k] for k in (5, 10)]
        cells += [vec_of[by_bm25, by_cosine][1][k] for k in (5, 10)]
        names = ["found" if f else "missed" for f in (by_bm25, by_cosine)]
        print(
            f"| {names[0]:10s} | {names[1]:12s} | {asked:3d} | "
            + " | ".join(f"{v:6.3f}" for v in cells)
            + " |"
        )
    print(
        "conversations where plain retrieval scores lower hold more questions of the groups it misses;"
        " a method's figure there is near the mean of its groups' figures, weighted by their shares"
    )

    print("\n## the similarity floor (default pipeline; a memory passes when it or a context neighbour does)")
    print("returned = mean memories returned at k=10; lost = questions whose evidence leaves the top 10")
    print(
        "| floor | hit@1  | hit@5  | hit@10 | returned | lost | returned, off-topic | returned, off-domain |"
    )
    print(
        "|-------|--------|--------|--------|----------|------|---------------------|----------------------|"
    )
    domain_vectors = embedder.encode(OFF_DOMAIN)
    no_floor = None
    for floor in sorted({0.0, default.floor, 0.3}):
        config = replace(default, min_similarity=floor)
        score = best if floor == default.floor else ask_in_process(table, convs, config)
        no_floor = no_floor or score
        lost = len(score.missed - no_floor.missed)
        print(
            f"| {floor:5.2f} | "
            + " | ".join(f"{score.rate(k):6.3f}" for k in KS)
            + f" | {score.mean_returned():8.2f} | {lost:4d} | {off_topic(table, convs, config):19.2f}"
            + f" | {off_domain(table, convs, config, domain_vectors):20.2f} |"
            + ("  default" if floor == default.floor else "")
        )
    print(
        "off-topic: each being is asked every third question of the next conversation (other people,"
        f" other lives); off-domain: {len(OFF_DOMAIN)} questions no chat answers (`kubernetes pod"
        " eviction policy`, `ok thanks`, ...). Fewer returned = noise dropped."
    )
    print(f"\ntotal {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
